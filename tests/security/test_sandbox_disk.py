"""Red-team test: a sandbox with a writable root (as Harbor ``/app`` tasks have) cannot fill
the host's disk. Its root overlay lives on a tmpfs of ``Limits.root_size``; filling it is an
ENOSPC inside the sandbox and nothing reaches the host disk (see the sandbox's
``docs/disk.md``)."""

from __future__ import annotations

import asyncio
import shutil

import pytest
from clawrl.sandbox import Limits, Sandbox, SandboxSpec

pytestmark = [pytest.mark.podman]

CAP_MIB = 64
WRITE_MIB = 200


def test_filling_a_writable_root_is_contained() -> None:
    """Revert: ``_run_capped_root`` in ``Sandbox.create`` (writable roots started with
    ``podman run`` as before) -> the 200 MiB write succeeds and lands on the host disk."""

    async def attack() -> tuple[str, int, str]:
        spec = SandboxSpec(
            read_only_root=False,
            forwarder=False,
            limits=Limits(memory="512m", root_size=f"{CAP_MIB}m", wall_clock_s=120),
        )
        before = shutil.disk_usage("/var/lib/containers").used
        sb = await Sandbox.create(spec)
        try:
            r = await sb.exec(
                f"mkdir -p /app && dd if=/dev/zero of=/app/fill bs=1M count={WRITE_MIB}; "
                "echo dd=$?; sync",
                timeout=90,
            )
            grew = shutil.disk_usage("/var/lib/containers").used - before
            after = await sb.exec("echo still-alive", timeout=30)
        finally:
            await sb.destroy()
        return r.stdout.decode() + r.stderr.decode(), grew, after.stdout.decode()

    text, grew, after = asyncio.run(attack())
    assert "dd=0" not in text and "No space left" in text, text
    assert grew <= (CAP_MIB + 32) << 20, f"host disk grew by {grew >> 20} MiB"
    assert after.strip() == "still-alive"
