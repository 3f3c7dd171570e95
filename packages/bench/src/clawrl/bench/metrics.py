"""pass@k and mean-score aggregation per task, category and harness.

Infrastructure failures (status ``infra-error``) and task images that could not be built
(``env-error``) say nothing about the agent: they are excluded from every score and counted
apart. Every other status is scored. An ``ok`` rollout and a ``timeout`` (the agent ran out
of time; its workspace is verified all the same, as Harbor and Terminal-Bench do) carry the
verifier's reward; ``harness-error``, ``verifier-error`` and ``context-overflow`` are scored
as 0, whatever reward their verifier gave. Verifier errors are also counted apart
(``n_verifier_error``), since a verifier that could not run says little about the agent (an
agent that breaks its verifier must not escape a zero, so they stay scored).

A rollout marked ``excluded`` (a harness-health failure the policy did not cause: see
``clawrl.bench.rollout_health``) is left out of every score too; ``harness-error`` and
``context-overflow`` rollouts are counted apart per harness (``harness_error_rate``,
``context_overflow_rate``), ``n_excluded`` counts the excluded ones of any status.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AggregateReport",
    "GroupStats",
    "ScoredRollout",
    "aggregate",
    "is_scored",
    "pass_at_k",
]

OK = "ok"
#: Statuses whose rollout carries its verifier's reward (every other scored status counts 0).
REWARDED = ("ok", "timeout")
INFRA_ERROR = "infra-error"
VERIFIER_ERROR = "verifier-error"
ENV_ERROR = "env-error"
HARNESS_ERROR = "harness-error"
CONTEXT_OVERFLOW = "context-overflow"
_UNSCORED = (INFRA_ERROR, ENV_ERROR)


def is_scored(status: str, excluded: bool = False) -> bool:
    """Whether a rollout of ``status`` counts in scores (and GRPO groups): not an
    ``infra-error`` or ``env-error``, and not ``excluded`` as a harness-health failure."""
    return status not in _UNSCORED and not excluded


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al. 2021, "Evaluating LLMs trained on code").

    With ``n`` samples of which ``c`` pass, pass@k = 1 − C(n−c, k) / C(n, k), computed
    stably as 1 − Π_{i=n−c+1..n} (1 − k/i); it is 1 when n − c < k.

    Raises:
        ValueError: unless 0 ≤ c ≤ n and 1 ≤ k ≤ n.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


class ScoredRollout(BaseModel):
    """The part of a rollout result that metrics need.

    ``status`` uses the rollout vocabulary: ``ok`` | ``timeout`` | ``harness-error`` |
    ``verifier-error`` | ``infra-error`` | ``env-error`` | ``context-overflow``;
    ``excluded``: left out of scores whatever its status (a harness-health failure).
    """

    model_config = ConfigDict(frozen=True)

    task_id: str
    category: str | None = None
    harness: str = "default"
    reward: float = Field(ge=0.0, le=1.0)
    status: str = "ok"
    excluded: bool = False


class GroupStats(BaseModel):
    """Scores of one group (a task, a category or a harness), one harness at a time.

    Attributes:
        n_tasks: tasks with at least one scored rollout.
        n_scored: rollouts scored (infrastructure failures excluded).
        n_infra_error: rollouts excluded as infrastructure failures.
        n_env_error: rollouts excluded because the task's image could not be built.
        n_verifier_error: scored rollouts (reward 0) whose verifier failed or could not run.
        mean_score: macro mean: the mean over tasks of each task's mean reward.
        pass_at_k: k -> mean over tasks (with ≥ k scored samples) of the unbiased pass@k;
            ``None`` when no task has k samples.
        pass_at_k_stderr: k -> standard error of that mean, clustered by task: the sample
            standard deviation (ddof 1) of the per-task pass@k over √(tasks) (Miller 2024,
            "Adding Error Bars to Evals", §2.2, clustered standard errors); ``None`` with
            fewer than 2 tasks. It is 0 when every task has the same pass@k (e.g. all 0):
            read a 0/n result with its one-sided 95 % bound, ≈ 3/n, instead.
        status_counts: rollouts per status (all statuses, infra failures included).
        infra_error_rate / verifier_error_rate: ``n_infra_error`` / ``n_verifier_error``
            over all rollouts of the group (``None`` when it has none). Only a sandbox or
            host really gone is an infra-error; anything the rollout's own files cause is
            a verifier-error.
        n_harness_error / n_context_overflow: rollouts of status ``harness-error`` /
            ``context-overflow`` (scored or not); harness_error_rate /
            context_overflow_rate: the same over all rollouts of the group.
        n_excluded: rollouts left out as harness-health failures (any status).
    """

    n_tasks: int
    n_scored: int
    n_infra_error: int
    n_verifier_error: int = 0
    infra_error_rate: float | None = None
    verifier_error_rate: float | None = None
    n_env_error: int = 0
    n_harness_error: int = 0
    n_context_overflow: int = 0
    n_excluded: int = 0
    harness_error_rate: float | None = None
    context_overflow_rate: float | None = None
    mean_score: float | None
    pass_at_k: dict[int, float | None]
    pass_at_k_stderr: dict[int, float | None] = Field(default_factory=dict)
    status_counts: dict[str, int]


class AggregateReport(BaseModel):
    """Result of :func:`aggregate`. Keys are ``"<harness>/<task or category>"`` / harness."""

    by_task: dict[str, GroupStats]
    by_category: dict[str, GroupStats]
    by_harness: dict[str, GroupStats]


def _task_level(rollouts: Sequence[ScoredRollout], threshold: float) -> tuple[int, int, float]:
    scored = [r for r in rollouts if is_scored(r.status, r.excluded)]
    n = len(scored)
    rewards = [r.reward if r.status in REWARDED else 0.0 for r in scored]
    c = sum(1 for x in rewards if x >= threshold)
    mean = sum(rewards) / n if n else math.nan
    return n, c, mean


def _stderr(values: Sequence[float]) -> float | None:
    """Standard error of the mean of ``values`` (ddof 1); ``None`` below 2 values."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _group(
    per_task: dict[str, list[ScoredRollout]], ks: Sequence[int], threshold: float
) -> GroupStats:
    n_scored = n_infra = n_excluded = 0
    means: list[float] = []
    passes: dict[int, list[float]] = {k: [] for k in ks}
    counts: dict[str, int] = defaultdict(int)
    for rollouts in per_task.values():
        for r in rollouts:
            counts[r.status] += 1
        n, c, mean = _task_level(rollouts, threshold)
        n_scored += n
        n_infra += sum(1 for r in rollouts if r.status == INFRA_ERROR)
        n_excluded += sum(1 for r in rollouts if r.excluded)
        if n:
            means.append(mean)
            for k in ks:
                if n >= k:
                    passes[k].append(pass_at_k(n, c, k))
    total = sum(counts.values())
    return GroupStats(
        n_tasks=len(means),
        n_scored=n_scored,
        n_infra_error=n_infra,
        n_verifier_error=counts.get(VERIFIER_ERROR, 0),
        infra_error_rate=n_infra / total if total else None,
        verifier_error_rate=counts.get(VERIFIER_ERROR, 0) / total if total else None,
        n_env_error=counts.get(ENV_ERROR, 0),
        n_harness_error=counts.get(HARNESS_ERROR, 0),
        n_context_overflow=counts.get(CONTEXT_OVERFLOW, 0),
        n_excluded=n_excluded,
        harness_error_rate=counts.get(HARNESS_ERROR, 0) / total if total else None,
        context_overflow_rate=counts.get(CONTEXT_OVERFLOW, 0) / total if total else None,
        mean_score=sum(means) / len(means) if means else None,
        pass_at_k={k: (sum(v) / len(v) if v else None) for k, v in passes.items()},
        pass_at_k_stderr={k: _stderr(v) for k, v in passes.items()},
        status_counts=dict(counts),
    )


