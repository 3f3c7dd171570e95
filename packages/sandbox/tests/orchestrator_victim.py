"""A throw-away orchestrator for the leak test: starts sandboxes, says READY, then hangs.

Run as ``python orchestrator_victim.py RUN_ID N``; the test SIGKILLs it mid-rollout.
"""

from __future__ import annotations

import asyncio
import sys

from clawrl.sandbox import SandboxPool, SandboxSpec


async def main(run_id: str, n: int) -> None:
    pool = SandboxPool(max_sandboxes=n + 1, run_id=run_id, gc_on_start=False)
    await pool.start()
    pool.warm(SandboxSpec(), 1)
    held = await asyncio.gather(*(pool.acquire() for _ in range(n)))
    rollouts = [asyncio.ensure_future(sb.exec("sleep 1000")) for sb in held]  # in progress
    await asyncio.sleep(1.0)
    print("READY", flush=True)
    await asyncio.wait(rollouts, timeout=3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
