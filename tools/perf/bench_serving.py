"""The embedded backend on a real model: prefill and decode speed against this machine's
roofline, for each serving dtype (fp32, bf16) and thread count.

For every (dtype, threads) case, one backend at a time (prefix cache off):

- **prefill**: one request with a ``--prompt``-token prompt and ``max_tokens=1``; tokens/s =
  prompt tokens / time to the first token. Roofline ratio: ``2 x params x tokens`` FLOPs
  (matmuls of every linear layer, attention left out) per second over the matmul peak of
  that dtype.
- **decode at batch 1 and 8**: 1 or 8 requests at once (a ``--decode-prompt``-token prompt
  each), ``--tokens`` tokens each at T = 1; tokens/s over the steps after every request's
  first token. Bound: one decode step reads every weight once (tied embeddings read once by
  the output projection), so ``batch x bandwidth / weight bytes`` tokens/s (KV reads left
  out: small at these lengths).

The roofline (``roofline.measure``, quick) is measured in the same run with the largest
thread count of the run; the load average before and after is recorded beside the figures.

    MODEL=$(uv run proxy model fetch qwen2.5-coder-0.5b-instruct)
    uv run python tools/perf/bench_serving.py --model $MODEL
    uv run python tools/perf/bench_serving.py --model $MODEL --long 16384   # one long prompt

``--shared N`` instead runs 8 sessions at once whose prompts share an N-token system prompt
(then 32 tokens of their own; 8 tokens generated each), prefix cache on, and reports the
backend's counters: prompt tokens computed, reused, hit rate, and the tokens saved against
computing every prompt in full.

``--long N`` instead prefills one N-token prompt in bf16 (chunks of ``--chunk``) and reports
its tokens/s and the process's peak resident memory (what "within memory" means for
10-30k-token harness prompts).

``--contexts 19000,8000,6000,1400`` instead decodes ``--tokens`` tokens in rows at those
context lengths at once (the first prompts of Claude Code, OpenClaw, Codex and pi with
Qwen2.5's tokenizer), bf16, twice: with the cache appending each token in place (what the
backend does) and with transformers' plain concatenation (the whole cache copied every
step), and reports decode tokens/s against the bound of one step reading every weight and
every row's KV once (``rows x bandwidth / (weight bytes + KV bytes)``).

Writes JSON (default ``tools/perf/results/serving.json``, ``serving_long.json`` with
``--long``, ``serving_contexts.json`` with ``--contexts``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _generate(backend: Any, rid: str, prompt: list[int], tokens: int) -> tuple[float, float]:
    """(seconds to the first token, seconds to the last) of one request."""
    from clawrl.proxy import GenerationRequest, GenerationResult, SamplingParams, TokenDelta

    t0 = time.perf_counter()
    first = 0.0
    request = GenerationRequest(rid, prompt, SamplingParams(max_tokens=tokens, temperature=1.0))
    async for item in backend.generate(request):
        if isinstance(item, TokenDelta) and not first:
            first = time.perf_counter() - t0
        if isinstance(item, GenerationResult):
            assert len(item.completion_ids) == tokens, item.finish_reason
    return first, time.perf_counter() - t0


async def measure_speed(
    backend: Any, vocab: int, prompt: int, decode_prompt: int, tokens: int
) -> dict[str, Any]:
    """Prefill and decode speed of a started backend (anything with ``generate``).

    A short warm-up request, then one ``prompt``-token request with ``max_tokens=1``
    (prefill: prompt tokens / time to the first token), then 1 and 8 requests at once with
    a ``decode_prompt``-token prompt and ``tokens`` tokens each (decode: tokens/s over the
    steps after every request's first token). Prompts are random ordinary token ids.
    """
    rng = random.Random(0)
    out: dict[str, Any] = {}
    await _generate(backend, "warm", [rng.randrange(vocab) for _ in range(16)], 2)
    ids = [rng.randrange(vocab) for _ in range(prompt)]
    first, _ = await _generate(backend, "prefill", ids, 1)
    out["prefill_tokens"] = prompt
    out["prefill_s"] = first
    out["prefill_tok_s"] = prompt / first
    for batch in (1, 8):
        prompts = [[rng.randrange(vocab) for _ in range(decode_prompt)] for _ in range(batch)]
        times = await asyncio.gather(
            *(_generate(backend, f"d{batch}-{i}", p, tokens) for i, p in enumerate(prompts))
        )
        start = max(f for f, _ in times)
        end = max(e for _, e in times)
        out[f"decode_b{batch}_tok_s"] = batch * (tokens - 1) / (end - start)
    return out


def add_roofline_ratios(case: dict[str, Any], roof: dict[str, Any], dtype: str) -> None:
    """Add the roofline ratios to ``case`` (which has ``params``, ``weight_bytes`` and the
    figures of :func:`measure_speed`): prefill FLOP/s (``2 x params`` a token) over the
    matmul peak of ``dtype``; decode over ``batch x bandwidth / weight bytes``."""
    peak = roof["bf16_gflops"] if dtype == "bf16" else roof["fp32_gflops"]
    case["prefill_gflops"] = 2 * case["params"] * case["prefill_tok_s"] / 1e9
    case["prefill_over_roofline"] = case["prefill_gflops"] / peak
    bound1 = roof["bandwidth_gbs"] * 1e9 / case["weight_bytes"]
    case["decode_b1_bound_tok_s"] = bound1
    case["decode_b1_over_bound"] = case["decode_b1_tok_s"] / bound1
    case["decode_b8_bound_tok_s"] = 8 * bound1
    case["decode_b8_over_bound"] = case["decode_b8_tok_s"] / (8 * bound1)


async def one_case(
    model_dir: Path, dtype: str, threads: int, args: argparse.Namespace, vocab: int
) -> dict[str, Any]:
    from clawrl.proxy import EmbeddedBackend

    backend = EmbeddedBackend(
        model_dir,
        dtype=dtype,
        num_threads=threads,
        prefix_cache_bytes=0,
        max_batch_size=8,
        seed=0,
    )
    t0 = time.perf_counter()
    await backend.start()
    out: dict[str, Any] = {"dtype": dtype, "threads": threads}
    out["start_s"] = time.perf_counter() - t0
    params = sum(p.numel() for p in backend.model.parameters())
    out["params"] = params
    out["weight_bytes"] = sum(p.numel() * p.element_size() for p in backend.model.parameters())
    try:
        out.update(
            await measure_speed(backend, vocab, args.prompt, args.decode_prompt, args.tokens)
        )
    finally:
        await backend.close()
    return out


async def long_case(model_dir: Path, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    from clawrl.proxy import EmbeddedBackend

    rng = random.Random(0)
    backend = EmbeddedBackend(
        model_dir,
        dtype=args.long_dtype,
        num_threads=args.threads[-1],
        prefix_cache_bytes=0,
        prefill_chunk=args.chunk,
        max_context=max(args.long + 8, 2),
        seed=0,
    )
    await backend.start()
    rss0 = _peak_rss_mib()
    try:
        prompt = [rng.randrange(vocab) for _ in range(args.long)]
        first, _ = await _generate(backend, "long", prompt, 1)
    finally:
        await backend.close()
    return {
        "dtype": args.long_dtype,
        "threads": args.threads[-1],
        "prompt_tokens": args.long,
        "prefill_chunk": args.chunk,
        "prefill_s": first,
        "prefill_tok_s": args.long / first,
        "peak_rss_mib_after_load": rss0,
        "peak_rss_mib": _peak_rss_mib(),
    }


async def shared_case(model_dir: Path, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    from clawrl.proxy import EmbeddedBackend

    rng = random.Random(0)
    backend = EmbeddedBackend(
        model_dir, dtype=args.long_dtype, num_threads=args.threads[-1], max_batch_size=8, seed=0
    )
    await backend.start()
    system = [rng.randrange(vocab) for _ in range(args.shared)]
    prompts = [system + [rng.randrange(vocab) for _ in range(32)] for _ in range(8)]
    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(_generate(backend, f"s{i}", p, 8) for i, p in enumerate(prompts)))
        wall = time.perf_counter() - t0
    finally:
        await backend.close()
    st = dict(backend.stats)
    full = sum(len(p) for p in prompts)
    return {
        "dtype": args.long_dtype,
        "threads": args.threads[-1],
        "sessions": 8,
        "shared_tokens": args.shared,
        "prompt_tokens": full,
        "computed_tokens": st["prefill_tokens"],
        "reused_tokens": st["prefix_hit_tokens"],
        "saved_tokens": full - st["prefill_tokens"],
        "token_hit_rate": st["prefix_hit_tokens"] / full,
        "request_hit_rate": st["prefix_hits"] / max(1, st["prefix_lookups"]),
        "wall_s": wall,
        "stats": st,
    }


async def contexts_case(
    model_dir: Path, args: argparse.Namespace, vocab: int, roof: dict[str, Any]
) -> list[dict[str, Any]]:
    """Decode speed with rows at the ``--contexts`` lengths: in-place KV appends vs
    concatenation (see the module docstring)."""
    from clawrl.proxy import EmbeddedBackend

    lengths = [int(n) for n in args.contexts.split(",")]
    rng = random.Random(0)
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in lengths]
    cases = []
    for mode in ("in_place", "concatenate"):
        backend = EmbeddedBackend(
            model_dir, dtype="bf16", num_threads=max(args.threads), prefix_cache_bytes=0,
            max_batch_size=8, seed=0, kv_in_place=mode == "in_place",
        )  # fmt: skip
        await backend.start()
        try:
            times = await asyncio.gather(
                *(_generate(backend, f"c{i}", p, args.tokens) for i, p in enumerate(prompts))
            )
            weight_bytes = sum(p.numel() * p.element_size() for p in backend.model.parameters())
            kv_bytes = backend._kv_bytes_per_token() * sum(lengths)
        finally:
            await backend.close()
        start = max(f for f, _ in times)
        end = max(e for _, e in times)
        tok_s = len(lengths) * (args.tokens - 1) / (end - start)
        bound = len(lengths) * roof["bandwidth_gbs"] * 1e9 / (weight_bytes + kv_bytes)
        case = {
            "mode": mode,
            "contexts": lengths,
            "tokens": args.tokens,
            "decode_tok_s": tok_s,
            "bound_tok_s": bound,
            "decode_over_bound": tok_s / bound,
            "weight_bytes": weight_bytes,
            "kv_bytes": kv_bytes,
            "prefill_s": start,
        }
        print(f"{mode}: decode {tok_s:.2f} tok/s ({tok_s / bound:.2f} of bound)", flush=True)
        cases.append(case)
    cases[0]["speedup_over_concatenate"] = cases[0]["decode_tok_s"] / cases[1]["decode_tok_s"]
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", required=True, help="HF model directory")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--prompt", type=int, default=512, help="prefill prompt tokens")
    ap.add_argument("--decode-prompt", type=int, default=64, help="decode prompt tokens")
    ap.add_argument("--tokens", type=int, default=24, help="generated tokens per request")
    ap.add_argument("--long", type=int, default=0, help="prefill one prompt this long instead")
    ap.add_argument("--shared", type=int, default=0, help="8 sessions sharing this many tokens")
    ap.add_argument("--long-dtype", default="bf16", help="dtype of --long and --shared")
    ap.add_argument("--chunk", type=int, default=1024, help="prefill chunk of --long")
    ap.add_argument("--contexts", default="", help="decode rows at these context lengths")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    model_dir = Path(args.model)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    vocab = min(vocab, 150000)  # ordinary text tokens (no special ids)

    load_before = os.getloadavg()
    result: dict[str, Any]
    if args.contexts:
        from roofline import measure

        roof = measure(threads=max(args.threads), quick=True)
        result = {
            "contexts": asyncio.run(contexts_case(model_dir, args, vocab, roof)),
            "roofline": {k: roof[k] for k in ("bandwidth_gbs", "threads")},
        }
        out = args.out or RESULTS / "serving_contexts.json"
    elif args.shared:
        result = {"shared": asyncio.run(shared_case(model_dir, args, vocab))}
        out = args.out or RESULTS / "serving_shared.json"
    elif args.long:
        result = {"long": asyncio.run(long_case(model_dir, args, vocab))}
        out = args.out or RESULTS / "serving_long.json"
    else:
        from roofline import measure

        roof = measure(threads=max(args.threads), quick=True)
        cases = []
        for dtype in args.dtypes.split(","):
            for threads in args.threads:
                case = asyncio.run(one_case(model_dir, dtype, threads, args, vocab))
                add_roofline_ratios(case, roof, dtype)
                cases.append(case)
                print(
                    f"{dtype} threads {threads}: prefill {case['prefill_tok_s']:.0f} tok/s "
                    f"({case['prefill_over_roofline']:.2f} of roofline), decode b1 "
                    f"{case['decode_b1_tok_s']:.1f} tok/s ({case['decode_b1_over_bound']:.2f} "
                    f"of bound), b8 {case['decode_b8_tok_s']:.1f} tok/s "
                    f"({case['decode_b8_over_bound']:.2f})",
                    flush=True,
                )
        result = {
            "cases": cases,
            "roofline": {
                k: roof[k] for k in ("bf16_gflops", "fp32_gflops", "bandwidth_gbs", "threads")
            },
        }
        out = args.out or RESULTS / "serving.json"
    result.update(
        {
            "model": model_dir.name,
            "args": {k: v for k, v in vars(args).items() if k != "out"},
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
            "host": platform.node(),
            "cpu_count": os.cpu_count(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result.get("long", result.get("shared", result.get("roofline")))))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
