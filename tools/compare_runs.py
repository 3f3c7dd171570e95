"""Compare bench runs side by side: pass@k ± its standard error, mean score, checks, calls.

    uv run python tools/compare_runs.py NAME=RUN_DIR [NAME=RUN_DIR ...] [--k 1 2] [--out F.json]

Each RUN_DIR is a ``bench --output-dir``: its ``results.json`` is re-aggregated with
:func:`clawrl.bench.aggregate` (pass@k with the task-clustered standard error, so runs made
before that field existed compare the same way). Besides the reward it counts what a pass/fail
reward hides: sub-scores (checks) passed, model calls per rollout (one per agent turn: a
rollout that answers at once makes 1), tool calls the proxy parsed (calls of a tool the
harness offers; JSON naming an unknown tool is text), rollouts that changed the
workspace, and how rollouts ended. Writes a rich table and, with ``--out``, JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from clawrl.bench import ScoredRollout, aggregate
from rich.console import Console
from rich.table import Table


def _tool_calls(rollout: dict[str, Any]) -> int:
    """Tool calls the proxy parsed out of the rollout's model calls (its call records)."""
    return sum(
        len((rec.get("parsed") or {}).get("tool_calls") or []) for rec in rollout.get("records", [])
    )


def summarize_run(run_dir: Path, ks: list[int]) -> dict[str, object]:
    """One run's row. Raises FileNotFoundError / KeyError on a directory that is not a run."""
    doc = json.loads((run_dir / "results.json").read_text())
    rollouts = doc["rollouts"]
    scored = [
        ScoredRollout(
            task_id=r["task_id"],
            category=r.get("category"),
            harness=r["harness"],
            reward=r["reward"],
            status=r["status"],
        )
        for r in rollouts
    ]
    report = aggregate(scored, ks=ks)
    if len(report.by_harness) != 1:
        raise ValueError(f"{run_dir}: expected one harness, got {sorted(report.by_harness)}")
    ((harness, g),) = report.by_harness.items()
    checks = [v for r in rollouts for k, v in (r.get("subscores") or {}).items() if k != "reward"]
    return {
        "run": str(run_dir),
        "model": doc["meta"].get("model"),
        "harness": harness,
        "tasks": g.n_tasks,
        "rollouts": g.n_scored,
        "pass_at_k": g.pass_at_k,
        "pass_at_k_stderr": g.pass_at_k_stderr,
        "mean_score": g.mean_score,
        "subscores_passed": sum(1 for v in checks if v >= 1.0),
        "subscores": len(checks),
        "model_calls_per_rollout": statistics.fmean(r.get("n_calls", 0) for r in rollouts),
        "tool_calls_per_rollout": statistics.fmean(map(_tool_calls, rollouts)),
        "rollouts_with_a_tool_call": sum(1 for r in rollouts if _tool_calls(r)),
        "rollouts_changing_workspace": sum(1 for r in rollouts if r.get("workspace_diff")),
        "end_reasons": dict(Counter(r.get("end_reason") or r["status"] for r in rollouts)),
        "duration_s": doc["meta"].get("duration_s"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    ap.add_argument("--k", type=int, nargs="+", default=[1])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rows: dict[str, dict[str, object]] = {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"{spec!r}: expected NAME=RUN_DIR")
        try:
            rows[name] = summarize_run(Path(path), args.k)
        except (OSError, KeyError, ValueError) as e:
            ap.error(f"{spec}: {e}")
    table = Table(title="runs")
    for col in ("run", "scored", *[f"pass@{k} ± s.e." for k in args.k]):
        table.add_column(col)
    for col in (
        "mean score",
        "sub-scores passed",
        "model calls / rollout",
        "tool calls / rollout",
        "changed workspace",
    ):
        table.add_column(col)
    for name, row in rows.items():
        p, se = row["pass_at_k"], row["pass_at_k_stderr"]
        assert isinstance(p, dict) and isinstance(se, dict)
        table.add_row(
            name,
            f"{row['tasks']} tasks, {row['rollouts']} rollouts",
            *["–" if p.get(k) is None else f"{p[k]:.3f} ± {se.get(k) or 0.0:.3f}" for k in args.k],
            f"{row['mean_score']:.3f}",
            f"{row['subscores_passed']} / {row['subscores']}",
            f"{row['model_calls_per_rollout']:.2f}",
            f"{row['tool_calls_per_rollout']:.2f}",
            f"{row['rollouts_changing_workspace']} / {row['rollouts']}",
        )
    Console(width=200).print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
