"""pass@k against the closed form, and aggregation with infrastructure failures apart."""

from __future__ import annotations

import math

import numpy as np
import pytest
from clawrl.bench import ScoredRollout, aggregate, pass_at_k
from hypothesis import assume, given
from hypothesis import strategies as st


def closed_form(n: int, c: int, k: int) -> float:
    """Chen et al. 2021: 1 - C(n-c, k) / C(n, k) (math.comb(a, b) = 0 when b > a)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@given(n=st.integers(1, 200), data=st.data())
def test_pass_at_k_matches_closed_form(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    assert pass_at_k(n, c, k) == pytest.approx(closed_form(n, c, k), abs=1e-12)


@given(n=st.integers(1, 100), data=st.data())
def test_pass_at_k_properties(n: int, data: st.DataObject) -> None:
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    p = pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    if n - c < k:
        assert p == 1.0
    if c == 0:
        assert p == 0.0
    if k == 1:
        assert p == pytest.approx(c / n)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p - 1e-12  # more attempts never hurt


def test_pass_at_k_examples() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 4, 2) == 1.0


@given(n=st.integers(-3, 5), c=st.integers(-3, 8), k=st.integers(-3, 8))
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    assume(not (0 <= c <= n and 1 <= k <= n))
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def r(
    task: str, reward: float, status: str = "ok", harness: str = "ref", cat: str = "a"
) -> ScoredRollout:
    return ScoredRollout(task_id=task, category=cat, harness=harness, reward=reward, status=status)


def test_aggregate_excludes_infra_errors() -> None:
    rollouts = [
        r("t1", 1.0),
        r("t1", 0.0),
        r("t1", 1.0),
        r("t1", 1.0, status="infra-error"),
        r("t2", 0.5),
        r("t2", 0.0, status="timeout"),
        r("t2", 0.0, status="infra-error"),
        r("t3", 1.0, cat="b"),
        r("t1", 0.0, harness="oracle"),
        r("t1", 1.0, harness="oracle"),
    ]
    rep = aggregate(rollouts, ks=(1, 2))
    t1 = rep.by_task["ref/t1"]
    assert (t1.n_scored, t1.n_infra_error) == (3, 1)
    assert t1.mean_score == pytest.approx(2 / 3)
    assert t1.pass_at_k[1] == pytest.approx(2 / 3)
    assert t1.pass_at_k[2] == pytest.approx(pass_at_k(3, 2, 2))
    assert t1.status_counts == {"ok": 3, "infra-error": 1}
    t2 = rep.by_task["ref/t2"]
    assert t2.mean_score == pytest.approx(0.25) and t2.pass_at_k[1] == 0.0  # 0.5 is not a pass
    cat_a = rep.by_category["ref/a"]
    assert cat_a.n_tasks == 2 and cat_a.n_infra_error == 2
    assert cat_a.mean_score == pytest.approx((2 / 3 + 0.25) / 2)  # macro mean over tasks
    ref = rep.by_harness["ref"]
    assert ref.n_tasks == 3 and ref.n_scored == 6
    assert ref.pass_at_k[1] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert ref.pass_at_k[2] == pytest.approx(
        (pass_at_k(3, 2, 2) + pass_at_k(2, 0, 2)) / 2
    )  # t3: n < k
    assert rep.by_harness["oracle"].mean_score == 0.5  # harnesses never mix


def test_aggregate_all_infra_and_threshold() -> None:
    rep = aggregate([r("t", 0.0, status="infra-error")], ks=(1,))
    stats = rep.by_task["ref/t"]
    assert stats.n_scored == 0 and stats.mean_score is None and stats.pass_at_k == {1: None}
    assert aggregate([r("t", 0.6)], pass_threshold=0.5).by_task["ref/t"].pass_at_k[1] == 1.0
    with pytest.raises(ValueError):
        aggregate([r("t", 1.0)], ks=(0,))


@given(passes=st.lists(st.lists(st.booleans(), min_size=2, max_size=6), min_size=1, max_size=12))
def test_pass_at_1_stderr_is_the_task_clustered_standard_error(passes: list[list[bool]]) -> None:
    """The oracle: NumPy's ddof-1 standard deviation of the per-task pass@1 over √tasks."""
    rollouts = [r(f"t{i}", float(p)) for i, ps in enumerate(passes) for p in ps]
    g = aggregate(rollouts, ks=(1, 2)).by_harness["ref"]
    per_task = np.array([np.mean(ps) for ps in passes])
    if len(passes) < 2:
        assert g.pass_at_k_stderr[1] is None
        return
    expected = per_task.std(ddof=1) / math.sqrt(len(passes))
    assert g.pass_at_k_stderr[1] == pytest.approx(expected, abs=1e-12)
    assert g.pass_at_k_stderr[2] is not None and g.pass_at_k_stderr[2] >= 0.0


def test_pass_at_k_stderr_examples() -> None:
    # two tasks: pass@1 1.0 and 0.0 -> mean 0.5, sd 0.7071, s.e. 0.5
    g = aggregate([r("a", 1.0), r("a", 1.0), r("b", 0.0), r("b", 0.0)]).by_harness["ref"]
    assert g.pass_at_k[1] == pytest.approx(0.5)
    assert g.pass_at_k_stderr[1] == pytest.approx(0.5)
    # every task at 0: no spread, s.e. 0 (the README says to read 0/n with its 3/n bound)
    g = aggregate([r("a", 0.0), r("b", 0.0), r("c", 0.0)]).by_harness["ref"]
    assert g.pass_at_k_stderr[1] == 0.0
    # a single task has no spread to measure
    assert aggregate([r("a", 1.0), r("a", 0.0)]).by_task["ref/a"].pass_at_k_stderr[1] is None


def test_aggregate_reports_infra_and_verifier_error_rates() -> None:
    """Revert tried: the two rate fields of GroupStats — AttributeError."""
    rollouts = [r("t1", 1.0), r("t1", 0.0, "verifier-error"), r("t2", 0.0, "infra-error")]
    rollouts.append(r("t2", 0.0))
    g = aggregate(rollouts).by_harness["ref"]
    assert g.infra_error_rate == 0.25
    assert g.verifier_error_rate == 0.25
    assert g.n_scored == 3


@pytest.mark.parametrize("status", ["harness-error", "verifier-error", "context-overflow"])
def test_a_rollout_that_is_not_ok_carries_no_reward(status: str) -> None:
    """A rollout whose harness failed (an oracle with no solution), whose context overflowed
    or whose verifier failed is scored as 0 even when its verifier's reward, recorded on it,
    was 1."""
    rep = aggregate([r("t", 1.0, status=status), r("t", 1.0)], ks=(1, 2))
    stats = rep.by_task["ref/t"]
    assert stats.n_scored == 2 and stats.mean_score == 0.5
    assert stats.pass_at_k == {1: 0.5, 2: 1.0}
    assert aggregate([r("t", 1.0, status=status)]).by_harness["ref"].mean_score == 0.0


def test_a_timed_out_rollout_keeps_its_verified_reward() -> None:
    """An agent that ran out of time is verified all the same (Harbor, Terminal-Bench): its
    verifier's reward counts."""
    rep = aggregate([r("t", 1.0, status="timeout"), r("t", 0.0)], ks=(1,))
    assert rep.by_task["ref/t"].mean_score == 0.5
    assert rep.by_task["ref/t"].pass_at_k == {1: 0.5}
