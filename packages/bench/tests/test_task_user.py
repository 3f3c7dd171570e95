"""A task image's USER at run time: the agent's commands run as that user (docker's
default), resolved to uid:gid through the image's own /etc/passwd and /etc/group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from clawrl.bench import RolloutStatus, load_task, run_rollouts
from clawrl.bench.task_env import numeric_user

PASSWD = "root:x:0:0:root:/root:/bin/bash\napp:x:1234:4321::/home/app:/bin/sh\n"
GROUP = "root:x:0:\ncrew:x:4321:\nstaff:x:50:\n"


@pytest.mark.parametrize(
    ("user", "want"),
    [
        ("app", "1234:4321"),
        ("app:staff", "1234:50"),
        ("app:7", "1234:7"),
        ("1234", "1234:4321"),
        ("999", "999:0"),
        ("0:0", "0:0"),
    ],
)
def test_user_names_resolve(user: str, want: str) -> None:
    assert numeric_user(user, PASSWD, GROUP) == want


@pytest.mark.parametrize(("user", "needle"), [("bob", "no user 'bob'"), ("app:ops", "no group")])
def test_unknown_names_are_errors(user: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        numeric_user(user, PASSWD, GROUP)


def _task(tmp_path: Path, user_line: str) -> Path:
    root = tmp_path / "task"
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True)
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    (root / "instruction.md").write_text("Write your uid and gid to /app/ids.txt.\n")
    (root / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "RUN groupadd -g 4321 crew && useradd -m -u 1234 -g crew app"
        " && mkdir -p /app && chown app:crew /app\n"
        f"{user_line}\nWORKDIR /app\n"
    )
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\necho $(id -u):$(id -g) > /app/ids.txt\n"
    )
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        '[ "$(cat /app/ids.txt)" = 1234:4321 ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    return root


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.parametrize(("user_line", "reward"), [("USER app", 1.0), ("", 0.0)])
def test_agent_runs_as_the_image_user(tmp_path: Path, user_line: str, reward: float) -> None:
    """The oracle writes its ids: 1234:4321 under ``USER app`` (the verifier reads them), root's
    0:0 without a USER line."""
    (result,) = asyncio.run(run_rollouts([load_task(_task(tmp_path, user_line))], ["oracle"]))
    assert result.status is RolloutStatus.OK and result.reward == reward, result
