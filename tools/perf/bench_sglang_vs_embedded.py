"""SGLang's CPU engine against the embedded backend, side by side, on one real model.

For each engine, one at a time (the next starts only when the last has stopped), on the
same model and the same prompts:

- **start-up**: seconds from launching the engine to its first successful request
  (SGLang: ``launch_sglang`` + ``/health`` + one request; embedded: ``start()`` + one
  request), the model read from a warm page cache;
- **prefill** tokens/s: one ``--prompt``-token prompt (1,024 random ordinary ids) with
  ``max_tokens=1``, prompt tokens over the time to the first token;
- **decode** tokens/s at batch 1 and batch 8: ``--tokens`` tokens per request after a
  ``--decode-prompt``-token prompt, T = 1, over the steps after every request's first token
  (``bench_serving.measure_speed``, the same code as the embedded backend's own benchmark);
- **logprob mismatch** against the trainer: 8 chat prompts rendered with the model's own
  template, ``--mismatch-tokens`` tokens each sampled at T = 1 and recorded with their
  logprobs, then recomputed by rl-core's trainer forward in float32 and under bf16 autocast
  (``bench_serving_mismatch.sample_prompts`` / ``recompute`` / ``summarise``): mean, p99 and
  max ``|logprob_engine - logprob_trainer|`` and the fractions TIS caps / IcePop masks.

SGLang generates past EOS here (``ignore_eos``), as the embedded backend does without stop
ids, so both produce exactly the requested token counts. Prompt reuse is off on both sides
(random prompts never share a prefix with SGLang's radix cache; the embedded backend's
prefix cache is 0 for the speed figures).

The roofline (``roofline.measure``, quick, with ``--threads`` threads) is measured in the
same run, before every engine and after the last; each figure is reported beside its ratio
to the best of those measurements (the least busy moment, so that other jobs on a shared
machine do not inflate the ratios): prefill FLOP/s (``2 x params`` a token) over the
matmul peak of the engine's dtype, decode over ``batch x bandwidth / weight bytes``. The
load average is recorded before and after every engine: on a shared machine all figures
are lower bounds.

    bash tools/sglang/install.sh                       # SGLang's own environment, once
    uv run proxy model fetch qwen2.5-coder-0.5b-instruct
    uv run python tools/perf/bench_sglang_vs_embedded.py

Writes JSON (default ``tools/perf/results/sglang_vs_embedded.json``; rewritten after every
engine, so an interrupted run keeps what it measured) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results"
ENGINES = ("sglang:bf16", "sglang:fp32", "embedded:bf16", "embedded:fp32")
SGLANG_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}


def weight_stats(model_dir: Path, dtype: str) -> tuple[int, int]:
    """(parameters, weight bytes in ``dtype``) of the checkpoint's safetensors (a tied
    output projection is stored once, so it counts once)."""
    from safetensors import safe_open

    params = 0
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():  # noqa: SIM118 (safe_open is not a mapping)
                n = 1
                for d in st.get_slice(name).get_shape():
                    n *= d
                params += n
    return params, params * (2 if dtype == "bf16" else 4)


def rss_mib(pids: list[int]) -> float:
    """Resident memory (MiB) of ``pids`` and all their descendants, now (NaN without
    psutil, which transformers' stack normally brings)."""
    try:
        import psutil
    except ImportError:
        return float("nan")

    total = 0
    seen: set[int] = set()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                if q.pid not in seen:
                    seen.add(q.pid)
                    total += q.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


async def _first_request(backend: Any) -> None:
    from bench_serving import _generate

    await _generate(backend, "first", [0, 1, 2, 3], 1)  # valid ids in any vocabulary


async def _run_engine(backend: Any, model_dir: Path, args: argparse.Namespace, vocab: int) -> Any:
    from bench_serving import measure_speed
    from bench_serving_mismatch import sample_prompts

    speed = await measure_speed(backend, vocab, args.prompt, args.decode_prompt, args.tokens)
    samples = await sample_prompts(backend, model_dir, args.mismatch_tokens, tag="mm")
    return speed, samples


async def _measure(
    backend: Any,
    t0: float,
    out: dict[str, Any],
    pids: list[int],
    model_dir: Path,
    args: argparse.Namespace,
    vocab: int,
) -> Any:
    """Start ``backend``, time its first answer since ``t0`` (``out["start_s"]``), measure it
    (:func:`_run_engine`) and record the resident memory of ``pids`` before closing it."""
    await backend.start()
    try:
        await _first_request(backend)
        out["start_s"] = time.perf_counter() - t0
        return await _run_engine(backend, model_dir, args, vocab)
    finally:
        out["rss_mib"] = rss_mib(pids)
        await backend.close()


def run_sglang(
    model_dir: Path, dtype: str, args: argparse.Namespace, vocab: int
) -> tuple[dict[str, Any], Any]:
    from clawrl.proxy import SGLangBackend, launch_sglang

    out: dict[str, Any] = {"engine": "sglang", "dtype": dtype}
    t0 = time.perf_counter()
    server = launch_sglang(
        model_dir,
        device="cpu",
        dtype=SGLANG_DTYPE[dtype],
        progress=False,
        log_path=args.log_dir / f"sglang_{dtype}.log",
        startup_timeout_s=args.startup_timeout,
        extra_args=shlex.split(args.sglang_args),
    )
    out["healthy_s"] = time.perf_counter() - t0

    async def go() -> Any:
        backend = SGLangBackend(server.url, extra_sampling_params={"ignore_eos": True})
        return await _measure(backend, t0, out, [server.process.pid], model_dir, args, vocab)

    try:
        speed, samples = asyncio.run(go())
    finally:
        server.stop()
    out.update(speed)
    return out, samples


def run_embedded(
    model_dir: Path, dtype: str, args: argparse.Namespace, vocab: int
) -> tuple[dict[str, Any], Any]:
    from clawrl.proxy import EmbeddedBackend

    out: dict[str, Any] = {"engine": "embedded", "dtype": dtype}

    async def go() -> Any:
        t0 = time.perf_counter()
        backend = EmbeddedBackend(
            model_dir,
            dtype=dtype,
            num_threads=args.threads,
            prefix_cache_bytes=0,
            max_batch_size=8,
            seed=0,
        )
        return await _measure(backend, t0, out, [os.getpid()], model_dir, args, vocab)

    speed, samples = asyncio.run(go())
    out.update(speed)
    gc.collect()
    return out, samples


def table(cases: list[dict[str, Any]]) -> str:
    """The side-by-side Markdown table (mismatch against the fp32 trainer)."""

    def cell(c: dict[str, Any], key: str, ratio: str, fmt: str) -> str:
        if key not in c:
            return "-"
        return f"{c[key]:{fmt}} ({c[ratio]:.2f})"

    lines = [
        "| engine | dtype | start-up s | prefill tok/s (x peak) | decode b1 tok/s (x bound) "
        "| decode b8 tok/s (x bound) | mismatch vs fp32 trainer: mean / p99 / max "
        "| vs bf16 trainer: mean / p99 / max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        if "error" in c:
            lines.append(f"| {c['engine']} | {c['dtype']} | failed: {c['error'][:120]} |")
            continue
        mm = []
        for trainer in ("fp32", "bf16"):
            m = c.get("mismatch", {}).get(f"trainer_{trainer}")
            mm.append(
                f"{m['mean_abs']:.1e} / {m['p99_abs']:.1e} / {m['max_abs']:.1e}" if m else "-"
            )
        lines.append(
            f"| {c['engine']} | {c['dtype']} | {c['start_s']:.0f} "
            f"| {cell(c, 'prefill_tok_s', 'prefill_over_roofline', '.0f')} "
            f"| {cell(c, 'decode_b1_tok_s', 'decode_b1_over_bound', '.1f')} "
            f"| {cell(c, 'decode_b8_tok_s', 'decode_b8_over_bound', '.1f')} "
            f"| {mm[0]} | {mm[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="kit name or HF dir")
    ap.add_argument("--engines", default=",".join(ENGINES), help="engine:dtype, comma-separated")
    ap.add_argument("--threads", type=int, default=2, help="embedded backend and roofline")
    ap.add_argument("--prompt", type=int, default=1024, help="prefill prompt tokens")
    ap.add_argument("--decode-prompt", type=int, default=64, help="decode prompt tokens")
    ap.add_argument("--tokens", type=int, default=24, help="generated tokens per decode request")
    ap.add_argument("--mismatch-tokens", type=int, default=32, help="tokens per mismatch prompt")
    ap.add_argument(
        "--sglang-args",
        default="",
        help='more SGLang server flags, one shell-split string (--sglang-args="--flag ...")',
    )
    ap.add_argument("--startup-timeout", type=float, default=1200.0, help="SGLang, seconds")
    ap.add_argument("--out", type=Path, default=RESULTS / "sglang_vs_embedded.json")
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/clawrl-sglang-vs-embedded"))
    args = ap.parse_args(argv)
    engines = [tuple(e.split(":")) for e in args.engines.split(",")]
    for e in engines:
        if len(e) != 2 or e[0] not in ("sglang", "embedded") or e[1] not in ("bf16", "fp32"):
            ap.error(f"--engines: {':'.join(e)!r} is not sglang|embedded:bf16|fp32")

    from clawrl.proxy import fetch_model

    model_dir = Path(args.model) if Path(args.model).is_dir() else Path(fetch_model(args.model))
    vocab = min(json.loads((model_dir / "config.json").read_text())["vocab_size"], 150000)
    args.log_dir.mkdir(parents=True, exist_ok=True)

    from bench_serving import add_roofline_ratios
    from bench_serving_mismatch import PROMPTS, recompute, summarise
    from bench_sglang_mismatch import server_version
    from roofline import measure

    load_before = os.getloadavg()
    keys = ("bf16_gflops", "fp32_gflops", "bandwidth_gbs")
    rooflines: list[dict[str, Any]] = []

    def measure_roofline() -> dict[str, Any]:
        """Measure once more; the best of every measurement so far, per quantity."""
        r = measure(threads=args.threads, quick=True)
        rooflines.append({k: r[k] for k in (*keys, "loadavg_before")})
        best = {k: max(x[k] for x in rooflines) for k in keys}
        best.update(threads=r["threads"], cpu_flags=r["cpu_flags"], measurements=rooflines)
        return best

    roof = measure_roofline()
    result: dict[str, Any] = {
        "what": "SGLang CPU engine vs the embedded backend, same model and prompts",
        "model": model_dir.name,
        "sglang_version": server_version(),
        "sglang_setup": "SGLANG_USE_CPU_ENGINE=1, --device cpu --attention-backend torch_native "
        "--max-total-tokens 8192 (launch_sglang's CPU set-up); OMP threads bound to every "
        "core of NUMA node 0",
        "embedded_threads": args.threads,
        "roofline": roof,
        "args": {k: str(v) for k, v in vars(args).items() if k not in ("out", "log_dir")},
        "mismatch_prompts": len(PROMPTS),
        "cases": [],
        "loadavg_before": list(load_before),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "command": shlex.join(
            ["uv", "run", "python", "tools/perf/bench_sglang_vs_embedded.py"]
            + (sys.argv[1:] if argv is None else argv)
        ),
    }

    def save() -> None:
        result["loadavg_after"] = list(os.getloadavg())
        result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    samples: dict[int, Any] = {}
    for n, (engine, dtype) in enumerate(engines):
        if n:
            result["roofline"] = measure_roofline()
        t0 = time.perf_counter()
        load0 = os.getloadavg()
        print(f"{engine} {dtype} ...", flush=True)
        try:
            if engine == "sglang":
                case, rows = run_sglang(model_dir, dtype, args, vocab)
            else:
                case, rows = run_embedded(model_dir, dtype, args, vocab)
        except Exception as exc:  # recorded: "SGLang cannot start here" is a result too
            case = {"engine": engine, "dtype": dtype, "error": f"{type(exc).__name__}: {exc}"}
            rows = None
            print(f"{engine} {dtype} failed: {case['error'][-2000:]}", flush=True)
        else:
            case["params"], case["weight_bytes"] = weight_stats(model_dir, dtype)
            samples[len(result["cases"])] = rows
        case["wall_s"] = time.perf_counter() - t0
        case["loadavg_before"] = list(load0)
        case["loadavg_after"] = list(os.getloadavg())
        result["cases"].append(case)
        save()
        print(json.dumps({k: v for k, v in case.items() if not isinstance(v, dict)}), flush=True)

    roof = measure_roofline()
    result["roofline"] = roof
    for case in result["cases"]:
        if "error" not in case:
            add_roofline_ratios(case, roof, case["dtype"])
    save()

    # the trainer's recompute, after every engine has stopped (one model in memory at a time)
    import torch
    from clawrl.rl_core import CorrectionConfig
    from transformers import AutoModelForCausalLM

    cap = CorrectionConfig().tis_cap or 2.0
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    for i, rows in samples.items():
        recorded = [lp for _, _, lps in rows for lp in lps]
        result["cases"][i]["mismatch"] = {
            f"trainer_{t}": summarise(recorded, recompute(model, rows, t), cap)
            for t in ("fp32", "bf16")
        }
    result["tis_cap"] = cap
    save()
    md = table(result["cases"])
    print(md)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
