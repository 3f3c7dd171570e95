"""Engine <-> trainer logprob mismatch for every pairing of the embedded backend's serving
dtype (fp32, bf16) and the trainer's precision (fp32, bf16 autocast), on a real model.

The embedded backend samples completions (T = 1, seeded) for a few chat prompts rendered with
the checkpoint's own template and records each token's logprob; rl-core's trainer forward
(:func:`clawrl.rl_core.tree_forward` over prompt + completion as a one-path tree) recomputes
them in float32 and under ``torch.autocast("cpu", bfloat16)`` (the trainer's
``precision = "bf16"``). Per pairing: mean, p99 and max ``|logprob_engine -
logprob_trainer|``, and the fraction of tokens the default corrections would touch: TIS caps
the weight ``rho = pi_trainer / pi_engine`` at ``tis_cap`` (rl-core's default, 2.0), and an
IcePop mask ``[0.5, 2]`` (off by default) would drop the token.

    MODEL=$(uv run proxy model fetch qwen2.5-coder-0.5b-instruct)
    uv run python tools/perf/bench_serving_mismatch.py --model $MODEL

Writes JSON (default ``tools/perf/results/serving_mismatch.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
PROMPTS = (
    "Hello!",
    "List three colours.",
    "What is 2 + 2?",
    "Write a haiku about the sea.",
    "Explain recursion briefly.",
    "Create a file called notes.txt containing hello.",
    "Write a Python function that reverses a string.",
    "What does `ls -la` print?",
)


async def engine_samples(
    model_dir: Path, dtype: str, threads: int, max_tokens: int
) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt, completion, recorded logprobs) per prompt from an embedded backend."""
    from clawrl.proxy import EmbeddedBackend

    backend = EmbeddedBackend(model_dir, dtype=dtype, num_threads=threads, seed=0)
    await backend.start()
    try:
        return await sample_prompts(backend, model_dir, max_tokens, tag=dtype)
    finally:
        await backend.close()


async def sample_prompts(
    backend: Any, model_dir: Path, max_tokens: int, tag: str = "mm"
) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt, completion, recorded logprobs) per prompt of :data:`PROMPTS`, rendered with
    the checkpoint's chat template and sampled at once (T = 1, seed = the prompt's index)
    from a started backend (anything with ``generate``)."""
    from clawrl.proxy import ChatRenderer, GenerationRequest, GenerationResult, SamplingParams

    renderer = ChatRenderer.from_model_dir(model_dir)

    async def one(i: int, text: str) -> tuple[list[int], list[int], list[float]]:
        messages = [{"role": "user", "content": text}]
        prompt = list(
            renderer.encode(renderer.render_text(messages, None, add_generation_prompt=True))
        )
        sampling = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=i)
        async for item in backend.generate(GenerationRequest(f"{tag}-{i}", prompt, sampling)):
            if isinstance(item, GenerationResult):
                return prompt, list(item.completion_ids), list(item.completion_logprobs)
        raise RuntimeError("no result")

    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(PROMPTS))))


def recompute(
    model: Any, rows: list[tuple[list[int], list[int], list[float]]], trainer: str
) -> list[float]:
    """The trainer's logprob of every completion token of ``rows`` at T = 1: float32, or
    under ``torch.autocast("cpu", bfloat16)`` for ``trainer == "bf16"``."""
    import contextlib

    import torch
    from bench_sglang_mismatch import trainer_logprobs

    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if trainer == "bf16" else None
    out: list[float] = []
    for prompt, completion, _ in rows:
        with ctx or contextlib.nullcontext():
            out += trainer_logprobs(model, prompt, completion, 1.0)
    return out


def summarise(engine: list[float], trainer: list[float], cap: float) -> dict[str, Any]:
    diffs = sorted(abs(a - b) for a, b in zip(engine, trainer, strict=True))
    log_ratio = [t - e for e, t in zip(engine, trainer, strict=True)]  # log pi_old / pi_rollout
    n = len(diffs)
    return {
        "tokens": n,
        "mean_abs": sum(diffs) / n,
        "p99_abs": diffs[min(n - 1, int(0.99 * n))],
        "max_abs": diffs[-1],
        "tis_capped_fraction": sum(1 for x in log_ratio if x > math.log(cap)) / n,
        "icepop_0.5_2_masked_fraction": sum(1 for x in log_ratio if abs(x) > math.log(2)) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", required=True, help="HF model directory")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "serving_mismatch.json")
    args = ap.parse_args()
    import torch
    from clawrl.rl_core import CorrectionConfig
    from transformers import AutoModelForCausalLM

    cap = CorrectionConfig().tis_cap or 2.0
    load_before = os.getloadavg()
    model_dir = Path(args.model)
    samples = {
        dtype: asyncio.run(engine_samples(model_dir, dtype, args.threads, args.max_tokens))
        for dtype in ("fp32", "bf16")
    }
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    table: dict[str, Any] = {}
    for engine, rows in samples.items():
        recorded = [lp for _, _, lps in rows for lp in lps]
        for trainer in ("fp32", "bf16"):
            recomputed = recompute(model, rows, trainer)
            key = f"engine_{engine}/trainer_{trainer}"
            table[key] = summarise(recorded, recomputed, cap)
            r = table[key]
            print(
                f"{key}: mean {r['mean_abs']:.2e} p99 {r['p99_abs']:.2e} max {r['max_abs']:.2e} "
                f"TIS-capped {r['tis_capped_fraction']:.3%} "
                f"masked[0.5,2] {r['icepop_0.5_2_masked_fraction']:.3%} ({r['tokens']} tokens)",
                flush=True,
            )
    result = {
        "model": model_dir.name,
        "pairings": table,
        "tis_cap": cap,
        "temperature": 1.0,
        "prompts": len(PROMPTS),
        "max_tokens": args.max_tokens,
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "host": platform.node(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
