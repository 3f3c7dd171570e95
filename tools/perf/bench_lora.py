"""LoRA vs full fine-tuning: step time and peak memory of a tree train step on real models,
each as a ratio to the roofline measured in the same run (``roofline.py``).

Runs (``--runs``, each ``SCHEME:MODEL`` in its own subprocess, so peak memory is its own):
``full:M`` trains every weight, ``lora:M`` trains LoRA adapters (``[algo] lora``, rank
``--rank``, alpha 2·rank, the attention and MLP projections); MODEL is a model kit name or an
HF directory. Both through rl-core's ``Trainer`` with ``precision = "bf16"`` (bf16 autocast
over float32 weights) and, with ``--grad-ckpt``, gradient checkpointing. Workload: the
ISE-shaped tree of ``bench_tree_training.py`` (a trunk of T·H history tokens and T
reasoning branches of B tokens).

Per run: forward + backward (the tree GRPO loss, :func:`loss_backward`) and the AdamW step,
timed separately; peak RSS (the process's, model load included) and RSS after the warm-up
step; trainable parameters and AdamW state bytes. Achieved GFLOP/s counts the useful matmul
FLOPs: forward 2·P per token (layers; the vocabulary head at target tokens; attention over
ancestors), backward 2× that for full fine-tuning (input and weight gradients) and 1× for
LoRA (input gradients only: frozen weights get none); recomputation under
gradient checkpointing is not counted.

    uv run python tools/perf/bench_lora.py
    uv run python tools/perf/bench_lora.py --runs lora:qwen2.5-coder-1.5b-instruct
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from tree_step import (
    add_workload_args,
    forward_flops,
    grpo_workload,
    rss_bytes,
    run_workers,
    throughput,
    timed_steps,
)

RESULTS = Path(__file__).parent / "results"
DEFAULT_RUNS = (
    "lora:qwen2.5-coder-0.5b-instruct,full:qwen2.5-coder-0.5b-instruct,"
    "lora:qwen2.5-coder-1.5b-instruct"
)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from clawrl.proxy import resolve_model
    from clawrl.rl_core import LoRAConfig, OptimConfig, Trainer, TrainerConfig
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    scheme, _, name = args.run.partition(":")
    t0 = time.perf_counter()
    model_dir = resolve_model(name)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa"
    )
    load_s = time.perf_counter() - t0
    rss_loaded = rss_bytes()
    lora = LoRAConfig(r=args.rank, alpha=2.0 * args.rank) if scheme == "lora" else None
    trainer = Trainer(
        model,
        TrainerConfig(
            precision="bf16",
            lora=lora,
            gradient_checkpointing=args.grad_ckpt,
            token_budget=None,
            optim=OptimConfig(lr=1e-6, max_grad_norm=None),
        ),
    )
    work = grpo_workload(args, int(model.config.vocab_size))
    trainer.model.train()

    def fwd_bwd() -> float:
        return work.fwd_bwd(trainer.model)

    def opt_step() -> None:
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    fwd_bwd()  # warm-up
    opt_step()
    rss_warm = rss_bytes()
    timing = timed_steps(fwd_bwd, opt_step, args.repeat)
    fwd = forward_flops(model, work.batch, work.n_targets, lambda n: ".lora_" not in n)
    flops = fwd * (3.0 if scheme == "full" else 2.0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt_state = sum(
        t.numel() * t.element_size()
        for s in trainer.optimizer.state.values()
        for t in s.values()
        if torch.is_tensor(t)
    )
    return {
        "run": args.run,
        "scheme": scheme,
        "model": name,
        "lora_rank": args.rank if scheme == "lora" else None,
        "tree_tokens": int(work.batch.num_tokens),
        "target_tokens": work.n_targets,
        "load_s": load_s,
        **timing,
        "step_wall_s_best": min(timing["fwd_bwd_wall_s"]) + min(timing["adamw_step_wall_s"]),
        **throughput(timing, int(work.batch.num_tokens), flops),
        "rss_loaded_bytes": rss_loaded,
        "rss_after_warmup_bytes": rss_warm,
        "params": sum(p.numel() for n, p in model.named_parameters() if ".lora_" not in n),
        "trainable_params": sum(p.numel() for p in trainable),
        "adamw_state_bytes": opt_state,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="comma-separated SCHEME:MODEL")
    ap.add_argument("--rank", type=int, default=16)
    add_workload_args(ap)
    ap.add_argument("--out", type=Path, default=RESULTS / "lora.json")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(worker(args)))
        return
    from roofline import measure

    roof_before = measure(args.threads, quick=True)
    print(f"roofline: bf16 {roof_before['bf16_gflops']:.0f} GFLOP/s", flush=True)
    runs = run_workers(__file__, "run", args.runs.split(","), args, extra=("rank",))
    for run, r in runs.items():
        if "error" not in r:
            print(
                f"{run}: {r['tokens_per_s_best']:.1f} tok/s fwd+bwd ({r['tree_tokens']} "
                f"tokens, {min(r['fwd_bwd_wall_s']):.1f} s), AdamW "
                f"{min(r['adamw_step_wall_s']):.2f} s, peak RSS "
                f"{r['peak_rss_bytes'] / 2**30:.2f} GiB",
                flush=True,
            )
    roof_after = measure(args.threads, quick=True)
    # the better of the two measurements (both are lower bounds on a shared host)
    peak = max(roof_before["bf16_gflops"], roof_after["bf16_gflops"])
    for r in runs.values():
        if "gflops_best" in r:
            r["ratio_to_bf16_roofline"] = r["gflops_best"] / peak
    summary = {
        "workload": {"turns": args.turns, "history_tokens": args.hist, "branch": args.branch},
        "precision": "bf16",
        "threads": args.threads,
        "grad_ckpt": args.grad_ckpt,
        "roofline_bf16_gflops": peak,
        "roofline_before": roof_before,
        "roofline_after": roof_after,
        "loadavg_after": list(os.getloadavg()),
        "runs": runs,
        "command": " ".join(["uv run python tools/perf/bench_lora.py", *sys.argv[1:]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
