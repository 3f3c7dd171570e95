"""This machine's roofline: bf16 and fp32 matmul peak (GFLOP/s) and memory bandwidth (GB/s).

Matmuls are timed at the shapes of Qwen2.5-0.5B's layers (hidden 896, MLP 4864, KV 128) at
512-2048 rows, the best of several repetitions each, with torch using every core; the peak of
a dtype is its best shape. Bandwidth is a STREAM-like triad ``a = b + s * c`` and a plain copy
over fp32 arrays far larger than the caches (bytes moved: 3 arrays for the triad, 2 for the
copy; best of several repetitions).

Other benchmarks call :func:`measure` in their own run and report their figures as ratios to
it (``from roofline import measure`` with ``tools/perf`` on ``sys.path``). The host's load
average is recorded with the figures: on a shared machine they are lower bounds.

    uv run python tools/perf/roofline.py            # writes tools/perf/results/roofline.json
    uv run python tools/perf/roofline.py --quick    # fewer shapes and repetitions (~5 s)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

#: (name, k, n) of Qwen2.5-0.5B's projections: x[m, k] @ W[k, n]
SHAPES = (
    ("mlp_up 896x4864", 896, 4864),
    ("mlp_down 4864x896", 4864, 896),
    ("attn_q_o 896x896", 896, 896),
    ("attn_kv 896x128", 896, 128),
)
ROWS = (512, 1024, 2048)


def _cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return sorted(f for f in line.split() if f.startswith(("amx", "avx512_bf16")))
    return []


def _best_seconds(fn: Any, reps: int, min_s: float = 0.05) -> float:
    """Fastest of ``reps`` timings; each timing runs ``fn`` enough times to last ``min_s``."""
    fn()  # warm-up (oneDNN primitive creation, page faults)
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, int(min_s / once))
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def matmul_gflops(dtype_name: str, m: int, k: int, n: int, reps: int = 5) -> float:
    """GFLOP/s of ``x[m, k] @ w[k, n]`` in ``dtype_name`` ("bf16" or "fp32"), best of reps."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    x = torch.randn(m, k).to(dtype)
    w = torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    s = _best_seconds(lambda: torch.matmul(x, w, out=out), reps)
    return 2.0 * m * k * n / s / 1e9


def bandwidth_gbs(mib: int = 256, reps: int = 5) -> dict[str, float]:
    """Memory bandwidth (GB/s): fp32 triad ``a = b + s*c`` (3 arrays of ``mib`` MiB moved)
    and copy (2 arrays), best of ``reps``."""
    import torch

    n = mib * 2**20 // 4
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)

    def triad() -> None:
        torch.add(b, c, alpha=3.0, out=a)

    def copy() -> None:
        a.copy_(b)

    nbytes = n * 4
    return {
        "triad_gbs": 3 * nbytes / _best_seconds(triad, reps, min_s=0.2) / 1e9,
        "copy_gbs": 2 * nbytes / _best_seconds(copy, reps, min_s=0.2) / 1e9,
    }


def measure(threads: int | None = None, quick: bool = False) -> dict[str, Any]:
    """Measure the roofline; returns a JSON-able dict.

    Keys: ``bf16_gflops`` / ``fp32_gflops`` (best shape), ``bf16_native`` (oneDNN has native
    bf16 kernels here: AVX-512 BF16 or AMX; without, bf16 is timed on one small shape),
    ``bandwidth_gbs`` (triad),
    ``matmuls`` (every shape), ``bandwidth`` (triad and copy), ``threads``, ``loadavg``
    (before and after), ``cpu_flags``, ``host``, ``torch``.

    Args:
        threads: torch threads (default: every core, ``os.cpu_count()``); restored after.
        quick: one row count (1024), three repetitions: a few seconds.
    """
    import torch

    before = os.getloadavg()
    saved = torch.get_num_threads()
    threads = threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    reps = 3 if quick else 5
    rows = (1024,) if quick else ROWS
    # without native bf16 kernels (no AVX-512 BF16 / AMX) torch runs bf16 matmuls on reference
    # kernels, over 100 times slower: one small shape shows it (the full grid takes an hour)
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    try:
        matmuls = []
        for dtype in ("bf16", "fp32"):
            slow = dtype == "bf16" and not native
            for name, k, n in SHAPES[:1] if slow else SHAPES:
                for m in (128,) if slow else rows:
                    g = matmul_gflops(dtype, m, k, n, 1 if slow else reps)
                    matmuls.append({"dtype": dtype, "shape": name, "rows": m, "gflops": g})
        bw = bandwidth_gbs(128 if quick else 256, reps)
    finally:
        torch.set_num_threads(saved)
    after = os.getloadavg()

    def peak(dtype: str) -> float:
        return max(r["gflops"] for r in matmuls if r["dtype"] == dtype)

    return {
        "bf16_gflops": peak("bf16"),
        "fp32_gflops": peak("fp32"),
        "bf16_over_fp32": peak("bf16") / peak("fp32"),
        "bf16_native": native,
        "bandwidth_gbs": bw["triad_gbs"],
        "bandwidth": bw,
        "matmuls": matmuls,
        "threads": threads,
        "loadavg_before": list(before),
        "loadavg_after": list(after),
        "cpu_flags": _cpu_flags(),
        "host": platform.node(),
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, help="torch threads (default: every core)")
    ap.add_argument("--quick", action="store_true", help="one row count, 3 repetitions")
    ap.add_argument("--out", type=Path, default=RESULTS / "roofline.json")
    args = ap.parse_args()
    r = measure(args.threads, args.quick)
    for row in r["matmuls"]:
        print(f"{row['dtype']:>5} {row['shape']:<18} rows {row['rows']:>5}: {row['gflops']:8.1f}")
    print(
        f"peak bf16 {r['bf16_gflops']:.1f} GFLOP/s, fp32 {r['fp32_gflops']:.1f} GFLOP/s "
        f"({r['bf16_over_fp32']:.1f}x); triad {r['bandwidth']['triad_gbs']:.1f} GB/s, "
        f"copy {r['bandwidth']['copy_gbs']:.1f} GB/s; threads {r['threads']}; "
        f"load {r['loadavg_before'][0]:.2f} -> {r['loadavg_after'][0]:.2f}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
