"""Honest verifier failures: a verifier that cannot run is a ``verifier-error`` with the
reason, never ``ok`` with reward 0 — checked with real Harbor-style ``test.sh`` verifiers
in podman sandboxes (the default root: the host's ``/usr``, no ``uvx``, no pytest for
Debian's python3, ``--network none``)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import (
    RolloutStatus,
    SandboxExecutor,
    Task,
    VerifierStatus,
    aggregate,
    load_task,
    run_rollouts,
    verify,
    withhold_network,
)
from clawrl.bench.verifier_diagnosis import cannot_run_reason

pytestmark = pytest.mark.podman

# writes 0 whenever its test command fails, whatever the cause (a common Harbor pattern)
_ZERO_ON_FAILURE = """
{command}
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def harbor_task(
    root: Path, test_sh: str, test_py: str = "def test_ok():\n    assert True\n"
) -> Task:
    """A minimal Harbor task whose verifier is ``test_sh`` (with ``tests/test_outputs.py``)."""
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test_sh))
    (root / "tests" / "test_outputs.py").write_text(test_py)
    (root / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (root / "instruction.md").write_text("Do nothing.\n")
    (root / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n')
    return load_task(root)


@pytest.fixture(scope="module")
def executor() -> SandboxExecutor:
    return SandboxExecutor()


CANNOT_RUN = {
    "uvx-missing": (
        _ZERO_ON_FAILURE.format(command="uvx pytest /tests/test_outputs.py"),
        "command not found: uvx",
    ),
    "pytest-module-missing": (
        _ZERO_ON_FAILURE.format(command="python3 -m pytest /tests/test_outputs.py"),
        "missing Python module: pytest",
    ),
    "pytest-missing": (
        _ZERO_ON_FAILURE.format(command="pytest /tests/test_outputs.py >/dev/null 2>&1"),
        "pytest is not installed",
    ),
    "dns-failure": (
        _ZERO_ON_FAILURE.format(command="curl -sS -o /dev/null https://pypi.org/simple/"),
        "the task declares a network, which this run withheld",
    ),
    "exit-127": ("set -e\nuvx pytest /tests/test_outputs.py\n", "status 127"),
    "no-reward": ("echo tests ran\n", "wrote no reward"),
    "nonzero-exit": ("echo 1 > /logs/verifier/reward.txt\nexit 2\n", "status 2"),
}


@pytest.mark.parametrize("case", sorted(CANNOT_RUN))
def test_verifier_that_cannot_run_is_an_error(
    tmp_path: Path, executor: SandboxExecutor, case: str
) -> None:
    script, reason = CANNOT_RUN[case]
    task = harbor_task(tmp_path / "task", script)
    if case == "dns-failure":  # the run withheld the network this task declares
        (task,) = withhold_network([task])
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(task, ws, executor)
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0, r
    assert reason in r.reason, r.reason


@pytest.mark.parametrize(
    ("script", "status", "reward"),
    [
        # Harbor's `exit "$rc"` after writing 0: the agent failed the tests, a scored 0
        ("echo 0 > /logs/verifier/reward.txt\nexit 1\n", VerifierStatus.OK, 0.0),
        # a positive reward from a non-zero exit is never trusted
        ("echo 1 > /logs/verifier/reward.txt\nexit 1\n", VerifierStatus.ERROR, 0.0),
        # killed after writing 0 (128 + 9): not a plain failure status
        ("echo 0 > /logs/verifier/reward.txt\nkill -9 $$\n", VerifierStatus.ERROR, 0.0),
        # a 0 from a verifier whose tool is missing stays a verifier error
        ("echo 0 > /logs/verifier/reward.txt\nuvx pytest\nexit 1\n", VerifierStatus.ERROR, 0.0),
    ],
)
def test_failed_tests_exit_after_a_zero_is_graded(
    tmp_path: Path, executor: SandboxExecutor, script: str, status: VerifierStatus, reward: float
) -> None:
    task = harbor_task(tmp_path / "task", script)
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(task, ws, executor)
    assert (r.status, r.reward) == (status, reward), r


AGENT_FAILURES = {
    # the agent did not write the module the tests import: its failure, scored 0
    "agent-module-missing": "import solution\n\ndef test_it():\n    assert solution.answer == 42\n",
    # the agent's program prints a command-not-found of its own: not the verifier's
    "agent-command-missing": (
        "import subprocess\n\ndef test_it():\n"
        "    r = subprocess.run(['bash', '-c', 'frobnicate'], capture_output=True, text=True)\n"
        "    print(r.stderr)\n    assert r.returncode == 0\n"
    ),
}


@pytest.mark.parametrize("case", sorted(AGENT_FAILURES))
def test_agent_failure_stays_a_zero(tmp_path: Path, executor: SandboxExecutor, case: str) -> None:
    """A verifier that ran and failed the agent's work is ``ok`` with reward 0."""
    runner = (
        "cd /tests && python3 -c 'import sys, test_outputs as t; "
        '[f() for n, f in vars(t).items() if n.startswith("test_")]\' 2>&1'
    )
    task = harbor_task(
        tmp_path / "task", _ZERO_ON_FAILURE.format(command=runner), AGENT_FAILURES[case]
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(task, ws, executor)
    assert r.status is VerifierStatus.OK and r.reward == 0.0, r


def test_full_marks_despite_a_missing_tool_stay_ok(
    tmp_path: Path, executor: SandboxExecutor
) -> None:
    """A verifier that tried an optional tool and still gave full marks is trusted."""
    task = harbor_task(
        tmp_path / "task", "uvx --version || true\necho 1 > /logs/verifier/reward.txt\n"
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(task, ws, executor)
    assert r.status is VerifierStatus.OK and r.reward == 1.0, r


def test_command_not_found_outside_the_verifier_is_not_a_sign() -> None:
    assert cannot_run_reason("", "bash: line 1: frobnicate: command not found", "/tests") is None
    assert cannot_run_reason("", "/app/run.sh: line 2: foo: command not found", "/tests") is None
    assert cannot_run_reason("", "/tests/test.sh: 4: uvx: not found", "/tests") is not None


def test_missing_tool_after_a_failed_download_names_the_host() -> None:
    """A public Harbor test.sh: ``curl … astral.sh/uv/install.sh | sh`` then ``uvx``; the
    reason names the unreachable host, the root cause, beside the missing command."""
    out = (
        "curl: (6) Could not resolve host: astral.sh\n"
        "/tests/test.sh: line 17: /root/.local/bin/env: No such file or directory\n"
        "/tests/test.sh: line 21: uvx: command not found\n"
    )
    reason = cannot_run_reason(out, "", "/tests")
    assert reason is not None and reason.startswith("command not found: uvx"), reason
    assert reason.endswith("after Could not resolve host: astral.sh"), reason
    apt = cannot_run_reason(
        "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  "
        "Temporary failure resolving 'deb.debian.org'\n"
        "/tests/test.sh: line 9: pytest: command not found\n",
        "",
        "/tests",
    )
    assert apt is not None and apt.endswith("Temporary failure resolving 'deb.debian.org'")
    alone = cannot_run_reason("", "/tests/test.sh: line 2: uvx: command not found", "/tests")
    assert alone is not None and "after" not in alone


def test_rollout_and_report_count_verifier_errors(tmp_path: Path) -> None:
    """Through the runner (noop harness): the rollout is ``verifier-error`` with the reason,
    and the aggregate counts it apart."""
    task = harbor_task(
        tmp_path / "task", _ZERO_ON_FAILURE.format(command="uvx pytest /tests/test_outputs.py")
    )
    results = asyncio.run(run_rollouts([task], ["noop"], concurrency=1))
    (r,) = results
    assert r.status is RolloutStatus.VERIFIER_ERROR and r.reward == 0.0, r
    assert "command not found: uvx" in r.reason
    report = aggregate([r.scored()])
    assert report.by_harness["noop"].n_verifier_error == 1
    assert report.by_harness["noop"].status_counts == {"verifier-error": 1}
