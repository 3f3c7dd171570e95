"""Honest baselines for a learning claim: the held-out pass rate with a task-clustered
standard error, the same held-out tasks whatever the run's seed, and the shuffled-reward
control (the rewards permuted among a step's rollouts before the advantages)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core.train import load_config
from clawrl.rl_core.train.rows import clustered_pass_rate, eval_row, summary
from clawrl.rl_core.train.trees import RolloutData, shuffled_rewards
from hypothesis import given
from hypothesis import strategies as st


def _r(task: str, reward: float, harness: str = "reference", i: int = 0) -> RolloutResult:
    return RolloutResult(
        rollout_id=f"{task}-{harness}-{i}",
        task_id=task,
        harness=harness,
        group_id=f"g/{task}/{harness}",
        sample_index=i,
        status=RolloutStatus.OK,
        reward=reward,
    )


def test_clustered_standard_error_is_over_tasks_not_rollouts() -> None:
    """Task a passes 2 of 2, task b 1 of 2, task c 0 of 2: per-task rates 1, 0.5, 0; mean
    0.5, s.e. = stdev([1, .5, 0]) / sqrt(3) = 0.5 / sqrt(3). A rollout-level error would be
    sqrt(.25 / 5) / ... — smaller, since samples of one task are not independent."""
    xs = [_r("a", 1, i=0), _r("a", 1, i=1), _r("b", 1, i=0), _r("b", 0, i=1)]
    xs += [_r("c", 0.5, i=0), _r("c", 0, i=1)]  # 0.5 is not an exact pass
    mean, se, n = clustered_pass_rate(xs)
    assert (mean, n) == (0.5, 3)
    assert se == pytest.approx(0.5 / math.sqrt(3))
    one = clustered_pass_rate([_r("a", 1)])
    assert one[0] == 1.0 and math.isnan(one[1])
    assert math.isnan(clustered_pass_rate([])[0])


def test_eval_row_per_harness_with_prefix() -> None:
    xs = [_r("a", 1, "pi"), _r("b", 0, "pi"), _r("a", 1, "codex"), _r("b", 1, "codex")]
    row = eval_row(xs, ["pi", "codex"], "step-0-greedy", 3, prefix="eval_greedy")
    assert row["eval_greedy_pass_rate/pi"] == 0.5
    assert row["eval_greedy_pass_rate_se/pi"] == pytest.approx(0.5)
    assert row["eval_greedy_pass_rate/codex"] == 1.0
    assert row["eval_greedy_pass_rate_se/codex"] == 0.0
    assert row["eval_greedy_n/pi"] == 2 and row["eval_greedy_pass_rate"] == 0.75
    assert not [k for k in row if k.startswith("eval_") and not k.startswith("eval_greedy_")]


def test_summary_reports_greedy_before_and_after() -> None:
    rows = [
        {"kind": "eval", "tag": "step-0", "step": 0, "eval_reward": 0.3, "eval_greedy_reward": 0.6},
        {"kind": "train", "step": 1},
        {"kind": "eval", "tag": "step-1", "step": 1, "eval_reward": 0.7, "eval_greedy_reward": 0.8},
    ]
    out = summary(rows, 1, 1)
    assert out["eval_gain"] == pytest.approx(0.4)
    assert out["eval_greedy_gain"] == pytest.approx(0.2)
    assert out["evals"][0]["eval_greedy_reward"] == 0.6


@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=40),
    st.integers(0, 2**32 - 1),
)
def test_shuffled_rewards_permute_and_keep_everything_else(rewards: list[float], seed: int) -> None:
    data = [
        RolloutData(f"r{i}", f"g{i // 4}", f"t{i // 4}", "pi", r, []) for i, r in enumerate(rewards)
    ]
    out = shuffled_rewards(data, random.Random(seed))
    assert sorted(d.reward for d in out) == sorted(rewards)
    assert [(d.rollout_id, d.group_id, d.task_id) for d in out] == [
        (d.rollout_id, d.group_id, d.task_id) for d in data
    ]
    again = shuffled_rewards(data, random.Random(seed))
    assert [d.reward for d in again] == [d.reward for d in out]


def test_shuffling_breaks_the_reward_to_rollout_link() -> None:
    """Over many seeds, a rollout keeps its own reward only at chance level."""
    data = [RolloutData(f"r{i}", "g", "t", "pi", float(i % 2), []) for i in range(16)]
    kept = sum(
        d.reward == s.reward
        for seed in range(200)
        for d, s in zip(data, shuffled_rewards(data, random.Random(seed)), strict=True)
    )
    assert 0.35 < kept / (200 * 16) < 0.65  # chance: 8/16 share each reward


@pytest.mark.parametrize("family", ["learnable", "chores"])
def test_heldout_tasks_do_not_follow_the_run_seed(tmp_path: Path, family: str) -> None:
    """Seeds 0 and 1 train on different tasks and evaluate on the same ones (revert tried:
    the held-out draw seeded by run.seed — the held-out ids differ)."""
    from clawrl.rl_core.train import TrainLoop

    def tasks(seed: int, heldout_seed: int = 0) -> tuple[list[str], list[str]]:
        over = [
            f'run.out="{tmp_path / f"{seed}-{heldout_seed}"}"',
            f"run.seed={seed}",
            f'tasks.family="{family}"',
            "tasks.train_n=6",
            "tasks.heldout_n=4",
            f"tasks.heldout_seed={heldout_seed}",
        ]
        train, held = TrainLoop(load_config(None, over))._tasks()
        return [t.id for t in train], [t.id for t in held]

    (train0, held0), (train1, held1) = tasks(0), tasks(1)
    assert held0 == held1
    assert train0 != train1
    assert tasks(0, heldout_seed=5)[1] != held0


def test_shuffle_rewards_is_an_algo_key() -> None:
    cfg = load_config(None, ["algo.shuffle_rewards=true", "eval.greedy=true"])
    assert cfg.algo.shuffle_rewards and cfg.eval.greedy
    assert cfg.algo.flat()["shuffle_rewards"] is True


def test_greedy_eval_is_refused_in_asynchronous_mode() -> None:
    """The greedy pass sets the proxy's sampling for every call; in asynchronous mode the
    next batches' training rollouts run meanwhile and would be sampled greedily."""
    from clawrl.rl_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"eval\.greedy cannot be used with async"):
        load_config(None, ["eval.greedy=true", "async.enabled=true"])


def test_eval_harnesses_are_checked() -> None:
    """``[eval] harnesses`` (a harness held out of training, for transfer) are checked like
    the rollout's: an unknown name is a ConfigError naming the section."""
    from clawrl.rl_core.errors import ConfigError

    cfg = load_config(None, ['eval.harnesses=["reference", "pi"]'])
    assert cfg.eval.harnesses == ["reference", "pi"] and cfg.rollout.harnesses == ["reference"]
    with pytest.raises(ConfigError, match=r"\[eval\] harnesses"):
        load_config(None, ['eval.harnesses=["no-such-harness"]'])
