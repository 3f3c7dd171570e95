"""Ctrl-C during a real `bench` run (podman): it stops within 10 s, saves the finished
rollouts, and leaves no container, temporary directory or process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.podman, pytest.mark.slow]

BENCH = str(Path(sys.executable).parent / "bench")


def _task(root: Path, name: str, verifier: str) -> Path:
    """A Harbor task without an image: the oracle writes a file, ``verifier`` scores it."""
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (d / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 300.0\n[agent]\ntimeout_sec = 60.0\n'
    )
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/out.txt\n")
    (d / "tests" / "test.sh").write_text(
        f"#!/bin/bash\n{verifier}\necho 1 > /logs/verifier/reward.txt\n"
    )
    return d


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_saves_finished_rollouts_and_leaves_nothing(
    tmp_path: Path, sig: int, interrupts: Any
) -> None:
    """One task is done, the other's verifier is still running (a 200 s sleep) when SIGINT
    comes (Ctrl-C: the whole process group) or SIGTERM (``kill``: bench's process only):
    bench exits 130 within 10 s, results.json holds the finished rollout, and no
    container of the run, no clawrl temporary directory and no process of its group is left."""
    fast = _task(tmp_path / "tasks", "fast", "true")
    slow = _task(tmp_path / "tasks", "slow", "sleep 200")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "run"
    run_id = f"interrupt-{os.getpid()}-{int(time.time())}"
    proc = subprocess.Popen(
        [BENCH, "--task", str(fast), str(slow), "--harness", "oracle", "--concurrency", "2",
         "--no-html", "--output-dir", str(out), "--run-id", run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(os.environ, TMPDIR=str(tmp)),
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any("fast · oracle" in line for line in lines):
            assert proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        time.sleep(3)  # the slow task's verifier is running now
        assert proc.poll() is None, "".join(lines)
        rc, elapsed = interrupts.send(proc, sig)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    text = "".join(lines)
    assert rc == 130 and elapsed <= 10.0, f"rc {rc} after {elapsed:.1f} s\n{text[-3000:]}"
    assert f"saved to {out}" in text.replace("\n", " ") or str(out) in text
    doc = json.loads((out / "results.json").read_text())
    assert [r["task_id"] for r in doc["rollouts"]] == ["fast"]
    assert doc["rollouts"][0]["reward"] == 1.0
    assert doc["meta"]["interrupted"] is True and doc["meta"]["n_planned"] == 2
    assert interrupts.containers(run_id) == []
    assert [p.name for p in tmp.iterdir() if p.name.startswith("clawrl-")] == []
    group = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True)
    assert group.stdout.split() == []
