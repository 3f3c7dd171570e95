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
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results"
DEFAULT_RUNS = (
    "lora:qwen2.5-coder-0.5b-instruct,full:qwen2.5-coder-0.5b-instruct,"
    "lora:qwen2.5-coder-1.5b-instruct"
)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def forward_flops(model: Any, batch: Any, n_targets: int) -> float:
    """Matmul FLOPs of one forward over a packed tree (the base model's weights)."""
    cfg = model.config
    names = {n: p for n, p in model.named_parameters() if ".lora_" not in n}
    head = model.get_output_embeddings().weight.numel()
    embed = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    layer_params = sum(p.numel() for p in names.values()) - embed - (0 if tied else head)
    n = int(batch.num_tokens)
    ctx = float((batch.position_ids + 1).sum())  # each token attends its ancestors and itself
    attn = 2 * 2 * cfg.num_hidden_layers * cfg.hidden_size * ctx  # QK^T and PV
    return 2 * layer_params * n + 2 * head * n_targets + attn


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    from bench_tree_training import build_sequences
    from clawrl.proxy import resolve_model
    from clawrl.rl_core import (
        LoRAConfig,
        LossConfig,
        OldPass,
        OptimConfig,
        Trainer,
        TrainerConfig,
        TreeBatch,
        loss_backward,
        pack_token_sequences,
        prepare_rl,
        split_by_token_budget,
    )
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    scheme, _, name = args.run.partition(":")
    t0 = time.perf_counter()
    model_dir = resolve_model(name)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa"
    )
    load_s = time.perf_counter() - t0
    rss_loaded = _rss()
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
    vocab = int(model.config.vocab_size)
    seqs = build_sequences(args.turns, args.hist, args.branch, vocab, 0)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    pieces = split_by_token_budget(batch, None)
    loss_cfg = LossConfig(aggregation="token_mean")
    old = OldPass(logprobs=np.full(batch.num_tokens, -12.0))
    prepared = prepare_rl(
        batch, old, {"r0": 1.0}, algorithm="grpo", loss_cfg=loss_cfg, groups={"r0": "g"}
    )
    prepared.advantage[:] = 1.0
    n_targets = int(sum(p.targets.size for p in pieces))
    trainer.model.train()

    def fwd_bwd() -> float:
        stats = loss_backward(trainer.model, batch, pieces, prepared, old, loss_cfg=loss_cfg)
        return float(stats["loss"])

    def opt_step() -> None:
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)

    loss = fwd_bwd()  # warm-up
    opt_step()
    rss_warm = _rss()
    fb_wall, fb_cpu, opt_wall = [], [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = fwd_bwd()
        fb_wall.append(time.perf_counter() - t0)
        fb_cpu.append(time.process_time() - c0)
        t0 = time.perf_counter()
        opt_step()
        opt_wall.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    fwd = forward_flops(model, batch, n_targets)
    flops = fwd * (3.0 if scheme == "full" else 2.0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt_state = sum(
        t.numel() * t.element_size()
        for s in trainer.optimizer.state.values()
        for t in s.values()
        if torch.is_tensor(t)
    )
    best = min(fb_wall)
    return {
        "run": args.run,
        "scheme": scheme,
        "model": name,
        "lora_rank": args.rank if scheme == "lora" else None,
        "tree_tokens": int(batch.num_tokens),
        "target_tokens": n_targets,
        "loss": loss,
        "load_s": load_s,
        "fwd_bwd_wall_s": fb_wall,
        "fwd_bwd_cpu_s": fb_cpu,
        "adamw_step_wall_s": opt_wall,
        "step_wall_s_best": best + min(opt_wall),
        "tokens_per_s_best": batch.num_tokens / best,
        "tokens_per_s_median": batch.num_tokens / statistics.median(fb_wall),
        "gflop_per_step": flops / 1e9,
        "gflops_best": flops / best / 1e9,
        "peak_rss_bytes": peak,
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
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--hist", type=int, default=100)
    ap.add_argument("--branch", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing")
    ap.add_argument("--out", type=Path, default=RESULTS / "lora.json")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(worker(args)))
        return
    from roofline import measure

    roof_before = measure(args.threads, quick=True)
    print(f"roofline: bf16 {roof_before['bf16_gflops']:.0f} GFLOP/s", flush=True)
    runs: dict[str, Any] = {}
    for run in args.runs.split(","):
        cmd = [sys.executable, __file__, "--run", run]
        for k in ("rank", "turns", "hist", "branch", "repeat", "threads"):
            cmd += [f"--{k}", str(getattr(args, k))]
        if args.grad_ckpt:
            cmd.append("--grad-ckpt")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            runs[run] = {"run": run, "error": tail[0], "returncode": proc.returncode}
            print(f"{run}: failed: {tail[0]}", flush=True)
            continue
        r = runs[run] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{run}: {r['tokens_per_s_best']:.1f} tok/s fwd+bwd ({r['tree_tokens']} tokens, "
            f"{min(r['fwd_bwd_wall_s']):.1f} s), AdamW {min(r['adamw_step_wall_s']):.2f} s, "
            f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB",
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
