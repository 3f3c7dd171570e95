"""Red-team tests of the unprivileged pytest of Harbor and Terminal-Bench 1 verifiers.

``test.sh`` / ``run-tests.sh`` run as root in the verifier sandbox (they install packages),
but clawrl's runner starts pytest as an unprivileged user: the workspace code that the
tests import or run cannot write the reward directory or the runner's reports, nor signal
the root runner, and every process of that user is killed before pytest writes its report.

Each attack is the agent's own output, run through ``run_rollouts`` with the ``oracle``
harness (the oracle script plays the agent) on a copy of a fixture task whose oracle is the
attack and whose true reward is 0: runner → podman agent sandbox → copy-out → verifier
sandbox (SandboxExecutor) → reward. Each docstring names the revert that makes it fail.
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path

import pytest
from clawrl.bench import RolloutOptions, RolloutResult, RolloutStatus, Task, load_task, run_rollouts

pytestmark = [pytest.mark.podman, pytest.mark.slow]

FIXTURES = Path(__file__).parents[2] / "packages" / "bench" / "tests" / "fixtures"


def _task(tmp: Path, fixture: str, oracle: str, path: str, code: str) -> Task:
    """A copy of ``fixture`` whose oracle (``oracle``) writes ``code`` to ``path``."""
    root = tmp / fixture
    shutil.copytree(FIXTURES / fixture, root)
    (root / oracle).write_text(
        f"#!/bin/bash\ncat > {path} <<'CLAWRL_EOF'\n{textwrap.dedent(code)}\nCLAWRL_EOF\n"
    )
    return load_task(root)


def _rollout(task: Task) -> RolloutResult:
    (result,) = asyncio.run(
        run_rollouts([task], ["oracle"], options=RolloutOptions(retries=1), concurrency=1)
    )
    return result


#: A detached daemon (double fork, setsid) that runs ``body()`` for 30 s.
DAEMON = """
import glob, os, signal, sys, time

def daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):  # the tests' pipes are not held open
                os.dup2(null, fd)
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    body()
                except OSError:
                    pass
                time.sleep(0.0005)
        os._exit(0)
    os.wait()

PASSING = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
    'errors="0" failures="0" skipped="0" tests="2"><testcase classname="test_outputs" '
    'name="test_sample"/><testcase classname="test_outputs" name="test_hidden"/>'
    '</testsuite></testsuites>'
)

def fake_reports():
    for path in glob.glob("/logs/verifier/clawrl-pytest/*.xml") + glob.glob(
        "/tmp/clawrl-pytest-*/*"
    ):
        with open(path) as fh:
            if fh.read() == PASSING:
                continue
        with open(path, "w") as fh:
            fh.write(PASSING)
"""


def test_harbor_daemon_of_an_imported_module_cannot_rewrite_reward_txt(tmp_path: Path) -> None:
    """harbor_slugify: the agent's ``textutils`` (imported by the tests) is wrong and, on
    import, leaves a daemon that rewrites ``/logs/verifier/reward.txt`` to 1 whenever it
    is not (polling: sandboxes have no inotify), so the 0 that ``test.sh`` writes after
    pytest is replaced before test.sh exits. Contained: pytest runs as an unprivileged
    user that cannot write the reward directory, and the daemon is killed when pytest's
    session ends. Revert tried: ``verifier_runner/pytest_runner.py`` and ``verify.py`` of
    main (pytest as root) — the rollout scores 1.0."""
    task = _task(
        tmp_path,
        "harbor_slugify",
        "solution/solve.sh",
        "/app/src/textutils.py",
        DAEMON
        + """
def fake_reward():
    with open("/logs/verifier/reward.txt", "a+") as fh:
        fh.seek(0)
        if fh.read().strip() != "1":
            fh.seek(0)
            fh.truncate()
            fh.write("1\\n")

daemon(fake_reward)

def slugify(text):
    return text
