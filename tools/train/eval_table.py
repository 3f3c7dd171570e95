"""A train run's held-out evaluations as tables: exact pass@1 ± its task-clustered standard
error per harness, at the training temperature and greedily, for every evaluation the run
made; and per harness × task template (chores) for one evaluation.

    uv run python tools/train/eval_table.py RUN_DIR [--eval step-0] [--json OUT]

Reads ``RUN_DIR/rollouts/eval-<tag>.jsonl`` (one line per held-out rollout, written by the
loop). Rollouts that do not count (infra-error, env-error, excluded harness-health failures)
are left out of the rates and counted apart, as in ``metrics.jsonl``. The template is the
task id's middle (``chores-count-matches-…`` → ``count-matches``). Exit status 2 when the
run has no evaluation files.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

_NOT_COUNTED = {"infra-error", "env-error"}


def _counts(row: dict[str, Any]) -> bool:
    return row.get("status") not in _NOT_COUNTED and not row.get("excluded")


def clustered(rows: list[dict[str, Any]]) -> tuple[float, float, int]:
    """Pass rate (reward >= 1), its standard error over tasks, number of tasks."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_task[r["task_id"]].append(float((r.get("reward") or 0.0) >= 1.0))
    if not by_task:
        return float("nan"), float("nan"), 0
    per = [statistics.fmean(v) for v in by_task.values()]
    se = statistics.stdev(per) / math.sqrt(len(per)) if len(per) > 1 else float("nan")
    return statistics.fmean(per), se, len(per)


def template(task_id: str) -> str:
    parts = task_id.split("-")
    return "-".join(parts[1:-1]) if len(parts) > 2 else task_id


def load(run: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for f in sorted((run / "rollouts").glob("eval-*.jsonl")):
        out[f.stem.removeprefix("eval-")] = [json.loads(x) for x in f.read_text().splitlines()]
    return out


def _fmt(mean: float, se: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.3f} ± {se:.3f}" if not math.isnan(se) else f"{mean:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--eval", default="step-0", help="the evaluation of the template table")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    evals = load(args.run)
    if not evals:
        print(f"eval_table: no rollouts/eval-*.jsonl in {args.run}", file=sys.stderr)
        return 2
    harnesses = sorted({r["harness"] for rows in evals.values() for r in rows})
    doc: dict[str, Any] = {"run": str(args.run), "evals": {}}
    print("| evaluation | " + " | ".join(harnesses) + " | not counted |")
    print("|---|" + "---|" * (len(harnesses) + 1))
    for tag, rows in evals.items():
        ok = [r for r in rows if _counts(r)]
        cells, per = [], {}
        for h in harnesses:
            m, se, n = clustered([r for r in ok if r["harness"] == h])
            per[h] = {"pass_rate": m, "se": se, "tasks": n}
            cells.append(_fmt(m, se))
        skipped = [f"{r['harness']}:{r['status']}" for r in rows if not _counts(r)]
        doc["evals"][tag] = {"per_harness": per, "not_counted": skipped}
        print(f"| {tag} | " + " | ".join(cells) + f" | {len(skipped)} |")
    rows = [r for r in evals.get(args.eval, []) if _counts(r)]
    templates = sorted({template(r["task_id"]) for r in rows})
    if templates:
        print(f"\npasses / rollouts per harness and template ({args.eval}):\n")
        print("| harness | " + " | ".join(templates) + " |")
        print("|---|" + "---|" * len(templates))
        table: dict[str, dict[str, list[int]]] = {}
        for h in harnesses:
            cells = []
            for t in templates:
                mine = [r for r in rows if r["harness"] == h and template(r["task_id"]) == t]
                passed = sum((r.get("reward") or 0.0) >= 1.0 for r in mine)
                table.setdefault(h, {})[t] = [passed, len(mine)]
                cells.append(f"{passed}/{len(mine)}")
            print(f"| {h} | " + " | ".join(cells) + " |")
        doc["templates"] = {args.eval: table}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
