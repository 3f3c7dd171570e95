"""An RL step whose advantages are all 0 skips the optimizer: AdamW's momentum (from an
earlier step) and weight decay would otherwise move the weights on a batch that says
nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from clawrl.rl_core import LossConfig, OptimConfig, Trainer, TrainerConfig


def _snapshot(trainer: Trainer) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    weights = {k: v.detach().clone() for k, v in trainer.unwrapped.state_dict().items()}
    moments = [
        t.detach().clone()
        for state in trainer.optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    ]
    return weights, moments


def _config(**loss: float) -> TrainerConfig:
    return TrainerConfig(
        algorithm="grpo",
        seed=3,
        optim=OptimConfig(lr=1e-2, total_steps=10, weight_decay=0.1),
        loss=LossConfig(**loss),
    )


def test_all_zero_advantages_leave_weights_bitwise_unchanged(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """Revert tried: the early return in Trainer.rl_step — the weights moved (AdamW's
    momentum from the first step) and ``skipped_update`` was missing."""
    model = tiny_model_factory(torch.float32, seed=4, vocab=16)
    trainer = Trainer(model, _config())
    trees, rewards = toy_task(model, 2, 4, 0)
    assert len(set(rewards.values())) > 1
    first = trainer.rl_step(trees, rewards)  # a real step: AdamW has momentum now
    assert first["skipped_update"] == 0.0 and first["optimizer_steps"] >= 1
    weights, moments = _snapshot(trainer)
    lr = trainer.scheduler.get_last_lr()[0]

    trees, rewards = toy_task(model, 2, 4, 1)
    flat = dict.fromkeys(rewards, 1.0)  # every group all-equal: every advantage 0
    m = trainer.rl_step(trees, flat)
    after, moments_after = _snapshot(trainer)
    assert all(torch.equal(weights[k], after[k]) for k in weights)
    assert m["skipped_update"] == 1.0 and m["optimizer_steps"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(moments, moments_after, strict=True))
    assert trainer.scheduler.get_last_lr()[0] == lr
    assert trainer.step == 2 and trainer.policy_version == 2

    m = trainer.rl_step(trees, rewards)  # the same batch with its real rewards: it moves
    assert m["skipped_update"] == 0.0
    moved = trainer.unwrapped.state_dict()
    assert any(not torch.equal(weights[k], moved[k]) for k in weights)


def test_an_entropy_term_still_trains_on_zero_advantages(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """With an entropy bonus the loss has a gradient of its own: the step is not skipped."""
    model = tiny_model_factory(torch.float32, seed=4, vocab=16)
    trainer = Trainer(model, _config(entropy_coef=0.01))
    trees, rewards = toy_task(model, 2, 4, 0)
    weights, _ = _snapshot(trainer)
    m = trainer.rl_step(trees, dict.fromkeys(rewards, 0.0))
    assert m["skipped_update"] == 0.0
    moved = trainer.unwrapped.state_dict()
    assert any(not torch.equal(weights[k], moved[k]) for k in weights)