def aggregate(
    rollouts: Iterable[ScoredRollout], ks: Sequence[int] = (1,), pass_threshold: float = 1.0
) -> AggregateReport:
    """Aggregate rollouts into per-task, per-category and per-harness statistics.

    A rollout *passes* when its reward is ≥ ``pass_threshold``. Groups never mix harnesses.

    Raises:
        ValueError: a k < 1.
    """
    if any(k < 1 for k in ks):
        raise ValueError(f"k must be >= 1, got {list(ks)}")
    tasks: dict[tuple[str, str], list[ScoredRollout]] = defaultdict(list)
    for r in rollouts:
        tasks[(r.harness, r.task_id)].append(r)
    by_task = {f"{h}/{t}": _group({t: rs}, ks, pass_threshold) for (h, t), rs in tasks.items()}
    cats: dict[tuple[str, str], dict[str, list[ScoredRollout]]] = defaultdict(dict)
    harnesses: dict[str, dict[str, list[ScoredRollout]]] = defaultdict(dict)
    for (h, t), rs in tasks.items():
        cats[(h, rs[0].category or "uncategorised")][t] = rs
        harnesses[h][t] = rs
    return AggregateReport(
        by_task=dict(sorted(by_task.items())),
        by_category={
            f"{h}/{c}": _group(v, ks, pass_threshold) for (h, c), v in sorted(cats.items())
        },
        by_harness={h: _group(v, ks, pass_threshold) for h, v in sorted(harnesses.items())},
    )
