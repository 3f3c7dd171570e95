"""tools/compare_runs.py: bench runs side by side, pass@k with the task-clustered s.e."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(
    tmp: Path,
    name: str,
    rewards: dict[str, list[float]],
    status: str = "ok",
    threshold: float = 1.0,
) -> Path:
    d = tmp / name
    d.mkdir()
    rollouts = [
        {
            "task_id": t,
            "category": "c",
            "harness": "reference",
            "reward": x,
            "status": status,
            "subscores": {"check_1": x, "check_2": 1.0},
            "n_calls": 2,
            "records": [
                {
                    "parsed": {
                        "tool_calls": [{"name": "bash"}] if x else [],
                        "content": "" if x else '{"name": "made_up", "arguments": {}}',
                    }
                },
                {},
            ],
            "end_reason": "final_answer",
            "workspace_diff": [{"path": "a"}] if x else [],
        }
        for t, xs in rewards.items()
        for x in xs
    ]
    doc = {"meta": {"model": "m"}, "config": {"pass_threshold": threshold}, "rollouts": rollouts}
    (d / "results.json").write_text(json.dumps(doc))
    return d


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools/compare_runs.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_rows_carry_pass_at_k_and_its_standard_error(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", {"t1": [1.0, 1.0], "t2": [0.0, 0.0]})
    b = _run(tmp_path, "b", {"t1": [0.0, 0.0], "t2": [0.0, 0.0], "t3": [0.0, 0.0]})
    out = tmp_path / "cmp.json"
    proc = _compare(f"a={a}", f"b={b}", "--k", "1", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert rows["a"]["pass_at_k"]["1"] == 0.5 and rows["a"]["pass_at_k_stderr"]["1"] == 0.5
    assert rows["b"]["pass_at_k"]["1"] == 0.0 and rows["b"]["pass_at_k_stderr"]["1"] == 0.0
    assert rows["a"]["subscores_passed"] == 6 and rows["a"]["subscores"] == 8
    assert rows["a"]["rollouts_changing_workspace"] == 2
    assert (
        rows["a"]["tool_calls_per_rollout"] == 0.5 and rows["a"]["rollouts_with_a_tool_call"] == 2
    )
    assert "0.500 ± 0.500" in proc.stdout


def test_the_runs_threshold_single_tasks_and_unscored_rollouts(tmp_path: Path) -> None:
    # the run's own pass threshold: 0.5 passes at 0.5
    half = _run(tmp_path, "half", {"t1": [0.5, 0.5], "t2": [0.5, 0.0]}, threshold=0.5)
    # one task: the error is undefined, printed as the value alone (not "± 0.000")
    one = _run(tmp_path, "one", {"t1": [1.0, 0.0]})
    out = tmp_path / "cmp.json"
    proc = _compare(f"half={half}", f"one={one}", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert rows["half"]["pass_at_k"]["1"] == 0.75
    assert rows["one"]["pass_at_k_stderr"]["1"] is None and "0.500 ±" not in proc.stdout
    # only infrastructure failures: nothing scored is a usage error, not a traceback
    infra = _run(tmp_path, "infra", {"t1": [0.0], "t2": [0.0]}, status="infra-error")
    proc = _compare(f"x={infra}")
    assert proc.returncode == 2 and "scored" in proc.stderr
    assert _compare(f"a={one}", f"a={half}").returncode == 2  # a name twice


def test_a_directory_without_results_is_a_usage_error(tmp_path: Path) -> None:
    proc = _compare(f"x={tmp_path}")
    assert proc.returncode == 2 and "results.json" in proc.stderr
    proc = _compare(str(tmp_path))
    assert proc.returncode == 2 and "NAME=RUN_DIR" in proc.stderr


def test_a_run_of_two_harnesses_gives_a_row_each_and_piped_tables_stay_whole(
    tmp_path: Path,
) -> None:
    """bench's default output (reference and oracle in one run) compares, one row per
    harness; the piped table keeps every column whole."""
    run = _run(tmp_path, "both", {"t1": [0.0], "t2": [1.0]})
    doc = json.loads((run / "results.json").read_text())
    doc["rollouts"] += [{**r, "harness": "oracle", "reward": 1.0} for r in doc["rollouts"]]
    (run / "results.json").write_text(json.dumps(doc))
    out = tmp_path / "cmp.json"
    proc = _compare(f"base={run}", "--k", "1", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert set(rows) == {"base/oracle", "base/reference"}
    assert rows["base/oracle"]["pass_at_k"]["1"] == 1.0
    assert rows["base/reference"]["pass_at_k"]["1"] == 0.5
    assert "…" not in proc.stdout and "pass@2 ± s.e." in proc.stdout
    assert "first reply call-shaped" in proc.stdout
