"""Prompt KV reuse through a real harness: one GRPO step's rollouts (tasks x samples) of a
third-party harness (default pi) against the embedded backend serving a real model, and what
the backend's prefix cache did over them.

Every rollout of a harness sends the same system prompt and tool list; the embedded
backend keeps the KV of every admitted prompt and finished generation (shared across
sessions, dropped at a weight sync), so later prompts compute only what is new. The figures
are the backend's counters over the step (`clawrl.rl_core.train.prefix_cache_row`, the
same ``serve/*`` figures `train` writes per step), plus the call records' prompt sizes.

    uv run python tools/perf/bench_prefix_harness.py                       # pi, 2 tasks x 4
    uv run python tools/perf/bench_prefix_harness.py --harness claude-code --tasks 1

Writes JSON (default tools/perf/results/prefix_harness_<harness>.json) with the load average
at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from clawrl.bench import BenchConfig, RolloutOptions, RolloutRunner, plan_rollouts, select_tasks
from clawrl.bench.harness import get_harness
from clawrl.proxy import BackendConfig, make_backend, resolve_model, serve
from clawrl.rl_core.train import prefix_cache_row

ROOT = Path(__file__).resolve().parents[2]


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    model_dir = Path(await asyncio.to_thread(resolve_model, args.model))
    tasks = select_tasks(BenchConfig())[: args.tasks]
    harness = get_harness(args.harness)
    out: dict[str, Any] = {
        "load_start": os.getloadavg(),
        "setup": {
            "harness": args.harness,
            "model": args.model,
            "dtype": args.dtype,
            "threads": args.threads,
            "prefix_cache_mib": args.prefix_cache_mib,
            "tasks": [t.id for t in tasks],
            "samples": args.samples,
            "max_turns": args.max_turns,
            "max_tokens": args.max_tokens,
            "concurrency": args.concurrency,
        },
    }
    backend = make_backend(
        BackendConfig(
            kind="embedded",
            model_dir=model_dir,
            dtype=args.dtype,
            num_threads=args.threads,
            prefix_cache_mib=args.prefix_cache_mib,
            max_batch_size=8,
        )
    )
    options = RolloutOptions(
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        timeout_reference_tps=20.0,
        retries=0,
    )
    async with serve(backend, model_dir) as endpoint:
        await endpoint.admin.set_sampling(
            temperature=1.0, top_p=1.0, top_k=-1, max_tokens=args.max_tokens
        )
        specs = plan_rollouts(tasks, [harness], args.samples, group_prefix="s1/", seed=0)
        runner = RolloutRunner(endpoint, options, concurrency=args.concurrency)
        before = dict(backend.stats)  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        results = await runner.run(specs)
        wall = time.perf_counter() - t0
        after = dict(backend.stats)  # type: ignore[attr-defined]
    prompts = [len(rec.get("prompt_ids") or []) for r in results for rec in r.records]
    out.update(
        {
            "wall_s": round(wall, 1),
            "rollouts": len(results),
            "statuses": dict(Counter(r.status.value for r in results)),
            "calls": len(prompts),
            "prompt_tokens_first_call": min(prompts) if prompts else 0,
            "prompt_tokens_mean": round(statistics.fmean(prompts), 1) if prompts else 0,
            "prompt_tokens_max": max(prompts) if prompts else 0,
            **prefix_cache_row(before, after),
            "stats_before": before,
            "stats_after": after,
            "load_end": os.getloadavg(),
        }
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--harness", default="pi")
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="kit name or HF dir")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prefix-cache-mib", type=float, default=256.0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    result = asyncio.run(bench(args))
    out = args.out or ROOT / f"tools/perf/results/prefix_harness_{args.harness}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in result.items() if not k.startswith("stats")}).decode())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
