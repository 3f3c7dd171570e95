"""Benchmark: build + pack a prefix tree of a synthetic ISE-shaped rollout.

The rollout (shape from the ISE paper's traces: ~68 dialogue turns, ~8 user
turns): a 1,500-token system prompt; 68 model calls, each prompt the full history so far
(token-in/token-out: generated ids spliced back exactly); per call ~400 new tokens — a
120-token tool result or user message, 160 tokens of reasoning and a 120-token answer /
tool call. 8 user turns start at calls 0, 8, 17, 25, 34, 42, 51, 59; at each new user turn
the chat template drops the reasoning of every earlier assistant message (Qwen3 behaviour),
so the history diverges and the tree branches before the first dropped reasoning block.

Reported side by side, in one run: compression ratio (tokens trained flat / unique tokens),
build time, pack time, and the time of a plain ``np.concatenate`` of all calls' token arrays
(the flat input, prompt + completion of every call). Goal: build+pack <= 10x the concat.
Also: an 8-rollout GRPO group tree (merge + pack) and serialization, for information.

Run: ``uv run python tools/perf/bench_prefixtree.py`` (writes
``tools/perf/results/prefixtree.json``). Takes well under a minute.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from clawrl.prefixtree import Call, PrefixTree, __version__, merge_trees

GOAL_RATIO = 10.0
HEADER = np.array([151644, 77091, 198], dtype=np.int64)  # "<|im_start|>assistant\n"
IM_END = np.array([151645, 198], dtype=np.int64)
USER_TURN_STARTS = (0, 8, 17, 25, 34, 42, 51, 59)


def ise_rollout(
    seed: int,
    n_calls: int = 68,
    system_tokens: int = 1500,
    segment_tokens: int = 120,
    reasoning_tokens: int = 160,
    answer_tokens: int = 120,
    rollout: str = "r0",
    task_seed: int = 0,
) -> list[Call]:
    """Synthetic ISE-shaped rollout (see module docstring); token ids are random.

    Rollouts with the same ``task_seed`` share the system prompt and the first user message
    (the rollouts of one GRPO group); ``seed`` draws everything else.
    """
    rng = np.random.default_rng(seed)

    def rand(n: int) -> np.ndarray:
        return rng.integers(0, 150_000, size=n, dtype=np.int64)

    task_rng = np.random.default_rng([task_seed, 2**31])
    system = task_rng.integers(0, 150_000, size=system_tokens, dtype=np.int64)
    first_user = task_rng.integers(0, 150_000, size=segment_tokens, dtype=np.int64)
    # history: list of messages; an assistant message is [reasoning, answer, keep_reasoning]
    history: list[Any] = []
    calls: list[Call] = []
    for k in range(n_calls):
        if k in USER_TURN_STARTS:
            for msg in history:
                if isinstance(msg, list):
                    msg[2] = False  # the template drops earlier reasoning at a new user turn
        history.append(first_user if k == 0 else rand(segment_tokens))  # user msg / tool result
        parts = [system]
        for msg in history:
            if isinstance(msg, list):
                parts.append(HEADER)
                if msg[2]:
                    parts.append(msg[0])
                parts.extend((msg[1], IM_END))
            else:
                parts.append(msg)
        parts.append(HEADER)
        prompt = np.concatenate(parts)
        reasoning, answer = rand(reasoning_tokens), rand(answer_tokens)
        completion = np.concatenate((reasoning, answer, IM_END[:1]))
        logprobs = -rng.exponential(0.5, size=completion.shape[0])
        calls.append(
            Call(f"{rollout}-c{k}", rollout, k, prompt, completion, logprobs, policy_version=3)
        )
        history.append([reasoning, answer, True])
    return calls


def timeit(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(median, min) seconds over ``repeat`` runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, tuple[float, float]]:
    """(median, min) seconds per function, timed round-robin (after one warm-up each), so
    that load from other processes on a shared machine hits all of them alike."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=60, help="timed runs per measurement")
    ap.add_argument("--group", type=int, default=8, help="rollouts in the group benchmark")
    ap.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "prefixtree.json"
    )
    args = ap.parse_args(argv)
    log = print

    log("[bench] generating the ISE-shaped rollout (68 calls, seed 0) ...", flush=True)
    calls = ise_rollout(0)
    arrays = [a for c in calls for a in (c.prompt_ids, c.completion_ids)]

    log(
        f"[bench] timing concat / build / pack / build+pack, round-robin, {args.repeat} rounds",
        flush=True,
    )
    iso_med, iso_min = timeit(lambda: np.concatenate(arrays), args.repeat)
    tree = PrefixTree.from_calls(calls)
    times = interleaved(
        {
            "concat": lambda: np.concatenate(arrays),
            "build": lambda: PrefixTree.from_calls(calls),
            "pack": tree.pack,
            "build_pack": lambda: PrefixTree.from_calls(calls).pack(),
        },
        args.repeat,
    )
    concat_med, concat_min = times["concat"]
    build_med, build_min = times["build"]
    pack_med, pack_min = times["pack"]
    both_med, both_min = times["build_pack"]
    stats = tree.stats()
    packed = tree.pack()
    for c in calls:  # correctness spot check: every call is a path
        assert np.array_equal(tree.path(c.call_id), c.token_ids)

    log("[bench] serialization round trip ...", flush=True)
    blob = tree.to_json()
    ser_med, _ = timeit(tree.to_json, max(3, args.repeat // 5))
    de_med, _ = timeit(lambda: PrefixTree.from_json(blob), max(3, args.repeat // 5))
    assert PrefixTree.from_json(blob) == tree

    log(f"[bench] GRPO group: {args.group} rollouts, merge + pack ...", flush=True)
    rollouts = [
        PrefixTree.from_calls(ise_rollout(100 + i, rollout=f"r{i}")) for i in range(args.group)
    ]
    group_arrays = [
        a for t in rollouts for c in t.calls() for a in (c.prompt_ids, c.completion_ids)
    ]
    g_concat, _ = timeit(lambda: np.concatenate(group_arrays), max(3, args.repeat // 5))
    g_merge, _ = timeit(lambda: merge_trees(*rollouts), max(3, args.repeat // 5))
    group = merge_trees(*rollouts)
    g_pack, _ = timeit(group.pack, max(3, args.repeat // 5))
    g_stats = group.stats()
    g_packed = group.pack()

    result = {
        "benchmark": "prefixtree build+pack, ISE-shaped rollout",
        "clawrl_prefixtree_version": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "repeat": args.repeat,
        "rollout": {
            "n_calls": stats.n_calls,
            "flat_tokens": stats.flat_tokens,
            "unique_tokens": stats.unique_tokens,
            "compression_ratio": stats.compression_ratio,
            "n_trajectories": stats.n_trajectories,
            "trajectory_tokens": stats.trajectory_tokens,
            "max_depth": stats.max_depth,
            "n_nodes": stats.n_nodes,
            "n_memberships": packed.num_memberships,
            "concat_s_median": concat_med,
            "concat_s_min": concat_min,
            "build_s_median": build_med,
            "build_s_min": build_min,
            "pack_s_median": pack_med,
            "pack_s_min": pack_min,
            "build_pack_s_median": both_med,
            "build_pack_s_min": both_min,
            "concat_isolated_s_median": iso_med,
            "concat_isolated_s_min": iso_min,
            "build_pack_over_concat_min": both_min / concat_min,
            "build_pack_over_concat_isolated_min": both_min / iso_min,
            "build_pack_over_concat_median": both_med / concat_med,
            "goal_ratio": GOAL_RATIO,
            "goal_met_min": both_min / concat_min <= GOAL_RATIO,
            "goal_met_median": both_med / concat_med <= GOAL_RATIO,
            "json_bytes": len(blob),
            "to_json_s": ser_med,
            "from_json_s": de_med,
        },
        "group": {
            "n_rollouts": args.group,
            "flat_tokens": g_stats.flat_tokens,
            "unique_tokens": g_stats.unique_tokens,
            "compression_ratio": g_stats.compression_ratio,
            "n_trajectories": g_stats.n_trajectories,
            "n_memberships": g_packed.num_memberships,
            "concat_s": g_concat,
            "merge_s": g_merge,
            "pack_s": g_pack,
            "merge_pack_over_concat": (g_merge + g_pack) / g_concat,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")

    def ms2(a: float, b: float) -> str:
        return f"{a * 1e3:.2f} / {b * 1e3:.2f} ms"

    r = result["rollout"]
    g = result["group"]
    rows = [
        ("calls / trajectories", f"{r['n_calls']} / {r['n_trajectories']}"),
        ("flat tokens (every call trained flat)", f"{r['flat_tokens']:,}"),
        ("unique tokens in the tree", f"{r['unique_tokens']:,}"),
        ("compression ratio", f"{r['compression_ratio']:.1f}x"),
        ("np.concatenate of all calls, min / median", ms2(concat_min, concat_med)),
        ("same, timed alone in a tight loop", ms2(iso_min, iso_med)),
        ("build, min / median", ms2(build_min, build_med)),
        ("pack, min / median", ms2(pack_min, pack_med)),
        ("build+pack, min / median", ms2(both_min, both_med)),
        (
            "build+pack / concat, min / median",
            f"{both_min / concat_min:.1f}x / {both_med / concat_med:.1f}x "
            f"(goal <= {GOAL_RATIO:.0f}x)",
        ),
        ("build+pack / concat timed alone, min", f"{both_min / iso_min:.1f}x"),
        (
            "json size / dump / load",
            f"{len(blob) / 1e6:.2f} MB / {ser_med * 1e3:.1f} ms / {de_med * 1e3:.1f} ms",
        ),
        (
            f"group of {g['n_rollouts']}: flat / unique tokens",
            f"{g['flat_tokens']:,} / {g['unique_tokens']:,} ({g['compression_ratio']:.1f}x)",
        ),
        (
            "group: concat / merge / pack",
            f"{g_concat * 1e3:.1f} / {g_merge * 1e3:.1f} / {g_pack * 1e3:.1f} ms",
        ),
    ]
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="clawrl-prefixtree: ISE-shaped rollout (68 calls)")
        table.add_column("measure")
        table.add_column("value", justify="right")
        for k, v in rows:
            table.add_row(k, v)
        Console().print(table)
    except ImportError:
        for k, v in rows:
            print(f"{k:45s} {v}")
    print(f"[bench] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
