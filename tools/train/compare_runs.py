"""Compare what two `uv run train` runs sampled: every captured RL call, keyed by
(group id, sample index, call seq), must have the same completion ids (and seed).

    uv run python tools/train/compare_runs.py RUN_A RUN_B [--json OUT]

Prints (and writes with --json) the counts of calls in each run, identical and differing,
plus the per-step train reward of each run. Cold-start captures (scripted) are skipped.
Exit status 1 when any call differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clawrl.proxy import read_records


def calls(run: Path) -> dict[tuple[str, int, int], tuple[list[int], Any]]:
    out: dict[tuple[str, int, int], tuple[list[int], Any]] = {}
    for f in sorted((run / "capture").glob("*/*.jsonl")):
        if f.parent.name.endswith("-coldstart"):
            continue
        for r in read_records(f):
            m = r["metadata"]
            key = (str(m.get("group_id")), int(m.get("sample_index", 0)), int(r["seq"]))
            out[key] = (list(r["completion_ids"]), r["sampling"].get("seed"))
    return out


def rewards(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["reward_mean"] for r in rows if r.get("kind") == "train"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args()
    a, b = calls(args.run_a), calls(args.run_b)
    keys = set(a) | set(b)
    differ = sorted(k for k in keys if a.get(k) != b.get(k))
    result = {
        "calls_a": len(a),
        "calls_b": len(b),
        "identical": len(keys) - len(differ),
        "differ": len(differ),
        "differing_keys": [list(k) for k in differ[:20]],
        "train_reward_a": rewards(args.run_a),
        "train_reward_b": rewards(args.run_b),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
