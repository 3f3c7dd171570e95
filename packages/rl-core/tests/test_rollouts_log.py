"""The train loop's per-step rollout files (``rollouts/step-NNNN.jsonl``, read by bench's
viewer): one line per rollout, no call records, and each trained trajectory's tokens with the
advantage and importance weight the update used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.prefixtree import Call, PrefixTree, merge_trees
from clawrl.rl_core import (
    CorrectionConfig,
    OldPass,
    TreeBatch,
    grpo_advantages,
    prepare_rl,
    truncated_importance_weights,
)
from clawrl.rl_core.train.rollouts_log import write_step_rollouts
from clawrl.rl_core.train.trees import BuiltTrees

GROUP = "s0/t1/reference"


def _result(rid: str, reward: float, status: RolloutStatus = RolloutStatus.OK) -> RolloutResult:
    return RolloutResult(
        rollout_id=rid,
        task_id="t1",
        harness="reference",
        group_id=GROUP,
        sample_index=0,
        status=status,
        reward=reward,
        records=[{"call_id": "c", "prompt_ids": [1, 2, 3]}],
        stdout="x" * 1000,
    )


def _tree(rid: str, completion: list[int], logprobs: list[float]) -> PrefixTree:
    """Two calls: the second one's prompt extends the first's (one trajectory)."""
    c0 = Call(f"{rid}-0", rid, 0, np.array([1, 2, 3]), np.array(completion), np.array(logprobs))
    p1 = np.array([1, 2, 3, *completion, 9])
    c1 = Call(f"{rid}-1", rid, 1, p1, np.array([7]), np.array([-0.5]))
    tree = PrefixTree.from_calls([c0, c1], rollout_id=rid)
    return tree


def _update(algorithm: str) -> tuple[BuiltTrees, tuple[TreeBatch, object, OldPass]]:
    trees = {
        "a": _tree("a", [4, 5], [-0.1, -0.2]),
        "b": _tree("b", [4, 6], [-0.3, -0.4]),
        "c": _tree("c", [8], [-1.0]),
    }
    rewards = {"a": 1.0, "b": 0.0, "c": 0.5}
    groups = dict.fromkeys(rewards, GROUP)
    batch = TreeBatch.from_trees([merge_trees(*trees.values()).pack()])
    rng = np.random.default_rng(0)
    old = OldPass(
        logprobs=rng.normal(-0.5, 0.3, batch.num_tokens),
        values=rng.normal(0.0, 0.5, batch.num_tokens) if algorithm == "ppo" else None,
    )
    prepared = prepare_rl(
        batch,
        old,
        rewards,
        algorithm=algorithm,
        corr_cfg=CorrectionConfig(tis_cap=1.2),
        groups=groups,
    )
    return BuiltTrees(rewards=rewards, groups=groups), (batch, prepared, old)


def test_step_file_rows_and_the_grpo_tokens(tmp_path: Path) -> None:
    built, update = _update("grpo")
    results = [_result("a", 1.0), _result("b", 0.0), _result("c", 0.5)]
    results.append(_result("d", 0.0, RolloutStatus.INFRA_ERROR))  # not trained
    path = write_step_rollouts(tmp_path, 1, results, built, update)  # type: ignore[arg-type]
    assert path == tmp_path / "rollouts" / "step-0001.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [r["rollout_id"] for r in rows] == ["a", "b", "c", "d"]
    assert all("records" not in r and "stdout" not in r and r["step"] == 1 for r in rows)
    want = grpo_advantages(np.array([1.0, 0.0, 0.5]), ["g"] * 3)
    assert np.allclose([r["advantage"] for r in rows[:3]], want, atol=1e-6)
    assert rows[3]["advantage"] is None and rows[3]["trained"] is False and rows[3]["tokens"] == {}
    for r, completion in zip(rows[:3], ([4, 5], [4, 6], [8]), strict=True):
        ((leaf, tok),) = r["tokens"].items()  # one trajectory per rollout, keyed by leaf call
        assert leaf == f"{r['rollout_id']}-1"
        n = len(completion)
        # trained: the first call's completion (positions 3..) and the second's one token
        assert tok["position"] == [*range(3, 3 + n), 3 + n + 1]
        assert np.allclose(tok["advantage"], r["advantage"], atol=1e-6)
        lr = np.asarray(tok["old_logprob"]) - np.asarray(tok["rollout_logprob"])
        iw = truncated_importance_weights(lr, 1.2)
        assert np.allclose(tok["importance_weight"], iw, atol=1e-5)
        assert tok["rollout_logprob"][-1] == pytest.approx(-0.5)


def test_ppo_tokens_carry_per_token_advantages_and_no_rollout_advantage(tmp_path: Path) -> None:
    built, update = _update("ppo")
    results = [_result("a", 1.0), _result("b", 0.0), _result("c", 0.5)]
    rows = [
        orjson.loads(line)
        for line in write_step_rollouts(tmp_path, 2, results, built, update)  # type: ignore[arg-type]
        .read_bytes()
        .splitlines()
    ]
    assert all(r["advantage"] is None for r in rows)  # GAE over values: not one per rollout
    adv = rows[0]["tokens"]["a-1"]["advantage"]
    assert len(set(adv)) > 1 and None not in adv


def test_a_step_that_trained_nothing_writes_rows_without_tokens(tmp_path: Path) -> None:
    path = write_step_rollouts(tmp_path, 3, [_result("a", 1.0)], BuiltTrees(), None)
    (row,) = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert (row["trained"], row["advantage"], row["tokens"]) == (False, None, {})


def test_a_name_that_is_not_utf8_does_not_crash_the_log(tmp_path: Path) -> None:
    """A rollout whose reason carries a file name from its sandbox that is not UTF-8 is
    logged, the name's other bytes as ``\\xNN``."""
    bad = _result("a", 0.0).model_copy(update={"reason": "skipped bad_\udcff.txt"})
    path = write_step_rollouts(tmp_path, 4, [bad], BuiltTrees(), None)
    (row,) = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert row["reason"] == "skipped bad_\\xff.txt"
