"""Host-side process control and copy-out against real podman (what a hostile agent tries)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from clawrl.sandbox import (
    CopyLimits,
    Limits,
    Sandbox,
    SandboxCopyLimitError,
    SandboxFileNotFoundError,
    SandboxPool,
    SandboxSpec,
)

from .conftest import UnixHTTP

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sb(unix_http: UnixHTTP) -> AsyncIterator[Sandbox]:
    async with await Sandbox.create(SandboxSpec(model_socket=unix_http.path)) as sandbox:
        yield sandbox


async def test_kill_all_leaves_only_pid_1(sb: Sandbox) -> None:
    # daemons that leave the exec's process group and session, ignore signals, or fork-bomb
    await sb.exec(
        "setsid sh -c 'trap \"\" TERM HUP INT; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & "
        "nohup sleep 1000 </dev/null >/dev/null 2>&1 & "
        "(f() { sleep 0.01; f & f & wait; }; f) </dev/null >/dev/null 2>&1 & "
        "exit 0",
        timeout=10,
    )
    await asyncio.sleep(1.0)
    # the bomb keeps the pids limit nearly full; the host-side kill needs no exec
    killed = await sb.kill_all()
    assert killed >= 50
    r = await sb.exec("ps -eo pid=,args=", timeout=10)
    rows = [line.split(None, 1) for line in r.stdout.decode().splitlines()]
    alive = [args for pid, args in rows if "ps -eo" not in args and "timeout" not in args]
    assert [pid for pid, _ in rows if pid == "1"] == ["1"]
    assert all("sleep infinity" in a for a in alive), alive


async def test_no_user_namespaces_so_no_nested_pid_namespaces(sb: Sandbox) -> None:
    """A process in a PID namespace of its own (``unshare -Upf``) is outside the sandbox's PID
    namespace; from one with its own cgroup namespace it could mount cgroup2 and move or
    freeze itself out of the sandbox's cgroup. The seccomp profile
    refuses user namespaces, and without one sandbox root (no ``CAP_SYS_ADMIN``) gets no
    PID, mount or cgroup namespace; ``kill_all`` also counts processes in the sandbox's
    cgroups or below as members (next test). Revert tried: profile without the
    ``CLONE_NEWUSER`` rules -> ``unshare`` succeeds and this test fails."""
    r = await sb.exec(
        "unshare -Upf --map-root-user true; echo pidns=$?; unshare -Ucm true; echo cgns=$?; "
        "unshare -U true; echo userns=$?",
        timeout=20,
    )
    assert r.stdout.decode().split() == ["pidns=1", "cgns=1", "userns=1"], r
    await sb.exec("sleep 777 </dev/null >/dev/null 2>&1 & sleep 0.2", timeout=20)
    assert await sb.kill_all() >= 1
    r = await sb.exec("ps -eo args", timeout=10)
    assert r.ok and "sleep 777" not in r.stdout.decode(), r


async def test_pid_1_cannot_be_traced_or_rewritten(sb: Sandbox) -> None:
    """Sandbox root has PID 1's uid and capabilities: with ptrace it could kill PID 1 (an
    infra-error it chooses) or make it run its own program, which ``kill_all`` never
    signals. ``ptrace``, ``process_vm_*`` and ``pidfd_getfd`` are
    refused, ``/proc/1/mem`` is masked. Revert tried: profile without the ptrace rule ->
    ``PTRACE_ATTACH`` on PID 1 returns 0."""
    code = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())"
    )
    r = await sb.exec(["python3", "-c", code], timeout=20)
    assert r.stdout.decode().split() == ["-1", "1"], r  # EPERM
    r = await sb.exec("head -c 16 /proc/1/mem | wc -c; stat -c %F /proc/1/mem", timeout=10)
    assert r.stdout.decode().split("\n")[:2] == ["0", "character special file"], r


async def test_pid_1_ignores_every_signal_from_inside(sb: Sandbox) -> None:
    r = await sb.exec(
        "for s in KILL TERM INT HUP QUIT USR1 USR2 ALRM STOP; do kill -s $s 1; done; sleep 0.3; "
        "kill -CONT 1; grep State /proc/1/status",
        timeout=10,
    )
    assert r.ok, r
    assert await sb.alive()
    assert (await sb.exec("echo still here", timeout=10)).stdout == b"still here\n"


async def test_copy_out_takes_regular_files_and_directories_only(
    sb: Sandbox, tmp_path: Path
) -> None:
    await sb.exec(
        "rm -rf /workspace/*; mkdir -p /workspace/d/e && echo hi > /workspace/d/e/f && "
        "chmod +x /workspace/d/e/f && ln -s /etc /workspace/etc_link && "
        "ln -s ../../../../../../tmp /workspace/d/up && mkfifo /workspace/fifo && "
        "ln /workspace/d/e/f /workspace/hard",
        timeout=10,
    )
    stats = await sb.copy_out("/workspace", tmp_path / "out")
    out = tmp_path / "out"
    found = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert found == ["d", "d/e", "d/e/f", "hard"]
    assert not any(p.is_symlink() for p in out.rglob("*"))
    assert (stats.files, stats.skipped) == (2, 3)
    assert os.stat(out / "d/e/f").st_mode & 0o777 == 0o755
    assert (out / "hard").read_text() == "hi\n"
    # a symlink on the way is never followed, for get_dir and get_file alike
    with pytest.raises(SandboxFileNotFoundError):
        await sb.get_dir("/workspace/etc_link", tmp_path / "etc")
    with pytest.raises(SandboxFileNotFoundError):
        await sb.get_file("/workspace/etc_link/passwd")
    with pytest.raises(SandboxFileNotFoundError):
        await sb.get_file("/workspace/fifo")  # neither blocks nor reads a FIFO
    assert not (tmp_path / "etc").exists() or not any((tmp_path / "etc").iterdir())


async def test_copy_out_bounds_fail_fast(sb: Sandbox, tmp_path: Path) -> None:
    await sb.exec("rm -rf /workspace/*; truncate -s 4G /workspace/sparse", timeout=10)
    t0 = time.monotonic()
    with pytest.raises(SandboxCopyLimitError) as e:
        await sb.get_dir("/workspace", tmp_path / "a", max_bytes=64 << 20)
    assert e.value.limit == "max_bytes" and time.monotonic() - t0 < 5
    assert not (tmp_path / "a" / "sparse").exists()
    with pytest.raises(SandboxCopyLimitError) as e:
        await sb.get_file("/workspace/sparse", max_bytes=1 << 20)
    assert e.value.limit == "max_bytes"

    await sb.exec("rm -rf /workspace/*; cd /workspace && seq 1 3000 | xargs touch", timeout=30)
    with pytest.raises(SandboxCopyLimitError) as e:
        await sb.get_dir("/workspace", tmp_path / "b", limits=CopyLimits(max_files=1000))
    assert e.value.limit == "max_files"

    await sb.exec(
        "rm -rf /workspace/*; cd /workspace && for i in $(seq 1 80); do mkdir d && cd d; done",
        timeout=30,
    )
    with pytest.raises(SandboxCopyLimitError) as e:
        await sb.get_dir("/workspace", tmp_path / "c")
    assert e.value.limit == "max_depth"
    with pytest.raises(SandboxCopyLimitError) as e:
        await sb.get_dir("/workspace", tmp_path / "d", limits=CopyLimits(max_path_length=100))
    assert e.value.limit == "max_path_length"


async def test_model_socket_cannot_be_tampered_with(sb: Sandbox, unix_http: UnixHTTP) -> None:
    r = await sb.exec(
        "chmod 000 /run/clawrl/model.sock; echo chmod=$?; rm -f /run/clawrl/model.sock; "
        "echo rm=$?; ls -l /run/clawrl/model.sock",
        timeout=10,
    )
    out = r.stdout.decode()
    assert "chmod=1" in out and "rm=1" in out, r
    assert unix_http.path.stat().st_mode & 0o777 != 0
    assert "srw" in out  # still a socket, mode unchanged


_INOTIFY_HOG = (
    "python3 -c 'import ctypes, os, sys, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fds = [fd for fd in (libc.inotify_init1(0) for _ in range(300)) if fd >= 0]\n"
    "print(len(fds), os.strerror(ctypes.get_errno()), flush=True)\n"
    "time.sleep(3)'"
)


def _host_inotify_instances_left(cap: int = 2000) -> int:
    """How many inotify instances this (host) process can still create, up to ``cap``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fds = []
    try:
        for _ in range(cap):
            fd = libc.inotify_init1(0)
            if fd < 0:
                break
            fds.append(fd)
        return len(fds)
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="host root's per-user inotify limit")
async def test_sandbox_root_takes_none_of_host_roots_inotify_instances(sb: Sandbox) -> None:
    """Sandbox root is host root (no user namespace), so each inotify instance it made was
    charged to host root's ``fs.inotify.max_user_instances`` (128): a hog left the host with
    none. The seccomp profile refuses ``inotify_init``/``inotify_init1`` (``ENOSYS``).
    Revert tried: no ``--security-opt seccomp=`` -> the hog gets 128 and the host 0."""
    before = _host_inotify_instances_left()
    hog = asyncio.ensure_future(sb.exec(_INOTIFY_HOG, timeout=20))
    await asyncio.sleep(1.5)  # the hog holds what it got for 3 s
    during = _host_inotify_instances_left()
    r = await hog
    got, _, why = r.stdout.decode().strip().partition(" ")
    assert (got, why) == ("0", "Function not implemented"), r
    assert during == before > 0
    # programs fall back: tail -f polls
    r = await sb.exec("echo a > /tmp/t; (sleep 0.5; echo b >> /tmp/t) & timeout 2 tail -f /tmp/t")
    assert r.stdout == b"a\nb\n", r


