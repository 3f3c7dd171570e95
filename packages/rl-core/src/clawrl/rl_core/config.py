"""Hyperparameters, one dataclass per concern (cleanrl style). Every value has a default.

Validation happens in ``__post_init__`` and raises :class:`ConfigError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from clawrl.rl_core.errors import ConfigError

__all__ = [
    "Aggregation",
    "CorrectionConfig",
    "GRPOConfig",
    "LoRAConfig",
    "LossConfig",
    "OptimConfig",
    "PPOConfig",
    "TrainerConfig",
]

Aggregation = Literal["token_mean", "sequence_mean", "prompt_mean", "unique_token_mean"]
_AGGREGATIONS = ("token_mean", "sequence_mean", "prompt_mean", "unique_token_mean")


@dataclass
class LossConfig:
    """Policy loss: clipped surrogate, aggregation, KL to a reference, entropy bonus.

    Attributes:
        clip_eps_low: ε_low, ratio floor 1 − ε_low for negative advantages.
        clip_eps_high: ε_high, ratio ceiling 1 + ε_high for positive advantages.
        aggregation: how per-(token, trajectory) terms are averaged (see
            :func:`clawrl.rl_core.losses.aggregation_weights`). ``token_mean`` (default)
            counts a token shared by k trajectories k times, as flat per-path training
            does; ``unique_token_mean`` counts it once, as the ClawGym II paper's tree GRPO
            does — recommended for branching rollouts.
        kl_coef: β of the k3 KL estimate to the reference model (0 = no reference model).
        entropy_coef: coefficient of the entropy bonus (subtracted from the loss).
        temperature: the rollout sampling temperature; logits are divided by it.
        include_side_paths: give side-path trajectories credit (excluded by default).
    """

    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    aggregation: Aggregation = "token_mean"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    temperature: float = 1.0
    include_side_paths: bool = False

    def __post_init__(self) -> None:
        if not (0 <= self.clip_eps_low < 1) or self.clip_eps_high < 0:
            raise ConfigError("need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
        if self.aggregation not in _AGGREGATIONS:
            raise ConfigError(f"aggregation must be one of {_AGGREGATIONS}")
        if self.temperature <= 0:
            raise ConfigError("temperature must be > 0")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError("kl_coef and entropy_coef must be >= 0")


@dataclass
class GRPOConfig:
    """GRPO advantages Â = (R − mean_g) / (std_g + ε) per group g.

    Attributes:
        scale_by_std: divide by the group std (False: Â = R − mean_g, "no-std" / Dr. GRPO).
        eps: ε in the denominator.
        group_key: the ``TrajectoryInfo.metadata`` key naming a rollout's group (a task, or a
            (task, harness) pair in mix-harness training) when groups are not given.
    """

    scale_by_std: bool = True
    eps: float = 1e-6
    group_key: str = "group_id"


@dataclass
class PPOConfig:
    """PPO with a value function (value head on the policy, or a separate critic).

    Attributes:
        gamma, lam: discount γ and GAE λ along each path (paper: γ = λ = 1, Â_t = R − V(s_t)).
        value_coef: weight of the value loss.
        value_clip: clip the new value to V_old ± value_clip in the value loss (None: off).
        value_warmup_steps: first steps train only the value function: the policy, KL and
            entropy terms are off and the policy gets no gradient (the value head reads
            detached hidden states), so no policy weight moves.
        whiten_advantages: normalise the GAE advantages to mean 0, std 1 over the batch's
            trainable tokens (:func:`clawrl.rl_core.whiten_advantages`); keeps a value
            function that lags the reward from making most advantages one sign.
    """

    gamma: float = 1.0
    lam: float = 1.0
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    value_warmup_steps: int = 0
    whiten_advantages: bool = False

    def __post_init__(self) -> None:
        if not (0 <= self.gamma <= 1 and 0 <= self.lam <= 1):
            raise ConfigError("gamma and lam must be in [0, 1]")
        if self.value_clip is not None and self.value_clip <= 0:
            raise ConfigError("value_clip must be > 0 or None")


@dataclass
class CorrectionConfig:
    """Training–inference consistency corrections from the recorded rollout logprobs.

    ρ = π_old(a) / π_rollout(a) per (token, trajectory), π_old the trainer's policy before the
    update. Attributes:
        tis_cap: token-level truncated importance weight min(ρ, c) (None: off).
        mask_low, mask_high: zero tokens whose ρ leaves [low, high] (IcePop; None: off).
        geo_mask_low, geo_mask_high: zero whole trajectories whose geometric-mean ρ leaves
            [low, high] (None: off).
    """

    tis_cap: float | None = 2.0
    mask_low: float | None = None
    mask_high: float | None = None
    geo_mask_low: float | None = None
    geo_mask_high: float | None = None

    def __post_init__(self) -> None:
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError("tis_cap must be > 0 or None")
        for lo, hi in ((self.mask_low, self.mask_high), (self.geo_mask_low, self.geo_mask_high)):
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError("a mask's low bound exceeds its high bound")


@dataclass
class OptimConfig:
    """AdamW with gradient clipping and a transformers LR schedule.

    Attributes:
        lr, betas, eps, weight_decay: AdamW.
        max_grad_norm: clip the global gradient norm (None: off).
        schedule: a ``transformers.get_scheduler`` name ("constant", "linear", "cosine", ...).
        warmup_steps, total_steps: schedule length in optimizer steps.
        value_lr: learning rate of the PPO value head / critic (None: ``lr``). A value
            head starts at zero, and Adam moves each weight by about ``lr`` per step, so at
            a policy-sized lr (1e-4) V stays near 0 for the whole run and Â = R − V carries
            no baseline; critics usually train faster than the policy.
    """

    lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 1000
    value_lr: float | None = None

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.total_steps < 1 or self.warmup_steps < 0:
            raise ConfigError("need lr > 0, total_steps >= 1, warmup_steps >= 0")
        if self.value_lr is not None and self.value_lr <= 0:
            raise ConfigError("value_lr must be > 0 or None")


#: LoRA's default target modules: every linear layer of a Llama / Qwen decoder block
LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoRAConfig:
    """LoRA adapters (peft's ``LoraConfig``) instead of full fine-tuning: the policy's
    weights stay frozen, each targeted linear layer learns ``W + (alpha / r) · B A``.

    Attributes:
        r: the adapters' rank (>= 1).
        alpha: the scale numerator (``lora_alpha``; the update is scaled by alpha / r).
        target_modules: names of the linear layers that get adapters (module-name suffixes,
            as peft matches them), or ``"all-linear"`` (every linear layer but the output
            layer). Default: the attention and MLP projections of Llama / Qwen blocks.
        dropout: dropout on the adapters' input in training (0: none).
    """

    r: int = 16
    alpha: float = 32.0
    target_modules: list[str] | str = field(default_factory=lambda: list(LORA_DEFAULT_TARGETS))
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ConfigError(f"lora.r: must be an integer >= 1, got {self.r!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float):
            raise ConfigError(f"lora.alpha: must be a number, got {self.alpha!r}")
        if self.alpha <= 0:
            raise ConfigError(f"lora.alpha: must be > 0, got {self.alpha!r}")
        self.alpha = float(self.alpha)
        t = self.target_modules
        if isinstance(t, tuple):
            self.target_modules = t = list(t)
        if isinstance(t, str):
            if t != "all-linear":
                raise ConfigError(
                    f"lora.target_modules: a list of module names or 'all-linear', got {t!r}"
                )
        elif not t or not all(isinstance(x, str) and x for x in t):
            raise ConfigError(
                f"lora.target_modules: must be a non-empty list of module names, got {t!r}"
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, int | float):
            raise ConfigError(f"lora.dropout: must be a number, got {self.dropout!r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"lora.dropout: must be in [0, 1), got {self.dropout!r}")


@dataclass
class TrainerConfig:
    """Everything one training run needs.

    Attributes:
        algorithm: "grpo" (critic-free) or "ppo" (value function).
        loss, grpo, ppo, corrections, optim: the sub-configs.
        token_budget: most tokens per forward (trees are split, results unchanged; None: no
            limit). The default 8192 bounds a forward's memory.
        update_epochs: passes over each RL batch (PPO epochs; ratios leave 1 from the second
            optimiser step on, where clipping acts).
        num_minibatches: optimiser steps per pass; the token-budget pieces are shuffled
            (seeded by ``seed``, the trainer step and the epoch: reproducible, and the same
            after a resume) and dealt into this many minibatches, each one's loss scaled by
            num_minibatches. Set ``token_budget`` so there are enough pieces: a batch with
            fewer pieces than minibatches runs one minibatch per piece, with a
            :class:`~clawrl.rl_core.errors.MinibatchCapWarning` and the step metrics
            ``num_minibatches`` / ``minibatches_capped``; ``token_budget=None`` (one piece)
            with num_minibatches > 1 is a ConfigError. The LR schedule counts optimiser
            steps: total = steps × epochs × minibatches.
        chunk_size: vocabulary-projection rows per chunk.
        seed: seeds torch, numpy and random at start.
        precision: "fp32" (default: everything in float32, as before), "bf16" or "auto"
            (bf16 where the device has native bf16 kernels, else fp32;
            :func:`clawrl.rl_core.precision.resolve_precision`). bf16: the
            forwards and backwards of the policy, critic and KL reference run under bf16
            autocast (matmuls in bfloat16 on the CPU's AMX units or the GPU's tensor cores),
            while parameters, gradients, AdamW state and checkpoints stay float32 (master
            weights), and logprobs, entropies and values are computed in float32 (the
            log-softmax over float32-upcast logits; value heads outside autocast). See
            ``docs/precision.md`` of the rl-core package.
        freeze_embeddings: keep the input embedding matrix fixed (no gradient, no AdamW
            state): for Qwen2.5-0.5B that is 136M of 630M parameters, ~1.6 GB of fp32
            gradient and optimiser state. With tied embeddings the output layer is the same
            matrix and is frozen too.
        gradient_checkpointing: recompute each decoder layer's activations in backward
            (transformers' ``activation_checkpointing_enable``, non-reentrant) instead of
            keeping them: the update's activation memory drops from every layer's to about
            one layer's, for one more forward's compute. Losses and gradients are unchanged.
        fsdp: with several processes (``accelerate launch --num_processes N``), shard the
            policy, its value head, a critic and the KL reference model over the ranks with
            torch's FSDP2 (``fully_shard`` on each decoder layer, then on the whole model):
            each rank keeps 1/N of the parameters, gradients and AdamW state, and
            all-gathers a layer's parameters for each forward and backward. The step equals
            the data-parallel one (ranks are padded to equal piece counts). Ignored in one
            process. See the package README, "FSDP".
        lora: train LoRA adapters instead of every weight: in TOML a table ``{r, alpha,
            target_modules, dropout}`` (:class:`LoRAConfig`; peft, the ``lora`` extra); None (default): full fine-tuning. The KL reference is
            then the policy with its adapters disabled (no copy of the model), and the
            weights synced to the inference backend are the merged ``W + scale · B A``. See
            ``docs/lora.md`` of the rl-core package.
    """

    algorithm: Literal["grpo", "ppo"] = "grpo"
    loss: LossConfig = field(default_factory=LossConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    corrections: CorrectionConfig = field(default_factory=CorrectionConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    token_budget: int | None = 8192
    update_epochs: int = 1
    num_minibatches: int = 1
    chunk_size: int = 1024
    seed: int = 0
    precision: Literal["fp32", "bf16", "auto"] = "fp32"
    freeze_embeddings: bool = False
    gradient_checkpointing: bool = False
    fsdp: bool = False
    lora: LoRAConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):  # from dataclasses.asdict (a saved checkpoint)
            self.lora = LoRAConfig(**self.lora)
        if self.lora is not None and self.fsdp:
            raise ConfigError("lora with fsdp is not supported (use one or the other)")
        if self.algorithm not in ("grpo", "ppo"):
            raise ConfigError("algorithm must be 'grpo' or 'ppo'")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise ConfigError(f"precision must be 'fp32', 'bf16' or 'auto', got {self.precision!r}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ConfigError("token_budget must be >= 1 or None")
        if self.update_epochs < 1 or self.num_minibatches < 1:
            raise ConfigError("update_epochs and num_minibatches must be >= 1")
        if self.token_budget is None and self.num_minibatches > 1:
            raise ConfigError(
                "num_minibatches > 1 needs a token_budget: without one a batch is one piece, "
                "so there would be a single minibatch"
            )
