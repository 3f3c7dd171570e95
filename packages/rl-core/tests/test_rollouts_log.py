"""The train loop's per-step rollout files (``rollouts/step-NNNN.jsonl``, read by bench's
viewer): one line per rollout, no call records, the GRPO advantage of each trained rollout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
from clawrl.bench import RolloutResult, RolloutStatus
from clawrl.rl_core import grpo_advantages
from clawrl.rl_core.config import GRPOConfig
from clawrl.rl_core.train.rollouts_log import write_step_rollouts
from clawrl.rl_core.train.trees import BuiltTrees


def _result(rid: str, group: str, reward: float, status: RolloutStatus) -> RolloutResult:
    return RolloutResult(
        rollout_id=rid,
        task_id=group.split("/")[1],
        harness="reference",
        group_id=group,
        sample_index=0,
        status=status,
        reward=reward,
        records=[{"call_id": "c", "prompt_ids": [1, 2, 3]}],
        stdout="x" * 1000,
    )


def test_step_file_has_every_rollout_and_the_grpo_advantages(tmp_path: Path) -> None:
    results = [
        _result("a", "s0/t1/reference", 1.0, RolloutStatus.OK),
        _result("b", "s0/t1/reference", 0.0, RolloutStatus.OK),
        _result("c", "s0/t1/reference", 0.5, RolloutStatus.OK),
        _result("d", "s0/t2/reference", 0.0, RolloutStatus.INFRA_ERROR),  # not trained
    ]
    built = BuiltTrees(
        rewards={"a": 1.0, "b": 0.0, "c": 0.5}, groups=dict.fromkeys("abc", "s0/t1/reference")
    )
    path = write_step_rollouts(tmp_path, 1, results, built, GRPOConfig())
    assert path == tmp_path / "rollouts" / "step-0001.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [r["rollout_id"] for r in rows] == ["a", "b", "c", "d"]
    assert all("records" not in r and "stdout" not in r and r["step"] == 1 for r in rows)
    want = grpo_advantages(np.array([1.0, 0.0, 0.5]), ["g"] * 3)
    assert np.allclose([r["advantage"] for r in rows[:3]], want)
    assert rows[3]["advantage"] is None and rows[3]["trained"] is False
    # PPO: no per-rollout advantage is written
    rows = [
        orjson.loads(line)
        for line in write_step_rollouts(tmp_path, 2, results, built, None).read_bytes().splitlines()
    ]
    assert all(r["advantage"] is None for r in rows)
