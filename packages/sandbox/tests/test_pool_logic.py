"""Pool scheduling invariants under random workloads (Hypothesis), without podman.

The sandboxes here are a *fake* (``FakeSandbox``, named as such): the pool's scheduling — cap,
FIFO queue, warm sets, eviction, reuse — is pure asyncio logic, and exploring thousands of
interleavings against real containers would take hours. Real-podman pool tests are in
test_pool.py.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import clawrl.sandbox.pool as pool_module
from clawrl.sandbox import ExecResult, Limits, SandboxCreateError, SandboxPool, SandboxSpec
from hypothesis import given, settings
from hypothesis import strategies as st

SPECS = [SandboxSpec(limits=Limits(memory=f"{m}m")) for m in (64, 96, 128)]


class FakeSandbox:
    """A fake sandbox: records liveness so the test can check the cap."""

    ids = itertools.count()

    def __init__(self, spec: SandboxSpec, world: dict[str, Any]) -> None:
        self.id = f"fake-{next(self.ids)}"
        self.spec = spec
        self.closed = False
        self.world = world

    async def exec(self, cmd: Any, **kw: Any) -> ExecResult:
        await asyncio.sleep(0)
        return ExecResult(0, b"", b"", False, 0.0)

    async def put_files(self, files: Any) -> None:
        await asyncio.sleep(0)

    async def destroy(self) -> None:
        if not self.closed:
            self.closed = True
            await asyncio.sleep(self.world["rng"].random() * 0.002)
            self.world["live"] -= 1


@settings(max_examples=50, deadline=None)
@given(
    cap=st.integers(1, 4),
    reuse=st.booleans(),
    warm=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=2),
    requests=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=12),
    fail_every=st.integers(0, 5),
    seed=st.integers(0, 1000),
)
def test_cap_holds_and_every_request_is_served(
    cap: int,
    reuse: bool,
    warm: list[tuple[int, int]],
    requests: list[tuple[int, int]],
    fail_every: int,
    seed: int,
) -> None:
    world: dict[str, Any] = {"live": 0, "max_live": 0, "n": 0, "rng": random.Random(seed)}

    async def factory(spec: SandboxSpec) -> Any:
        world["n"] += 1
        await asyncio.sleep(world["rng"].random() * 0.003)
        if fail_every and world["n"] % fail_every == 0:
            raise SandboxCreateError("fake creation failure")
        world["live"] += 1
        world["max_live"] = max(world["max_live"], world["live"])
        return FakeSandbox(spec, world)

    async def run() -> None:
        pool = SandboxPool(
            max_sandboxes=cap,
            reuse=reuse,
            gc_on_start=False,
            factory=factory,
            warm=[(SPECS[i], n) for i, n in warm],
        )
        served: list[int] = []
        failed: list[int] = []

        async def rollout(i: int, spec_i: int, hold: int) -> None:
            try:
                sb = await pool.acquire(SPECS[spec_i], timeout=30)
            except SandboxCreateError:
                failed.append(i)
                return
            assert sb.spec == SPECS[spec_i] and not sb.closed
            served.append(i)
            for _ in range(hold):
                await asyncio.sleep(0)
            await pool.release(sb)

        async with pool:
            await asyncio.gather(*(rollout(i, s, h) for i, (s, h) in enumerate(requests)))
            m = pool.metrics()
            assert m.in_use == 0 and m.waiting == 0
            assert m.acquired == len(served)
        assert sorted(served + failed) == list(range(len(requests)))
        if not fail_every:
            assert not failed
        assert world["max_live"] <= cap
        assert world["live"] == 0  # close() destroyed everything

    saved, pool_module.WARM_RETRY_S = pool_module.WARM_RETRY_S, 0.005
    try:
        asyncio.run(run())
    finally:
        pool_module.WARM_RETRY_S = saved
