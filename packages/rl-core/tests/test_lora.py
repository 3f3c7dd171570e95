"""LoRA (``[algo] lora``, with peft): a LoRA tree step is the step of peft's own merged
model (loss equal, adapter gradients = the chain rule of the merged weights' gradients);
only the adapters train; the KL reference is the base model (adapters disabled); the
merged weights the backend gets give the trainer's logprobs; checkpoints resume and export
merged weights; config errors are one line naming ``[algo] lora.KEY``."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    ConfigError,
    CorrectionConfig,
    LoRAConfig,
    LossConfig,
    OldPass,
    OptimConfig,
    PPOConfig,
    Trainer,
    TrainerConfig,
    TreeBatch,
    TreeModel,
    ValueHead,
    loss_backward,
    old_pass,
    pack_token_sequences,
    prepare_rl,
    split_by_token_budget,
)
from clawrl.rl_core.lora import (
    AdapterDisabledReference,
    add_lora,
    lora_parameters,
    merged_state_dict,
)
from clawrl.rl_core.train.config import AlgoConfig, load_config
from clawrl.rl_core.train_cli import main as train_main
from peft.tuners.lora import LoraLayer

LORA = LoRAConfig(r=4, alpha=8.0)


def _lora_model(factory: Callable[..., Any], seed: int) -> tuple[Any, Any, Any]:
    """(model with adapters, a copy of its base, the peft model); every adapter weight drawn
    at random (B = 0 at init would make the adapters a no-op)."""
    model = factory(torch.float64, seed=seed, vocab=64, hidden=64)
    base = copy.deepcopy(model)
    peft_model = add_lora(model, LORA)
    torch.manual_seed(seed + 100)
    with torch.no_grad():
        for _, p in lora_parameters(model):
            p.normal_(0, 0.2)
    return model, base, peft_model


def _batch(seq_factory: Callable[..., Any], seed: int) -> tuple[Any, Any, list[Any]]:
    rng = random.Random(seed)
    seqs = seq_factory(rng, 6, vocab=64, max_new=8)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    return batch, split_by_token_budget(batch, None), seqs


@pytest.mark.parametrize("mode", ["grpo", "ppo"])
def test_lora_tree_step_equals_the_step_of_peft_merged_model(
    tiny_model_factory: Callable[..., Any], seq_factory: Callable[..., Any], mode: str
) -> None:
    """Same batch through the LoRA model (tree forward, value head, KL reference = adapters
    disabled) and through ``merge_and_unload()`` of a copy (KL reference = the base model):
    equal logprobs, reference logprobs, values and loss; each adapter's gradient is the
    chain rule of the merged weight's gradient G: dB = s·G·Aᵀ, dA = s·Bᵀ·G (s = alpha/r)."""
    model, base, peft_model = _lora_model(tiny_model_factory, seed=3)
    merged = copy.deepcopy(peft_model).merge_and_unload().requires_grad_(True)
    head = None
    if mode == "ppo":
        head = ValueHead(64).to(torch.float64)
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    lora_tm, merged_tm = TreeModel(model, head), TreeModel(merged, copy.deepcopy(head))
    ref = AdapterDisabledReference(peft_model)
    batch, pieces, seqs = _batch(seq_factory, 3)

    old = old_pass(lora_tm, batch, pieces, ref_model=ref)
    old_m = old_pass(merged_tm, batch, pieces, ref_model=base)
    ok = np.isfinite(old.logprobs)
    assert ok.sum() > 5
    np.testing.assert_allclose(old.logprobs[ok], old_m.logprobs[ok], rtol=0, atol=1e-10)
    assert old.ref_logprobs is not None and old_m.ref_logprobs is not None
    np.testing.assert_allclose(old.ref_logprobs[ok], old_m.ref_logprobs[ok], rtol=0, atol=1e-10)
    assert np.abs(old.ref_logprobs[ok] - old.logprobs[ok]).max() > 1e-2  # adapters matter
    if mode == "ppo":
        assert old.values is not None and old_m.values is not None
        np.testing.assert_allclose(old.values[ok], old_m.values[ok], rtol=0, atol=1e-10)

    noise = np.random.default_rng(3).normal(0, 0.3, batch.num_tokens)
    old = OldPass(logprobs=old.logprobs + noise, values=old.values, ref_logprobs=old.ref_logprobs)
    rng = random.Random(4)
    loss_cfg = LossConfig(clip_eps_low=0.1, clip_eps_high=0.3, kl_coef=0.3, entropy_coef=0.05)
    ppo = PPOConfig(gamma=0.9, lam=0.8, value_coef=0.7, value_clip=0.05)
    prepared = prepare_rl(
        batch,
        old,
        {s.rollout_id: rng.random() for s in seqs},
        algorithm=mode,
        loss_cfg=loss_cfg,
        ppo_cfg=ppo,
        corr_cfg=CorrectionConfig(tis_cap=1.5),
    )
    stats = {}
    for name, tm in (("lora", lora_tm), ("merged", merged_tm)):
        stats[name] = loss_backward(
            tm, batch, pieces, prepared, old, loss_cfg=loss_cfg, ppo_cfg=ppo, chunk_size=4
        )
    assert stats["lora"]["loss"] == pytest.approx(stats["merged"]["loss"], rel=1e-10, abs=1e-12)
    assert stats["lora"]["kl"] > 0

    layers = {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}
    assert len(layers) == 2 * 7  # every projection of both decoder layers
    merged_params = dict(merged.named_parameters())
    scale = LORA.alpha / LORA.r
    for name, layer in layers.items():
        g = merged_params[f"{name}.weight"].grad
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        assert g is not None and a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, scale * g @ a.detach().T, rtol=1e-8, atol=1e-12)
        torch.testing.assert_close(a.grad, scale * b.detach().T @ g, rtol=1e-8, atol=1e-12)
    if head is not None:
        head_m = merged_tm.value_head
        assert head_m is not None
        torch.testing.assert_close(head.linear.weight.grad, head_m.linear.weight.grad)
    frozen = [n for n, p in model.named_parameters() if ".lora_" not in n]
    assert frozen and all(model.get_parameter(n).grad is None for n in frozen)


