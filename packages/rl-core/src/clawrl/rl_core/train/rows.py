"""The loop's metrics rows: what one evaluation, one RL step's rollouts and its trees put in
``metrics.jsonl``, the one-line progress text, and the run's ``summary.json``.

Rewards come from bench's :class:`~clawrl.bench.RolloutResult`; a rollout that does not
count (``infra-error``, ``env-error``, or ``excluded`` as a harness-health failure: the
harness failed before the policy had a say) is left out of every mean and of the GRPO
groups, and counted on its own. The pass rate is the fraction of rewards ``>= 1.0`` (exact pass).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train.trees import BuiltTrees

T = TypeVar("T")

__all__ = [
    "clustered_pass_rate",
    "drop_small_groups",
    "eval_row",
    "mean_std",
    "prefix_cache_row",
    "rollout_row",
    "scored",
    "step_line",
    "summary",
    "tree_row",
]


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation; ``(nan, nan)`` for no values, std 0 for one."""
    if not xs:
        return float("nan"), float("nan")
    return float(statistics.fmean(xs)), float(statistics.pstdev(xs)) if len(xs) > 1 else 0.0


def _pass_rate(rewards: Sequence[float]) -> float:
    return mean_std([float(r >= 1.0) for r in rewards])[0]


def scored(results: Sequence[RolloutResult]) -> list[RolloutResult]:
    """The rollouts that count (:attr:`RolloutResult.counts
    <clawrl.bench.RolloutResult.counts>`): not ``infra-error``, ``env-error`` or
    ``excluded``."""
    return [x for x in results if x.counts]


def drop_small_groups(data: Sequence[T], group_of: Callable[[T], str]) -> tuple[list[T], int]:
    """The members of GRPO groups that keep at least 2 members once the rollouts that do not
    count are gone, and the number of groups dropped: a group of one has a GRPO advantage
    of 0, so it would only cost a forward and backward pass."""
    sizes = Counter(group_of(d) for d in data)
    small = {g for g, n in sizes.items() if n < 2}
    return [d for d in data if group_of(d) not in small], len(small)


def clustered_pass_rate(results: Sequence[RolloutResult]) -> tuple[float, float, int]:
    """Exact pass rate of ``results`` (the rollouts that count), its standard error clustered
    by task, and the number of tasks: each task's own pass rate over its rollouts, then the
    mean and ``stdev / sqrt(n_tasks)`` over tasks (samples of one task are not independent,
    so a rollout-level error would be too small). ``(nan, nan, 0)`` for no rollouts; the
    error is ``nan`` for one task."""
    by_task: dict[str, list[float]] = {}
    for x in results:
        by_task.setdefault(x.task_id, []).append(float(x.reward >= 1.0))
    if not by_task:
        return float("nan"), float("nan"), 0
    per_task = [statistics.fmean(v) for v in by_task.values()]
    n = len(per_task)
    se = statistics.stdev(per_task) / math.sqrt(n) if n > 1 else float("nan")
    return float(statistics.fmean(per_task)), float(se), n


def eval_row(
    results: Sequence[RolloutResult],
    harnesses: Sequence[str],
    tag: str,
    policy_version: int,
    *,
    prefix: str = "eval",
) -> dict[str, Any]:
    """One held-out evaluation: mean reward, exact pass rate with its task-clustered
    standard error (:func:`clustered_pass_rate`; ``PREFIX_pass_rate_task_mean``,
    ``PREFIX_pass_rate_se``), the same per harness, and the verifier's sub-scores
    (``PREFIX_subscore/NAME``, a missing sub-score counting 0). ``prefix`` starts every
    figure's key (``eval``; ``eval_greedy`` for the greedy pass)."""
    ok = scored(results)
    rewards = [x.reward for x in ok]
    row: dict[str, Any] = {
        "kind": "eval",
        "tag": tag,
        "policy_version": policy_version,
        f"{prefix}_reward": mean_std(rewards)[0],
        f"{prefix}_pass_rate": _pass_rate(rewards),
        f"{prefix}_n": len(ok),
        f"{prefix}_infra_errors": sum(1 for x in results if x.status is RolloutStatus.INFRA_ERROR),
        f"{prefix}_excluded": sum(1 for x in results if x.excluded),
    }
    row[f"{prefix}_pass_rate_task_mean"], row[f"{prefix}_pass_rate_se"], _ = clustered_pass_rate(ok)
    row.update({f"{prefix}_{k}": v for k, v in _health_rates(results, "").items()})
    for h in harnesses:
        mine = [x for x in ok if x.harness == h]
        row[f"{prefix}_reward/{h}"] = mean_std([x.reward for x in mine])[0]
        row[f"{prefix}_pass_rate/{h}"], row[f"{prefix}_pass_rate_se/{h}"], _ = clustered_pass_rate(
            mine
        )
        row[f"{prefix}_n/{h}"] = len(mine)
    for name in sorted({k for x in ok for k in x.subscores}):
        row[f"{prefix}_subscore/{name}"] = mean_std([x.subscores.get(name, 0.0) for x in ok])[0]
    return row


