"""Sandbox behaviour against real podman: functional, concurrency, timeouts, caps, limits."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from clawrl.sandbox import (
    Limits,
    Sandbox,
    SandboxClosedError,
    SandboxFileNotFoundError,
    SandboxGoneError,
    SandboxSpec,
    default_rootfs,
)

from .conftest import containers_of_run

RUN_FUNCTIONAL = f"t-functional-{uuid.uuid4().hex[:6]}"
RUN_16 = f"t-16-{uuid.uuid4().hex[:6]}"
RUN_WALL = f"t-wall-{uuid.uuid4().hex[:6]}"
RUN_ATEXIT = f"t-atexit-{uuid.uuid4().hex[:6]}"


async def test_create_exec_files_destroy(tmp_path: Path) -> None:
    host_dir = tmp_path / "proj"
    (host_dir / "pkg").mkdir(parents=True)
    (host_dir / "pkg" / "mod.py").write_text("X = 42\n")
    spec = SandboxSpec(files={"task.txt": "do it", "bin/run.sh": b"#!/bin/sh\necho ran\n"})
    sb = await Sandbox.create(spec, run_id=RUN_FUNCTIONAL)
    assert containers_of_run(RUN_FUNCTIONAL) == [sb.name]
    async with sb:
        r = await sb.exec("cat task.txt; pwd; id -u")
        assert r.ok and r.stdout == b"do it/workspace\n0\n" and r.stderr == b""
        assert r.duration_s > 0 and not r.timed_out

        r = await sb.exec(
            ["/bin/sh", "-c", 'echo "$1-$GREETING" >&2; exit 3', "sh", "arg"],
            env={"GREETING": "hi"},
        )
        assert (r.exit_code, r.stderr, r.ok) == (3, b"arg-hi\n", False)

        r = await sb.exec("wc -c", stdin=b"x" * 100_000)
        assert r.stdout.strip() == b"100000"

        await sb.put_file("/tmp/data.bin", bytes(range(256)))
        assert await sb.get_file("/tmp/data.bin") == bytes(range(256))
        await sb.put_dir(host_dir, "/workspace/proj")
        r = await sb.exec("cd proj && /usr/bin/python3 -c 'from pkg.mod import X; print(X)'")
        assert r.stdout == b"42\n", r
        await sb.exec("ln -s /etc/passwd /workspace/escape; ln -s ../../outside /workspace/up")
        out = await sb.get_dir("/workspace", tmp_path / "back")
        assert not (tmp_path / "outside").exists()
        assert not (out / "escape").is_symlink() and not (out / "up").is_symlink()  # skipped
        assert (out / "proj" / "pkg" / "mod.py").read_text() == "X = 42\n"
        assert (out / "task.txt").read_text() == "do it"
        with pytest.raises(SandboxFileNotFoundError):
            await sb.get_file("/workspace/missing")

        chunks = []
        stream = sb.exec_stream("for i in 1 2 3; do echo $i; sleep 0.2; done; echo err >&2")
        async for c in stream:
            chunks.append((c.stream, c.data, time.monotonic()))
        assert stream.result is not None and stream.result.ok
        assert b"".join(d for s, d, _ in chunks if s == "stdout") == b"1\n2\n3\n"
        assert chunks[-1][2] - chunks[0][2] > 0.3  # delivered as produced, not at the end
    assert sb.closed
    assert containers_of_run(RUN_FUNCTIONAL) == []
    with pytest.raises(SandboxClosedError):
        await sb.exec("true")
    await sb.destroy()  # idempotent


async def test_sixteen_sandboxes_execute_at_once() -> None:
    n = 16
    spec = SandboxSpec(limits=Limits(memory="128m", cpus=0.5))
    sandboxes = await asyncio.gather(*(Sandbox.create(spec, run_id=RUN_16) for _ in range(n)))
    try:
        assert len(set(containers_of_run(RUN_16))) == n
        # Each command records its start and end on the host clock (same kernel clock).
        cmd = "date +%s.%N; sleep 5; date +%s.%N"
        results = await asyncio.gather(*(sb.exec(cmd, timeout=60) for sb in sandboxes))
        windows = [tuple(float(x) for x in r.stdout.split()) for r in results]
        assert all(r.ok for r in results)
        latest_start = max(s for s, _ in windows)
        earliest_end = min(e for _, e in windows)
        assert latest_start < earliest_end, windows  # all 16 windows share a common instant
    finally:
        await asyncio.gather(*(sb.destroy() for sb in sandboxes))
    assert containers_of_run(RUN_16) == []


async def test_timeout_kills_and_reports_timed_out() -> None:
    async with await Sandbox.create(SandboxSpec()) as sb:
        t0 = time.monotonic()
        r = await sb.exec("sleep 100 & sleep 100; echo never", timeout=1.0)
        assert r.timed_out and not r.ok and r.exit_code != 0
        assert b"never" not in r.stdout
        assert 1.0 <= r.duration_s < 8 and time.monotonic() - t0 < 10
        # The whole process group died, including the background sleep.
        ps = await sb.exec("ps -eo args")
        assert b"sleep 100" not in ps.stdout, ps.stdout
        # A command that traps SIGTERM and exits 0 still counts as a timeout.
        r = await sb.exec("trap '' TERM; sleep 5; exit 0", timeout=0.5)
        assert r.timed_out and not r.ok

        # A failing output callback aborts the exec and kills the command's processes.
        def boom(stream: str, data: bytes) -> None:
            raise RuntimeError("consumer failed")

        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="consumer failed"):
            await sb.exec("echo first; sleep 77", on_output=boom)
        assert time.monotonic() - t0 < 20
        ps = await sb.exec("ps -eo args")
        assert b"sleep 77" not in ps.stdout, ps.stdout
        # A command finishing in time is not a timeout.
        r = await sb.exec("sleep 0.1", timeout=20)
        assert r.ok and not r.timed_out


async def test_output_caps_hold() -> None:
    async with await Sandbox.create(SandboxSpec()) as sb:
        r = await sb.exec(
            "head -c 5000000 /dev/zero; head -c 300000 /dev/zero >&2", max_output_bytes=1000
        )
        assert r.ok
        assert len(r.stdout) == 1000 and r.stdout_truncated
        assert len(r.stderr) == 1000 and r.stderr_truncated
        seen = 0

        def count(stream: str, data: bytes) -> None:
            nonlocal seen
            seen += len(data) if stream == "stdout" else 0

        r = await sb.exec("head -c 2000000 /dev/zero", max_output_bytes=10, on_output=count)
        assert seen == 2_000_000 and len(r.stdout) == 10
        r = await sb.exec("echo small")
        assert r.stdout == b"small\n" and not r.stdout_truncated


async def test_memory_limit_kills_twice_the_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the caller's directory: nothing may appear in it
    async with await Sandbox.create(SandboxSpec(limits=Limits(memory="128m"))) as sb:
        ok = await sb.exec("python3 -c \"b = b'x' * (64 << 20); print(len(b))\"", timeout=60)
        assert ok.ok, ok
        r = await sb.exec("python3 -c \"b = b'x' * (256 << 20); print('survived')\"", timeout=60)
        assert r.exit_code == 137 and b"survived" not in r.stdout, r
        assert (await sb.exec("echo alive")).ok  # the sandbox itself lives on
    # conmon (podman's monitor) creates an ``oom`` file in its working directory after an
    # OOM kill: podman runs in a private directory, not the caller's
    assert list(tmp_path.iterdir()) == []


async def test_fork_bomb_hits_pids_limit_host_stays_responsive() -> None:
    async with await Sandbox.create(SandboxSpec(limits=Limits(pids=64, cpus=1.0))) as sb:
        bomb = (
            'python3 -c "import os, time\n'
            "while True:\n"
            "    try: os.fork()\n"
            '    except OSError: time.sleep(0.01)\n"'
        )
        task = asyncio.ensure_future(sb.exec(bomb, timeout=6))
        await asyncio.sleep(2.5)  # the bomb is at its limit now
        count = await sb.exec("ls -d /proc/[0-9]* | wc -l", timeout=30)
        t0 = time.monotonic()
        host = subprocess.run(["/bin/sh", "-c", "echo host-ok"], capture_output=True, timeout=10)
        host_s = time.monotonic() - t0
        assert host.stdout == b"host-ok\n" and host_s < 1.0, host_s
        r = await task
        assert r.timed_out and not r.ok
        if count.ok:  # fork may fail for the counting shell itself: that also proves the cap
            assert int(count.stdout) <= 64
        after = await sb.exec("echo recovered", timeout=30)
        assert after.ok


async def test_workspace_fill_stops_at_limit() -> None:
    spec = SandboxSpec(limits=Limits(workspace_size="16m", memory="256m"))
    async with await Sandbox.create(spec) as sb:
        r = await sb.exec("dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo rc=$?")
        assert b"No space left on device" in r.stdout and b"rc=1" in r.stdout
        size = int((await sb.exec("stat -c %s /workspace/fill")).stdout)
        assert 15 << 20 <= size <= 16 << 20
        r = await sb.exec("df -k /workspace | tail -1")
        assert int(r.stdout.split()[1]) == 16 * 1024


async def test_wall_clock_removes_sandbox() -> None:
    sb = await Sandbox.create(SandboxSpec(limits=Limits(wall_clock_s=2)), run_id=RUN_WALL)
    try:
        assert (await sb.exec("true")).ok
        for _ in range(100):
            if not containers_of_run(RUN_WALL):
                break
            await asyncio.sleep(0.2)
        assert containers_of_run(RUN_WALL) == []
        with pytest.raises(SandboxGoneError):
            await sb.exec("true")
    finally:
        await sb.destroy()


async def test_non_root_user_owns_workspace() -> None:
    spec = SandboxSpec(user="1000:1000", files={"sub/f.txt": "x"})
    async with await Sandbox.create(spec) as sb:
        r = await sb.exec(
            "id -u; echo $HOME; stat -c %u /workspace /workspace/sub /workspace/sub/f.txt; "
            "touch /workspace/sub/new && echo wrote"
        )
        assert r.stdout.split() == [
            b"1000",
            b"/home/sandbox",
            b"1000",
            b"1000",
            b"1000",
            b"wrote",
        ], r
        r = await sb.exec("touch /etc/x")
        assert not r.ok


def test_normal_exit_without_destroy_leaves_nothing() -> None:
    script = (
        "import asyncio\n"
        "from clawrl.sandbox import Sandbox, SandboxSpec\n"
        "async def main():\n"
        f"    sb = await Sandbox.create(SandboxSpec(), run_id={RUN_ATEXIT!r})\n"
        "    assert (await sb.exec('true')).ok\n"
        "asyncio.run(main())\n"  # exits without destroy(): the atexit hook removes it
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert containers_of_run(RUN_ATEXIT) == []


async def test_extra_mounts_never_touch_the_shared_skeleton(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("mounted")
    target = f"/extra-{uuid.uuid4().hex[:6]}"
    spec = SandboxSpec(read_only_mounts={str(tmp_path): target, str(tmp_path / "f.txt"): "/tmp/f"})
    async with await Sandbox.create(spec) as sb:
        r = await sb.exec(f"cat {target}/f.txt /tmp/f; touch {target}/x 2>&1")
        assert r.stdout.startswith(b"mountedmounted") and b"Read-only" in r.stdout
    assert not (default_rootfs() / target.lstrip("/")).exists()
    async with await Sandbox.create(SandboxSpec()) as sb:
        assert not (await sb.exec(["test", "-e", target])).ok
