"""Verification on a snapshot of the agent's container (Harbor, Terminal-Bench 1): the
verifier sees what the agent changed outside the workspace, in a fresh sandbox of the
task's image, and the rollout lists those paths. Real podman, a Harbor task built here
(``FROM debian:bookworm-slim``: the local base, no registry)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import RolloutStatus, Task, load_task, run_rollouts
from clawrl.sandbox import list_containers

FIXTURES = Path(__file__).parent / "fixtures"

#: The oracle writes where its instruction says, outside the workspace: a new file in
#: /etc, one in root's home (a tmpfs place of the sandbox), a deletion from the image, a
#: new directory with a symlink, and a file whose name is not UTF-8.
SOLVE = r"""#!/bin/bash
set -e
echo hi > /etc/snapx.conf
echo key > /root/.snapx
rm /etc/issue
mkdir -p /opt/tool && ln -s /etc/snapx.conf /opt/tool/conf
touch "/opt/tool/$(printf 'n\xffm')"
echo done > /app/out
"""

TEST_SH = r"""#!/bin/bash
ok=1
[ "$(cat /etc/snapx.conf)" = hi ] || ok=0
[ "$(cat /root/.snapx)" = key ] || ok=0
[ ! -e /etc/issue ] || ok=0
[ "$(readlink /opt/tool/conf)" = /etc/snapx.conf ] || ok=0
[ "$(cat /app/out)" = done ] || ok=0
echo "verifier saw ok=$ok"
echo $ok > /logs/verifier/reward.txt
"""


def harbor_task(root: Path, solve: str = SOLVE, test_sh: str = TEST_SH) -> Task:
    """A Harbor task (``task.toml``, ``environment/Dockerfile``, ``tests/test.sh``,
    ``solution/solve.sh``) with ``WORKDIR /app`` and no network."""
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (root / "solution" / "solve.sh").write_text(textwrap.dedent(solve))
    (root / "instruction.md").write_text("Configure the tool.\n")
    (root / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    return load_task(root)


def test_harbor_and_tb1_loaders_verify_on_a_snapshot() -> None:
    """Harbor and Terminal-Bench 1 verify the whole container; the built-in layout (its
    checkers read the workspace only) does not."""
    assert load_task(FIXTURES / "harbor_slugify").verifier.verify_on_snapshot
    assert load_task(FIXTURES / "tb1_word_count").verifier.verify_on_snapshot
    from clawrl.bench import builtin_suite_dir

    assert not load_task(builtin_suite_dir() / "fix_median").verifier.verify_on_snapshot


@pytest.mark.podman
@pytest.mark.slow
def test_oracle_writing_outside_the_workspace_scores_one(tmp_path: Path) -> None:
    """The oracle's files outside the workspace reach the verifier (reward 1; noop 0), the
    result lists them (printable, the workspace's own left to the workspace diff), and no
    container of the run is left behind (no image is made: the state is restored into a
    fresh sandbox of the task's own image). Fails on the code before verification
    on a snapshot: the verifier saw only ``/app`` (``ok 0``)."""
    task = harbor_task(tmp_path / "task")
    results = asyncio.run(
        run_rollouts([task], ["oracle", "noop"], concurrency=1, run_id="snapx-test")
    )
    by = {r.harness: r for r in results}
    oracle, noop = by["oracle"], by["noop"]
    assert oracle.status is RolloutStatus.OK and oracle.reward == 1.0, (oracle.reason, oracle)
    assert noop.status is RolloutStatus.OK and noop.reward == 0.0, noop
    changes = set(oracle.outside_changes)
    assert {
        "A /etc/snapx.conf",
        "A /root/.snapx",
        "D /etc/issue",
        "A /opt/tool",
        "A /opt/tool/conf",
        "A /opt/tool/n\\xffm",
    } <= changes, changes
    assert not any(c.split(" ", 1)[1].startswith(("/app", "/tmp/clawrl-harness")) for c in changes)
    assert noop.outside_changes == []
    assert "snapshot" in oracle.timing
    assert asyncio.run(list_containers(run_id="snapx-test")) == []


#: The oracle configures a service and starts it, as its instruction asks; the check needs
#: it running (Harbor verifies in the agent's live container, where it still is).
SERVICE_SOLVE = r"""#!/bin/bash
set -e
echo 'while :; do date +%s > /run/svc.beat; sleep 0.2; done' > /usr/local/bin/svc
chmod +x /usr/local/bin/svc
setsid /usr/local/bin/svc </dev/null >/dev/null 2>&1 &
echo configured > /app/svc.conf
"""
SERVICE_TEST_SH = r"""#!/bin/bash
ok=1
[ "$(cat /app/svc.conf)" = configured ] || ok=0
pgrep -f /usr/local/bin/svc >/dev/null || ok=0
echo $ok > /logs/verifier/reward.txt
"""


@pytest.mark.podman
@pytest.mark.slow
def test_a_service_the_agent_left_is_named_not_scored_zero(tmp_path: Path) -> None:
    """A check that needs a process the agent started cannot pass on a snapshot (no agent
    process is carried over): the oracle's rollout is a ``verifier-error`` that names what
    it left running, never ``ok`` 0; the noop, which left nothing, is ``ok`` 0. Fails on the
    code before: the oracle scored ``ok`` 0."""
    task = harbor_task(tmp_path / "task", SERVICE_SOLVE, SERVICE_TEST_SH)
    results = asyncio.run(run_rollouts([task], ["oracle", "noop"], concurrency=1))
    by = {r.harness: r for r in results}
    oracle, noop = by["oracle"], by["noop"]
    assert oracle.status is RolloutStatus.VERIFIER_ERROR and oracle.reward == 0.0, oracle
    assert "not verifiable on a snapshot" in oracle.reason, oracle.reason
    assert "/usr/local/bin/svc" in oracle.reason and "sleep 0.2" in oracle.reason, oracle.reason
    assert noop.status is RolloutStatus.OK and noop.reward == 0.0, (noop.reason, noop)
