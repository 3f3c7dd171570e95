"""SGLang on CPU with a real model: its logprobs against the trainer's recompute.

Starts a real SGLang server (``tools/sglang/install.sh``'s environment, CPU engine, float32)
on a model-kit checkpoint (default SmolLM2-135M-Instruct; fetch it first with
``uv run proxy model fetch smollm2-135m-instruct``), samples completions with logprobs for a
few chat prompts rendered with the checkpoint's own template, and recomputes each generated
token's logprob with rl-core's trainer forward (:func:`clawrl.rl_core.tree_forward` over the
prompt + completion as a one-path tree, ``log_softmax(logits / T)``, float32). The figure is
``|logprob_sglang - logprob_trainer|`` per generated token: the training-inference mismatch
that the importance-ratio corrections (TIS) see.

    uv run python tools/perf/bench_sglang_mismatch.py                       # SmolLM2
    uv run python tools/perf/bench_sglang_mismatch.py --model qwen2.5-coder-0.5b-instruct

Writes JSON (default ``tools/perf/results/sglang_mismatch_<model>.json``): per temperature
the token count and the max / mean / p99 absolute difference, and the overall max and mean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = (
    "Hello!",
    "List three colours.",
    "What is 2 + 2?",
    "Write a haiku about the sea.",
    "Explain recursion briefly.",
    "Create a file called notes.txt containing hello.",
)


def trainer_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """The trainer's logprob of each completion token (float32, no grad): a one-path tree."""
    import torch
    from clawrl.rl_core import tree_forward

    ids = torch.tensor(prompt + completion, dtype=torch.long)
    n = len(ids)
    with torch.no_grad():
        out = tree_forward(
            model,
            ids,
            torch.arange(n),
            torch.arange(-1, n - 1),
            torch.full((n,), n),
            torch.arange(len(prompt), n),
            temperature=temperature,
        )
    return [float(x) for x in out.logprobs]


def server_version() -> str:
    """The installed SGLang's version, from its environment's package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:  # SGLang lives in its own environment, not this one
        return "0.5.23 (tools/sglang/install.sh)"


def summarise(diffs: list[float]) -> dict[str, Any]:
    diffs = sorted(diffs)
    return {
        "tokens": len(diffs),
        "max_abs": diffs[-1],
        "mean_abs": sum(diffs) / len(diffs),
        "p99_abs": diffs[min(len(diffs) - 1, int(0.99 * len(diffs)))],
    }


async def measure(model_dir: Path, server_url: str, max_tokens: int) -> dict[str, Any]:
    import torch
    from clawrl.proxy import ChatRenderer, GenerationRequest, SamplingParams, SGLangBackend
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    renderer = ChatRenderer.from_model_dir(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    backend = SGLangBackend(server_url)
    await backend.start()
    report: dict[str, Any] = {"temperatures": {}}
    every: list[float] = []
    try:
        for temperature in (1.0, 0.7):
            diffs: list[float] = []
            for i, text in enumerate(PROMPTS):
                messages = [{"role": "user", "content": text}]
                prompt = list(
                    renderer.encode(
                        renderer.render_text(messages, None, add_generation_prompt=True)
                    )
                )
                sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=i)
                res = await backend.generate_once(
                    GenerationRequest(f"mm-{temperature}-{i}", prompt, sampling)
                )
                ref = trainer_logprobs(model, prompt, list(res.completion_ids), temperature)
                diffs += [abs(a - b) for a, b in zip(res.completion_logprobs, ref, strict=True)]
            report["temperatures"][str(temperature)] = summarise(diffs)
            every += diffs
    finally:
        await backend.close()
    report.update({"overall": summarise(every)})
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="model-kit name or an HF dir"
    )
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from clawrl.proxy import fetch_model, launch_sglang

    model_dir = Path(args.model) if Path(args.model).is_dir() else Path(fetch_model(args.model))
    t0 = time.monotonic()
    server = launch_sglang(model_dir, device="cpu", dtype="float32", progress=True)
    startup_s = time.monotonic() - t0
    try:
        t1 = time.monotonic()
        report = asyncio.run(measure(model_dir, server.url, args.max_tokens))
        measure_s = time.monotonic() - t1
    finally:
        server.stop()
    report.update(
        {
            "what": "|SGLang logprob - rl-core tree_forward recompute| per generated token",
            "model": model_dir.name,
            "sglang_version": server_version(),
            "device": "cpu",
            "dtype": "float32",
            "prompts": len(PROMPTS),
            "max_new_tokens": args.max_tokens,
            "server_startup_s": round(startup_s, 1),
            "measure_s": round(measure_s, 1),
            "machine": platform.machine(),
            "command": f"uv run python tools/perf/bench_sglang_mismatch.py --model {args.model}",
        }
    )
    out = args.out or ROOT / "tools" / "perf" / "results" / f"sglang_mismatch_{model_dir.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
