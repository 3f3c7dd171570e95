"""Real pretrained models against the tiny default model, through `bench`, side by side.

Each model runs the same tasks through the same harness with `uv run bench` (podman
sandboxes, the embedded backend on CPU, sandboxed verification): by default 8 held-out
tasks of the learnable family ("make a file called NAME whose content is WORD"), 4 samples
each, the reference harness, at most 2 turns and 96 tokens per call. Models: the tiny
default model (byte tokenizer, random weights), SmolLM2-135M-Instruct and
Qwen2.5-Coder-0.5B-Instruct (fetch them first: `uv run proxy model fetch NAME`).

    uv run python tools/perf/bench_real_models.py                        # run, then summarise
    uv run python tools/perf/bench_real_models.py --from-runs tiny=DIR smollm2=DIR ...

Writes JSON (default tools/perf/results/real_models.json): per model the exact pass@1
(reward 1 = pass; mean over tasks of the per-task pass rate) with its standard error over
rollouts, mean seconds per rollout (whole rollout, and the harness phase), calls per
rollout, completion and prompt tokens per call, and the statuses.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "tiny": None,
    "smollm2": "smollm2-135m-instruct",
    "qwen25": "qwen2.5-coder-0.5b-instruct",
}


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """The figures of one bench ``results.json`` (see the module docstring)."""
    rs = results["rollouts"]
    passed = [1.0 if (r.get("reward") or 0.0) >= 1.0 else 0.0 for r in rs]
    by_task: dict[str, list[float]] = {}
    for r, x in zip(rs, passed, strict=True):
        by_task.setdefault(r["task_id"], []).append(x)
    p = statistics.fmean(passed)
    calls = [c for r in rs for c in r.get("records") or []]
    statuses: dict[str, int] = {}
    for r in rs:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {
        "rollouts": len(rs),
        "tasks": len(by_task),
        "pass@1": round(statistics.fmean(statistics.fmean(v) for v in by_task.values()), 4),
        "pass@1_se": round(math.sqrt(p * (1 - p) / len(rs)), 4),
        "s_per_rollout": round(statistics.fmean(r["timing"]["total"] for r in rs), 2),
        "harness_s_per_rollout": round(statistics.fmean(r["timing"]["harness"] for r in rs), 2),
        "calls_per_rollout": round(len(calls) / len(rs), 2),
        "completion_tokens_per_call": round(
            statistics.fmean(len(c["completion_ids"]) for c in calls), 1
        ),
        "prompt_tokens_per_call": round(statistics.fmean(len(c["prompt_ids"]) for c in calls)),
        "statuses": statuses,
    }


def _run(name: str, fetch_name: str | None, suite: Path, args: argparse.Namespace) -> Path:
    out = Path(args.work) / f"bench-{name}"
    cmd = ["uv", "run", "--no-sync", "bench", "--harness", args.harness]
    cmd += ["--suite", str(suite)] if args.suite == "learnable" else []  # else: built-in slice
    cmd += ["--samples", str(args.samples), "--k", "1", "--max-turns", str(args.max_turns)]
    cmd += ["--max-tokens", str(args.max_tokens), "--concurrency", str(args.concurrency)]
    cmd += ["--output-dir", str(out), "--no-html"]
    cmd += ["--timeout", str(args.timeout)] if args.timeout else []
    if fetch_name is not None:
        from clawrl.proxy import fetch_model

        cmd += ["--model-dir", str(fetch_model(fetch_name))]
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--from-runs", nargs="+", metavar="NAME=DIR", help="summarise these runs")
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--harness", default="reference")
    p.add_argument(
        "--suite",
        choices=["learnable", "builtin"],
        default="learnable",
        help="learnable: --tasks held-out learnable tasks; builtin: bench's default slice "
        "of the built-in suite (one easy task per category)",
    )
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--timeout", type=float, default=0, help="agent timeout, s (0: each task's own)")
    p.add_argument("--work", default="/tmp/clawrl-real-models")
    p.add_argument("--out", default=str(ROOT / "tools/perf/results/real_models.json"))
    args = p.parse_args()
    t0 = time.time()
    if args.from_runs:
        runs = {k: Path(v) for k, _, v in (x.partition("=") for x in args.from_runs)}
    else:
        from clawrl.bench import generate_learnable_tasks

        suite = Path(args.work) / "tasks"
        generate_learnable_tasks(suite, "heldout", n=args.tasks, seed=0)
        runs = {m: _run(m, MODELS[m], suite, args) for m in args.models}
    table = {m: summarise(orjson.loads((d / "results.json").read_bytes())) for m, d in runs.items()}
    doc = {
        "benchmark": "real models vs the tiny model through bench (exact pass@1)",
        "tasks": "learnable family, held-out split"
        if args.suite == "learnable"
        else "built-in suite, bench's default slice",
        "settings": {
            k: getattr(args, k)
            for k in ("suite", "samples", "harness", "max_turns", "max_tokens", "timeout")
        },
        "machine": {"cpus": os.cpu_count(), "load_avg_end": os.getloadavg()},
        "models": table,
        "wall_s": round(time.time() - t0, 1),
    }
    Path(args.out).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    for m, row in table.items():
        print(
            f"{m:8s} pass@1 {row['pass@1']:.3f} ± {row['pass@1_se']:.3f}  "
            f"{row['s_per_rollout']:.1f} s/rollout  {row['completion_tokens_per_call']} tok/call"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
