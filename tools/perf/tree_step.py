"""Shared parts of the one-step training benchmarks (``bench_precision.py``,
``bench_lora.py``): the GRPO workload over an ISE-shaped prefix tree, its matmul FLOPs, the
timed forward + backward / optimizer loop, and the parent's one-subprocess-per-run driver
(peak memory per run)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Qwen2.5-0.5B's shape (hidden 896, MLP 4864, 14 / 2 heads, vocabulary 151,936)
QWEN25_05B_SHAPE = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
}


def qwen25_05b_model(layers: int) -> Any:
    """A Qwen2 with random weights (seed 0) at Qwen2.5-0.5B's shape, ``layers`` of its 24,
    untied head, sdpa (the dense tree mask)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        **QWEN25_05B_SHAPE,
        num_hidden_layers=layers,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        max_position_embeddings=32768,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def rss_bytes() -> int:
    """This process's resident set size now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def add_workload_args(ap: argparse.ArgumentParser) -> None:
    """The workload and timing options every one-step benchmark takes."""
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--hist", type=int, default=100)
    ap.add_argument("--branch", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing")


WORKLOAD_ARGS = ("turns", "hist", "branch", "repeat", "threads")


@dataclass
class Workload:
    """One packed tree of the benchmark's shape and a GRPO loss over it (advantage 1)."""

    batch: Any
    pieces: Any
    loss_cfg: Any
    old: Any
    prepared: Any
    n_targets: int

    def fwd_bwd(self, model: Any) -> float:
        """One forward + backward over the tree; the loss."""
        from clawrl.rl_core import loss_backward

        stats = loss_backward(
            model, self.batch, self.pieces, self.prepared, self.old, loss_cfg=self.loss_cfg
        )
        return float(stats["loss"])


def grpo_workload(args: argparse.Namespace, vocab: int) -> Workload:
    """The tree of ``args.turns`` turns of ``args.hist`` history tokens and ``args.branch``
    dropped-branch tokens (see ``bench_tree_training.py``), prepared for a GRPO step."""
    import numpy as np
    from bench_tree_training import build_sequences
    from clawrl.rl_core import (
        LossConfig,
        OldPass,
        TreeBatch,
        pack_token_sequences,
        prepare_rl,
        split_by_token_budget,
    )

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
    return Workload(batch, pieces, loss_cfg, old, prepared, n_targets)


def forward_flops(
    model: Any, batch: Any, n_targets: int, counts: Callable[[str], bool] = lambda _: True
) -> float:
    """Matmul FLOPs of one forward over a packed tree: the layers' weights (the parameters
    whose name ``counts``, less the embeddings and an untied head), the head on the target
    tokens only, and attention over each token's ancestors."""
    cfg = model.config
    head = model.get_output_embeddings().weight
    embed = model.get_input_embeddings().weight
    params = sum(p.numel() for n, p in model.named_parameters() if counts(n))
    layer_params = params - embed.numel() - (0 if head is embed else head.numel())
    n = int(batch.num_tokens)
    ctx = float((batch.position_ids + 1).sum())  # each token attends its ancestors and itself
    attn = 2 * 2 * cfg.num_hidden_layers * cfg.hidden_size * ctx  # QK^T and PV
    return 2 * layer_params * n + 2 * head.numel() * n_targets + attn


def timed_steps(
    fwd_bwd: Callable[[], float], opt_step: Callable[[], None], repeat: int
) -> dict[str, Any]:
    """``repeat`` timed (forward + backward, optimizer step) pairs after the caller's
    warm-up: wall and CPU times, the last loss and the peak RSS so far."""
    fb_wall, fb_cpu, opt_wall = [], [], []
    loss = float("nan")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = fwd_bwd()
        fb_wall.append(time.perf_counter() - t0)
        fb_cpu.append(time.process_time() - c0)
        t0 = time.perf_counter()
        opt_step()
        opt_wall.append(time.perf_counter() - t0)
    return {
        "loss": loss,
        "fwd_bwd_wall_s": fb_wall,
        "fwd_bwd_cpu_s": fb_cpu,
        "adamw_step_wall_s": opt_wall,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def throughput(timing: dict[str, Any], num_tokens: int, flops: float) -> dict[str, float]:
    """Tokens/s (best and median) and GFLOP/s of the timed forward + backward passes."""
    best = min(timing["fwd_bwd_wall_s"])
    return {
        "tokens_per_s_best": num_tokens / best,
        "tokens_per_s_median": num_tokens / statistics.median(timing["fwd_bwd_wall_s"]),
        "gflop_per_step": flops / 1e9,
        "gflops_best": flops / best / 1e9,
    }


def run_workers(script: str, flag: str, names: list[str], args: argparse.Namespace,
                extra: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """Run ``script --flag NAME`` once per name, each in its own process, with the workload
    options (and the ``extra`` option names) of ``args``; each worker prints its result as
    the last line of JSON. A failed worker gives ``{"error": ..., "returncode": ...}``."""
    runs: dict[str, Any] = {}
    for name in names:
        cmd = [sys.executable, script, f"--{flag}", name]
        for k in (*WORKLOAD_ARGS, *extra):
            cmd += [f"--{k}", str(getattr(args, k))]
        if args.grad_ckpt:
            cmd.append("--grad-ckpt")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            runs[name] = {flag: name, "error": tail[0], "returncode": proc.returncode}
            print(f"{name}: failed: {tail[0]}", flush=True)
            continue
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return runs
