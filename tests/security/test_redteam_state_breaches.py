"""Red-team findings against verification on a snapshot of the agent's container (Harbor,
Terminal-Bench 1): attacks that once worked, run through ``run_rollouts`` with the ``oracle`` harness playing
the agent; each asserts the secure outcome. Reverts tried: without the Python rule of the
state's tamper check (``verify._python_planted``) the ``.pth`` forges 1.0; with the recursive
``os.walk`` the deep tree raises RecursionError out of ``run_rollouts``; with directories
never listed, ``outside_changes`` is empty.
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import RolloutOptions, RolloutStatus, Task, load_task, run_rollouts

pytestmark = [pytest.mark.podman, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[2] / "packages" / "bench" / "tests" / "fixtures"

#: A ``.pth`` in the system site-packages: processed by every ``python -I`` start, so it runs
#: inside clawrl's trusted runner as root, before pytest is started as the tests' user. It
#: forges the runner's record and a passing JUnit report and exits 0. The workspace is left
#: unsolved.
PTH_ATTACK = r"""
d=$(python3 -c 'import site; print(site.getsitepackages()[-1])')
mkdir -p "$d"
cat > "$d/rt_helper.py" <<'PY'
import os, sys
def go():
    if not sys.argv or not sys.argv[0].endswith("pytest_runner.py") or "--child" in sys.argv:
        return
    d = os.environ.get("CLAWRL_REPORT_DIR") or "/logs/verifier/clawrl-pytest"
    os.makedirs(d, exist_ok=True)
    open(d + "/run-1.xml", "w").write(
        '<testsuites><testsuite name="pytest" tests="2" failures="0" errors="0">'
        '<testcase classname="test_outputs" name="test_sample"/>'
        '<testcase classname="test_outputs" name="test_hidden"/></testsuite></testsuites>')
    open(d + "/run-1.json", "w").write(
        '{"args": [], "mode": "script", "python": "/usr/bin/python3", "exit": 0,'
        ' "junit": "run-1.xml", "seconds": 0.1, "user": 64999}')
    os._exit(0)
PY
echo 'import rt_helper; rt_helper.go()' > "$d/zz_rt.pth"
"""


@pytest.mark.parametrize(
    ("fixture", "oracle"),
    [("harbor_slugify", "solution/solve.sh"), ("tb1_word_count", "solution.sh")],
)
def test_a_pth_in_site_packages_cannot_forge_the_runner(
    tmp_path: Path, fixture: str, oracle: str
) -> None:
    root = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, root)
    (root / oracle).write_text("#!/bin/bash\n" + textwrap.dedent(PTH_ATTACK))
    (r,) = asyncio.run(
        run_rollouts(
            [load_task(root)], ["oracle"], concurrency=1, options=RolloutOptions(retries=1)
        )
    )
    assert any(c.endswith("/zz_rt.pth") for c in r.outside_changes), r.outside_changes
    assert r.reward == 0.0, (r.status, r.reason)
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason


def _dir_task(tmp_path: Path, solve: str) -> Task:
    root = tmp_path / "task"
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "echo \"saw $(stat -c '%a' /usr/share) $(stat -c '%u' /usr/share)\"\n"
        "echo 0 > /logs/verifier/reward.txt\n"
    )
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve + "\n")
    (root / "instruction.md").write_text("Do nothing.\n")
    (root / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    return load_task(root)


def test_a_changed_image_directory_is_listed(tmp_path: Path) -> None:
    """The agent gives ``/usr/share`` to the tests' uid and opens it to everyone: the
    verifier sees it (its test script prints it), and the review list shows it too."""
    task = _dir_task(tmp_path, "chmod 777 /usr/share && chown 64999:64999 /usr/share")
    (r,) = asyncio.run(run_rollouts([task], ["oracle"], concurrency=1))
    assert r.verifier is not None and "saw 777 64999" in r.verifier.stdout, r.verifier
    assert ("C /usr/share") in r.outside_changes, r.outside_changes


def test_an_opened_path_directory_is_tampering(tmp_path: Path) -> None:
    """``/usr/local/bin`` opened to everyone: a later process of the tests' uid could plant
    a program there that root's verifier script runs by name — refused before it runs."""
    task = _dir_task(tmp_path, "chmod 777 /usr/local/bin")
    (r,) = asyncio.run(run_rollouts([task], ["oracle"], concurrency=1))
    assert r.status is RolloutStatus.VERIFIER_ERROR and r.reward == 0.0, r.reason
    assert "tampering" in r.reason and "/usr/local/bin" in r.reason, r.reason


def test_a_deep_directory_outside_the_workspace_is_a_scored_failure(tmp_path: Path) -> None:
    """The agent leaves ``/opt/d99/d99/...`` 1,100 deep (made with relative ``mkdir``/``cd``):
    the rollout must end as a scored failure, never crash the batch."""
    root = tmp_path / "task"
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncd /opt && for i in $(seq 1 1100); do mkdir d99 && cd d99 || break; done\n"
    )
    (root / "instruction.md").write_text("Do nothing.\n")
    (root / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    (r,) = asyncio.run(run_rollouts([load_task(root)], ["oracle"], concurrency=1))
    assert r.reward == 0.0 and r.counts, (r.status, r.reason)
