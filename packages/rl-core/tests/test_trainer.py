"""Trainer: checkpoint/resume bit-exactness, HF export, typed errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    CheckpointError,
    ConfigError,
    LossConfig,
    OptimConfig,
    PPOConfig,
    Trainer,
    TrainerConfig,
)
from transformers import AutoModelForCausalLM


def _config() -> TrainerConfig:
    return TrainerConfig(
        algorithm="ppo",
        seed=7,
        optim=OptimConfig(
            lr=3e-3, total_steps=5, warmup_steps=1, schedule="cosine", weight_decay=0.01
        ),
        ppo=PPOConfig(value_warmup_steps=1),
        loss=LossConfig(entropy_coef=0.01),
    )


def _steps(
    trainer: Trainer, model: Any, toy_task: Callable[..., Any], start: int, stop: int
) -> list[float]:
    losses = []
    for step in range(start, stop):
        trees, rewards = toy_task(model, 4, 2, step)  # sampling draws on the torch RNG
        losses.append(trainer.rl_step(trees, rewards)["loss"])
    return losses


def test_resume_is_bit_exact(
    tmp_path: Path, tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """3 steps, checkpoint, resume in a fresh trainer, 2 steps == 5 steps straight."""
    m1 = tiny_model_factory(torch.float32, seed=1, vocab=16)
    t1 = Trainer(m1, _config())
    straight = _steps(t1, m1, toy_task, 0, 5)

    m2 = tiny_model_factory(torch.float32, seed=1, vocab=16)
    t2 = Trainer(m2, _config())
    first = _steps(t2, m2, toy_task, 0, 3)
    t2.save_checkpoint(tmp_path / "ckpt", data_position=3)

    m3 = tiny_model_factory(torch.float32, seed=99, vocab=16)  # different init, overwritten
    t3 = Trainer(m3, _config())
    state = t3.load_checkpoint(tmp_path / "ckpt")
    assert state["data_position"] == 3 and t3.step == 3 and t3.policy_version == 3
    rest = _steps(t3, m3, toy_task, 3, 5)

    assert first + rest == straight
    sd1 = t1.unwrapped.state_dict()
    sd3 = t3.unwrapped.state_dict()
    assert sd1.keys() == sd3.keys()
    for k in sd1:
        assert torch.equal(sd1[k], sd3[k]), k
    assert t1.scheduler.get_last_lr() == t3.scheduler.get_last_lr()


def test_export_hf_checkpoint_loads(tmp_path: Path, tiny_model_factory: Callable[..., Any]) -> None:
    model = tiny_model_factory(torch.float32, seed=2, vocab=16)
    trainer = Trainer(model, _config())
    out = trainer.export_hf(tmp_path / "hf")
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(out)
    x = torch.tensor([[0, 1, 2, 3]])
    torch.testing.assert_close(loaded(input_ids=x).logits, model(input_ids=x).logits)
    assert not any("value_head" in k for k in loaded.state_dict())


def test_checkpoint_errors(tmp_path: Path, tiny_model_factory: Callable[..., Any]) -> None:
    trainer = Trainer(tiny_model_factory(torch.float32, vocab=16), _config())
    with pytest.raises(CheckpointError, match="missing"):
        trainer.load_checkpoint(tmp_path / "nothing")
    trainer.save_checkpoint(tmp_path / "c")
    other = Trainer(tiny_model_factory(torch.float32, vocab=16, hidden=16), _config())
    with pytest.raises(CheckpointError):
        other.load_checkpoint(tmp_path / "c")


def test_config_errors(tiny_model_factory: Callable[..., Any]) -> None:
    with pytest.raises(ConfigError):
        Trainer(
            tiny_model_factory(torch.float32, vocab=16), TrainerConfig(loss=LossConfig(kl_coef=0.1))
        )
    with pytest.raises(ConfigError):
        OptimConfig(lr=-1)
    with pytest.raises(ConfigError):
        TrainerConfig(algorithm="dpo")  # type: ignore[arg-type]


@pytest.mark.parametrize("value_fn", ["head", "critic"])
def test_value_warmup_freezes_the_policy(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any], value_fn: str
) -> None:
    """Over 3 warm-up steps, with KL, entropy and weight decay on, no policy weight moves
    (exactly) while the value function does; from the first step after the warm-up the policy
    moves. One step would not show it: a zero-initialised value head passes no gradient to
    the hidden states until its weights have moved."""
    from clawrl.rl_core import Critic

    model = tiny_model_factory(torch.float32, seed=3, vocab=16)
    ref = tiny_model_factory(torch.float32, seed=4, vocab=16)
    critic = None
    if value_fn == "critic":
        critic = Critic(tiny_model_factory(torch.float32, seed=5, vocab=16))
    cfg = TrainerConfig(
        algorithm="ppo",
        optim=OptimConfig(lr=1e-2, weight_decay=0.1),
        ppo=PPOConfig(value_warmup_steps=3),
        loss=LossConfig(kl_coef=0.1, entropy_coef=0.05),
        token_budget=12,
    )
    trainer = Trainer(model, cfg, critic=critic, ref_model=ref)
    before = {k: v.clone() for k, v in trainer.unwrapped.policy.state_dict().items()}

    def value_params() -> list[torch.Tensor]:
        mod = trainer.unwrapped.value_head if critic is None else critic
        assert mod is not None
        return [p.detach().clone() for p in mod.parameters()]

    for step in range(3):
        v_before = value_params()
        trees, rewards = toy_task(model, 4, 1, step)
        m = trainer.rl_step(trees, rewards)
        assert m["num_pieces"] > 1  # the token budget split the batch
        after = trainer.unwrapped.policy.state_dict()
        moved = max(float((after[k] - before[k]).abs().max()) for k in before)
        assert moved == 0.0, f"warm-up step {step}: policy moved by {moved}"
        assert m["kl"] == 0.0 and m["entropy"] == 0.0 and m["policy_loss"] == 0.0
        assert any(not torch.equal(a, b) for a, b in zip(v_before, value_params(), strict=True))
    trees, rewards = toy_task(model, 4, 1, 3)
    m = trainer.rl_step(trees, rewards)  # warm-up over: the policy moves
    after = trainer.unwrapped.policy.state_dict()
    assert not all(torch.equal(before[k], after[k]) for k in before)
    assert m["entropy"] > 0


def test_value_lr_trains_the_value_head_faster(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """optim.value_lr is the value head's own learning rate: Adam's first step moves a
    parameter by about its group's lr, so the zero-initialised bias moves by value_lr
    and no policy weight by more than lr."""
    model = tiny_model_factory(torch.float32, seed=3, vocab=16)
    cfg = TrainerConfig(
        algorithm="ppo",
        optim=OptimConfig(lr=1e-4, value_lr=1e-2, weight_decay=0.0, max_grad_norm=None),
    )
    trainer = Trainer(model, cfg)
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [1e-4, 1e-2]
    before = {k: v.clone() for k, v in trainer.unwrapped.policy.state_dict().items()}
    trees, rewards = toy_task(model, 4, 1, 0)
    trainer.rl_step(trees, rewards)
    bias = trainer.unwrapped.value_head.state_dict()["linear.bias"]  # type: ignore[union-attr]
    assert float(bias.abs().max()) == pytest.approx(1e-2, rel=1e-3)
    after = trainer.unwrapped.policy.state_dict()
    moved = max(float((after[k] - before[k]).abs().max()) for k in before)
    assert 0 < moved <= 1e-4 * (1 + 1e-3)
    with pytest.raises(ConfigError, match="value_lr"):
        OptimConfig(value_lr=0.0)


def test_separate_critic_and_reference_kl(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    from clawrl.rl_core import Critic

    model = tiny_model_factory(torch.float32, seed=4, vocab=16)
    ref = tiny_model_factory(torch.float32, seed=4, vocab=16)
    critic = Critic(tiny_model_factory(torch.float32, seed=5, vocab=16))
    cfg = TrainerConfig(
        algorithm="ppo", optim=OptimConfig(lr=1e-2), loss=LossConfig(kl_coef=0.1, entropy_coef=0.01)
    )
    trainer = Trainer(model, cfg, critic=critic, ref_model=ref)
    assert trainer.unwrapped.value_head is None
    c_before = critic.head.linear.bias.detach().clone()
    kls = []
    for step in range(3):
        trees, rewards = toy_task(model, 4, 1, step)
        m = trainer.rl_step(trees, rewards)
        kls.append(m["kl"])
        assert m["entropy"] > 0 and m["value_loss"] >= 0
    assert kls[0] == pytest.approx(0.0, abs=1e-9)  # policy == reference at the start
    assert kls[-1] > 0
    assert not torch.equal(c_before, critic.head.linear.bias)
    # on-policy rollouts from the same weights: trainer and sampler logprobs agree
    assert m["max_abs_logprob_diff"] < 1e-4


def test_rl_step_rejects_bad_rewards(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    model = tiny_model_factory(torch.float32, vocab=16)
    trainer = Trainer(model, TrainerConfig())
    trees, rewards = toy_task(model, 2, 2, 0)
    missing = dict(list(rewards.items())[1:])
    with pytest.raises(ConfigError, match="no reward"):
        trainer.rl_step(trees, missing)
    with pytest.raises(ConfigError, match="finite"):
        trainer.rl_step(trees, {k: float("nan") for k in rewards})
    assert trainer.step == 0


def test_ppo_epochs_and_minibatches(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """2 epochs × 2 minibatches = 4 optimiser steps (and LR-schedule steps) per rl_step, one
    trainer step and policy version per rl_step."""
    model = tiny_model_factory(torch.float32, seed=6, vocab=16)
    cfg = TrainerConfig(
        algorithm="grpo",
        token_budget=12,
        update_epochs=2,
        num_minibatches=2,
        optim=OptimConfig(lr=1e-2, total_steps=8, schedule="linear"),
    )
    trainer = Trainer(model, cfg)
    trees, rewards = toy_task(model, 2, 4, 0)
    m = trainer.rl_step(trees, rewards)
    assert m["optimizer_steps"] == 4 and m["num_pieces"] >= 2
    assert trainer.step == 1 and trainer.policy_version == 1
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(1e-2 * 4 / 8)
    with pytest.raises(ConfigError):
        TrainerConfig(update_epochs=0)


def test_old_pass_runs_in_eval_mode(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """π_old comes from the policy with dropout off: with attention dropout 0.5, two old
    passes in train mode agree exactly and equal the eval-mode forward, although two
    train-mode forwards differ; the model is back in train mode afterwards."""
    from clawrl.rl_core import TreeBatch, old_pass, split_by_token_budget, tree_forward

    model = tiny_model_factory(torch.float32, seed=8, vocab=16)
    for mod in model.modules():
        if hasattr(mod, "attention_dropout"):
            mod.attention_dropout = 0.5
    trees, _ = toy_task(model, 2, 2, 0)
    batch = TreeBatch.from_trees(trees)
    pieces = split_by_token_budget(batch, None)
    model.eval()
    ref = old_pass(model, batch, pieces).logprobs
    model.train()
    a = old_pass(model, batch, pieces).logprobs
    b = old_pass(model, batch, pieces).logprobs
    assert model.training and all(m.training for m in model.modules())
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, ref)
    # dropout is really on in train mode: two forwards disagree
    p = pieces[0]
    args = [
        torch.as_tensor(x)
        for x in (p.input_ids, p.position_ids, p.parent_index, p.subtree_end, p.targets)
    ]
    assert not torch.equal(tree_forward(model, *args).logprobs, tree_forward(model, *args).logprobs)


def test_minibatch_indices_are_a_seeded_shuffle() -> None:
    from clawrl.rl_core.trainer import minibatch_indices

    parts = minibatch_indices(10, 3, seed=0, step=0, epoch=0)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    again = minibatch_indices(10, 3, seed=0, step=0, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    consecutive = [p.tolist() for p in np.array_split(np.arange(10), 3)]
    draws = {
        tuple(tuple(p.tolist()) for p in minibatch_indices(10, 3, seed=s, step=t, epoch=e))
        for s in range(2)
        for t in range(3)
        for e in range(2)
    }
    assert len(draws) == 12  # seed, step and epoch each change the deal
    assert tuple(map(tuple, consecutive)) not in draws
    assert len(minibatch_indices(2, 5, seed=0, step=0, epoch=0)) == 2


def test_rl_step_deals_shuffled_minibatches_reproducibly(
    tiny_model_factory: Callable[..., Any],
    toy_task: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pieces each optimiser step sees are minibatch_indices' deal (not consecutive DFS
    runs), a new one per epoch, and two equal trainers end with equal weights."""
    import clawrl.rl_core.trainer as trainer_mod
    from clawrl.rl_core.trainer import minibatch_indices

    seen: list[list[int]] = []
    real = trainer_mod.loss_backward

    def spy(model: Any, batch: Any, pieces: Any, *a: Any, **k: Any) -> Any:
        seen.append([int(p.token_index[p.n_context]) for p in pieces])  # first owned token
        return real(model, batch, pieces, *a, **k)

    monkeypatch.setattr(trainer_mod, "loss_backward", spy)
    cfg = TrainerConfig(
        algorithm="grpo",
        seed=3,
        token_budget=10,
        update_epochs=2,
        num_minibatches=3,
        optim=OptimConfig(lr=1e-2, total_steps=12),
    )
    weights = []
    for _ in range(2):
        seen.clear()
        model = tiny_model_factory(torch.float32, seed=6, vocab=16)
        trainer = Trainer(model, cfg)
        trees, rewards = toy_task(model, 2, 4, 0)
        m = trainer.rl_step(trees, rewards)
        assert m["num_minibatches"] == 3 and m["minibatches_capped"] == 0.0
        weights.append({k: v.clone() for k, v in trainer.unwrapped.state_dict().items()})
        from clawrl.rl_core import TreeBatch, split_by_token_budget

        pieces = split_by_token_budget(TreeBatch.from_trees(trees), 10)
        starts = [int(p.token_index[p.n_context]) for p in pieces]
        n = len(pieces)
        expect = [
            [starts[i] for i in idx]
            for e in range(2)
            for idx in minibatch_indices(n, 3, seed=3, step=0, epoch=e)
        ]
        assert seen == expect
        runs = [[starts[i] for i in idx] for idx in np.array_split(np.arange(n), 3)]
        assert seen[:3] != runs
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_minibatch_cap_warns_and_is_counted(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    from clawrl.rl_core import MinibatchCapWarning

    model = tiny_model_factory(torch.float32, seed=6, vocab=16)
    trainer = Trainer(model, TrainerConfig(algorithm="grpo", token_budget=12, num_minibatches=500))
    trees, rewards = toy_task(model, 2, 2, 0)
    with pytest.warns(MinibatchCapWarning, match="num_minibatches=500"):
        m = trainer.rl_step(trees, rewards)
    assert m["minibatches_capped"] == 1.0
    assert m["num_minibatches"] == m["num_pieces"] == m["optimizer_steps"] < 500
    with pytest.raises(ConfigError, match="token_budget"):
        TrainerConfig(token_budget=None, num_minibatches=2)


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_embeddings(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any], freeze: bool
) -> None:
    """freeze_embeddings: the input embedding matrix stays bit-identical (weight decay on)
    and holds no AdamW state, while the other weights move; without it, it moves too."""
    model = tiny_model_factory(torch.float32, seed=3, vocab=16)
    cfg = TrainerConfig(optim=OptimConfig(lr=1e-2, weight_decay=0.1), freeze_embeddings=freeze)
    trainer = Trainer(model, cfg)
    emb = model.get_input_embeddings().weight
    emb0 = emb.detach().clone()
    others0 = {n: p.detach().clone() for n, p in model.named_parameters() if p is not emb}
    for step in range(2):
        trees, rewards = toy_task(model, 4, 2, step)
        trainer.rl_step(trees, rewards)
    assert torch.equal(emb.detach(), emb0) is freeze
    assert any(
        not torch.equal(p.detach(), others0[n]) for n, p in model.named_parameters() if n in others0
    )
    assert (emb in trainer.optimizer.state) is not freeze


def test_gradient_checkpointing_keeps_losses_and_gradients(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """gradient_checkpointing recomputes the decoder layers in backward: the same loss and
    the same weights after two AdamW steps as without it (float tolerance), and the layers
    really are checkpointed."""
    results = []
    for ckpt in (False, True):
        model = tiny_model_factory(torch.float32, seed=3, vocab=16)
        cfg = TrainerConfig(optim=OptimConfig(lr=1e-2), gradient_checkpointing=ckpt)
        trainer = Trainer(model, cfg)
        assert model.is_activation_checkpointing is ckpt
        losses = []
        for step in range(2):
            torch.manual_seed(step)
            trees, rewards = toy_task(model, 4, 2, step)
            losses.append(trainer.rl_step(trees, rewards)["loss"])
        results.append((losses, {k: v.clone() for k, v in model.state_dict().items()}))
    (l0, w0), (l1, w1) = results
    assert np.allclose(l0, l1, rtol=1e-5, atol=1e-7)
    for k in w0:
        torch.testing.assert_close(w0[k], w1[k], rtol=1e-5, atol=1e-6)
