"""The train loop's step rows count infra-errors and verifier-errors apart: an infra-error
(the infrastructure failed) is left out of the scores, a verifier-error (the rollout's own
files broke verification) is scored 0 and trained on; each rate is a key of the row."""

from __future__ import annotations

from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train.rows import rollout_row, scored


def _result(rid: str, reward: float, status: RolloutStatus) -> RolloutResult:
    return RolloutResult(
        rollout_id=rid,
        task_id="t1",
        harness="reference",
        group_id="s0/t1/reference",
        sample_index=0,
        status=status,
        reward=reward,
    )


def test_step_row_has_both_error_rates_and_keeps_verifier_errors_scored() -> None:
    """Revert tried: the two rate keys in rollout_row — KeyError."""
    results = [
        _result("a", 1.0, RolloutStatus.OK),
        _result("b", 0.0, RolloutStatus.VERIFIER_ERROR),
        _result("c", 0.0, RolloutStatus.VERIFIER_ERROR),
        _result("d", 0.0, RolloutStatus.INFRA_ERROR),
    ]
    row = rollout_row(results, {})
    assert row["infra_error_rate"] == 0.25
    assert row["verifier_error_rate"] == 0.5
    assert [x.rollout_id for x in scored(results)] == ["a", "b", "c"]
    assert row["reward_mean"] == 1.0 / 3
    assert rollout_row([], {})["infra_error_rate"] is None
