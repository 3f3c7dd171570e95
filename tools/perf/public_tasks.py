"""Run a suite of public tasks (copied locally, never committed) through ``bench`` with the
oracle and the noop harness, and summarise it per task (or per AgentBench file).

Usage (the CPU is shared: concurrency 1, niced)::

    uv run --no-sync python tools/perf/public_tasks.py --suite /tmp/pubtasks/harbor --name harbor
    uv run --no-sync python tools/perf/public_tasks.py --suite DIR --name agentbench_os --per-file
    uv run --no-sync python tools/perf/public_tasks.py --name harbor --suite DIR \
        --results runs/a/results.json runs/b/results.json   # later runs override a task's rows

A task directory may hold a ``.source`` file (one line: the public repository it was copied
from) and a ``.reconstructed`` file (what was written here because the stored copy lacked
it); both are reported. Writes (merges) ``tools/perf/results/public_tasks.json`` under
``--name`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "public_tasks.json"


def run_suite(suite: Path, run_dir: Path) -> Path:
    """``bench --suite suite --harness oracle noop`` into ``run_dir``; its results.json."""
    cmd = [
        "nice", "-n", "10", "uv", "run", "--no-sync", "bench", "--suite", str(suite),
        "--harness", "oracle", "noop", "--concurrency", "1", "--output-dir", str(run_dir),
        "--no-html",
    ]  # fmt: skip
    subprocess.run(cmd, check=False)
    return run_dir / "results.json"


def _side(r: dict[str, Any]) -> dict[str, Any]:
    reason = r["reason"] or ""
    if len(reason) > 300:  # a build log: its first line and its last lines (the error)
        reason = reason.splitlines()[0][:150] + " … " + reason[-150:]
    # only ok and timeout rollouts carry their reward (older results may not say so)
    reward = r["reward"] if r["status"] in ("ok", "timeout") else 0.0
    return {"status": r["status"], "reward": reward, "reason": reason}


def per_task(rollouts: list[dict[str, Any]], suite: Path | None) -> list[dict[str, Any]]:
    """One row per task: source, image build seconds (the longest seen), oracle and noop
    outcome (the last seen)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in rollouts:
        row = rows.setdefault(r["task_id"], {"task": r["task_id"], "image_s": 0.0})
        row["image_s"] = round(max(row["image_s"], float(r["timing"].get("image") or 0.0)), 1)
        row[r["harness"]] = _side(r)
    for row in rows.values():
        for extra in (".source", ".reconstructed"):
            path = suite / row["task"] / extra if suite else None
            if path is not None and path.is_file():
                row[extra.lstrip(".")] = path.read_text().strip()
    return sorted(rows.values(), key=lambda row: row["task"])


def per_file(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """AgentBench: counts per JSON file (task id ``<file>-<index>``) and harness."""
    counts: dict[str, dict[str, dict[str, int]]] = defaultdict(
        lambda: defaultdict(lambda: {"pass": 0, "fail": 0, "error": 0})
    )
    others: dict[str, dict[str, str]] = defaultdict(dict)
    last = {(r["task_id"], r["harness"]): r for r in rollouts}
    for r in last.values():
        stem = r["task_id"].rsplit("-", 1)[0]
        ok = r["status"] == "ok"
        kind = "error" if not ok else ("pass" if r["reward"] >= 1.0 else "fail")
        counts[stem][r["harness"]][kind] += 1
        # what is not oracle 1 / noop 0, with its reason
        expected = "pass" if r["harness"] == "oracle" else "fail"
        if kind != expected:
            side = _side(r)
            others[stem][f"{r['task_id']} {r['harness']}"] = (
                f"{side['status']} {side['reward']}: {side['reason']}"
            )
    return [
        {
            "file": stem,
            **{h: dict(c) for h, c in by.items()},
            **({"not_1_0": dict(sorted(others[stem].items()))} if others[stem] else {}),
        }
        for stem, by in sorted(counts.items())
    ]


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table for the README."""
    if rows and "file" in rows[0]:
        lines = ["| file | oracle pass/fail/err | noop pass/fail/err |", "|---|---|---|"]
        for row in rows:
            cells = [
                "/".join(str(row.get(h, {}).get(k, 0)) for k in ("pass", "fail", "error"))
                for h in ("oracle", "noop")
            ]
            lines.append(f"| {row['file']} | {cells[0]} | {cells[1]} |")
        return "\n".join(lines)
    lines = ["| task | source | image s | oracle | noop |", "|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for h in ("oracle", "noop"):
            side = row.get(h, {})
            cells.append(f"`{side.get('status')}` {side.get('reward')}")
        lines.append(
            f"| {row['task']} | {row.get('source', '')} | {row['image_s']} | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, help="suite directory to run")
    ap.add_argument("--results", type=Path, nargs="+", help="existing results.json files")
    ap.add_argument("--name", required=True, help="key in public_tasks.json")
    ap.add_argument("--per-file", action="store_true", help="AgentBench: counts per file")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.results is None:
        if args.suite is None:
            ap.error("--suite or --results")
        run_dir = Path("runs") / f"public-{args.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        args.results = [run_suite(args.suite, run_dir)]
    runs = [json.loads(p.read_text()) for p in args.results]
    rollouts = [r for run in runs for r in run["rollouts"]]
    rows = per_file(rollouts) if args.per_file else per_task(rollouts, args.suite)
    data = json.loads(args.out.read_text()) if args.out.is_file() else {}
    data[args.name] = {
        "command": "bench --suite DIR --harness oracle noop --concurrency 1",
        "run_ids": [run["meta"]["run_id"] for run in runs],
        "duration_s": round(sum(run["meta"]["duration_s"] for run in runs), 1),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