def _ids_logprobs(model: Any, batch: TreeBatch, pieces: list[Any]) -> np.ndarray:
    out = old_pass(TreeModel(model), batch, pieces)
    return out.logprobs


def _lora_trainer(model: Any, *, kl: float = 0.2, algorithm: str = "grpo") -> Trainer:
    cfg = TrainerConfig(
        algorithm=algorithm,  # type: ignore[arg-type]
        lora=LORA,
        optim=OptimConfig(lr=3e-2),
        loss=LossConfig(kl_coef=kl),
    )
    return Trainer(model, cfg)


def test_lora_trainer_trains_only_adapters_and_syncs_merged_weights(
    tiny_model_factory: Callable[..., Any], seq_factory: Callable[..., Any]
) -> None:
    """Two optimiser steps of a LoRA Trainer (KL on, no reference model passed): gradients
    and AdamW state exist for the adapters only, the base weights are unchanged, the KL
    reference is the base model, and the merged weights loaded into a plain model (what the
    weight sync sends) give the trainer's logprobs — and equal peft's ``merge_and_unload``."""
    model = tiny_model_factory(torch.float64, seed=5, vocab=64, hidden=64)
    base = copy.deepcopy(model)
    trainer = _lora_trainer(model)
    batch, pieces, seqs = _batch(seq_factory, 5)
    trees = [pack_token_sequences(seqs)]
    rewards = {"r0": 1.0, "r1": 0.0, "r2": 0.0}
    for _ in range(2):
        trainer.rl_step(trees, rewards)

    adapters = dict(lora_parameters(model))
    assert len(adapters) == 28
    trained = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert trained == {id(p) for p in adapters.values()}
    assert {id(p) for p in trainer.optimizer.state} == trained  # AdamW moments: adapters only
    for name, p in model.named_parameters():
        if ".lora_" not in name:
            assert not p.requires_grad and p.grad is None
    base_sd = base.state_dict()
    own = {  # the trainer's frozen weights under the adapters did not move
        k.replace(".base_layer.", "."): v
        for k, v in model.state_dict().items()
        if ".lora_" not in k
    }
    assert own.keys() == base_sd.keys()
    assert all(torch.equal(own[k], base_sd[k]) for k in base_sd)
    merged = merged_state_dict(model)
    assert merged.keys() == base_sd.keys()
    adapted = [f"{n}.weight" for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    assert len(adapted) == 14
    changed = [k for k in base_sd if not torch.equal(merged[k], base_sd[k])]
    assert sorted(changed) == sorted(adapted)  # the adapters moved exactly these

    # the KL reference of the last step was the base model
    assert trainer.last_update is not None
    _, _, old = trainer.last_update
    assert old.ref_logprobs is not None
    ok = np.isfinite(old.ref_logprobs)
    want_ref = _ids_logprobs(base, batch, pieces)
    np.testing.assert_allclose(old.ref_logprobs[ok], want_ref[ok], rtol=0, atol=1e-10)

    synced = tiny_model_factory(torch.float64, seed=99, vocab=64, hidden=64)
    synced.load_state_dict(merged, strict=True)
    peft_merged = copy.deepcopy(trainer.peft_model).merge_and_unload()  # type: ignore[union-attr]
    for key, value in peft_merged.state_dict().items():
        torch.testing.assert_close(merged[key], value, rtol=1e-12, atol=1e-14)
    got = old_pass(trainer.model, batch, pieces).logprobs
    want = _ids_logprobs(synced, batch, pieces)
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=1e-10)
    assert np.abs(got[ok] - want_ref[ok]).max() > 1e-3  # the steps changed the policy


