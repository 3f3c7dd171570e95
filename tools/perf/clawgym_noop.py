"""ClawGym-Bench through ``bench``: the untouched baseline (``noop``) and the oracle where
tasks have a ``solution/solve.sh``, with the time per rollout, cold (ClawGym image built)
and warm (image cached).

Usage (the CPU is shared: niced, concurrency 2)::

    uv run --no-sync python tools/perf/clawgym_noop.py --suite /tmp/clawgym-bench
    uv run --no-sync python tools/perf/clawgym_noop.py --suite DIR --results cold.json warm.json oracle.json

The suite is ClawGym's eval tasks copied locally (never committed; see bench's README,
"ClawGym-Bench"). Runs ``bench --harness noop`` twice (the first builds the ClawGym image
unless it is cached already) and ``--harness oracle``, or summarises given results.json
files in that order. The oracle runs only the tasks that have a solution. Writes ``tools/perf/results/clawgym_noop.json`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "clawgym_noop.json"


def run(suite: Path, harness: str, out: Path, ids: list[str] | None = None) -> tuple[Path, float]:
    """``bench --suite suite --harness harness`` (only tasks ``ids`` if given) into ``out``;
    its results.json and wall seconds."""
    cmd = [
        "nice", "-n", "10", "uv", "run", "--no-sync", "bench", "--suite", str(suite),
        "--harness", harness, "--concurrency", "2", "--output-dir", str(out), "--no-html",
    ]  # fmt: skip
    if ids:
        cmd += ["--task-id", *ids]
    t0 = time.time()
    subprocess.run(cmd, check=False)
    return out / "results.json", time.time() - t0


def summary(path: Path, wall_s: float | None) -> dict[str, Any]:
    """Counts, per-phase seconds per rollout, and what scored above 0 (with its sub-scores)."""
    data = json.loads(path.read_text())
    rollouts = data["rollouts"]
    statuses: dict[str, int] = {}
    for r in rollouts:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1

    def mean(key: str) -> float:
        return round(statistics.fmean(float(r["timing"].get(key) or 0.0) for r in rollouts), 2)

    return {
        "rollouts": len(rollouts),
        "statuses": statuses,
        "mean_reward": round(statistics.fmean(r["reward"] for r in rollouts), 3),
        "scored_above_0": [
            {"task": r["task_id"], "reward": r["reward"], "subscores": r["subscores"]}
            for r in rollouts
            if r["status"] == "ok" and r["reward"] > 0
        ],
        "not_ok": [
            {"task": r["task_id"], "status": r["status"], "reason": r["reason"][:300]}
            for r in rollouts
            if r["status"] != "ok"
        ],
        "with_subscores": sum(1 for r in rollouts if r["subscores"]),
        "s_per_rollout": {k: mean(k) for k in ("image", "setup", "harness", "verify", "total")},
        "max_image_s": round(max(float(r["timing"].get("image") or 0.0) for r in rollouts), 1),
        "wall_s": None if wall_s is None else round(wall_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, required=True)
    ap.add_argument("--results", type=Path, nargs=3, metavar=("COLD", "WARM", "ORACLE"))
    args = ap.parse_args()
    tasks = sorted(p.name for p in args.suite.iterdir() if (p / "data_entry.json").is_file())
    solved = [t for t in tasks if (args.suite / t / "solution" / "solve.sh").is_file()]
    if args.results:
        runs = [(p, None) for p in args.results]
    else:
        tmp = Path(tempfile.mkdtemp(prefix="clawgym-perf-"))
        runs = [run(args.suite, "noop", tmp / "cold"), run(args.suite, "noop", tmp / "warm")]
        runs.append(run(args.suite, "oracle", tmp / "oracle", solved))
    out = {
        "suite": str(args.suite),
        "tasks": tasks,
        "with_solution": solved,
        "noop_cold": summary(*runs[0]),
        "noop_warm": summary(*runs[1]),
        "oracle": summary(*runs[2]),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
