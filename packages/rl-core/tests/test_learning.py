"""Learning sanity without any harness: a tiny policy improves a verifiable reward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import LossConfig, OptimConfig, PPOConfig, Trainer, TrainerConfig

STEPS = 40


def _run(
    algorithm: str, seed: int, tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> tuple[float, float]:
    model = tiny_model_factory(torch.float32, seed=seed, vocab=16)
    cfg = TrainerConfig(
        algorithm=algorithm,
        seed=seed,  # type: ignore[arg-type]
        optim=OptimConfig(lr=3e-3, total_steps=STEPS),
        ppo=PPOConfig(value_warmup_steps=2),
        loss=LossConfig(aggregation="token_mean"),
    )
    trainer = Trainer(model, cfg)
    means = []
    for step in range(STEPS):
        # GRPO: 4 tasks × 8 rollouts; PPO: 16 tasks × 1 rollout (value baseline)
        n_tasks, group = (4, 8) if algorithm == "grpo" else (16, 1)
        trees, rewards = toy_task(model, n_tasks, group, step)
        metrics = trainer.rl_step(trees, rewards)
        assert np.isfinite(metrics["loss"])
        means.append(float(np.mean(list(rewards.values()))))
    k = STEPS // 5
    return float(np.mean(means[:k])), float(np.mean(means[-k:]))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_policy_improves_on_3_of_4_seeds(
    algorithm: str,
    tiny_model_factory: Callable[..., Any],
    toy_task: Callable[..., Any],
) -> None:
    """Mean reward of the last 20 % of steps ≥ first 20 % + 0.2, on ≥ 3 of 4 seeds."""
    results = [_run(algorithm, seed, tiny_model_factory, toy_task) for seed in range(4)]
    improved = [last >= first + 0.2 for first, last in results]
    assert sum(improved) >= 3, results
