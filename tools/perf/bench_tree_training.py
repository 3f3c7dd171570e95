"""Tree-packed vs flat training step: time, peak memory, token-compression ratio.

Workload (ISE-shaped): one rollout of T turns; turn k's call sees the kept
history (k+1 segments of H tokens) and generates a B-token reasoning branch that the harness
later drops, so the prefix tree is a trunk of T·H tokens with T leaves of B tokens, while the
flat computation trains every root-to-leaf path separately. In each history segment the second
half is trainable (assistant output), the branches are trainable.

Both modes compute the same GRPO-style clipped-surrogate loss (one forward + backward):
* ``tree``: one forward over the packed tree (sdpa + dense boolean tree mask on CPU,
  flex_attention + BlockMask from ``subtree_end`` on GPU), per-token terms scattered from the
  (token, trajectory) memberships;
* ``flat``: path by path with plain causal attention (is_causal sdpa / flash), gradients
  accumulated.

Each mode runs in its own subprocess (peak memory per mode). Results: JSON in
``tools/perf/results/``.

    uv run python tools/perf/bench_tree_training.py            # CPU, tiny model
    uv run python tools/perf/bench_tree_training.py --gpu      # H200: Qwen3-0.6B-shaped, bf16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build_sequences(turns: int, hist: int, branch: int, vocab: int, seed: int) -> list[Any]:
    import random

    from clawrl.rl_core import TokenSequence

    rng = random.Random(seed)
    trunk: list[int] = []
    trunk_train: list[bool] = []
    seqs = []
    for k in range(turns):
        seg = [rng.randrange(vocab) for _ in range(hist)]
        trunk += seg
        trunk_train += [False] * (hist // 2) + [True] * (hist - hist // 2)
        br = [rng.randrange(vocab) for _ in range(branch)]
        ids = trunk + br
        train = trunk_train + [True] * branch
        train[0] = False
        seqs.append(
            TokenSequence(
                token_ids=list(ids),
                trainable=train,
                logprobs=[-1.0] * len(ids),
                rollout_id="r0",
                call_id=f"c{k}",
                metadata={"group_id": "g"},
            )
        )
    return seqs


# Qwen3Config sizes of the benchmark model: "gpu" is Qwen3-0.6B's shape (random weights, tied
# embeddings, vocabulary 151936); "cpu" has 2 layers and a small vocabulary, but Qwen3-0.6B's
# MLP-to-attention cost ratio (MLP FLOPs per token 6·h·i vs attention 4·L·(heads·head_dim):
# 6·512·1536 / (4·512) = 2304 per context token, as 6·1024·3072 / (4·2048) for the real model)
QWEN3_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
QWEN3_SIZES = {
    "gpu": (1024, 3072, 28, 16, 8, 128, 40960),
    "cpu": (512, 1536, 2, 8, 4, 64, 8192),
}


def make_model(gpu: bool, attn: str, vocab: int) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sizes = dict(zip(QWEN3_FIELDS, QWEN3_SIZES["gpu" if gpu else "cpu"], strict=True))
    cfg = Qwen3Config(
        vocab_size=151936 if gpu else vocab,
        tie_word_embeddings=gpu,
        attn_implementation=attn,
        **sizes,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    if gpu:
        model = model.to("cuda", torch.bfloat16)
    return model


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    from clawrl.rl_core import (
        LossConfig,
        OldPass,
        TreeBatch,
        chunked_token_logprobs,
        clipped_surrogate_loss,
        loss_backward,
        pack_token_sequences,
        prepare_rl,
        split_by_token_budget,
        tree_attention_mask,
        tree_block_mask,
    )

    torch.set_num_threads(args.threads)
    gpu = args.gpu
    dev = torch.device("cuda" if gpu else "cpu")
    seqs = build_sequences(args.turns, args.hist, args.branch, args.vocab, 0)
    tree = pack_token_sequences(seqs)
    batch = TreeBatch.from_trees([tree])
    pieces = split_by_token_budget(batch, None)
    flat_tokens = sum(len(s.token_ids) for s in seqs)
    attn = ("flex_attention" if gpu else "sdpa") if args.mode == "tree" else "sdpa"
    model = make_model(gpu, attn, args.vocab)
    cfg = LossConfig(aggregation="token_mean")
    old = OldPass(logprobs=np.full(batch.num_tokens, -1.0))  # ratio r = exp(logp + 1)
    prepared = prepare_rl(
        batch, old, {"r0": 1.0}, algorithm="grpo", loss_cfg=cfg, groups={"r0": "g"}
    )
    prepared.advantage[:] = 1.0  # single rollout: GRPO would give 0; use A = 1
    chunk = 4096

    def tree_step() -> float:
        stats = loss_backward(model, batch, pieces, prepared, old, loss_cfg=cfg, chunk_size=chunk)
        return stats["loss"]

    dec = model.get_decoder()
    head = model.get_output_embeddings()
    paths = [batch.path(k) for k in range(batch.num_trajectories)]
    w_all = prepared.weight

    def flat_step() -> float:
        total = 0.0
        for k, path in enumerate(paths):
            ids = torch.as_tensor(batch.input_ids[path], device=dev)
            h = dec(input_ids=ids[None], use_cache=False).last_hidden_state[0]
            mem = np.nonzero(batch.mem_traj == k)[0]
            pos_of = np.full(batch.num_tokens, -1)
            pos_of[path] = np.arange(len(path))
            p = torch.as_tensor(pos_of[batch.mem_token[mem]], device=dev)
            lp, _ = chunked_token_logprobs(h[p - 1], ids[p], head, chunk_size=chunk)
            w = torch.as_tensor(w_all[mem], dtype=lp.dtype, device=dev)
            loss = clipped_surrogate_loss(
                lp, torch.full_like(lp, -1.0), w, torch.zeros_like(w), 0.2, 0.28
            )
            loss.backward()
            total += float(loss.detach())
        return total

    step = tree_step if args.mode == "tree" else flat_step

    def sync() -> None:
        if gpu:
            torch.cuda.synchronize()

    # mask construction alone
    end = torch.as_tensor(batch.subtree_end, device=dev)
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    if gpu:
        tree_block_mask(end)
    else:
        tree_attention_mask(end)
    sync()
    mask_s = time.perf_counter() - t0 if gpu else time.process_time() - c0

    loss = step()  # warm-up (compilation on GPU)
    model.zero_grad(set_to_none=True)
    sync()
    if gpu:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    times, cpu_times = [], []
    for _ in range(args.repeat):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
        model.zero_grad(set_to_none=True)
    if gpu:
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    # on a shared CPU host wall time is inflated by other processes: with one thread the
    # process CPU time is the step's cost; on GPU the wall time (synchronised) is
    timed = times if gpu else cpu_times
    return {
        "mode": args.mode,
        "step_s_median": statistics.median(timed),
        "step_s_kind": "wall (cuda synchronised)" if gpu else "process CPU time, 1 thread",
        "step_wall_s": times,
        "step_cpu_s": cpu_times,
        "peak_mem_bytes": max(int(peak), 0),
        "peak_mem_kind": "cuda max_memory_allocated - allocated before the step"
        if gpu
        else "peak RSS - RSS before the timed steps (warm-up excluded)",
        "loss": loss,
        "tree_tokens": batch.num_tokens,
        "flat_tokens": flat_tokens,
        "mask_build_s": mask_s if args.mode == "tree" else None,
        "attn_implementation": attn,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--gpu",
        action="store_true",
        help="H200 run: Qwen3-0.6B-shaped random model, bf16, 68x240+160",
    )
    ap.add_argument("--turns", type=int)
    ap.add_argument("--hist", type=int)
    ap.add_argument("--branch", type=int)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--mode", choices=["tree", "flat"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.turns is None:
        args.turns = 68 if args.gpu else 24
    if args.hist is None:
        args.hist = 240 if args.gpu else 40
    if args.branch is None:
        args.branch = 160 if args.gpu else 24
    if args.mode:
        print(json.dumps(worker(args)))
        return
    results = {}
    for mode in ("tree", "flat"):
        cmd = [
            sys.executable,
            __file__,
            "--mode",
            mode,
            "--turns",
            str(args.turns),
            "--hist",
            str(args.hist),
            "--branch",
            str(args.branch),
            "--vocab",
            str(args.vocab),
            "--repeat",
            str(args.repeat),
            "--threads",
            str(args.threads),
        ]
        if args.gpu:
            cmd.append("--gpu")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
        print(
            f"{mode}: {results[mode]['step_s_median']:.3f} s/step, "
            f"peak {results[mode]['peak_mem_bytes'] / 2**20:.1f} MiB",
            flush=True,
        )
    tree, flat = results["tree"], results["flat"]
    # the O(N) BlockMask construction for the full workload (27,200 tokens),
    # timed here on this machine's CPU (the GPU builds it from the same tensor ops)
    import torch
    from clawrl.rl_core import pack_token_sequences, tree_block_mask

    torch.set_num_threads(args.threads)
    ise = pack_token_sequences(build_sequences(68, 240, 160, 1000, 0))
    ise_end = torch.as_tensor(ise.subtree_end, device="cuda" if args.gpu else "cpu")
    bm_times = []
    for _ in range(3):
        if args.gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        bm = tree_block_mask(ise_end)
        if args.gpu:
            torch.cuda.synchronize()
        bm_times.append(time.perf_counter() - t0)
    ratio = flat["flat_tokens"] / tree["tree_tokens"]
    speedup = flat["step_s_median"] / tree["step_s_median"]
    summary = {
        "device": "gpu" if args.gpu else "cpu",
        "host": platform.node(),
        "python": platform.python_version(),
        "workload": {
            "turns": args.turns,
            "history_tokens": args.hist,
            "branch_tokens": args.branch,
            "vocab": 151936 if args.gpu else args.vocab,
        },
        "tree_tokens": tree["tree_tokens"],
        "flat_tokens": flat["flat_tokens"],
        "token_ratio": ratio,
        "speedup": speedup,
        "speedup_over_token_ratio": speedup / ratio,
        "goal_speedup": 0.7 * ratio,
        "memory_ratio_flat_over_tree": flat["peak_mem_bytes"] / max(tree["peak_mem_bytes"], 1),
        "mask_build_fraction_of_tree_step": (tree["mask_build_s"] or 0) / tree["step_s_median"],
        "loss_tree": tree["loss"],
        "loss_flat": flat["loss"],
        "ise_block_mask": {
            "tokens": int(ise.input_ids.shape[0]),
            "block": 128,
            "build_s_min_of_3": min(bm_times),
            "sparsity_percent": float(bm.sparsity()),
            "device": "cuda" if args.gpu else "cpu",
        },
        "modes": results,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "modes"}, indent=2))
    out = args.out or RESULTS / ("tree_training_gpu.json" if args.gpu else "tree_training_cpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
