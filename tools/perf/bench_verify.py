"""Per-rollout verification cost, host vs sandbox, side by side; writes
tools/perf/results/verify.json.

What the rollout runner does after each rollout: :func:`clawrl.bench.verify` on the
copied-out workspace, through

* ``host``: :class:`~clawrl.bench.LocalExecutor` (a host subprocess; allowed only for
  verifiers that do not execute workspace code, e.g. the learnable family);
* ``sandbox_cold``: :class:`~clawrl.bench.SandboxExecutor` creating one sandbox per
  verification (``warm=0``);
* ``sandbox_warm``: :class:`~clawrl.bench.SandboxExecutor` with ``warm=N`` single-use
  sandboxes created in advance (the runner's default, N = its concurrency).

Two measurements per executor, on the oracle-solved workspace of each task:

* ``sequential``: one verification after another (latency, p50/p95);
* ``batch``: ``--batch`` verifications, ``--concurrency`` at once, as one RL step of the
  quickstart verifies (16 rollouts, 4 at once); for ``sandbox_warm`` the executor is
  created, warmed and closed inside the timed batch, as the runner does per ``run()``.

Usage:  uv run python tools/perf/bench_verify.py [--repeat 12] [--batch 16] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
from clawrl.bench import (
    Executor,
    LocalExecutor,
    SandboxExecutor,
    Task,
    generate_learnable_tasks,
    load_builtin_suite,
    prepare_workspace,
    run_solution,
    verify,
)
from latency import summary

OUT = Path(__file__).parent / "results" / "verify.json"


def solved(task: Task, root: Path) -> Path:
    ws = prepare_workspace(task, root / task.id)
    run_solution(task, ws, LocalExecutor())
    return ws


def sequential(task: Task, ws: Path, executor: Executor, n: int) -> dict[str, Any]:
    times = []
    for _ in range(n):
        t0 = time.monotonic()
        r = verify(task, ws, executor)
        times.append(time.monotonic() - t0)
        assert r.ok and r.reward == 1.0, (r.status, r.reason, r.stderr[-300:])
    return summary(times)


def batch(
    task: Task, ws: Path, make: Callable[[], Executor], n: int, concurrency: int
) -> dict[str, Any]:
    t0 = time.monotonic()
    executor = make()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda _: verify(task, ws, executor), range(n)))
    finally:
        close = getattr(executor, "close", None)
        if close is not None:
            close()
    wall = time.monotonic() - t0
    assert all(r.ok and r.reward == 1.0 for r in results)
    return {"wall_s": round(wall, 3), "per_verification_s": round(wall / n, 4), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=12, help="sequential verifications each")
    ap.add_argument("--batch", type=int, default=16, help="verifications per batch")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="clawrl-benchverify-") as tmp:
        root = Path(tmp)
        learnable = generate_learnable_tasks(root / "tasks", "train", 1, 0)[0]
        fix_median = next(t for t in load_builtin_suite() if t.id == "fix_median")
        cases = [("learnable", learnable, True), ("fix_median", fix_median, False)]
        executors: dict[str, Callable[[], Executor]] = {
            "host": LocalExecutor,
            "sandbox_cold": SandboxExecutor,
            "sandbox_warm": lambda: SandboxExecutor(warm=args.concurrency),
        }
        results: dict[str, Any] = {}
        for name, task, host_ok in cases:
            ws = solved(task, root / "ws")
            row: dict[str, Any] = {}
            for ex_name, make in executors.items():
                if ex_name == "host" and not host_ok:
                    row[ex_name] = "refused (the verifier executes workspace code)"
                    continue
                executor = make()
                if isinstance(executor, SandboxExecutor) and executor.warm:
                    # warm up: let the pool create its sandboxes before timing latencies
                    verify(task, ws, executor)
                    time.sleep(2.0)
                seq = sequential(task, ws, executor, args.repeat)
                if isinstance(executor, SandboxExecutor):
                    executor.close()
                row[ex_name] = {
                    "sequential": seq,
                    "batch": batch(task, ws, make, args.batch, args.concurrency),
                }
                print(
                    f"{name:10s} {ex_name:12s} p50 {seq['p50']:.3f} s  batch "
                    f"{row[ex_name]['batch']['wall_s']:.2f} s / {args.batch}",
                    flush=True,
                )
            results[name] = row

    doc = {
        "what": "seconds per verification of an oracle-solved workspace (tools/perf/bench_verify.py)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": {k: str(v) for k, v in vars(args).items()},
        "results": results,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
