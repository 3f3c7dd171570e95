"""Rollouts per minute through the whole path, by concurrency.

Each rollout: a podman sandbox + a proxy session, the reference harness run by the sandbox's
python3 against the embedded tiny model (byte tokenizer, CPU) through the in-sandbox
forwarder, the workspace copied out, verified in a fresh sandbox, diffed. One in-process
proxy serves every level; tasks cycle over bench's default slice (six easy built-in tasks).

    uv run python tools/perf/bench_rollouts.py                       # levels 1 2 4 8
    uv run python tools/perf/bench_rollouts.py --levels 1 2 --rollouts 4 --out /tmp/r.json

Writes JSON (default tools/perf/results/rollouts.json): per level the wall time, rollouts
per minute, mean seconds per phase (setup = session + sandbox creation, harness, collect,
verify), model calls, and statuses; plus the machine's load average at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from clawrl.bench import BenchConfig, RolloutOptions, RolloutRunner, RolloutSpec, select_tasks
from clawrl.bench.harness import get_harness
from clawrl.proxy import BackendConfig, build_default_model, make_backend, serve

ROOT = Path(__file__).resolve().parents[2]


async def bench(
    levels: list[int], rollouts: int, max_turns: int, max_tokens: int
) -> dict[str, Any]:
    tasks = select_tasks(BenchConfig())
    harness = get_harness("reference")
    model_dir = build_default_model("byte")
    out: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_start": os.getloadavg(),
        },
        "setup": {
            "harness": "reference",
            "model": "embedded tiny Qwen3 (byte tokenizer, 2 layers, width 128, CPU, 1 thread)",
            "max_turns": max_turns,
            "max_tokens": max_tokens,
            "tasks": [t.id for t in tasks],
            "verifier": "fresh podman sandbox per rollout",
        },
        "levels": [],
    }
    options = RolloutOptions(max_turns=max_turns, max_tokens=max_tokens, retries=0)
    backend = make_backend(BackendConfig(kind="embedded", model_dir=model_dir))
    async with serve(backend, model_dir) as endpoint:
        # warm-up: first generation loads kernels; first sandbox builds the rootfs skeleton
        warm = RolloutRunner(endpoint, options, concurrency=1)
        await warm.run([RolloutSpec(tasks[0], harness)])
        for level in levels:
            n = max(rollouts, level)
            specs = [RolloutSpec(tasks[i % len(tasks)], harness, sample_index=i) for i in range(n)]
            runner = RolloutRunner(endpoint, options, concurrency=level)
            t0 = time.perf_counter()
            results = await runner.run(specs)
            wall = time.perf_counter() - t0

            def mean(key: str, rs: list[Any] = results) -> float:
                return round(statistics.fmean(r.timing.get(key, 0.0) for r in rs), 2)

            row = {
                "concurrency": level,
                "rollouts": n,
                "wall_s": round(wall, 1),
                "rollouts_per_min": round(60 * n / wall, 2),
                "mean_rollout_s": mean("total"),
                "mean_phase_s": {k: mean(k) for k in ("setup", "harness", "collect", "verify")},
                "mean_calls": round(statistics.fmean(r.n_calls for r in results), 2),
                "statuses": dict(Counter(r.status.value for r in results)),
            }
            print(orjson.dumps(row).decode(), flush=True)
            out["levels"].append(row)
    out["machine"]["load_end"] = os.getloadavg()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--rollouts", type=int, default=8, help="rollouts per level (>= level)")
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=ROOT / "tools/perf/results/rollouts.json")
    args = p.parse_args()
    result = asyncio.run(bench(args.levels, args.rollouts, args.max_turns, args.max_tokens))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
