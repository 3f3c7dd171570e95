"""The loop's metrics rows: what one evaluation, one RL step's rollouts and its trees put in
``metrics.jsonl``, the one-line progress text, and the run's ``summary.json``.

Rewards come from bench's :class:`~clawrl.bench.RolloutResult`; a rollout with status
``infra-error`` is left out of every mean (the infrastructure failed, not the policy) and
counted on its own. The pass rate is the fraction of rewards ``>= 1.0`` (exact pass).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train.trees import BuiltTrees

__all__ = [
    "eval_row",
    "mean_std",
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
    """The rollouts that count: every status but ``infra-error``."""
    return [x for x in results if x.status is not RolloutStatus.INFRA_ERROR]


def eval_row(
    results: Sequence[RolloutResult], harnesses: Sequence[str], tag: str, policy_version: int
) -> dict[str, Any]:
    """One held-out evaluation: mean reward, exact pass rate, per-harness reward and the
    verifier's sub-scores (``eval_subscore/NAME``, a missing sub-score counting 0)."""
    ok = scored(results)
    rewards = [x.reward for x in ok]
    row: dict[str, Any] = {
        "kind": "eval",
        "tag": tag,
        "policy_version": policy_version,
        "eval_reward": mean_std(rewards)[0],
        "eval_pass_rate": _pass_rate(rewards),
        "eval_n": len(ok),
        "eval_infra_errors": len(results) - len(ok),
    }
    for h in harnesses:
        row[f"eval_reward/{h}"] = mean_std([x.reward for x in ok if x.harness == h])[0]
    for name in sorted({k for x in ok for k in x.subscores}):
        row[f"eval_subscore/{name}"] = mean_std([x.subscores.get(name, 0.0) for x in ok])[0]
    return row


def rollout_row(
    results: Sequence[RolloutResult], records: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """One RL step's rollouts: counts per status, the rates of infra-errors (left out of
    the means) and verifier-errors (scored 0, trained on), reward mean / std and pass rate (overall
    and per harness), prompt and generated tokens, and an entropy estimate (minus the mean
    sampled-token logprob, nats) over the scored rollouts' call ``records``."""
    ok = scored(results)
    row: dict[str, Any] = {"n_rollouts": len(results), "n_infra_errors": len(results) - len(ok)}
    for st in RolloutStatus:
        row[f"status/{st.value}"] = sum(1 for x in results if x.status is st)
    n_verifier_errors = row[f"status/{RolloutStatus.VERIFIER_ERROR.value}"]
    row["infra_error_rate"] = row["n_infra_errors"] / len(results) if results else None
    row["verifier_error_rate"] = n_verifier_errors / len(results) if results else None
    rewards = [x.reward for x in ok]
    row["reward_mean"], row["reward_std"] = mean_std(rewards)
    row["pass_rate"] = _pass_rate(rewards)
    for h in sorted({x.harness for x in results}):
        hr = [x.reward for x in ok if x.harness == h]
        row[f"reward_mean/{h}"], row[f"reward_std/{h}"] = mean_std(hr)
        row[f"pass_rate/{h}"] = _pass_rate(hr)
    recs = [rec for x in ok for rec in records.get(x.rollout_id, [])]
    row["tokens_prompt"] = sum(len(rec.get("prompt_ids") or []) for rec in recs)
    row["tokens_generated"] = sum(len(rec.get("completion_ids") or []) for rec in recs)
    lps = [lp for rec in recs for lp in (rec.get("completion_logprobs") or [])]
    row["entropy_estimate"] = -statistics.fmean(lps) if lps else None
    return row


def tree_row(built: BuiltTrees) -> dict[str, Any]:
    """The step's prefix-tree figures: packed trees (one, or one per trainer rank), unique vs
    flat tokens, compression, trajectories and what the tree builder left out (dead leaves,
    over-branched rollouts, side-path calls, empty rollouts)."""
    return {
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
            {k: e.get(k) for k in ("tag", "eval_reward", "eval_pass_rate", "policy_version")}
            for e in evals
        ],
    }
    if out["eval_before_rl"] is not None and out["eval_final"] is not None:
        out["eval_gain"] = out["eval_final"] - out["eval_before_rl"]
    return out
