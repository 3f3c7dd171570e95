"""Benchmark of ISE stage 1 (intents): rendering rate, dedup and Vendi cost, Vendi vs pool size.

    uv run python tools/perf/bench_ise_intents.py --out tools/perf/results/bench_ise_intents.json

Measures (CPU, wall clock):
* sampling + template rendering: intents/s over ``--render-n`` draws;
* dedup_near and vendi_score on random unit vectors of dim 384 (MiniLM's) for n in ``--sizes``
  (the paper's pool is ~50k) — cost of the algorithms alone;
* on ``--embed-n`` template intents: embedding rate and, for growing prefixes of the pool,
  unique count and Vendi Score under each embedding in ``--embeddings`` (the paper reports
  Vendi growing from 40.7 to 61.6 with pool size on all-mpnet-base-v2 and LLM-written intents).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
from clawrl.ise_synth import (
    IntentSampler,
    TemplateRenderer,
    dedup_exact,
    dedup_near,
    generate_intents,
    load_embedder,
    load_taxonomy,
    vendi_score,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("tools/perf/results/bench_ise_intents.json")
    )
    parser.add_argument("--render-n", type=int, default=20_000)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 50_000])
    parser.add_argument("--embed-n", type=int, default=2_000)
    parser.add_argument("--embeddings", nargs="*", default=["tfidf", "minilm"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch_threads": args.threads,
    }
    tax = load_taxonomy()
    t0 = time.perf_counter()
    records, _ = generate_intents(IntentSampler(tax, seed=0), args.render_n, TemplateRenderer())
    dt = time.perf_counter() - t0
    result["template_render"] = {
        "n": args.render_n,
        "seconds": round(dt, 3),
        "intents_per_s": round(args.render_n / dt, 1),
    }
    print("render", result["template_render"], flush=True)

    rng = np.random.default_rng(0)
    algo = []
    for n in args.sizes:
        # clustered unit vectors so that dedup has real work (some pairs >= 0.9)
        centers = rng.normal(size=(max(1, n // 4), 384))
        x = centers[rng.integers(len(centers), size=n)] + rng.normal(scale=0.25, size=(n, 384))
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        groups = list(rng.integers(10, size=n))
        t0 = time.perf_counter()
        res = dedup_near(x, groups, 0.9)
        t_dedup = time.perf_counter() - t0
        t0 = time.perf_counter()
        vs = vendi_score(x)
        t_vendi = time.perf_counter() - t0
        row = {
            "n": n,
            "d": 384,
            "dedup_s": round(t_dedup, 3),
            "kept": len(res.kept),
            "vendi_s": round(t_vendi, 3),
            "vendi": round(vs, 2),
        }
        algo.append(row)
        print("algorithms", row, flush=True)
    result["algorithms_random_384d"] = algo

    pool = records[: args.embed_n]
    exact = [pool[i] for i in dedup_exact([r.intent for r in pool])]
    texts = [r.intent for r in exact]
    result["pool"] = {"generated": len(pool), "unique_exact": len(exact)}
    curves = {}
    for kind in args.embeddings:
        t0 = time.perf_counter()
        emb = load_embedder(kind)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        x = emb.encode(texts)
        t_embed = time.perf_counter() - t0
        curve = []
        k = 250
        while True:
            k = min(k, len(exact))
            sub = x[:k]
            res = dedup_near(sub, [r.primary_domain for r in exact[:k]], 0.9)
            curve.append(
                {"pool": k, "unique": len(res.kept), "vendi": round(vendi_score(sub[res.kept]), 2)}
            )
            if k == len(exact):
                break
            k *= 2
        curves[emb.name] = {
            "load_s": round(t_load, 2),
            "embed_s": round(t_embed, 2),
            "texts_per_s": round(len(texts) / t_embed, 1),
            "curve": curve,
        }
        print(emb.name, curves[emb.name], flush=True)
    result["vendi_vs_pool_size"] = curves
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
