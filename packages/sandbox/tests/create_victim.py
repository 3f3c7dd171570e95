"""Throw-away orchestrator for the kill-during-create test: ``python create_victim.py RUN_ID``.

Prints GO just before ``Sandbox.create``; the test SIGKILLs it while podman is creating.
"""

from __future__ import annotations

import asyncio
import sys

from clawrl.sandbox import Sandbox, SandboxSpec


async def main(run_id: str) -> None:
    print("GO", flush=True)
    await Sandbox.create(SandboxSpec(files={"a": "x"}), run_id=run_id)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