def rollout_row(
    results: Sequence[RolloutResult], records: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """One RL step's rollouts: counts per status, the rates of infra-errors (left out of
    the means), verifier-errors (scored 0, trained on), harness-errors and context
    overflows (overall and per harness), ``n_excluded`` (harness-health failures left out of
    the means and groups), reward mean / std and pass rate (overall and per harness), prompt and generated tokens, and an entropy estimate (minus the mean
    sampled-token logprob, nats) over the scored rollouts' call ``records``."""
    ok = scored(results)
    n_infra = sum(1 for x in results if x.status is RolloutStatus.INFRA_ERROR)
    row: dict[str, Any] = {"n_rollouts": len(results), "n_infra_errors": n_infra}
    row["n_excluded"] = sum(1 for x in results if x.excluded)
    for st in RolloutStatus:
        row[f"status/{st.value}"] = sum(1 for x in results if x.status is st)
    n_verifier_errors = row[f"status/{RolloutStatus.VERIFIER_ERROR.value}"]
    row["infra_error_rate"] = n_infra / len(results) if results else None
    row["verifier_error_rate"] = n_verifier_errors / len(results) if results else None
    row.update(_health_rates(results, ""))
    rewards = [x.reward for x in ok]
    row["reward_mean"], row["reward_std"] = mean_std(rewards)
    row["pass_rate"] = _pass_rate(rewards)
    for h in sorted({x.harness for x in results}):
        hr = [x.reward for x in ok if x.harness == h]
        row[f"reward_mean/{h}"], row[f"reward_std/{h}"] = mean_std(hr)
        row[f"pass_rate/{h}"] = _pass_rate(hr)
        row.update(_health_rates([x for x in results if x.harness == h], f"/{h}"))
    recs = [rec for x in ok for rec in records.get(x.rollout_id, [])]
    row["tokens_prompt"] = sum(len(rec.get("prompt_ids") or []) for rec in recs)
    row["tokens_generated"] = sum(len(rec.get("completion_ids") or []) for rec in recs)
    lps = [lp for rec in recs for lp in (rec.get("completion_logprobs") or [])]
    row["entropy_estimate"] = -statistics.fmean(lps) if lps else None
    row.update(verify_times(results))
    return row


def verify_times(results: Sequence[RolloutResult]) -> dict[str, float]:
    """The step's verification time: ``time/verify``, the wall seconds during which at least
    one rollout was being verified (the union of the rollouts' verification intervals; part
    of ``time/rollout``, which counts the whole collection), and ``time/verify_total``, the
    sum of every rollout's verification seconds (rollouts run concurrently, so it can exceed
    the wall time). Rollouts without a recorded verification interval add nothing."""
    spans = sorted(
        (x.timing["verify_started"], x.timing["verify_started"] + x.timing["verify"])
        for x in results
        if "verify_started" in x.timing and "verify" in x.timing
    )
    wall = 0.0
    end = float("-inf")
    for a, b in spans:
        if b > end:
            wall += b - max(a, end)
            end = b
    total = sum(b - a for a, b in spans)
    return {"time/verify": wall, "time/verify_total": total}


def prefix_cache_row(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> dict[str, float]:
    """What the inference backend's prompt KV reuse did between two reads of its counters
    (the embedded backend's ``stats``; see the proxy's serving docs): ``serve/prompt_tokens``
    admitted, ``serve/prefill_tokens`` computed (a prefix shared by prompts admitted together
    counts once), ``serve/prefix_hit_tokens`` whose KV came from the cache,
    ``serve/prefill_tokens_saved`` (admitted minus computed), ``serve/prefix_hit_rate`` (hit
    tokens / admitted tokens) and ``serve/prompt_hit_rate`` (the fraction of admitted prompts
    that reused some KV). Empty for a backend without these counters (SGLang)."""
    keys = ("prefill_tokens", "prefix_hit_tokens", "prefix_lookups", "prefix_hits")
    if not before or not after or not all(k in after for k in keys):
        return {}
    d = {k: float(after[k]) - float(before.get(k, 0)) for k in (*keys, "shared_prefill_tokens")}
    hit, computed = d["prefix_hit_tokens"], d["prefill_tokens"]
    admitted = hit + computed - d["shared_prefill_tokens"]
    return {
        "serve/prompt_tokens": admitted,
        "serve/prefill_tokens": computed,
        "serve/prefix_hit_tokens": hit,
        "serve/prefill_tokens_saved": admitted - computed,
        "serve/prefix_hit_rate": hit / admitted if admitted else 0.0,
        "serve/prompt_hit_rate": d["prefix_hits"] / d["prefix_lookups"]
        if d["prefix_lookups"]
        else 0.0,
    }


def _health_rates(results: Sequence[RolloutResult], suffix: str) -> dict[str, float | None]:
    n = len(results)
    return {
        f"harness_error_rate{suffix}": (
            sum(1 for x in results if x.status is RolloutStatus.HARNESS_ERROR) / n if n else None
        ),
        f"context_overflow_rate{suffix}": (
            sum(1 for x in results if x.status is RolloutStatus.CONTEXT_OVERFLOW) / n if n else None
        ),
    }


def tree_row(built: BuiltTrees) -> dict[str, Any]:
    """The step's prefix-tree figures: packed trees (one, or one per trainer rank), unique vs
    flat tokens, compression, trajectories and what the tree builder left out (dead leaves,
    over-branched rollouts, side-path calls, empty rollouts); per harness, the flat and tree
    tokens of its rollouts merged into one tree and their ratio
    (``tree_compression/<harness>``)."""
    per: dict[str, Any] = {}
    for h, (flat, unique) in sorted(built.per_harness.items()):
        per[f"flat_tokens/{h}"] = flat
        per[f"tree_tokens/{h}"] = unique
        per[f"tree_compression/{h}"] = flat / unique if unique else 1.0
    return per | {
        "trees": len(built.trees),
        "tree_tokens": built.unique_tokens,
        "flat_tokens": built.flat_tokens,
        "tree_compression": built.compression,
        "trajectories": built.n_trajectories,
        "dead_leaves": built.dead_leaves,
        "over_branched_dropped": built.dropped_rollouts,
        "side_path_calls": built.side_path_calls,
        "empty_rollouts": built.empty_rollouts,
    }


def step_line(row: Mapping[str, Any], steps: int) -> str:
    """The progress line of one RL step (``-`` where a figure is missing)."""

    def f(k: str, fmt: str = ".3f") -> str:
        v = row.get(k)
        return format(v, fmt) if isinstance(v, int | float) else "-"

    return (
        f"step {row['step']}/{steps} v{row['policy_version']}: reward "
        f"{f('reward_mean')}±{f('reward_std')} pass {f('pass_rate')} "
        f"tokens {row.get('tokens_generated')} compression {f('tree_compression', '.1f')}x "
        f"|Δlp| {f('mean_abs_logprob_diff', '.2e')} grad {f('grad_norm')} "
        f"({f('time/step', '.0f')} s)"
    )


def summary(rows: Sequence[Mapping[str, Any]], steps: int, policy_version: int) -> dict[str, Any]:
    """The run's summary from its metrics ``rows``: the eval before RL (``step-0``, or the
    last cold-start eval), the final eval, their difference (``eval_gain``) and every eval."""
    evals = [r for r in rows if r.get("kind") == "eval"]
    first_rl = [
        e
        for e in evals
        if e.get("tag") == "step-0" or str(e.get("tag", "")).startswith("coldstart-")
    ]
    out: dict[str, Any] = {
        "steps": steps,
        "policy_version": policy_version,
        "eval_before_rl": first_rl[-1]["eval_reward"] if first_rl else None,
        "eval_final": evals[-1]["eval_reward"] if evals else None,
        "evals": [
            {
                k: e[k]
                for k in sorted(e)
                if k in ("tag", "policy_version", "step")
                or k.startswith(("eval_reward", "eval_pass_rate", "eval_greedy_reward"))
                or k.startswith("eval_greedy_pass_rate")
            }
            for e in evals
        ],
    }
    if out["eval_before_rl"] is not None and out["eval_final"] is not None:
        out["eval_gain"] = out["eval_final"] - out["eval_before_rl"]
    greedy = [e for e in first_rl[-1:] + evals[-1:] if e.get("eval_greedy_reward") is not None]
    if len(greedy) == 2:
        out["eval_greedy_before_rl"] = greedy[0]["eval_greedy_reward"]
        out["eval_greedy_final"] = greedy[1]["eval_greedy_reward"]
        out["eval_greedy_gain"] = out["eval_greedy_final"] - out["eval_greedy_before_rl"]
    return out
