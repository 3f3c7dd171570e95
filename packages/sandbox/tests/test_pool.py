"""SandboxPool and the reaper against real podman: reuse, warm, cap, FIFO, leaks after SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from clawrl.sandbox import (
    Limits,
    PoolClosedError,
    PoolMetrics,
    PoolTimeoutError,
    SandboxPool,
    SandboxSpec,
    gc,
)

from .conftest import containers_of_run

SMALL = SandboxSpec(limits=Limits(memory="128m", cpus=0.5))


def _run_id(tag: str) -> str:
    return f"t-{tag}-{uuid.uuid4().hex[:6]}"


async def _wait_for_metrics(pool: SandboxPool, done: Callable[[PoolMetrics], bool]) -> None:
    """Poll the pool's metrics (up to 20 s) until ``done`` holds; the caller asserts after."""
    for _ in range(200):
        if done(pool.metrics()):
            return
        await asyncio.sleep(0.1)


async def test_pool_reuse_resets_sandbox() -> None:
    run = _run_id("reuse")
    spec = SandboxSpec(files={"task.txt": "original"}, limits=Limits(memory="128m"))
    async with SandboxPool(max_sandboxes=1, reuse=True, run_id=run, gc_on_start=False) as pool:
        async with pool.sandbox(spec) as sb:
            first = sb.id
            r = await sb.exec("echo dirty > task.txt; echo junk > /tmp/j; (sleep 300 &) ; echo ok")
            assert r.ok
        async with pool.sandbox(spec) as sb:
            assert sb.id == first  # the same container, reset
            r = await sb.exec(
                "cat task.txt; echo; ls -A /tmp; ps -eo args | grep -c '^sleep 300' || true"
            )
            assert r.stdout.split() == [b"original", b"0"], r
        m = pool.metrics()
        assert (m.created, m.acquired, m.reused, m.failed) == (1, 2, 1, 0)
    assert containers_of_run(run) == []


async def test_pool_default_replaces_released_sandboxes_and_warm_acquire_is_fast() -> None:
    run = _run_id("warm")
    async with SandboxPool(
        max_sandboxes=4, warm=[(SMALL, 2)], run_id=run, gc_on_start=False
    ) as pool:
        await _wait_for_metrics(pool, lambda m: m.idle == 2)
        assert pool.metrics().idle == 2
        t0 = time.monotonic()
        sb = await pool.acquire(SMALL)
        warm_s = time.monotonic() - t0
        assert warm_s < 0.05, warm_s  # a queue pop, no podman call
        assert pool.metrics().created == 2
        first = sb.id
        await pool.release(sb)
        # released -> destroyed; warm topped up again with a fresh one
        await _wait_for_metrics(pool, lambda m: m.destroyed == 1 and m.idle == 2)
        m = pool.metrics()
        assert (m.destroyed, m.idle, m.in_use, m.reused) == (1, 2, 0, 0)
        assert first not in {s.id for q in pool._idle.values() for s in q}
    assert containers_of_run(run) == []


async def test_pool_cap_fifo_and_timeout() -> None:
    run = _run_id("fifo")
    # cap 1 + reuse: every handover goes through the queue head, so service order is visible
    async with SandboxPool(max_sandboxes=1, reuse=True, run_id=run, gc_on_start=False) as pool:
        a = await pool.acquire(SMALL)
        with pytest.raises(PoolTimeoutError):
            await pool.acquire(SMALL, timeout=0.3)
        order: list[int] = []

        async def waiter(i: int) -> None:
            sb = await pool.acquire(SMALL)
            order.append(i)
            assert len(containers_of_run(run)) == 1  # the cap holds
            await pool.release(sb)

        tasks = []
        for i in range(4):
            tasks.append(asyncio.ensure_future(waiter(i)))
            await asyncio.sleep(0.02)  # enqueue in a known order
        assert pool.metrics().waiting == 4
        await pool.release(a)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert order == [0, 1, 2, 3]
        m = pool.metrics()
        assert (m.acquired, m.created, m.reused, m.waiting) == (5, 1, 4, 0)
        assert m.acquire_wait_s > 0
    assert containers_of_run(run) == []
    with pytest.raises(PoolClosedError):
        await pool.acquire(SMALL)


async def test_pool_cap_evicts_idle_of_other_spec() -> None:
    run = _run_id("evict")
    other = SandboxSpec(limits=Limits(memory="96m", cpus=0.5))
    async with SandboxPool(
        max_sandboxes=1, warm=[(other, 1)], run_id=run, gc_on_start=False
    ) as pool:
        await _wait_for_metrics(pool, lambda m: m.idle == 1)
        sb = await pool.acquire(SMALL, timeout=60)
        assert sb.spec == SMALL and len(containers_of_run(run)) == 1
        await pool.release(sb)


def _start_victim(run: str, n: int) -> subprocess.Popen[str]:
    victim = Path(__file__).with_name("orchestrator_victim.py")
    proc = subprocess.Popen(
        [sys.executable, str(victim), run, str(n)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", line
    return proc


async def test_sigkilled_orchestrator_leaves_nothing_after_gc_or_next_pool() -> None:
    live_run = _run_id("live")
    run_a, run_b = _run_id("killed-a"), _run_id("killed-b")
    async with SandboxPool(max_sandboxes=1, run_id=live_run, gc_on_start=False) as live_pool:
        live = await live_pool.acquire(SMALL)
        a = _start_victim(run_a, 2)
        b = _start_victim(run_b, 2)
        assert len(containers_of_run(run_a)) == 3 and len(containers_of_run(run_b)) == 3
        os.kill(a.pid, signal.SIGKILL)
        os.kill(b.pid, signal.SIGKILL)
        for proc in (a, b):
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
        assert len(containers_of_run(run_a)) == 3  # nothing cleaned them up yet

        # (1) `sandbox gc` (the CLI) removes the dead run's containers ...
        cli = subprocess.run(
            [sys.executable, "-m", "clawrl.sandbox.cli", "gc", "--run", run_a],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        assert containers_of_run(run_a) == []
        # (2) ... and the next pool start removes every dead run's containers,
        async with SandboxPool(max_sandboxes=1, run_id=_run_id("next")) as nxt:
            assert {c.run_id for c in nxt.reaped} >= {run_b}
        assert containers_of_run(run_b) == []
        # while live runs of other orchestrators are never touched.
        assert containers_of_run(live_run) == [live.name]
        assert (await live.exec("echo still-here")).ok
        assert [c for c in await gc() if c.run_id == live_run] == []
        await live_pool.release(live)
    assert containers_of_run(live_run) == []
