"""An interrupt during an update: the update runs in a worker thread that cannot be
interrupted (a real model's step takes minutes on a CPU), so ``train`` exits with status 130
once the cancellation's clean-up is done instead of waiting for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

# a stand-in for TrainLoop whose run() is inside a 60 s "update" in a worker thread; its
# finally block stands for the cancellation's clean-up (sandboxes, proxies)
SCRIPT = r"""
import asyncio, time
from clawrl.rl_core import train_cli

class Run:
    out = "runs/x"

class Cfg:
    run = Run()

class Loop:
    cfg = Cfg()
    ranks = None

    async def run(self):
        try:
            print("updating", flush=True)
            await asyncio.to_thread(time.sleep, 60)
        finally:
            print("cleaned up", flush=True)

asyncio.run(train_cli._stoppable(Loop()))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_an_interrupt_during_an_update_exits_after_the_clean_up(sig: int) -> None:
    """Revert (``_stoppable`` without its exit for unfinished worker items): the process
    waits the update's 60 s out, past this test's 20 s."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "updating"
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = proc.communicate()
    assert rc == 130 and elapsed < 20, (rc, elapsed, out, err)
    assert "cleaned up" in out, out
    assert "--resume (--out runs/x)" in err and "Traceback" not in err, err
