"""``precision = "bf16"``: bf16 autocast over float32 master weights.

Stated tolerance of the bf16 tree forward against the bf16 flat (per-path) computation, both
under bf16 autocast: the loss to 1 % (relative) or 1e-3 (absolute, for losses near 0), every
gradient entry to 2 % of itself plus 3 % of the largest gradient entry. Measured over 12
seeds x {GRPO, PPO, SFT} x {without, with KL and entropy}: loss within 0.3 % (or 1.1e-4
absolute where the loss is under 1e-2), gradients within 1.5 % of the largest entry. fp32
stays exact (the float32/float64 tree-vs-flat properties elsewhere are unchanged)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from clawrl.rl_core import (
    ConfigError,
    CorrectionConfig,
    Critic,
    LossConfig,
    OptimConfig,
    Trainer,
    TrainerConfig,
    TreeBatch,
    ValueHead,
    pack_token_sequences,
    split_by_token_budget,
)
from clawrl.rl_core.train.config import AlgoConfig

BF16_LOSS_REL, BF16_LOSS_ABS = 1e-2, 1e-3
BF16_GRAD_RTOL, BF16_GRAD_ATOL = 2e-2, 3e-2


@pytest.mark.parametrize("mode", ["grpo", "ppo", "sft"])
@pytest.mark.parametrize(
    ("seed", "budget", "kl"), [(0, None, False), (1, 20, False), (2, 24, True)]
)
def test_bf16_tree_loss_and_grads_match_bf16_flat(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    tree_vs_flat: Callable[..., Any],
    mode: str,
    seed: int,
    budget: int | None,
    kl: bool,
) -> None:
    """Under bf16 autocast the tree loss and gradients equal the flat per-path ones to the
    stated bf16 tolerance (fp32 master weights; the value head and log-softmax in fp32)."""
    if kl and mode == "sft":
        pytest.skip("SFT has no KL term")
    rng = random.Random(seed)
    model = tiny_model_factory(torch.float32, seed=seed, vocab=64, hidden=64)
    head = None
    if mode == "ppo":
        head = ValueHead(64)
        torch.manual_seed(seed)
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    ref = tiny_model_factory(torch.float32, seed=seed + 10, vocab=64, hidden=64) if kl else None
    seqs = seq_factory(rng, 6, vocab=64, max_new=8)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    pieces = split_by_token_budget(
        batch, None if budget is None else max(budget, int(batch.position_ids.max()) + 1)
    )
    cfg = LossConfig(
        clip_eps_low=0.1,
        clip_eps_high=0.3,
        kl_coef=0.3 if kl else 0.0,
        entropy_coef=0.05 if kl else 0.0,
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tree_vs_flat(
            model,
            batch,
            pieces,
            seqs,
            rng,
            mode=mode,
            seed=seed,
            cfg=cfg,
            corr=CorrectionConfig(tis_cap=1.5),
            head=head,
            ref_model=ref,
            flat_extra=None if ref is None else _flat_kl_entropy(model, ref, batch, cfg),
            loss_rel=BF16_LOSS_REL,
            loss_abs=BF16_LOSS_ABS,
            grad_rtol=BF16_GRAD_RTOL,
            grad_atol=BF16_GRAD_ATOL,
        )


def _flat_kl_entropy(model: Any, ref: Any, batch: TreeBatch, cfg: LossConfig) -> Any:
    import numpy as np

    def extra(prepared: Any) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float64)
        for k in range(batch.num_trajectories):
            path = batch.path(k)
            x = torch.as_tensor(batch.input_ids[path])[None]
            lp_all = torch.log_softmax(model(input_ids=x).logits[0].float(), -1)
            with torch.no_grad():
                ref_all = torch.log_softmax(ref(input_ids=x).logits[0].float(), -1)
            pos_of = {int(t): p for p, t in enumerate(path)}
            for m in np.nonzero(batch.mem_traj == k)[0]:
                t = int(batch.mem_token[m])
                p, tok = pos_of[t], int(batch.input_ids[t])
                d = ref_all[p - 1, tok] - lp_all[p - 1, tok]
                ent = -(lp_all[p - 1].exp() * lp_all[p - 1]).sum()
                w = float(prepared.weight[m])
                total = total + w * (cfg.kl_coef * (d.exp() - d - 1) - cfg.entropy_coef * ent)
        return total

    return extra


class _DtypeSpy:
    """Records the output dtypes of every ``nn.Linear`` of a module (forward hooks)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.dtypes: dict[str, set[torch.dtype]] = {}
        for name, sub in module.named_modules():
            if isinstance(sub, torch.nn.Linear):
                sub.register_forward_hook(self._hook(name))

    def _hook(self, name: str) -> Any:
        def hook(_m: Any, _inp: Any, out: torch.Tensor) -> None:
            self.dtypes.setdefault(name, set()).add(out.dtype)

        return hook