def test_lora_checkpoint_resumes_and_exports_merged_weights(
    tiny_model_factory: Callable[..., Any], seq_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """save → a fresh LoRA Trainer on the starting weights loads it → same adapters, AdamW
    state and next step; ``export_hf`` writes the merged weights as a plain HF model."""
    from transformers import AutoModelForCausalLM

    model = tiny_model_factory(torch.float64, seed=6, vocab=64, hidden=64)
    start = copy.deepcopy(model)
    trainer = _lora_trainer(model, algorithm="ppo")
    _, _, seqs = _batch(seq_factory, 6)
    trees = [pack_token_sequences(seqs)]
    rewards = {s.rollout_id: float(s.rollout_id == "r1") for s in seqs}
    trainer.rl_step(trees, rewards)
    trainer.save_checkpoint(tmp_path / "ckpt")

    resumed = _lora_trainer(start, algorithm="ppo")
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.step == 1
    want = trainer.unwrapped.state_dict()
    got = resumed.unwrapped.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    m1 = trainer.rl_step(trees, rewards)
    m2 = resumed.rl_step(trees, rewards)
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-12)
    for (n1, p1), (_, p2) in zip(lora_parameters(model), lora_parameters(start), strict=True):
        torch.testing.assert_close(p1, p2, rtol=1e-12, atol=1e-14, msg=n1)

    out = trainer.export_hf(tmp_path / "hf")
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64)
    sd = exported.state_dict()
    merged = copy.deepcopy(trainer.peft_model).merge_and_unload().state_dict()  # type: ignore[union-attr]
    assert sd.keys() == merged.keys()
    for k in merged:
        torch.testing.assert_close(sd[k], merged[k], rtol=1e-12, atol=1e-14)


