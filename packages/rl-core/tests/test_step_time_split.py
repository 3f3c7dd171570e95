"""The step row splits the rollout phase's wall time: ``time/verify`` is the wall time during
which some rollout was being verified (overlapping verifications counted once), and
``time/verify_total`` the rollouts' verification seconds summed."""

from __future__ import annotations

import pytest
from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train.rows import rollout_row


def _result(rid: str, timing: dict[str, float]) -> RolloutResult:
    return RolloutResult(
        rollout_id=rid,
        task_id="t1",
        harness="reference",
        group_id="s0/t1/reference",
        sample_index=0,
        status=RolloutStatus.OK,
        reward=1.0,
        timing=timing,
    )


def test_verify_wall_time_is_the_union_of_the_rollouts_verification_intervals() -> None:
    """Revert tried: rollout_row without ``verify_times`` — KeyError 'time/verify'."""
    results = [
        _result("a", {"started": 0.0, "verify_started": 100.0, "verify": 4.0}),  # 100-104
        _result("b", {"started": 0.0, "verify_started": 102.0, "verify": 4.0}),  # 102-106
        _result("c", {"started": 0.0, "verify_started": 103.0, "verify": 1.0}),  # inside
        _result("d", {"started": 0.0, "verify_started": 110.0, "verify": 2.0}),  # 110-112
        _result("e", {"started": 0.0, "total": 3.0}),  # never verified: adds nothing
    ]
    row = rollout_row(results, {})
    assert row["time/verify"] == pytest.approx(6.0 + 2.0)
    assert row["time/verify_total"] == pytest.approx(4.0 + 4.0 + 1.0 + 2.0)
    empty = rollout_row([], {})
    assert empty["time/verify"] == 0.0 and empty["time/verify_total"] == 0.0


def test_prefix_cache_row_is_the_difference_of_the_backend_counters() -> None:
    """Revert tried: prefix_cache_row absent from rows.py — ImportError (the loop wrote no
    ``serve/*`` figures before). Admitted prompt tokens = reused + computed − the shared
    prefills (computed once for several prompts, then counted as reused by each)."""
    from clawrl.rl_core.train.rows import prefix_cache_row

    before = {
        "prefill_tokens": 1000,
        "prefix_hit_tokens": 50,
        "prefix_lookups": 4,
        "prefix_hits": 1,
        "shared_prefill_tokens": 0,
    }
    # then: 8 prompts of 1,024 shared + 32 own tokens, the shared part prefilled once
    after = {
        "prefill_tokens": 1000 + 1024 + 8 * 32,
        "prefix_hit_tokens": 50 + 8 * 1024,
        "prefix_lookups": 12,
        "prefix_hits": 9,
        "shared_prefill_tokens": 1024,
    }
    row = prefix_cache_row(before, after)
    assert row["serve/prompt_tokens"] == 8 * (1024 + 32)
    assert row["serve/prefill_tokens"] == 1024 + 8 * 32
    assert row["serve/prefix_hit_tokens"] == 8 * 1024
    assert row["serve/prefill_tokens_saved"] == 7 * 1024
    assert row["serve/prefix_hit_rate"] == pytest.approx(1024 / 1056)
    assert row["serve/prompt_hit_rate"] == 1.0
    assert prefix_cache_row(None, after) == {}  # a backend without counters (SGLang)
    assert prefix_cache_row(before, {"steps": 3}) == {}
