"""tools/train/eval_table.py: per-harness pass@1 with the task-clustered error, and the
harness x template table, from a train run's eval rollout files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = str(ROOT / "tools/train/eval_table.py")


def _row(task: str, harness: str, reward: float, status: str = "ok") -> dict[str, object]:
    return {"task_id": task, "harness": harness, "reward": reward, "status": status}


def test_eval_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "rollouts").mkdir(parents=True)
    rows = [
        _row("chores-count-matches-aa", "pi", 1.0),
        _row("chores-count-matches-aa", "pi", 1.0),
        _row("chores-log-value-bb", "pi", 0.0),
        _row("chores-log-value-bb", "pi", 1.0),
        _row("chores-log-value-bb", "codex", 0.0),
        _row("chores-log-value-bb", "codex", 1.0, status="infra-error"),  # not counted
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    (run / "rollouts" / "eval-step-0.jsonl").write_text(text)
    out = tmp_path / "t.json"
    proc = subprocess.run(
        [sys.executable, TOOL, str(run), "--json", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    pi = doc["evals"]["step-0"]["per_harness"]["pi"]
    assert pi["pass_rate"] == 0.75 and pi["tasks"] == 2  # tasks: 1.0 and 0.5
    assert abs(pi["se"] - 0.25) < 1e-9  # stdev([1, .5]) / sqrt(2)
    assert doc["evals"]["step-0"]["per_harness"]["codex"]["pass_rate"] == 0.0
    assert doc["evals"]["step-0"]["not_counted"] == ["codex:infra-error"]
    assert doc["templates"]["step-0"]["pi"] == {"count-matches": [2, 2], "log-value": [1, 2]}
    assert "| step-0 | 0.000 | 0.750 ± 0.250 | 1 |" in proc.stdout
    empty = subprocess.run([sys.executable, TOOL, str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode == 2 and "no rollouts/eval-" in empty.stderr
