"""Rollouts excluded as harness-health failures are not trained on: they leave their GRPO
group (a group left with fewer than 2 members is dropped: its advantage would be 0), the
step row counts them per harness."""

from __future__ import annotations

from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train.rows import drop_small_groups, rollout_row, scored


def _r(rid: str, group: str, reward: float, status: RolloutStatus, excluded: bool = False):  # type: ignore[no-untyped-def]
    return RolloutResult(
        rollout_id=rid,
        task_id=group,
        harness="claude-code" if group != "c" else "reference",
        group_id=group,
        sample_index=0,
        status=status,
        reward=reward,
        excluded=excluded,
    )


def test_excluded_rollouts_leave_their_groups_and_are_counted() -> None:
    """Revert tried: ``scored`` keeping every status but infra-error — the excluded
    rollouts stayed in groups a and b (b kept 2 members)."""
    ok, herr, ovf = RolloutStatus.OK, RolloutStatus.HARNESS_ERROR, RolloutStatus.CONTEXT_OVERFLOW
    results = [
        _r("a1", "a", 1.0, ok),
        _r("a2", "a", 0.0, ok),
        _r("a3", "a", 0.0, ovf, excluded=True),
        _r("b1", "b", 1.0, ok),
        _r("b2", "b", 0.0, herr, excluded=True),
        _r("c1", "c", 0.0, ovf),  # the policy filled its context: scored, trained on
        _r("c2", "c", 1.0, ok),
    ]
    kept = scored(results)
    assert [x.rollout_id for x in kept] == ["a1", "a2", "b1", "c1", "c2"]
    members, dropped = drop_small_groups(kept, lambda x: x.group_id)
    assert [x.rollout_id for x in members] == ["a1", "a2", "c1", "c2"] and dropped == 1
    row = rollout_row(results, {})
    assert row["n_excluded"] == 2 and row["status/context-overflow"] == 2
    assert row["harness_error_rate"] == 1 / 7 and row["context_overflow_rate"] == 2 / 7
    assert row["harness_error_rate/claude-code"] == 1 / 5
    assert row["context_overflow_rate/reference"] == 0.5
    assert row["reward_mean"] == 3 / 5
