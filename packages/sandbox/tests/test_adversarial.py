"""Adversarial inputs found by the red-team pass: each was a real bug (hang, leaked pool slot,
surviving process, forgeable exec tag) before its fix. Real podman where a container is needed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from clawrl.sandbox import (
    Sandbox,
    SandboxCreateError,
    SandboxPool,
    SandboxSpec,
    SandboxSpecError,
)
from clawrl.sandbox.podman import shared_podman

from .conftest import containers_of_run


@pytest.mark.timeout(60)
async def test_fifo_as_file_content_is_a_typed_error_not_a_hang(tmp_path: Path) -> None:
    # Reading a FIFO with no writer blocked the event loop forever (after the container had
    # started). Now non-regular host files are refused before any container exists.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run_id = "advfifo" + os.urandom(3).hex()
    with pytest.raises(SandboxSpecError, match="not a regular file"):
        await Sandbox.create(SandboxSpec(files={"f": fifo}), run_id=run_id)
    assert containers_of_run(run_id) == []


async def test_unreadable_host_file_neither_hangs_the_acquirer_nor_leaks_the_slot() -> None:
    # /proc/self/mem is a "regular file" whose read fails with EIO: an OSError (not a
    # SandboxError) escaped the pool's creation task, left the slot counted forever and the
    # acquirer waiting until its timeout.
    bad = SandboxSpec(files={"x": Path("/proc/self/mem")})
    async with SandboxPool(max_sandboxes=1, gc_on_start=False) as pool:
        with pytest.raises(SandboxSpecError, match="cannot read host path"):
            await pool.acquire(bad, timeout=60)
        assert pool.metrics().failed == 1
        async with pool.sandbox(timeout=60) as sb:  # the only slot is free again
            assert (await sb.exec("true", timeout=30)).ok


async def test_pool_factory_raising_a_foreign_exception_frees_the_slot() -> None:
    calls: list[int] = []

    async def factory(spec: SandboxSpec) -> Any:
        calls.append(1)
        raise RuntimeError("factory blew up")

    async with SandboxPool(max_sandboxes=1, gc_on_start=False, factory=factory) as pool:
        for _ in range(3):  # a leaked slot would make the 2nd acquire wait for its timeout
            with pytest.raises(SandboxCreateError, match="factory blew up"):
                await pool.acquire(timeout=5)
        m = pool.metrics()
        assert (m.failed, m.creating, m.in_use, m.waiting) == (3, 0, 0, 0)
    assert len(calls) == 3


def test_exec_tag_and_reserved_env_cannot_be_overridden() -> None:
    # An exec env of CLAWRL_EXEC_ID=forwarder made the command's processes immune to the
    # timeout kill and to the pool's reset.
    with pytest.raises(SandboxSpecError, match="reserved"):
        SandboxSpec(env={"CLAWRL_EXEC_ID": "forwarder"})


async def test_exec_rejects_bad_arguments_before_running() -> None:
    sb = Sandbox(
        container_id="not-a-container",
        name="n",
        spec=SandboxSpec(),
        podman=shared_podman(),
        run_id="r",
    )
    with pytest.raises(SandboxSpecError, match="reserved"):
        await sb.exec("true", env={"CLAWRL_EXEC_ID": "forwarder"})
    with pytest.raises(SandboxSpecError, match="user"):
        await sb.exec("true", user="bob")
    # these reached asyncio's subprocess start or the stdin writer as ValueError / TypeError
    with pytest.raises(SandboxSpecError, match="NUL"):
        await sb.exec(["echo", "a\0b"])
    with pytest.raises(SandboxSpecError, match="NUL"):
        await sb.exec("echo a\0b")
    with pytest.raises(SandboxSpecError, match="NUL"):
        await sb.exec(["echo", 5])  # type: ignore[list-item]
    with pytest.raises(SandboxSpecError, match="stdin"):
        await sb.exec("cat", stdin="text")  # type: ignore[arg-type]


async def test_timeout_kills_detached_descendants() -> None:
    # `timeout -s KILL` kills the command's process group; a child that called setsid() and
    # closed its output escaped it and kept running after a timed-out exec.
    async with await Sandbox.create(SandboxSpec()) as sb:
        r = await sb.exec(
            'setsid sh -c "sleep 301" >/dev/null 2>&1 </dev/null & sleep 100', timeout=1
        )
        assert r.timed_out and not r.ok
        ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '", timeout=30)
        assert "sleep 301" not in ps.text
        assert "sleep 100" not in ps.text
        # an exec that finishes normally may leave a daemon behind (documented); destroy ends it
        d = await sb.exec('setsid sh -c "sleep 302" >/dev/null 2>&1 </dev/null &', timeout=30)
        assert d.ok
        ps = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '", timeout=30)
        assert "sleep 302" in ps.text
    await asyncio.sleep(0)


@pytest.mark.parametrize("delay", [0.3, 1.2])
async def test_gc_right_after_sigkill_during_create_leaves_nothing(delay: float) -> None:
    # The orphaned `podman run` client used to finish creating the container after the next
    # gc had listed containers, so that gc missed it. Podman clients now die with their parent.
    import subprocess
    import sys

    from clawrl.sandbox import gc

    run_id = "advkill" + os.urandom(3).hex()
    victim = Path(__file__).with_name("create_victim.py")
    p = await asyncio.create_subprocess_exec(
        sys.executable, str(victim), run_id, stdout=subprocess.PIPE
    )
    assert p.stdout is not None
    assert (await p.stdout.readline()).strip() == b"GO"
    await asyncio.sleep(delay)
    p.kill()
    await p.wait()
    await gc()  # at once, like the next pool start after a crash
    assert containers_of_run(run_id) == []
    await asyncio.sleep(3)  # nothing appears later either
    assert containers_of_run(run_id) == []


def test_cli_ls_into_a_closed_pipe_exits_quietly() -> None:
    # `sandbox ls | head` printed a BrokenPipeError traceback.
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-m", "clawrl.sandbox.cli", "ls"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first line is written
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err
