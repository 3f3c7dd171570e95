"""tools/train/record_run.py: a train run's small files become a run record under the size
limit; checkpoints and call records stay behind; bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
TOOL = str(ROOT / "tools/train/record_run.py")


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for d in ("rollouts", "capture/s0", "checkpoints/step-1"):
        (run / d).mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"run": {"seed": 0}}))
    row = {"step": 1, "reward": 0.5, "loss": 5.6310811042785645, "xs": [0.1234567891, 3]}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (run / "summary.json").write_text(json.dumps({"steps": 1}))
    (run / "capture/s0/calls.jsonl").write_text("{}\n")
    (run / "checkpoints/step-1/model.safetensors").write_bytes(b"\0" * 1000)
    (run / "rollouts/step-1.jsonl").write_text("{}\n")
    rows = [
        {"task_id": "chores-count-matches-aa", "harness": "pi", "reward": 1.0, "status": "ok"},
        {"task_id": "chores-log-value-bb", "harness": "pi", "reward": 0.0, "status": "ok"},
    ]
    rows[1]["workspace_diff"] = "x" * 300_000  # the loop's lines also hold diffs and logs
    (run / "rollouts/eval-step-1.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    # an RGBA picture of thousands of colours (noise: it does not compress)
    im = Image.frombytes("RGB", (320, 240), random.Random(0).randbytes(320 * 240 * 3))
    im.convert("RGBA").save(run / "curves.png")
    return run


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def test_record_keeps_the_small_files_and_a_palette_curve(tmp_path: Path) -> None:
    run, dest = _run_dir(tmp_path), tmp_path / "rec"
    proc = _tool(str(run), str(dest), "--title", "A run", "--command", "uv run train --x")
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in dest.iterdir())
    assert names == [
        "README.md",
        "config.json",
        "curves.png",
        "eval-step-1.jsonl",
        "eval_table.json",
        "metrics.jsonl",
        "summary.json",
    ]
    with Image.open(dest / "curves.png") as im:
        assert im.mode == "P" and im.size == (320, 240)
    # floats keep 6 significant digits; ints and the keys stay
    rows = [json.loads(line) for line in (dest / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "reward": 0.5, "loss": 5.63108, "xs": [0.123457, 3]}]
    assert (dest / "curves.png").stat().st_size < (run / "curves.png").stat().st_size
    kept = [json.loads(x) for x in (dest / "eval-step-1.jsonl").read_text().splitlines()]
    assert kept[1] == {
        "task_id": "chores-log-value-bb",
        "harness": "pi",
        "reward": 0.0,
        "status": "ok",
    }
    table = json.loads((dest / "eval_table.json").read_text())
    assert table["evals"]["step-1"]["per_harness"]["pi"]["pass_rate"] == 0.5
    readme = (dest / "README.md").read_text()
    assert readme.startswith("# A run\n") and "uv run train --x" in readme
    assert "| step-1 | 0.500 ± 0.500 |" in readme, readme
    assert sum(p.stat().st_size for p in dest.iterdir()) < 200_000
    # a hand-written README is kept on a second recording
    (dest / "README.md").write_text("# mine\n")
    assert _tool(str(run), str(dest)).returncode == 0
    assert (dest / "README.md").read_text() == "# mine\n"


def test_not_a_run_and_over_the_limit_exit_2_and_write_nothing(tmp_path: Path) -> None:
    proc = _tool(str(tmp_path / "nothing"), str(tmp_path / "rec"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not a training run" in proc.stderr and not (tmp_path / "rec").exists()
    run = _run_dir(tmp_path)
    (run / "metrics.jsonl").write_bytes(os.urandom(300_000).hex().encode())
    proc = _tool(str(run), str(tmp_path / "rec"))
    assert proc.returncode == 2 and "metrics.jsonl" in proc.stderr, proc.stderr
    assert not (tmp_path / "rec").exists()