def test_train_export_hf_merges_a_lora_runs_checkpoint(tmp_path: Path) -> None:
    """``train export-hf`` on a LoRA run's checkpoint writes the merged policy."""
    from clawrl.rl_core.train import TrainConfig
    from clawrl.rl_core.train.checkpoints import LoopState, save_checkpoint
    from clawrl.rl_core.train.ranks import load_policy
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    cfg = TrainConfig(algo=AlgoConfig.from_flat({"lora": {"r": 2, "alpha": 4}}))
    cfg.run.out = str(run)
    (run / "checkpoints").mkdir(parents=True)
    cfg.save(run / "config.json")
    policy = load_policy(cfg.model.build())
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    trainer = Trainer(policy, cfg.trainer_config())
    with torch.no_grad():
        for _, p in lora_parameters(policy):
            p.normal_(0, 0.1)
    ckpt = save_checkpoint(run / "checkpoints", trainer, LoopState(next_step=1), keep=1)
    out = tmp_path / "hf"
    assert train_main(["export-hf", str(ckpt), str(out)]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    merged = copy.deepcopy(trainer.peft_model).merge_and_unload().state_dict()  # type: ignore[union-attr]
    assert exported.keys() == merged.keys()
    for k in merged:
        torch.testing.assert_close(exported[k], merged[k], rtol=1e-6, atol=1e-7)
    assert any(not torch.equal(exported[k], v) for k, v in start.items())


def test_lora_config_keys_and_one_line_errors(
    tiny_model_factory: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert TrainerConfig().lora is None and AlgoConfig().flat()["lora"] is None
    algo = AlgoConfig.from_flat({"lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}})
    assert algo.trainer.lora == LoRAConfig(r=8, alpha=32.0, target_modules=["q_proj", "v_proj"])
    flat = json.loads(json.dumps(algo.flat()))  # config.json round trip
    assert AlgoConfig.from_flat(flat).trainer.lora == algo.trainer.lora
    assert AlgoConfig.from_flat({"lora": None}).trainer.lora is None
    cfg = load_config(None, ["algo.lora.r=4", "algo.lora.dropout=0.1"])
    assert cfg.trainer_config().lora == LoRAConfig(r=4, dropout=0.1)
    bad = [
        ({"r": 0}, r"^\[algo\] lora\.r: must be an integer >= 1, got 0$"),
        ({"r": "8"}, r"^\[algo\] lora\.r: expected int, got '8'$"),
        ({"alpha": -1}, r"^\[algo\] lora\.alpha: must be > 0"),
        ({"target_modules": []}, r"^\[algo\] lora\.target_modules: must be a non-empty list"),
        ({"target_modules": "all"}, r"^\[algo\] lora\.target_modules: .*'all-linear'"),
        ({"dropout": 1.0}, r"^\[algo\] lora\.dropout: must be in \[0, 1\)"),
        ({"rank": 8}, r"^\[algo\] lora: unknown key\(s\) \['rank'\]"),
    ]
    for table, match in bad:
        with pytest.raises(ConfigError, match=match):
            AlgoConfig.from_flat({"lora": table})
    with pytest.raises(ConfigError, match=r"^\[algo\] lora: expected a table"):
        AlgoConfig.from_flat({"lora": 8})
    with pytest.raises(ConfigError, match="lora with fsdp"):
        TrainerConfig(lora=LoRAConfig(), fsdp=True)
    model = tiny_model_factory(torch.float32, seed=1, vocab=16)
    with pytest.raises(ConfigError, match=r"^\[algo\] lora\.target_modules: .*not found"):
        Trainer(model, TrainerConfig(lora=LoRAConfig(target_modules=["no_such_proj"])))

    out = tmp_path / "out"
    config = tmp_path / "bad.toml"
    config.write_text(f'[run]\nout = "{out}"\n[algo]\nlora = {{r = 0, alpha = 16}}\n')
    assert train_main(["--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "train: config error: [algo] lora.r: must be an integer >= 1, got 0"
    assert not out.exists()


async def test_embedded_backend_loads_the_merged_weights() -> None:
    """The loop's in-process weight sync: the embedded backend takes the merged weights
    (the LoRA model's own state dict, with ``base_layer`` / ``lora_`` keys, it refuses) and
    then holds exactly peft's merged model."""
    from clawrl.proxy import EmbeddedBackend
    from clawrl.rl_core.train import TrainConfig
    from clawrl.rl_core.train.ranks import load_policy

    cfg = TrainConfig(algo=AlgoConfig.from_flat({"lora": {"r": 2, "alpha": 4}}))
    model_dir = cfg.model.build()
    policy = load_policy(model_dir)
    trainer = Trainer(policy, cfg.trainer_config())
    with torch.no_grad():
        for _, p in lora_parameters(policy):
            p.normal_(0, 0.1)
    backend = EmbeddedBackend(model_dir)
    try:
        with pytest.raises(Exception, match=r"base_layer|lora_") as refused:
            await backend.load_state_dict(policy.state_dict(), 1)
        assert type(refused.value).__name__ == "WeightLoadError"
        await backend.load_state_dict(merged_state_dict(policy), 2)
        assert backend.policy_version == 2
        served = backend._model.state_dict()  # the backend's own copy
    finally:
        await backend.close()
    want = copy.deepcopy(trainer.peft_model).merge_and_unload().state_dict()  # type: ignore[union-attr]
    assert served.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(served[k], want[k], rtol=1e-6, atol=1e-7)
