"""Red-team tests of verification (issue 18): each attack is the agent's own output, run
through bench's real path — ``run_rollouts`` with the ``oracle`` harness on a temporary copy
of a task whose ``solution/solve.sh`` is the attack: runner → podman agent sandbox →
copy-out → verifier sandbox (SandboxExecutor) → reward. Each asserts containment (the true
reward, or ``verifier-error``, never the faked one) and names the fix whose revert makes it
fail.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    ExecSpec,
    HostVerificationError,
    LocalExecutor,
    Mount,
    RolloutResult,
    RolloutStatus,
    SandboxExecutor,
    Task,
    VerifierStatus,
    builtin_suite_dir,
    load_task,
    run_rollouts,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman"),
    pytest.mark.slow,
]

FAKE = {"odd_unsorted": 1, "even_sorted": 1, "even_unsorted": 1}


def attack_task(tmp: Path, stats_py: str, *, base: str = "fix_median") -> Task:
    """A copy of a built-in task whose oracle writes ``stats_py`` as the agent's answer."""
    root = tmp / base
    shutil.copytree(builtin_suite_dir() / base, root)
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\ncat > stats.py <<'CLAWRL_EOF'\n"
        + textwrap.dedent(stats_py)
        + "\nCLAWRL_EOF\n"
    )
    return load_task(root)


def rollout(task: Task, **kwargs: Any) -> RolloutResult:
    (result,) = asyncio.run(run_rollouts([task], ["oracle"], **kwargs))
    return result


def test_fake_reward_then_kill_the_checker(tmp_path: Path) -> None:
    """(a) stats.py writes a fake reward.json and SIGKILLs check.py (its parent).

    Contained by the checker running agent code as uid 65534: the write and the kill fail
    (EPERM), the checker scores the wrong median 0. Revert tried: `run()` without
    user/group/extra_groups — the checker dies with exit 137 and the rollout is a
    verifier-error instead of an ok 0, so this test fails.
    """
    task = attack_task(
        tmp_path,
        f"""
        import os, signal
        try:
            open("/logs/verifier/reward.json", "w").write({json.dumps(FAKE)!r})
        except OSError:
            pass
        try:
            os.kill(os.getppid(), signal.SIGKILL)
        except OSError:
            pass
        def median(values):
            return values[0]
        """,
    )
    r = rollout(task)
    assert r.reward == 0.0
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK, r.verifier
    assert r.subscores == {k: 0.0 for k in FAKE}


def test_root_verifier_killed_after_fake_reward_is_verifier_error(tmp_path: Path) -> None:
    """(a') A verifier that runs agent code as root (a Harbor-style test.sh) is killed by it
    after the code wrote a perfect reward.txt: a verifier that did not exit 0 is a
    verifier-error, never a score. Revert tried: dropping the exit-status check in
    verify() — the rollout then scores 1.0."""
    task = attack_task(
        tmp_path,
        """
        import os, signal
        open("/logs/verifier/reward.txt", "w").write("1.0")
        os.kill(os.getppid(), signal.SIGKILL)
        """,
    )
    (task.root / "tests" / "check.py").unlink()
    (task.root / "tests" / "test.sh").write_text(
        "cd /workspace && python3 stats.py\necho 0 > /logs/verifier/reward.txt\n"
    )
    task = load_task(task.root)
    r = rollout(task)
    assert r.reward == 0.0
    assert r.status is RolloutStatus.VERIFIER_ERROR, r.reason
    assert r.verifier is not None and r.verifier.status is VerifierStatus.ERROR