async def test_every_writable_tmpfs_has_a_size(sb: Sandbox) -> None:
    r = await sb.exec("cat /proc/self/mountinfo", timeout=10)
    unsized = []
    for line in r.stdout.decode().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _source, opts = post.split(" ", 2)
        if fstype == "tmpfs" and "size=" not in opts:
            unsized.append(pre.split()[4])
    assert unsized, "expected the read-only /sys/fs/cgroup tmpfs"
    # an unsized tmpfs (half the host's RAM) must not take a single byte
    for place in unsized:
        w = await sb.exec(f"echo x > {place}/clawrl-probe", timeout=10, user="0:0")
        assert w.exit_code != 0, place
    r = await sb.exec("dd if=/dev/zero of=/run/fill bs=1M count=64; rm -f /run/fill", timeout=30)
    assert b"No space left" in r.stderr


async def test_reused_sandbox_is_reset_from_the_host(unix_http: UnixHTTP) -> None:
    spec = SandboxSpec(model_socket=unix_http.path, limits=Limits(wall_clock_s=600))
    async with SandboxPool(max_sandboxes=1, reuse=True) as pool:
        async with pool.sandbox(spec) as first:
            await first.exec(
                "echo x > /run/planted; echo y > /var/tmp/planted; echo z > /dev/shm/planted; "
                "echo w > /workspace/planted; env -i setsid sleep 1000 </dev/null >/dev/null 2>&1 &",
                timeout=10,
            )
            first_id = first.id
        await asyncio.sleep(0)
        async with pool.sandbox(spec) as again:
            assert again.id == first_id and pool.metrics().reused == 1
            r = await again.exec(
                "ls /run/planted /var/tmp/planted /dev/shm/planted /workspace/planted 2>&1; "
                "ps -eo args= | grep -c '^sleep 1000' ; "
                "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/x').status)\"",
                timeout=20,
            )
            out = r.stdout.decode()
            assert out.count("No such file") == 4, out
            assert "\n0\n" in out and out.strip().endswith("200"), out
    # a sandbox whose root is writable is destroyed, never handed to the next user
    writable = SandboxSpec(read_only_root=False)
    async with SandboxPool(max_sandboxes=1, reuse=True) as pool:
        async with pool.sandbox(writable) as sb1:
            await sb1.exec("echo evil > /etc/ld.so.preload", timeout=10)
            id1 = sb1.id
        async with pool.sandbox(writable) as sb2:
            assert sb2.id != id1
            assert (await sb2.exec("cat /etc/ld.so.preload", timeout=10)).exit_code != 0


async def test_cgroup_membership_includes_child_cgroups_never_the_whole_host() -> None:
    from clawrl.sandbox.hostfs import _in_cgroups

    box = b"12:pids:/machine/libpod-abc\n1:name=systemd:/machine/libpod-abc\n0::/\n"
    child = b"12:pids:/machine/libpod-abc/hide\n1:name=systemd:/machine/libpod-abc\n0::/x\n"
    other = b"12:pids:/machine/libpod-abcd\n1:name=systemd:/machine/libpod-abcd\n0::/\n"
    host = b"12:pids:/\n1:name=systemd:/\n0::/\n"
    assert _in_cgroups(box, box) and _in_cgroups(child, box)
    assert not _in_cgroups(other, box) and not _in_cgroups(host, box)
    assert not _in_cgroups(host, host)  # a sandbox at every root: the cgroups say nothing