def _bf16_config(**kw: Any) -> TrainerConfig:
    return TrainerConfig(precision="bf16", optim=OptimConfig(lr=1e-2), **kw)


def test_bf16_trainer_runs_matmuls_in_bf16_over_fp32_master_weights(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any], tmp_path: Path
) -> None:
    """precision="bf16": the policy's, critic's and reference's projections run in bf16,
    the value head in fp32; parameters, gradients and AdamW state stay fp32; the step's
    logprobs are fp32 and close to the fp32 trainer's; a checkpoint resumes exactly."""
    model = tiny_model_factory(torch.float32, seed=4, vocab=16, hidden=64)
    ref = tiny_model_factory(torch.float32, seed=4, vocab=16, hidden=64)
    critic = Critic(tiny_model_factory(torch.float32, seed=5, vocab=16, hidden=64))
    spies = {"policy": _DtypeSpy(model), "ref": _DtypeSpy(ref), "critic": _DtypeSpy(critic)}
    cfg = _bf16_config(algorithm="ppo", loss=LossConfig(kl_coef=0.1, entropy_coef=0.01))
    trainer = Trainer(model, cfg, critic=critic, ref_model=ref)
    assert trainer.autocast_dtype == torch.bfloat16
    trees, rewards = toy_task(model, 4, 1, 0)  # sampling runs outside the trainer: fp32
    for spy in spies.values():
        spy.dtypes.clear()
    m = trainer.rl_step(trees, rewards)
    assert m["kl"] == pytest.approx(0.0, abs=1e-6)  # same weights and same precision
    assert m["entropy"] > 0 and m["value_loss"] >= 0
    for who in ("policy", "ref", "critic"):
        proj = {k: v for k, v in spies[who].dtypes.items() if "head.linear" not in k}
        assert proj and all(v == {torch.bfloat16} for v in proj.values()), (who, proj)
    assert spies["critic"].dtypes["head.linear"] == {torch.float32}
    for p in [*model.parameters(), *critic.parameters()]:
        assert p.dtype == torch.float32
    for state in trainer.optimizer.state.values():
        assert all(v.dtype == torch.float32 for v in state.values() if v.dim())
    # the recorded old-pass logprobs are fp32, log-softmax of fp32-upcast logits
    assert trainer.last_update is not None
    old = trainer.last_update[2]
    assert old.logprobs.dtype.name == "float64"
    trainer.save_checkpoint(tmp_path / "c")
    again = Trainer(
        tiny_model_factory(torch.float32, seed=9, vocab=16, hidden=64),
        _bf16_config(algorithm="ppo"),
        critic=Critic(tiny_model_factory(torch.float32, seed=9, vocab=16, hidden=64)),
    )
    again.load_checkpoint(tmp_path / "c")
    for k, v in trainer.unwrapped.state_dict().items():
        assert torch.equal(v, again.unwrapped.state_dict()[k]), k


