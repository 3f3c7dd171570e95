"""One RL update through a harness's shared prompt: the prefix tree against flat sequences,
side by side, as ratios to the roofline measured in the same run.

A harness sends the same system prompt and tools (P tokens: Claude Code ~19k with Qwen2.5's
tokenizer, OpenClaw ~8k, Codex ~6k, pi ~1.4k) at the start of every rollout. A GRPO group of G
rollouts of one task is then one tree: the P shared tokens once, then G branches of L tokens
(the rollout's own turns, trained on). A trainer without prefix sharing runs G sequences of
P + L tokens. Both compute the same loss; this measures forward + backward of each under bf16
autocast with gradient checkpointing (what ``examples/mix_harness_real.toml`` trains with).

Model: a Qwen2 with random weights at Qwen2.5-0.5B's shape (hidden 896, MLP 4864, 14 / 2
heads, vocabulary 151,936), ``--layers`` of its 24 (the time of the full model is about
24 / layers times the layers' share); sdpa with the dense tree mask. Each (prompt, mode) runs
in its own process (peak RSS is its own).

    uv run python tools/perf/bench_harness_update.py                       # 19000,8000,1400
    uv run python tools/perf/bench_harness_update.py --prompts 1400 --layers 1   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from tree_step import QWEN25_05B_SHAPE as SHAPE

RESULTS = Path(__file__).parent / "results"
MODES = ("tree", "flat")


def _sequences(prompt: int, branches: int, branch_tokens: int) -> list[Any]:
    import random

    from clawrl.rl_core import TokenSequence

    rng = random.Random(0)
    shared = [rng.randrange(SHAPE["vocab_size"]) for _ in range(prompt)]
    seqs = []
    for g in range(branches):
        ids = shared + [rng.randrange(SHAPE["vocab_size"]) for _ in range(branch_tokens)]
        seqs.append(
            TokenSequence(
                token_ids=ids,
                trainable=[False] * prompt + [True] * branch_tokens,
                logprobs=[-1.0] * len(ids),
                rollout_id=f"r{g}",
                call_id="c0",
                metadata={"group_id": "g"},
            )
        )
    return seqs


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import torch
    from clawrl.rl_core import (
        LossConfig,
        OldPass,
        TreeBatch,
        loss_backward,
        pack_token_sequences,
        prepare_rl,
        split_by_token_budget,
    )
    from tree_step import forward_flops, qwen25_05b_model

    torch.set_num_threads(args.threads)
    model = qwen25_05b_model(args.layers)
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.get_input_embeddings().requires_grad_(False)
    model.train()
    seqs = _sequences(args.prompt, args.branches, args.branch_tokens)
    groups = [seqs] if args.mode == "tree" else [[s] for s in seqs]
    loss_cfg = LossConfig(aggregation="token_mean")
    work = []
    for part in groups:
        batch = TreeBatch.from_trees([pack_token_sequences(part)])
        old = OldPass(logprobs=np.full(batch.num_tokens, -12.0))
        rewards = {s.rollout_id: 1.0 for s in part}
        prepared = prepare_rl(
            batch,
            old,
            rewards,
            algorithm="grpo",
            loss_cfg=loss_cfg,
            groups={r: "g" for r in rewards},
        )
        prepared.advantage[:] = 1.0
        work.append((batch, split_by_token_budget(batch, None), prepared, old))

    def fwd_bwd() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for batch, pieces, prepared, old in work:
                loss_backward(model, batch, pieces, prepared, old, loss_cfg=loss_cfg)
        model.zero_grad(set_to_none=True)

    walls, cpus = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fwd_bwd()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    tokens = sum(int(b.num_tokens) for b, *_ in work)
    targets = args.branches * args.branch_tokens
    # forward + backward + the checkpointed forward again: 4x the forward's matmul FLOPs
    flops = 4.0 * sum(
        forward_flops(model, b, args.branch_tokens * (args.branches if args.mode == "tree" else 1))
        for b, *_ in work
    )
    best = min(walls)
    return {
        "mode": args.mode,
        "prompt_tokens": args.prompt,
        "tokens": tokens,
        "target_tokens": targets,
        "fwd_bwd_wall_s": walls,
        "fwd_bwd_cpu_s": cpus,
        "gflop": flops / 1e9,
        "gflops_best": flops / best / 1e9,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _run(args: argparse.Namespace, prompt: int, mode: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", mode, "--prompt", str(prompt)]
    for k in ("layers", "branches", "branch_tokens", "repeat", "threads"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        return {"mode": mode, "prompt_tokens": prompt, "error": tail[0]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--prompts", default="19000,8000,1400", help="shared prompt tokens, each")
    ap.add_argument("--branches", type=int, default=4, help="rollouts in the group (G)")
    ap.add_argument("--branch-tokens", type=int, default=600, help="each rollout's own tokens")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", type=Path, default=RESULTS / "harness_update.json")
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.mode = args.worker
        print(json.dumps(worker(args)))
        return
    try:
        prompts = [int(p) for p in args.prompts.split(",")]
    except ValueError:
        sys.exit(f"bench_harness_update: --prompts must be integers, got {args.prompts!r}")
    from roofline import measure

    roof = measure(args.threads, quick=True)
    peak = roof["bf16_gflops"]
    rows = []
    for prompt in prompts:
        pair = {m: _run(args, prompt, m) for m in MODES}
        row: dict[str, Any] = {"prompt_tokens": prompt, **pair}
        if not any("error" in r for r in pair.values()):
            tree, flat = pair["tree"], pair["flat"]
            row["token_ratio"] = flat["tokens"] / tree["tokens"]
            row["speedup"] = min(flat["fwd_bwd_wall_s"]) / min(tree["fwd_bwd_wall_s"])
            for m in MODES:
                pair[m]["ratio_to_bf16_roofline"] = pair[m]["gflops_best"] / peak
                pair[m]["seconds_per_layer"] = min(pair[m]["fwd_bwd_wall_s"]) / args.layers
            print(
                f"prompt {prompt:>6}: tree {tree['tokens']} tokens {min(tree['fwd_bwd_wall_s']):.1f}"
                f" s ({tree['ratio_to_bf16_roofline']:.2f}x bf16 roofline, "
                f"{tree['peak_rss_bytes'] / 2**30:.1f} GiB) | flat {flat['tokens']} tokens "
                f"{min(flat['fwd_bwd_wall_s']):.1f} s ({flat['ratio_to_bf16_roofline']:.2f}x, "
                f"{flat['peak_rss_bytes'] / 2**30:.1f} GiB) | speedup {row['speedup']:.2f}x "
                f"of token ratio {row['token_ratio']:.2f}x",
                flush=True,
            )
        else:
            print(f"prompt {prompt}: failed: {pair}", flush=True)
        rows.append(row)
    summary = {
        "model": {"architecture": "Qwen2", **SHAPE, "num_hidden_layers": args.layers},
        "workload": {"branches": args.branches, "branch_tokens": args.branch_tokens},
        "precision": "bf16 autocast, gradient checkpointing, frozen embeddings",
        "threads": args.threads,
        "roofline_gflops": {"bf16": peak, "fp32": roof["fp32_gflops"]},
        "loadavg_after": list(os.getloadavg()),
        "rows": rows,
        "command": " ".join(["uv run python tools/perf/bench_harness_update.py", *sys.argv[1:]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
