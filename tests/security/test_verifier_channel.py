"""Red-team tests of the verifier's channel: the reward directory and the verifier's output
belong to the root supervisor of the verifier sandbox, and a failure the rollout's own
files cause is a ``verifier-error`` (scored 0, kept for training), never an ``infra-error``.

Each attack is the agent's own output, run through ``run_rollouts`` with the ``oracle``
harness on a temporary copy of a task whose oracle is the attack: runner → podman agent
sandbox → copy-out → verifier sandbox (SandboxExecutor) → reward. Each docstring names the
revert that makes the test fail.
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutResult,
    RolloutStatus,
    SandboxExecutor,
    Task,
    VerifierStatus,
    builtin_suite_dir,
    load_task,
    run_rollouts,
)
from clawrl.sandbox import CopyLimits

pytestmark = [pytest.mark.podman, pytest.mark.slow]

FIXTURES = Path(__file__).parents[2] / "packages" / "bench" / "tests" / "fixtures"


def harbor_task(tmp: Path, agent_py: str, test_sh: str) -> Task:
    """A Harbor-style task (``tests/test.sh`` run as root, reward in ``reward.txt``) whose
    oracle writes ``agent_py`` as the agent's ``stats.py``; ``test_sh`` runs it."""
    root = tmp / "fix_median"
    shutil.copytree(builtin_suite_dir() / "fix_median", root)
    (root / "tests" / "check.py").unlink()
    (root / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncat > stats.py <<'CLAWRL_EOF'\n"
        + textwrap.dedent(agent_py)
        + "\nCLAWRL_EOF\n"
    )
    return load_task(root)


def rollout(task: Task, **kwargs: Any) -> RolloutResult:
    kwargs.setdefault("options", RolloutOptions(retries=1))
    (result,) = asyncio.run(run_rollouts([task], ["oracle"], **kwargs))
    return result


#: A detached daemon (double fork, setsid) that waits until the process ``PID`` is gone,
#: then runs ``ACTION``.
DAEMON = """
import os, sys, time
def daemon(pid, action):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            deadline = time.time() + 20
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    action()
                    break
                time.sleep(0.0005)
        os._exit(0)
    os.wait()
"""


def test_root_daemon_cannot_rewrite_the_reward_after_test_sh_exits(tmp_path: Path) -> None:
    """A root daemon the tests started waits until ``test.sh`` is gone (after it wrote
    0), then writes 1 into ``reward.txt``. Contained by the supervisor, which kills every
    other process as soon as it has reaped test.sh's main process and takes the reward
    only then. (A root daemon busy-polling for test.sh's zombie state still wins that
    race: docs/verification.md.)
    Revert tried: the supervisor's ``kill -9 -1`` loop (a plain run, the host's kill_all
    after the exec) — the daemon wins and the rollout scores 1.0."""
    task = harbor_task(
        tmp_path,
        DAEMON
        + """
def fake():
    with open("/logs/verifier/reward.txt", "w") as f:
        f.write("1")
daemon(int(sys.argv[1]), fake)
""",
        """\
        #!/bin/bash
        cd /workspace && python3 stats.py $$
        echo 0 > /logs/verifier/reward.txt
        """,
    )
    for _ in range(3):
        r = rollout(task)
        assert r.reward == 0.0, (r.status, r.reason)
        assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.reason


def test_reward_txt_linked_to_dev_null_beside_a_reward_json_is_a_verifier_error(
    tmp_path: Path,
) -> None:
    """The agent's code makes ``reward.txt`` a symlink to /dev/null (test.sh's 0 goes
    nowhere) and writes a ``reward.json`` of 1. A reward directory holding a link is a
    verifier-error scored 0, never reward.json's word alone. Revert tried: the
    output_error / reward-directory check in verify() — the rollout scores 1.0."""
    task = harbor_task(
        tmp_path,
        """
        import json, os
        os.symlink("/dev/null", "/logs/verifier/reward.txt")
        with open("/logs/verifier/reward.json", "w") as f:
            json.dump({"reward": 1}, f)
        """,
        """\
        #!/bin/bash
        cd /workspace && python3 stats.py
        echo 0 > /logs/verifier/reward.txt
        """,
    )
    r = rollout(task)
    assert r.reward == 0.0
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert "special file" in r.reason, r.reason


