"""SIGTERM (``kill``, a scheduler's preemption) or Ctrl-C during a real ``train`` run (podman, the
tiny model): it stops within 30 s with exit status 130 and a line naming ``--resume``, and
leaves no container of the run behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.podman, pytest.mark.slow]

CONFIG = """
[run]
out = "{out}"
steps = 50
checkpoint_every = 1
[tasks]
train_n = 6
heldout_n = 2
tasks_per_step = 2
[rollout]
samples = 2
max_tokens = 16
concurrency = 4
verifier = "sandbox"
[eval]
enabled = false
[logging]
progress = false
plot = false
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_sigterm_stops_train_and_removes_its_sandboxes(
    tmp_path: Path, sig: int, interrupts: Any
) -> None:
    """SIGTERM to train's process, or Ctrl-C (SIGINT to its process group). Revert tried:
    train_cli without its SIGTERM handler — the process dies at once (status -15) and the
    run's sandboxes stay up; without catching KeyboardInterrupt, Ctrl-C ends in a
    traceback."""
    out = tmp_path / "run"
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.format(out=out))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawrl.rl_core.train_cli", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 240
        run_id = ""
        while not (run_id and interrupts.containers(run_id)):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "no sandbox of the run came up"
            runs = out / "runs.jsonl"
            if runs.exists() and runs.read_text().strip():
                run_id = json.loads(runs.read_text().splitlines()[0])["run_id"]
            time.sleep(0.5)
        rc, elapsed = interrupts.send(proc, sig)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = proc.stdout.read() if proc.stdout else ""
    if proc.stdout is not None:
        proc.stdout.close()
    assert rc == 130 and elapsed <= 30.0, f"rc {rc} after {elapsed:.1f} s\n{text[-3000:]}"
    assert "--resume" in text and "Traceback" not in text, text[-3000:]
    assert interrupts.containers(run_id) == []
