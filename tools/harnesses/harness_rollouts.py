"""Recorded run: each real npm harness solves built-in tasks in podman sandboxes through the
real proxy, the ScriptedBackend (a test backend) emitting each task's oracle as one call of
the harness's own shell tool; optionally the embedded tiny model generates for real.

Writes a JSON with per-rollout results and, per harness, the fraction of calls whose prompt
extended / was spliced / diverged from an earlier call of the session and the prefix-tree
compression (``clawrl.prefixtree``: flat tokens / unique tokens of each rollout's tree, and
of the harness's rollouts merged).

    uv run python tools/harnesses/harness_rollouts.py \
        --harness claude-code codex pi openclaw --tasks csv_to_markdown log_level_counts fix_median \
        --out tools/harnesses/results/harness_rollouts.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
from pathlib import Path
from typing import Any, Literal

from clawrl.bench import (
    RolloutOptions,
    RolloutResult,
    RolloutRunner,
    load_builtin_suite,
    plan_rollouts,
)
from clawrl.bench.harness import get_harness, scripted_oracle
from clawrl.prefixtree import Call, PrefixTree, merge_trees
from clawrl.proxy import BackendConfig, build_default_model, make_backend, serve
from clawrl.proxy.testing import ScriptedBackend


def tree_stats(results: list[RolloutResult]) -> dict[str, Any]:
    """Relations of every call and tree compression over ``results`` (one harness)."""
    kinds: collections.Counter[str] = collections.Counter()
    trees = []
    per_rollout = []
    for r in results:
        recs = [x for x in r.records if x.get("prompt_ids")]
        for rec in recs:
            kinds[rec["prompt_relation"]["kind"]] += 1
        if not recs:
            continue
        tree = PrefixTree.from_calls([Call.from_record(x) for x in recs], rollout_id=r.rollout_id)
        trees.append(tree)
        per_rollout.append(tree.stats().compression_ratio)
    later = sum(v for k, v in kinds.items() if k != "first")
    merged = merge_trees(*trees).stats().to_dict() if trees else {}
    return {
        "calls": sum(kinds.values()),
        "relations": dict(kinds),
        "later_calls": later,
        "fraction": {
            k: (kinds[k] / later if later else 0.0) for k in ("extends", "spliced", "diverged")
        },
        "rollout_compression_mean": sum(per_rollout) / len(per_rollout) if per_rollout else 1.0,
        "merged_tree": merged,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model_dir = Path(build_default_model("qwen3"))
    suite = {t.id: t for t in load_builtin_suite()}
    tasks = [suite[t] for t in args.tasks]
    harnesses = [get_harness(h) for h in args.harness]
    out: dict[str, Any] = {"mode": args.mode, "tasks": args.tasks, "harnesses": {}}
    kind: Literal["scripted", "embedded"] = "scripted" if args.mode == "scripted" else "embedded"
    backend = make_backend(BackendConfig(kind=kind, model_dir=model_dir))
    opts = RolloutOptions(
        max_turns=args.max_turns,
        max_tokens=None if args.mode == "scripted" else args.max_tokens,
        memory_mb=3072,
        agent_timeout_s=args.timeout,
    )
    async with serve(backend, model_dir) as endpoint:
        if args.mode == "tiny":
            # the proxy's cap (Codex sends none; the tiny model rarely ends a turn by itself)
            await endpoint.admin.set_sampling(temperature=1.0, max_tokens=args.max_tokens)

        async def script(session: Any, spec: Any) -> None:
            if isinstance(backend, ScriptedBackend):
                backend.script(session.session_id, scripted_oracle(spec.harness, spec.task))

        def progress(ev: Any) -> None:
            if ev.kind == "finished" and ev.result is not None:
                r = ev.result
                print(
                    f"[{ev.done}/{ev.total}] {r.harness} {r.task_id}: {r.status.value} "
                    f"reward={r.reward} calls={r.n_calls} {r.timing.get('total', 0):.0f}s "
                    f"{r.reason[:200]}",
                    flush=True,
                )
            elif ev.kind == "message":
                print(ev.message, flush=True)

        runner = RolloutRunner(
            endpoint, opts, session_hook=script, concurrency=args.concurrency, progress=progress
        )
        t0 = time.time()
        results = await runner.run(plan_rollouts(tasks, harnesses))
        out["wall_s"] = time.time() - t0
    for h in harnesses:
        rs = [r for r in results if r.harness == h.name]
        out["harnesses"][h.name] = {
            "describe": h.describe(),
            "rollouts": [
                {
                    "task_id": r.task_id,
                    "status": r.status.value,
                    "reason": r.reason[:500],
                    "reward": r.reward,
                    "exit_code": r.exit_code,
                    "n_calls": r.n_calls,
                    "end_reason": r.end_reason,
                    "relations": [x["prompt_relation"]["kind"] for x in r.records],
                    "timing": r.timing,
                }
                for r in rs
            ],
            "solved": sum(1 for r in rs if r.reward == 1.0),
            "clean_exits": sum(1 for r in rs if r.exit_code == 0),
            **tree_stats(rs),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--harness", nargs="+", default=["claude-code", "codex", "pi", "openclaw"])
    p.add_argument(
        "--tasks", nargs="+", default=["csv_to_markdown", "log_level_counts", "fix_median"]
    )
    p.add_argument("--mode", choices=["scripted", "tiny"], default="scripted")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--concurrency", type=int, default=3)
    p.add_argument(
        "--out", type=Path, default=Path("tools/harnesses/results/harness_rollouts.json")
    )
    args = p.parse_args()
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    for name, h in result["harnesses"].items():
        f = h["fraction"]
        print(
            f"{name}: solved {h['solved']}/{len(h['rollouts'])}, calls {h['calls']}, "
            f"extends {f['extends']:.2f} spliced {f['spliced']:.2f} diverged {f['diverged']:.2f}, "
            f"compression {h['rollout_compression_mean']:.2f} "
            f"(merged {h['merged_tree'].get('compression_ratio', 1.0):.2f})"
        )


if __name__ == "__main__":
    main()
