"""Tree train tokens/s in fp32 and bf16, side by side, each as a ratio to the roofline
measured in the same run (``roofline.py``).

Model: a Qwen2 (the architecture of Qwen2.5-Coder-0.5B) with random weights at Qwen2.5-0.5B's
shape (hidden 896, MLP 4864, 14 heads / 2 KV heads, vocabulary 151,936, untied head; 24 layers,
``--layers`` fewer), sdpa with the dense tree mask. Workload: the ISE-shaped tree of
``bench_tree_training.py`` (a trunk of T·H history tokens and T reasoning branches of B tokens).

Schemes (each in its own subprocess, so peak memory is its own):

* ``fp32``: everything float32 (``precision = "fp32"``);
* ``bf16``: ``torch.autocast(bfloat16)`` over float32 master weights, float32 gradients and
  AdamW state: what ``precision = "bf16"`` runs;
* ``bf16-params``: the model cast to bfloat16 (parameters, gradients and AdamW state in bf16),
  for comparison only: the scheme the trainer does not use.

Per scheme: forward + backward (the tree GRPO loss, :func:`loss_backward`) and the AdamW step,
timed separately (wall, and process CPU time), peak RSS; tokens/s = tree tokens / forward +
backward seconds; achieved GFLOP/s = matmul FLOPs of forward + backward (6 per parameter per
token for the layers, the vocabulary head at the target tokens only, attention over each
token's ancestors) / seconds, and its ratio to the roofline peak of the scheme's dtype and to
the bf16 peak. ``lost_update_fraction``: the share of parameters an AdamW step of
``lr = 1e-6`` leaves bit-unchanged among those with a nonzero gradient (bf16 parameters
cannot hold updates that small).

    uv run python tools/perf/bench_precision.py                # 24 layers, ~600 tree tokens
    uv run python tools/perf/bench_precision.py --layers 4     # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from tree_step import (
    QWEN25_05B_SHAPE as SHAPE,
)
from tree_step import (
    add_workload_args,
    forward_flops,
    grpo_workload,
    qwen25_05b_model,
    rss_bytes,
    run_workers,
    throughput,
    timed_steps,
)

RESULTS = Path(__file__).parent / "results"
SCHEMES = ("fp32", "bf16", "bf16-params")


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(args.threads)
    model = qwen25_05b_model(args.layers)
    if args.scheme == "bf16-params":
        model = model.to(torch.bfloat16)
    if args.grad_ckpt:
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    model.train()
    work = grpo_workload(args, SHAPE["vocab_size"])
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    autocast = args.scheme == "bf16"

    def fwd_bwd() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return work.fwd_bwd(model)

    def opt_step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    fwd_bwd()  # warm-up
    # entries with a gradient (an embedding row of an absent token has none)
    moved = [
        p.grad != 0 if p.grad is not None else torch.zeros_like(p, dtype=torch.bool) for p in params
    ]
    before = [p.detach().clone() for p in params]
    opt.step()
    changed = sum(
        int(((p.detach() != b) & m).sum()) for p, b, m in zip(params, before, moved, strict=True)
    )
    total = sum(int(m.sum()) for m in moved)
    del before, moved
    opt.zero_grad(set_to_none=True)
    base = rss_bytes()
    timing = timed_steps(fwd_bwd, opt_step, args.repeat)
    # forward + backward: 3x the forward's matmul FLOPs
    flops = 3.0 * forward_flops(model, work.batch, work.n_targets)
    return {
        "scheme": args.scheme,
        "tree_tokens": int(work.batch.num_tokens),
        "target_tokens": work.n_targets,
        **timing,
        **throughput(timing, int(work.batch.num_tokens), flops),
        # on a shared host: tokens per second of this process's own CPU time per thread
        "tokens_per_cpu_s_per_thread": work.batch.num_tokens
        / (min(timing["fwd_bwd_cpu_s"]) / args.threads),
        "rss_after_warmup_bytes": base,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "lost_update_fraction": 1.0 - changed / total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--layers", type=int, default=24)
    add_workload_args(ap)
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--out", type=Path, default=RESULTS / "precision.json")
    ap.add_argument("--scheme", choices=SCHEMES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scheme:
        print(json.dumps(worker(args)))
        return
    from roofline import measure

    roof_before = measure(args.threads, quick=True)
    print(
        f"roofline: bf16 {roof_before['bf16_gflops']:.0f}, fp32 {roof_before['fp32_gflops']:.0f}"
        f" GFLOP/s, triad {roof_before['bandwidth_gbs']:.1f} GB/s",
        flush=True,
    )
    runs = run_workers(__file__, "scheme", args.schemes.split(","), args, extra=("layers",))
    failed = {k: r["error"] for k, r in runs.items() if "error" in r}
    if failed:
        sys.exit(f"failed runs: {failed}")
    roof_after = measure(args.threads, quick=True)
    # the better of the two roofline measurements (both are lower bounds on a shared host)
    peak = {d: max(roof_before[f"{d}_gflops"], roof_after[f"{d}_gflops"]) for d in ("bf16", "fp32")}
    for scheme, r in runs.items():
        dtype = "fp32" if scheme == "fp32" else "bf16"
        r["roofline_dtype"] = dtype
        r["ratio_to_own_dtype_roofline"] = r["gflops_best"] / peak[dtype]
        r["ratio_to_bf16_roofline"] = r["gflops_best"] / peak["bf16"]
        # the same from the process's own CPU time per thread (less inflated by other load)
        r["gflops_cpu_time"] = r["gflop_per_step"] / (min(r["fwd_bwd_cpu_s"]) / args.threads)
        r["ratio_to_own_dtype_roofline_cpu_time"] = r["gflops_cpu_time"] / peak[dtype]
        print(
            f"{scheme:>11}: {r['tokens_per_s_best']:7.1f} tok/s fwd+bwd "
            f"({r['gflops_best']:.0f} GFLOP/s = {r['ratio_to_own_dtype_roofline']:.2f}x "
            f"{dtype} roofline, {r['ratio_to_bf16_roofline']:.2f}x bf16), AdamW "
            f"{min(r['adamw_step_wall_s']):.2f} s, peak RSS {r['peak_rss_bytes'] / 2**30:.2f} "
            f"GiB, lost updates {r['lost_update_fraction']:.3f}",
            flush=True,
        )
    summary = {
        "model": {"architecture": "Qwen2", **SHAPE, "num_hidden_layers": args.layers},
        "workload": {"turns": args.turns, "history_tokens": args.hist, "branch": args.branch},
        "threads": args.threads,
        "grad_ckpt": args.grad_ckpt,
        "roofline_gflops": peak,
        "roofline_before": roof_before,
        "roofline_after": roof_after,
        "loadavg_after": list(os.getloadavg()),
        "runs": runs,
        "command": " ".join(["uv run python tools/perf/bench_precision.py", *sys.argv[1:]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