def test_bf16_logprobs_are_near_fp32_and_value_head_fp32(
    tiny_model_factory: Callable[..., Any], toy_task: Callable[..., Any]
) -> None:
    """The bf16 trainer's on-policy logprobs are within bf16 rounding of the fp32 trainer's
    (not equal: the matmuls really run in bf16), and a policy value head keeps fp32."""
    results = {}
    for precision in ("fp32", "bf16"):
        model = tiny_model_factory(torch.float32, seed=3, vocab=16, hidden=64)
        torch.manual_seed(0)
        trees, rewards = toy_task(model, 4, 2, 0)
        trainer = Trainer(
            model,
            TrainerConfig(algorithm="ppo", precision=precision),  # type: ignore[arg-type]
        )
        spy = _DtypeSpy(trainer.unwrapped)
        trainer.rl_step(trees, rewards)
        assert trainer.last_update is not None
        results[precision] = trainer.last_update[2].logprobs
        assert spy.dtypes["value_head.linear"] == {torch.float32}
    import numpy as np

    ok = np.isfinite(results["fp32"])
    diff = np.abs(results["fp32"][ok] - results["bf16"][ok])
    assert 0 < diff.max() < 0.1


def test_precision_config_and_errors(tiny_model_factory: Callable[..., Any]) -> None:
    """The [algo] key, its legacy spelling in a saved config.json, and one-line errors."""
    assert TrainerConfig().precision == "fp32"
    assert AlgoConfig.from_flat({"precision": "bf16"}).trainer.precision == "bf16"
    assert AlgoConfig.from_flat({"bf16": True}).trainer.precision == "bf16"
    assert AlgoConfig.from_flat({"bf16": "auto"}).trainer.precision == "fp32"
    assert json.loads(json.dumps(AlgoConfig().flat()))["precision"] == "fp32"
    with pytest.raises(ConfigError, match="precision"):
        TrainerConfig(precision="fp16")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="precision"):
        AlgoConfig.from_flat({"precision": "half"})
    import types

    model = tiny_model_factory(torch.float32, seed=1, vocab=16)
    # (a real Accelerator with mixed precision would fix accelerate's process-wide state)
    mixed = types.SimpleNamespace(mixed_precision="bf16")
    with pytest.raises(ConfigError, match="mixed_precision"):
        Trainer(model, _bf16_config(), accelerator=mixed)  # type: ignore[arg-type]
    trainer = Trainer(model, TrainerConfig())
    assert trainer.accelerator.mixed_precision == "no" and trainer.autocast_dtype is None


def test_sft_command_takes_precision() -> None:
    from clawrl.rl_core.sft_cli import SFTRunConfig

    base = {"trajectories": ["t.jsonl"], "model": "m", "out": "o"}
    assert SFTRunConfig(**base).precision == "fp32"  # type: ignore[arg-type]
    assert SFTRunConfig(**base, precision="bf16").precision == "bf16"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="precision"):
        SFTRunConfig(**base, precision="fp16")  # type: ignore[arg-type]


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_where_bf16_is_native(
    tiny_model_factory: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    native: bool,
) -> None:
    """ "auto" resolves to bf16 on a device with native bf16 kernels and to fp32 elsewhere
    (an AVX2-only CPU runs bf16 matmuls over 100 times slower than fp32); an explicit bf16
    is kept, with a warning where it is not native. The trainer, sft and train configs all
    take it. Revert: "auto" treated as fp32 (or bf16) everywhere -> one of the cases fails."""
    from clawrl.rl_core import precision
    from clawrl.rl_core.sft_cli import SFTRunConfig
    from clawrl.rl_core.train.config import BackendConfig

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
    assert precision.bf16_is_native("cpu") is native
    assert precision.resolve_precision("auto", "cpu") == ("bf16" if native else "fp32")
    assert precision.resolve_precision("fp32", "cpu") == "fp32"
    caplog.clear()
    with caplog.at_level("WARNING", logger="clawrl.rl_core"):
        assert precision.resolve_precision("bf16", "cpu") == "bf16"
    assert ("over 100 times slower" in caplog.text) is (not native)
    model = tiny_model_factory(torch.float32, seed=1, vocab=16)
    trainer = Trainer(model, TrainerConfig(precision="auto"))
    assert trainer.precision == ("bf16" if native else "fp32")
    assert trainer.autocast_dtype == (torch.bfloat16 if native else None)
    assert AlgoConfig.from_flat({"precision": "auto"}).trainer.precision == "auto"
    base = {"trajectories": ["t.jsonl"], "model": "m", "out": "o"}
    assert SFTRunConfig(**base, precision="auto").precision == "auto"  # type: ignore[arg-type]
    assert BackendConfig(dtype="auto").dtype == "auto"
