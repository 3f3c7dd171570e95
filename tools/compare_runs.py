"""Compare bench runs side by side: pass@k ± its standard error, mean score, checks, calls.

    uv run python tools/compare_runs.py NAME=RUN_DIR [NAME=RUN_DIR ...] [--k 1 2] [--out F.json]

A run of several harnesses (bench's default: reference and oracle) gives one row per
harness, named ``NAME/HARNESS``.

Each RUN_DIR is a ``bench --output-dir``: its ``results.json`` is re-aggregated with
:func:`clawrl.bench.aggregate` (pass@k with the task-clustered standard error, so runs made
before that field existed compare the same way). Besides the reward it counts what a pass/fail
reward hides: sub-scores (checks) passed, whether the first reply is shaped like a tool call,
model calls per rollout (one per agent turn: a rollout that answers at once makes 1), tool
calls the proxy parsed (calls of a tool the harness offers; JSON naming an unknown tool is
text), rollouts that changed the workspace, and how rollouts ended. Writes a rich table and,
with ``--out``, JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from clawrl.bench import ScoredRollout, aggregate
from rich.console import Console
from rich.table import Table

_UNSCORED = ("infra-error", "env-error")  # excluded from every score (clawrl.bench.metrics)
_CALL_SHAPED = re.compile(r'"name"\s*:\s*"[^"]*"\s*,\s*"arguments"\s*:')


def _tool_calls(rollout: dict[str, Any]) -> int:
    """Tool calls the proxy parsed out of the rollout's model calls (its call records)."""
    return sum(
        len((rec.get("parsed") or {}).get("tool_calls") or []) for rec in rollout.get("records", [])
    )


def _first_reply_call_shaped(rollout: dict[str, Any]) -> bool:
    """The first model reply is a parsed tool call or text shaped like one
    (``{"name": …, "arguments": …}``, e.g. a call of a tool the harness does not offer)."""
    records = rollout.get("records") or []
    if not records:
        return False
    parsed = records[0].get("parsed") or {}
    return bool(parsed.get("tool_calls")) or bool(_CALL_SHAPED.search(parsed.get("content") or ""))


def summarize_run(run_dir: Path, ks: list[int]) -> dict[str, dict[str, object]]:
    """One row per harness of a run (bench's default run has two), over its scored
    rollouts (infrastructure and image-build failures are left out, as bench's own summary
    does; ``excluded`` counts them). A rollout passes at the run's own ``pass_threshold``.

    Raises:
        OSError / KeyError / ValueError: not a bench run directory, or nothing scored.
    """
    doc = json.loads((run_dir / "results.json").read_text())
    harnesses = sorted({r["harness"] for r in doc["rollouts"]})
    rows: dict[str, dict[str, object]] = {}
    for h in harnesses:
        row = _harness_row(run_dir, doc, h, ks)
        if row is not None:
            rows[h] = row
    if not rows:
        raise ValueError(f"{run_dir}: no scored rollouts (harnesses: {harnesses})")
    return rows


def _harness_row(
    run_dir: Path, doc: dict[str, Any], harness_name: str, ks: list[int]
) -> dict[str, object] | None:
    """The row of one harness of a run; None when none of its rollouts is scored."""
    everything = [r for r in doc["rollouts"] if r["harness"] == harness_name]
    rollouts = [r for r in everything if r["status"] not in _UNSCORED]
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
    threshold = float((doc.get("config") or {}).get("pass_threshold", 1.0))
    report = aggregate(scored, ks=ks, pass_threshold=threshold)
    if len(report.by_harness) != 1:
        return None
    ((harness, g),) = report.by_harness.items()
    checks = [v for r in rollouts for k, v in (r.get("subscores") or {}).items() if k != "reward"]
    return {
        "run": str(run_dir),
        "model": doc["meta"].get("model"),
        "harness": harness,
        "pass_threshold": threshold,
        "tasks": g.n_tasks,
        "rollouts": len(rollouts),
        "excluded": len(everything) - len(rollouts),
        "pass_at_k": g.pass_at_k,
        "pass_at_k_stderr": g.pass_at_k_stderr,
        "mean_score": g.mean_score,
        "subscores_passed": sum(1 for v in checks if v >= 1.0),
        "subscores": len(checks),
        "model_calls_per_rollout": statistics.fmean(r.get("n_calls", 0) for r in rollouts),
        "tool_calls_per_rollout": statistics.fmean(map(_tool_calls, rollouts)),
        "rollouts_with_a_tool_call": sum(1 for r in rollouts if _tool_calls(r)),
        "first_reply_call_shaped": sum(map(_first_reply_call_shaped, rollouts)),
        "rollouts_changing_workspace": sum(1 for r in rollouts if r.get("workspace_diff")),
        "end_reasons": dict(Counter(r.get("end_reason") or r["status"] for r in rollouts)),
        "duration_s": doc["meta"].get("duration_s"),
    }


def _cell(value: object, stderr: object = None) -> str:
    """``0.281 ± 0.059``; the value alone when the error is undefined (< 2 tasks); ``–``."""
    if not isinstance(value, float | int):
        return "–"
    return f"{value:.3f} ± {stderr:.3f}" if isinstance(stderr, float | int) else f"{value:.3f}"


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
        if name in rows:
            ap.error(f"{name!r} is named twice")
        try:
            per_harness = summarize_run(Path(path), args.k)
        except (OSError, KeyError, ValueError) as e:
            ap.error(f"{spec}: {e}")
        for harness, row in per_harness.items():  # NAME, or NAME/HARNESS for several
            rows[name if len(per_harness) == 1 else f"{name}/{harness}"] = row
    table = Table(title="runs")
    for col in ("run", "scored", *[f"pass@{k} ± s.e." for k in args.k]):
        table.add_column(col)
    for col in (
        "mean score",
        "sub-scores passed",
        "model calls / rollout",
        "tool calls / rollout",
        "first reply call-shaped",
        "changed workspace",
    ):
        table.add_column(col)
    for name, row in rows.items():
        p, se = row["pass_at_k"], row["pass_at_k_stderr"]
        assert isinstance(p, dict) and isinstance(se, dict)
        table.add_row(
            name,
            f"{row['tasks']} tasks, {row['rollouts']} rollouts",
            *[_cell(p.get(k), se.get(k)) for k in args.k],
            _cell(row["mean_score"]),
            f"{row['subscores_passed']} / {row['subscores']}",
            f"{row['model_calls_per_rollout']:.2f}",
            f"{row['tool_calls_per_rollout']:.2f}",
            f"{row['first_reply_call_shaped']} / {row['rollouts']}",
            f"{row['rollouts_changing_workspace']} / {row['rollouts']}",
        )
    console = Console()
    if not console.is_terminal:  # a pipe or a file: no column is cut
        console = Console(width=max(console.width, 1000))
    console.print(table)
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
        except OSError as e:
            ap.error(f"--out {args.out}: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