def test_detached_daemon_cannot_rewrite_the_reward(tmp_path: Path) -> None:
    """(b) stats.py leaves a detached daemon (double fork, setsid, no inherited fds) that
    rewrites reward.json with full marks as soon as the checker has written it.

    Contained by the uid drop (the daemon cannot write /logs/verifier) and by kill_all
    before the copy-back (it is dead when the reward is read). Revert tried: the uid drop —
    the root daemon wins the race and the rollout scores 1.0.
    """
    task = attack_task(
        tmp_path,
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in range(3):
                    os.close(fd)
                deadline = time.time() + 20
                while time.time() < deadline:
                    try:
                        with open("/logs/verifier/reward.json") as f:
                            seen = f.read()
                        if seen and "0.0" in seen:
                            with open("/logs/verifier/reward.json", "w") as f:
                                f.write({json.dumps(FAKE)!r})
                    except OSError:
                        pass
                    time.sleep(0.001)
            os._exit(0)
        os.wait()
        def median(values):
            return values[0]
        """,
    )
    r = rollout(task)
    assert r.reward == 0.0, r.subscores
    assert r.verifier is not None and r.verifier.status is VerifierStatus.OK


def test_host_verification_of_workspace_code_is_refused(tmp_path: Path) -> None:
    """(c) Host verification of fix_median (its checker imports the agent's stats.py) is
    refused with a typed error before any rollout runs. Revert tried: the runner's
    check_host_verification call — the batch then runs (verify()'s own refusal becomes a
    verifier-error per rollout) and no HostVerificationError is raised."""
    task = load_task(builtin_suite_dir() / "fix_median")
    events: list[Any] = []
    with pytest.raises(HostVerificationError) as info:
        rollout(task, verify_executor=LocalExecutor(), progress=events.append)
    assert info.value.task_ids == ["fix_median"]
    assert not [e for e in events if e.kind == "started"]


def test_agent_code_cannot_write_reward_or_verifier_files(tmp_path: Path) -> None:
    """(d) Agent code run by the checker tries to write /logs/verifier, to change and add to
    the trusted /tests, and to signal the checker; its median is right only if every one of
    those failed, so the rollout scores 1.0 iff all were contained. Revert tried: the uid
    drop — the writes succeed and the rollout scores 0."""
    task = attack_task(
        tmp_path,
        """
        import os, signal
        def _contained():
            for path in ("/logs/verifier/reward.json", "/logs/verifier/x",
                         "/tests/check.py", "/tests/new.py"):
                try:
                    open(path, "a").close()
                    return False
                except OSError:
                    pass
            try:
                os.kill(os.getppid(), 0)
                return False
            except PermissionError:
                pass
            return os.getuid() == 65534 and os.getgid() == 65534 and os.getgroups() == []
        CONTAINED = _contained()
        def median(values):
            xs = sorted(values)
            n = len(xs)
            m = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
            return m if CONTAINED else -1
        """,
    )
    r = rollout(task)
    assert r.status is RolloutStatus.OK, r.reason
    assert r.reward == 1.0, r.subscores


def test_sandbox_executor_kills_everything_before_copying_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reward directory is read only once no process of the verifier sandbox is left:
    SandboxExecutor calls kill_all after the command and before any copy-back. Revert
    tried: removing the kill_all call — the recorded order then lacks it."""
    from clawrl.sandbox import Sandbox

    order: list[str] = []
    real_kill, real_get = Sandbox.kill_all, Sandbox.get_dir

    async def kill_all(self: Sandbox, *a: Any, **k: Any) -> int:
        order.append("kill_all")
        return await real_kill(self, *a, **k)

    async def get_dir(self: Sandbox, *a: Any, **k: Any) -> Path:
        order.append("get_dir")
        return await real_get(self, *a, **k)

    monkeypatch.setattr(Sandbox, "kill_all", kill_all)
    monkeypatch.setattr(Sandbox, "get_dir", get_dir)
    out = tmp_path / "out"
    out.mkdir()
    spec = ExecSpec(
        argv=("sh", "-c", "(setsid sleep 30 &) ; echo 1 > /out/r"),
        cwd="/",
        mounts=(Mount(out, "/out", read_only=False),),
        timeout_s=30,
    )
    with SandboxExecutor() as ex:
        res = ex.run(spec)
    assert res.exit_code == 0, res.stderr
    assert order == ["kill_all", "get_dir"]
    assert (out / "r").read_text() == "1\n"
