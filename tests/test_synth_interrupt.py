"""Ctrl-C or SIGTERM during a real `synth run` (podman, the scripted test agent and test
simulator): it stops within 15 s with exit 130 and one line naming how to continue, leaves no
container of the run and no traceback, and the same command then finishes the rest."""

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

SYNTH = str(Path(sys.executable).parent / "synth")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_synthesis_stops_cleanly_and_resumes(
    tmp_path: Path, sig: int, interrupts: Any
) -> None:
    out = tmp_path / "ise"
    # six sessions, three at a time: the run outlasts its first wave (a scripted session
    # takes ~2 s), so the signal lands while sessions are running
    argv = [SYNTH, "run", "-n", "6", "--checkable", "-o", str(out), "--agent", "scripted",
            "--simulator", "scripted", "--scripted-max-queries", "3", "--concurrency", "3"]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    run_id = f"ise-{proc.pid}"
    try:
        deadline = time.monotonic() + 240
        while not interrupts.containers(run_id):  # the sessions' sandboxes are up
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.5)
        time.sleep(0.5)
        assert proc.poll() is None, "the run ended before the signal: make it longer"
        _, elapsed = interrupts.send(proc, sig)
        _, err = proc.communicate()  # the output, and the pipes closed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130 and elapsed <= 15.0, f"{proc.returncode} {elapsed:.1f} s {err}"
    assert "Traceback" not in err and "the same command continues" in err, err
    assert interrupts.containers(run_id) == []
    (cut,) = [json.loads(ln) for ln in (out / "runs.jsonl").read_text().splitlines()]
    assert cut["interrupted"] is True and cut["wall_s"] > 0  # counted in the yield
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    # the interrupted sessions were not written as done (discarded): they ran again
    assert (report["trajectories"]["complete"], report["trajectories"]["discarded"]) == (6, 0)
    assert report["yield"]["wall_s"] > cut["wall_s"]  # both calls' time