def test_a_reward_dir_swapped_for_a_symlink_is_a_scored_failure_not_infra(
    tmp_path: Path,
) -> None:
    """A failing agent swaps /logs/verifier for a symlink: the copy-back finds no
    directory. That is the rollout's doing: a verifier-error scored 0, one attempt, never
    an infra-error (dropped from training, retried). Revert tried: raising
    SandboxFileNotFoundError from the copy-back as before — the rollout becomes an
    infra-error after 2 attempts."""
    task = harbor_task(
        tmp_path,
        """
        import os, shutil
        shutil.rmtree("/logs/verifier")
        os.symlink("/tmp", "/logs/verifier")
        """,
        """\
        #!/bin/bash
        cd /workspace && python3 stats.py
        echo 0 > /logs/verifier/reward.txt
        """,
    )
    r = rollout(task)
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert r.reward == 0.0 and r.attempts == 1
    assert "no longer a directory" in r.reason, r.reason


def test_a_flooded_reward_dir_is_a_scored_failure_not_infra(tmp_path: Path) -> None:
    """A failing agent fills /logs/verifier past the copy-back limits (here 50 entries; the
    default is 100,000). A verifier-error scored 0 after one attempt. Revert tried: letting
    SandboxCopyLimitError out of the copy-back as before — the rollout becomes an
    infra-error after 2 attempts."""
    task = harbor_task(
        tmp_path,
        """
        for i in range(80):
            open(f"/logs/verifier/f{i}", "w").close()
        """,
        """\
        #!/bin/bash
        cd /workspace && python3 stats.py
        echo 0 > /logs/verifier/reward.txt
        """,
    )
    with SandboxExecutor(copy_limits=CopyLimits(max_files=50)) as ex:
        r = rollout(task, verify_executor=ex)
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert r.reward == 0.0 and r.attempts == 1
    assert "copy-back limits" in r.reason, r.reason


def clawgym_task(tmp: Path, program: str) -> Task:
    """A copy of the ClawGym word-stats fixture whose checker runs the agent's
    ``output/prog.py`` (as many ClawGym checkers run the agent's script) and whose oracle
    writes ``program`` there and nothing else (the true reward is 0)."""
    root = tmp / "clawgym_word_stats"
    shutil.copytree(FIXTURES / "clawgym_word_stats", root)
    check = root / "reward" / "check.py"
    check.write_text(
        check.read_text().replace(
            "def main() -> None:\n    ws = Path(sys.argv[1])\n",
            "def main() -> None:\n    ws = Path(sys.argv[1])\n"
            "    import subprocess\n"
            "    subprocess.run([sys.executable, str(ws / 'output' / 'prog.py')], "
            "stdout=subprocess.DEVNULL)\n",
        )
    )
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nmkdir -p /root/.openclaw/workspace/output\n"
        "cat > /root/.openclaw/workspace/output/prog.py <<'CLAWRL_EOF'\n"
        + textwrap.dedent(program)
        + "\nCLAWRL_EOF\n"
    )
    return load_task(root)


def test_clawgym_late_stdout_cannot_set_the_reward(tmp_path: Path) -> None:
    """The agent's program, run by the checker, leaves a daemon that opens reward.sh's
    stdout through /proc, waits for the checker to exit, then prints ``1.0`` every
    millisecond (before, while and after reward.sh prints the mean and exits). Contained: reward.sh runs as an
    unprivileged user, its stdout a root-only file the supervisor opened (the daemon
    cannot reopen it), and the daemon is killed at reward.sh's exit. Revert tried: the
    whole change (a plain root exec whose stdout pipe any root process can reopen) — the
    rollout scores 1.0; and the loader's ``user=UNPRIVILEGED_USER`` alone (reward.sh run
    as root under the supervisor, which can reopen its stdout) — 1.0 as well."""
    task = clawgym_task(
        tmp_path,
        """
        import glob, os, time
        def pids(marker):
            found = []
            for cmd in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    if marker in open(cmd, "rb").read():
                        found.append(int(cmd.split("/")[2]))
                except OSError:
                    pass
            return found
        outs = []
        for p in pids(b"reward.sh"):
            for fd in (1, 2):
                try:
                    outs.append(open(f"/proc/{p}/fd/{fd}", "w"))
                except OSError:
                    pass
        parent = os.getppid()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                deadline = time.time() + 20
                while time.time() < deadline:  # the checker that ran this program exits,
                    try:  # then reward.sh prints the mean and exits
                        os.kill(parent, 0)
                        time.sleep(0.0005)
                        continue
                    except ProcessLookupError:
                        pass
                    for f in outs:
                        try:
                            f.write("\\n1.0\\n")
                            f.flush()
                        except OSError:
                            pass
                    time.sleep(0.001)
            os._exit(0)
        os.wait()
        """,
    )
    # the default root (the host's python3 and setpriv), not the suite's built image
    r = rollout(task, options=RolloutOptions(retries=1, task_images=False))
    assert r.reward == 0.0, (r.status, r.reason, r.verifier and r.verifier.stdout)
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.reason
