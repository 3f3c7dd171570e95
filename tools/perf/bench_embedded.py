"""Benchmark the embedded backend on the default model kit's tiny models (CPU).

For each tokenizer ("byte": 282-token vocabulary, "qwen3": 151,669) and each concurrency
(1 and 8 requests at once), every request has a ``--prompt``-token prompt (random ids) and
generates exactly ``--tokens`` tokens at T = 1. Reported per case: wall time, prefill time
of the first request (time to its first token), generated tokens/s over all requests.

Run: ``uv run python tools/perf/bench_embedded.py`` (writes
``tools/perf/results/embedded.json``; about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import time
from pathlib import Path
from typing import Any

import torch
from clawrl.proxy import (
    EmbeddedBackend,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    TokenDelta,
    build_default_model,
)


async def one_case(
    model_dir: Path, vocab: int, concurrency: int, prompt: int, tokens: int, threads: int
) -> dict[str, Any]:
    backend = EmbeddedBackend(
        model_dir, num_threads=threads, max_batch_size=max(8, concurrency), seed=0
    )
    await backend.start()
    rng = random.Random(0)
    first_token: list[float] = []

    async def run(i: int) -> GenerationResult:
        request = GenerationRequest(
            f"r{i}",
            [rng.randrange(vocab) for _ in range(prompt)],
            SamplingParams(max_tokens=tokens, temperature=1.0),
        )
        t0 = time.perf_counter()
        result = None
        async for item in backend.generate(request):
            if i == 0 and isinstance(item, TokenDelta) and not first_token:
                first_token.append(time.perf_counter() - t0)
            if isinstance(item, GenerationResult):
                result = item
        assert result is not None
        return result

    t0 = time.perf_counter()
    results = await asyncio.gather(*(run(i) for i in range(concurrency)))
    wall = time.perf_counter() - t0
    await backend.close()
    generated = sum(len(r.completion_ids) for r in results)
    return {
        "concurrency": concurrency,
        "prompt_tokens": prompt,
        "completion_tokens": tokens,
        "wall_s": round(wall, 3),
        "first_token_s": round(first_token[0], 3) if first_token else None,
        "generated_tokens_per_s": round(generated / wall, 1),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": args.threads,
        },
        "cases": {},
    }
    for kind in args.tokenizers:
        model_dir = build_default_model(kind)
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        out["cases"][kind] = [
            await one_case(model_dir, vocab, c, args.prompt, args.tokens, args.threads)
            for c in args.concurrency
        ]
        print(kind, json.dumps(out["cases"][kind]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizers", nargs="+", default=["byte", "qwen3"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "embedded.json"
    )
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