""",
    )
    for _ in range(2):
        r = _rollout(task)
        assert r.reward == 0.0, (r.status, r.reason)
        assert r.status is RolloutStatus.OK, r.reason


def test_tb1_daemon_of_a_tested_program_cannot_rewrite_the_junit_report(tmp_path: Path) -> None:
    """tb1_word_count: the agent's ``count.py`` (run by the tests) prints a wrong count and
    leaves a daemon that replaces every JUnit report it can find (the runner's, and
    pytest's private one) with a passing one as soon as pytest has written it. Contained:
    the report is written only after pytest killed every other process of its user, and
    the runner copies it into the root-owned report directory after killing them again.
    Revert tried: ``verifier_runner/pytest_runner.py`` and ``verify.py`` of main — the
    rollout scores 1.0."""
    task = _task(
        tmp_path,
        "tb1_word_count",
        "solution.sh",
        "/app/count.py",
        DAEMON
        + """
daemon(fake_reports)
print(0)
""",
    )
    r = _rollout(task)
    assert r.reward == 0.0, (r.status, r.reason, r.subscores)
    assert r.status is RolloutStatus.OK, r.reason
    assert r.subscores == {"test_sample": 0.0, "test_hidden": 0.0}


def test_tb1_tested_program_cannot_stop_the_runner(tmp_path: Path) -> None:
    """tb1_word_count: the agent's ``count.py`` stops clawrl's runner (SIGSTOP, so the race
    with the report is won every time), and leaves a daemon that waits for pytest to be
    gone, writes a passing report over the runner's and lets the runner go on (SIGCONT).
    Contained: the tests' user cannot signal the root runner, and its processes are
    killed before any report is written. Revert tried: ``verifier_runner/pytest_runner.py``
    and ``verify.py`` of main — the rollout scores 1.0."""
    task = _task(
        tmp_path,
        "tb1_word_count",
        "solution.sh",
        "/app/count.py",
        DAEMON
        + """
def procs(marker):
    found = []
    for cmd in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmd, "rb") as fh:
                argv = fh.read().split(b"\\0")
        except OSError:
            continue
        if any(marker in a for a in argv):
            found.append((int(cmd.split("/")[2]), argv))
    return found

runners = [p for p, argv in procs(b"pytest_runner.py") if b"--child" not in argv]
children = [p for p, argv in procs(b"pytest_runner.py") if b"--child" in argv]
stopped = []
for p in runners:
    try:
        os.kill(p, signal.SIGSTOP)
        stopped.append(p)
    except OSError:
        pass

def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True

def finish():
    if stopped and all(gone(c) for c in children):
        fake_reports()
        for p in stopped:
            os.kill(p, signal.SIGCONT)
        os._exit(0)

daemon(finish)
print(0)
""",
    )
    r = _rollout(task)
    assert r.reward == 0.0, (r.status, r.reason, r.subscores)
    assert r.status is RolloutStatus.OK, r.reason
    assert r.subscores == {"test_sample": 0.0, "test_hidden": 0.0}


def test_harbor_pytest_exiting_0_at_import_is_tampering(tmp_path: Path) -> None:
    """harbor_slugify: the agent's ``textutils`` ends the pytest process with status 0 as
    soon as the tests import it, so no test fails and ``test.sh`` writes 1. The runner
    takes pytest's status only where its JUnit report backs it: here there is none, which
    is tampering (a verifier-error scored 0). Revert tried: ``_backed`` in
    ``verifier_runner/pytest_runner.py`` (the status passed through as on main) — the
    rollout scores 1.0."""
    task = _task(
        tmp_path,
        "harbor_slugify",
        "solution/solve.sh",
        "/app/src/textutils.py",
        """
import os
os._exit(0)
""",
    )
    r = _rollout(task)
    assert r.reward == 0.0, (r.status, r.reason)
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert "tampering" in r.reason and "without a JUnit report" in r.reason, r.reason
