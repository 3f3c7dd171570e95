"""One tree-packed RL / SFT update, decomposed into the steps a reader can check.

1. :func:`old_pass` — no-grad forward over every piece: π_old per token (and V_old, π_ref);
2. :func:`prepare_rl` — advantages (GRPO / GAE), corrections, aggregation weights, on the
   membership list (NumPy float64);
3. :func:`loss_backward` — per piece: forward with grad, scatter membership terms into
   per-token coefficients, loss, ``backward`` (gradients accumulate over pieces).

The optimiser step is the trainer's job (:mod:`clawrl.rl_core.trainer`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from clawrl.rl_core.advantages import gae_along_paths, grpo_advantages, whiten_advantages
from clawrl.rl_core.config import CorrectionConfig, GRPOConfig, LossConfig, PPOConfig
from clawrl.rl_core.corrections import (
    correction_metrics,
    geometric_sequence_mask,
    ratio_mask,
    truncated_importance_weights,
)
from clawrl.rl_core.errors import ConfigError, MissingGroupError, PackingError
from clawrl.rl_core.forward import TreeForwardOutput, TreeModel, tree_forward
from clawrl.rl_core.losses import (
    aggregation_weights,
    clipped_surrogate_loss,
    entropy_bonus,
    reference_kl_loss,
    scatter_to_tokens,
    sft_loss,
    value_loss,
)
from clawrl.rl_core.packing import TreeBatch, TreePiece
from clawrl.rl_core.value import Critic
from torch import Tensor, nn

__all__ = ["OldPass", "PreparedRL", "loss_backward", "old_pass", "prepare_rl", "prepare_sft"]


@dataclass
class OldPass:
    """Per-token results of the no-grad pass (float64 [N], NaN where not computed)."""

    logprobs: np.ndarray
    values: np.ndarray | None = None
    ref_logprobs: np.ndarray | None = None


@dataclass
class PreparedRL:
    """Per-membership quantities (float64 [M]) for :func:`loss_backward`.

    Attributes:
        weight: w_m for policy / KL / entropy / SFT terms (aggregation × corrections).
        advantage: A_m (None for SFT).
        value_weight, returns, old_values: value-loss inputs (None without a value function).
        importance_weight: the correction factor c_m folded into ``weight`` (RL only): the
            TIS weight min(ρ, C) of ρ = π_old / π_rollout (Yao et al. 2025, "Your efficient
            RL framework secretly brings you off-policy RL training"), times 0 where a ratio
            mask drops the token, 1 with no correction configured.
        metrics: scalar diagnostics (corrections, advantages).
    """

    weight: np.ndarray
    advantage: np.ndarray | None = None
    value_weight: np.ndarray | None = None
    returns: np.ndarray | None = None
    old_values: np.ndarray | None = None
    importance_weight: np.ndarray | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def _piece_tensors(
    piece: TreePiece,
    device: torch.device,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(input_ids, position_ids, parent_index, subtree_end, targets) as int64 tensors."""

    def t(a: np.ndarray) -> Tensor:
        return torch.as_tensor(a, dtype=torch.int64, device=device)

    return (
        t(piece.input_ids),
        t(piece.position_ids),
        t(piece.parent_index),
        t(piece.subtree_end),
        t(piece.targets),
    )


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _forward(
    model: nn.Module,
    pt: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    value_head: nn.Module | None,
    *,
    temperature: float,
    chunk_size: int,
    compute_entropy: bool = False,
    compute_values: bool = True,
    policy_grad: bool = True,
) -> TreeForwardOutput:
    """Run ``model`` (a HF causal LM, a :class:`TreeModel`, or a DDP/FSDP wrapper of one)."""
    inner = getattr(model, "module", model)
    if isinstance(inner, TreeModel):
        out: TreeForwardOutput = model(
            *pt,
            temperature=temperature,
            chunk_size=chunk_size,
            compute_entropy=compute_entropy,
            compute_values=compute_values,
            policy_grad=policy_grad,
        )
        return out
    return tree_forward(
        model,
        *pt,
        temperature=temperature,
        chunk_size=chunk_size,
        compute_entropy=compute_entropy,
        value_head=value_head if compute_values else None,
        policy_grad=policy_grad,
    )


@contextmanager
def _eval_mode(*modules: nn.Module | None) -> Iterator[None]:
    """Put modules in eval mode (dropout off) and restore each one's mode afterwards."""
    mods = [m for m in modules if m is not None]
    modes = [[(s, s.training) for s in m.modules()] for m in mods]
    try:
        for m in mods:
            m.eval()
        yield
    finally:
        for saved in modes:
            for sub, was in saved:
                sub.train(was)


@torch.no_grad()
def old_pass(
    model: nn.Module,
    batch: TreeBatch,
    pieces: Sequence[TreePiece],
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    value_head: nn.Module | None = None,
    critic: Critic | None = None,
    ref_model: nn.Module | None = None,
) -> OldPass:
    """Forward every piece without gradients; π_old (and V_old, π_ref) per trainable token.

    Runs ``model``, ``value_head``, ``critic`` and ``ref_model`` in eval mode (dropout off,
    so π_old is deterministic and is the policy the engine samples from), restoring each
    module's train/eval mode afterwards.

    Returns:
        :class:`OldPass`, float64 [N] arrays (NaN at tokens that are no piece's target).
    """
    with _eval_mode(model, value_head, critic, ref_model):
        return _old_pass(
            model,
            batch,
            pieces,
            temperature=temperature,
            chunk_size=chunk_size,
            value_head=value_head,
            critic=critic,
            ref_model=ref_model,
        )


def _old_pass(
    model: nn.Module,
    batch: TreeBatch,
    pieces: Sequence[TreePiece],
    *,
    temperature: float,
    chunk_size: int,
    value_head: nn.Module | None,
    critic: Critic | None,
    ref_model: nn.Module | None,
) -> OldPass:
    n = batch.num_tokens
    lp = np.full(n, np.nan)
    inner = getattr(model, "module", model)
    has_head = value_head is not None or (
        isinstance(inner, TreeModel) and inner.value_head is not None
    )
    vals = np.full(n, np.nan) if (has_head or critic is not None) else None
    ref = np.full(n, np.nan) if ref_model is not None else None
    dev = _device_of(model)
    for piece in pieces:
        pt = _piece_tensors(piece, dev)
        out = _forward(
            model,
            pt,
            value_head,
            temperature=temperature,
            chunk_size=chunk_size,
            compute_values=vals is not None and critic is None,
        )
        # a padding piece runs the same forwards (sharded models all-gather in each one)
        # and records nothing
        g = piece.token_index[piece.targets] if not piece.padding else None
        if g is not None:
            lp[g] = out.logprobs.double().cpu().numpy()
        if vals is not None:
            v = out.values if critic is None else critic(*pt)
            assert v is not None
            if g is not None:
                vals[g] = v.double().cpu().numpy()
        if ref is not None and ref_model is not None:
            pr = _piece_tensors(piece, _device_of(ref_model))
            r = _forward(
                ref_model,
                pr,
                None,
                temperature=temperature,
                chunk_size=chunk_size,
                compute_values=False,
            )
            if g is not None:
                ref[g] = r.logprobs.double().cpu().numpy()
    return OldPass(logprobs=lp, values=vals, ref_logprobs=ref)


def _included(batch: TreeBatch, loss_cfg: LossConfig) -> np.ndarray:
    side = np.asarray([t.side_path for t in batch.trajectories], dtype=bool)
    if loss_cfg.include_side_paths or side.size == 0:
        return np.ones(batch.num_memberships, dtype=bool)
    return ~side[batch.mem_traj]


def _traj_groups(batch: TreeBatch, key: str) -> list[Hashable]:
    return [t.metadata.get(key, t.rollout_id) for t in batch.trajectories]


def _checked_rewards(batch: TreeBatch, rewards: Mapping[str, float]) -> np.ndarray:
    """Reward per trajectory (float64 [T]); raises ConfigError / PackingError on bad input."""
    missing = {t.rollout_id for t in batch.trajectories} - set(rewards)
    if missing:
        raise ConfigError(f"no reward for rollouts {sorted(missing)[:5]}")
    traj_reward = np.asarray([rewards[t.rollout_id] for t in batch.trajectories], np.float64)
    if not np.all(np.isfinite(traj_reward)):
        raise ConfigError("rewards must be finite (a failed verification is 0, not NaN)")
    if not np.all(np.isfinite(batch.mem_logprob)):
        raise PackingError("rollout logprobs (mem_logprob) must be finite")
    return traj_reward


def _resolved_groups(
    batch: TreeBatch, key: str, groups: Mapping[str, Hashable] | None, required: bool
) -> list[Hashable]:
    """Group key per trajectory: ``groups`` first, then trajectory metadata ``key``.

    Raises:
        MissingGroupError: ``required`` and a rollout with a group in neither place.
    """
    tg = _traj_groups(batch, key)
    if groups is not None:
        tg = [groups.get(t.rollout_id, g) for t, g in zip(batch.trajectories, tg, strict=True)]
    if required:
        lost = sorted(
            {
                t.rollout_id
                for t in batch.trajectories
                if key not in t.metadata and (groups is None or t.rollout_id not in groups)
            }
        )
        if lost:
            raise MissingGroupError(
                f"no group for rollouts {lost[:5]} ({len(lost)} in all): pass groups= or set "
                f"trajectory metadata {key!r}; a group of one would get advantage 0"
            )
    return tg


def _correction_multiplier(
    batch: TreeBatch,
    old: OldPass,
    inc: np.ndarray,
    corr_cfg: CorrectionConfig,
    current_version: int,
    metrics: dict[str, float],
) -> np.ndarray:
    """Per-membership correction factor (float64 [M]): masks × TIS weight of
    ρ = π_old / π_rollout; adds the correction metrics to ``metrics``."""
    log_ratio = old.logprobs[batch.mem_token] - batch.mem_logprob
    keep = ratio_mask(log_ratio, corr_cfg.mask_low, corr_cfg.mask_high)
    keep &= geometric_sequence_mask(
        log_ratio, batch.mem_traj, corr_cfg.geo_mask_low, corr_cfg.geo_mask_high
    )
    mult = keep.astype(np.float64)
    if corr_cfg.tis_cap is not None:
        mult = mult * truncated_importance_weights(log_ratio, corr_cfg.tis_cap)
    metrics.update(
        correction_metrics(
            log_ratio[inc], keep[inc], batch.mem_policy_version[inc], current_version
        )
    )
    return mult


def _grpo_advantage(
    batch: TreeBatch,
    traj_reward: np.ndarray,
    tg: list[Hashable],
    grpo_cfg: GRPOConfig,
    metrics: dict[str, float],
) -> np.ndarray:
    """GRPO advantage per membership (float64 [M]): one reward per rollout, normalised in
    its group (every trajectory of a rollout shares it)."""
    rollouts: dict[str, int] = {}
    r_of_traj = np.asarray(
        [rollouts.setdefault(t.rollout_id, len(rollouts)) for t in batch.trajectories], np.int64
    )
    r_reward = np.zeros(len(rollouts))
    r_group: list[Hashable] = [None] * len(rollouts)
    for k, ri in enumerate(r_of_traj):
        r_reward[ri] = traj_reward[k]
        r_group[ri] = tg[k]
    adv_r = grpo_advantages(r_reward, r_group, scale_by_std=grpo_cfg.scale_by_std, eps=grpo_cfg.eps)
    metrics["advantage_mean"] = float(adv_r.mean())
    metrics["reward_mean"] = float(r_reward.mean())
    return adv_r[r_of_traj][batch.mem_traj]


def _ppo_prepared(
    batch: TreeBatch,
    old: OldPass,
    traj_reward: np.ndarray,
    inc: np.ndarray,
    pol_w: np.ndarray,
    w: np.ndarray,
    ppo_cfg: PPOConfig,
    metrics: dict[str, float],
) -> PreparedRL:
    """PPO: GAE along each trajectory's path from V_old, optional whitening."""
    if old.values is None:
        raise ConfigError("PPO needs values from a value head or critic in the old pass")
    v_mem = old.values[batch.mem_token]
    adv, ret = gae_along_paths(
        v_mem,
        traj_reward,
        batch.mem_traj,
        batch.position_ids[batch.mem_token],
        gamma=ppo_cfg.gamma,
        lam=ppo_cfg.lam,
    )
    metrics["advantage_mean"] = float(adv[inc].mean()) if inc.any() else 0.0
    metrics["advantage_std"] = float(adv[inc].std()) if inc.any() else 0.0
    if ppo_cfg.whiten_advantages:
        adv = whiten_advantages(adv, inc)
    metrics["value_mean"] = float(v_mem[inc].mean()) if inc.any() else 0.0
    metrics["reward_mean"] = float(traj_reward.mean())
    return PreparedRL(
        weight=pol_w, advantage=adv, value_weight=w, returns=ret, old_values=v_mem, metrics=metrics
    )


def prepare_rl(
    batch: TreeBatch,
    old: OldPass,
    rewards: Mapping[str, float],
    *,
    algorithm: str = "grpo",
    loss_cfg: LossConfig | None = None,
    grpo_cfg: GRPOConfig | None = None,
    ppo_cfg: PPOConfig | None = None,
    corr_cfg: CorrectionConfig | None = None,
    groups: Mapping[str, Hashable] | None = None,
    current_version: int = 0,
) -> PreparedRL:
    """Advantages, corrections and weights on the membership list.

    Args:
        batch: the forest.
        old: the no-grad pass (π_old; V_old for PPO).
        rewards: reward per rollout id (every trajectory of a rollout shares it).
        algorithm: "grpo" or "ppo".
        groups: group key per rollout id (GRPO, ``prompt_mean``); a rollout not in it takes
            its trajectories' metadata value of ``grpo_cfg.group_key``. (PPO without
            ``prompt_mean`` needs no group.)
        current_version: the trainer's policy version (staleness metric).

    Raises:
        ConfigError: a rollout without a reward, a non-finite reward, an unknown algorithm.
        MissingGroupError: GRPO or ``prompt_mean`` and a rollout with no group in either
            place (it would be a group of one: Â ≡ 0, silently untrained).
        PackingError: a non-finite rollout logprob.
    """
    loss_cfg = loss_cfg or LossConfig()
    grpo_cfg = grpo_cfg or GRPOConfig()
    if algorithm not in ("grpo", "ppo"):
        raise ConfigError(f"unknown algorithm {algorithm!r}")
    traj_reward = _checked_rewards(batch, rewards)
    inc = _included(batch, loss_cfg)
    need_group = algorithm == "grpo" or loss_cfg.aggregation == "prompt_mean"
    tg = _resolved_groups(batch, grpo_cfg.group_key, groups, need_group)
    w = aggregation_weights(loss_cfg.aggregation, batch.mem_token, batch.mem_traj, inc, tg)
    metrics: dict[str, float] = {}
    mult = _correction_multiplier(
        batch, old, inc, corr_cfg or CorrectionConfig(), current_version, metrics
    )
    pol_w = w * mult
    if algorithm == "grpo":
        adv = _grpo_advantage(batch, traj_reward, tg, grpo_cfg, metrics)
        return PreparedRL(weight=pol_w, advantage=adv, importance_weight=mult, metrics=metrics)
    ppo = _ppo_prepared(batch, old, traj_reward, inc, pol_w, w, ppo_cfg or PPOConfig(), metrics)
    return dataclasses.replace(ppo, importance_weight=mult)


def prepare_sft(batch: TreeBatch, loss_cfg: LossConfig | None = None) -> PreparedRL:
    """SFT weights: ``loss_cfg.aggregation`` over the assistant-token memberships
    (``unique_token_mean`` counts a shared assistant token once)."""
    loss_cfg = loss_cfg or LossConfig(aggregation="unique_token_mean")
    w = aggregation_weights(
        loss_cfg.aggregation,
        batch.mem_token,
        batch.mem_traj,
        _included(batch, loss_cfg),
        _traj_groups(batch, GRPOConfig().group_key),
    )
    return PreparedRL(weight=w)


@dataclass
class _PieceTerms:
    """What :func:`loss_backward` needs to turn one piece's forward into its loss."""

    prepared: PreparedRL
    old: OldPass | None
    loss_cfg: LossConfig
    ppo_cfg: PPOConfig
    critic: Critic | None
    is_sft: bool
    freeze: bool
    want_values: bool


def _policy_term(
    t: _PieceTerms, piece: TreePiece, out: TreeForwardOutput, w: Tensor, c_w: Tensor, tgt: Tensor
) -> Tensor:
    """SFT NLL, the clipped surrogate (RL), or zero (value warm-up)."""
    if t.is_sft:
        return sft_loss(out.logprobs, c_w)
    if t.freeze:
        return out.logprobs.new_zeros(())
    assert t.prepared.advantage is not None and t.old is not None
    dt, dev, n_t = out.logprobs.dtype, out.logprobs.device, int(piece.targets.size)
    a = torch.as_tensor(t.prepared.advantage[piece.membership_index], dtype=dt, device=dev)
    c_pos = scatter_to_tokens(w * a.clamp(min=0), tgt, n_t)
    c_neg = scatter_to_tokens(w * (-a).clamp(min=0), tgt, n_t)
    g = piece.token_index[piece.targets]
    old_lp = torch.as_tensor(t.old.logprobs[g], dtype=dt, device=dev)
    return clipped_surrogate_loss(
        out.logprobs, old_lp, c_pos, c_neg, t.loss_cfg.clip_eps_low, t.loss_cfg.clip_eps_high
    )


def _value_term(t: _PieceTerms, piece: TreePiece, out: TreeForwardOutput, tgt: Tensor) -> Tensor:
    """The clipped value loss on the piece's memberships (PPO)."""
    p = t.prepared
    assert p.returns is not None and p.old_values is not None and p.value_weight is not None
    dt, dev, mem = out.logprobs.dtype, out.logprobs.device, piece.membership_index
    v_t = out.values if t.critic is None else t.critic(*_piece_tensors(piece, _device_of(t.critic)))
    assert v_t is not None
    return value_loss(
        v_t.to(dt)[tgt],
        torch.as_tensor(p.old_values[mem], dtype=dt, device=dev),
        torch.as_tensor(p.returns[mem], dtype=dt, device=dev),
        torch.as_tensor(p.value_weight[mem], dtype=dt, device=dev),
        t.ppo_cfg.value_clip,
    )


def _piece_loss(
    t: _PieceTerms, piece: TreePiece, out: TreeForwardOutput, stats: dict[str, float]
) -> Tensor:
    """One piece's total loss; adds its terms to ``stats``."""
    dt, dev = out.logprobs.dtype, out.logprobs.device
    tgt = torch.as_tensor(piece.mem_target, dtype=torch.int64, device=dev)
    w = torch.as_tensor(t.prepared.weight[piece.membership_index], dtype=dt, device=dev)
    c_w = scatter_to_tokens(w, tgt, int(piece.targets.size))
    total = _policy_term(t, piece, out, w, c_w, tgt)
    stats["policy_loss"] += float(total.detach())
    cfg = t.loss_cfg
    # value warm-up (freeze): no policy-side term (KL and entropy would move the policy)
    if not t.freeze and cfg.kl_coef > 0 and t.old is not None and t.old.ref_logprobs is not None:
        g = piece.token_index[piece.targets]
        ref = torch.as_tensor(t.old.ref_logprobs[g], dtype=dt, device=dev)
        kl = reference_kl_loss(out.logprobs, ref, c_w)
        total = total + cfg.kl_coef * kl
        stats["kl"] += float(kl.detach())
    if not t.freeze and cfg.entropy_coef > 0 and out.entropy is not None:
        ent = entropy_bonus(out.entropy, c_w)
        total = total - cfg.entropy_coef * ent
        stats["entropy"] += float(ent.detach())
    if t.want_values:
        vl = _value_term(t, piece, out, tgt)
        total = total + t.ppo_cfg.value_coef * vl
        stats["value_loss"] += float(vl.detach())
    return total


def _padding_loss(t: _PieceTerms, piece: TreePiece, out: TreeForwardOutput) -> Tensor:
    """Zero times everything a real piece's loss is built from (the policy outputs and the
    value, the critic's included): the backward reaches every parameter a real piece's does,
    with exactly zero gradient (a sharded rank's reduce-scatters match the other ranks')."""
    parts = [out.logprobs, out.entropy, out.values]
    if t.want_values and t.critic is not None:
        parts.append(t.critic(*_piece_tensors(piece, _device_of(t.critic))))
    live = [p.sum() for p in parts if p is not None and p.requires_grad]
    if not live:
        raise ConfigError("a padding piece has no output with a gradient")
    total = live[0]
    for x in live[1:]:
        total = total + x
    return 0.0 * total


def loss_backward(
    model: nn.Module,
    batch: TreeBatch,
    pieces: Sequence[TreePiece],
    prepared: PreparedRL,
    old: OldPass | None,
    *,
    loss_cfg: LossConfig | None = None,
    ppo_cfg: PPOConfig | None = None,
    value_head: nn.Module | None = None,
    critic: Critic | None = None,
    train_policy: bool = True,
    chunk_size: int = 1024,
    backward: Callable[[Tensor], None] | None = None,
) -> dict[str, float]:
    """Forward each piece with gradients, build its loss, call ``backward`` on it.

    The total loss is the sum over pieces of

        policy:   Σ_t [−c⁺_t min(r_t, 1+ε_high) + c⁻_t max(r_t, 1−ε_low)]     (RL)
                  or −Σ_t c_t log π_θ(t)                                         (SFT: old=None
                  or prepared.advantage is None)
        + β_KL Σ_t c_t k3_t − β_H Σ_t c_t H_t
        + value_coef · Σ_m w_m ½ max((V−G)², (V_clip−G)²)                         (PPO)

    with c⁺, c⁻, c scattered from the pieces' memberships. ``backward`` defaults to
    ``loss.backward()`` (pass ``accelerator.backward``).

    ``train_policy=False`` (PPO value warm-up) freezes the policy: the loss is the value term
    alone (no policy, KL or entropy term), and the policy runs without autograd, so the value
    head reads detached hidden states and no policy parameter gets a gradient (``.grad``
    stays None, so AdamW leaves it untouched, weight decay included).

    A padding piece (:func:`~clawrl.rl_core.padding_piece`, sharded multi-process runs) is
    forwarded and backpropagated with a zero loss: gradients and statistics are unchanged.

    Returns:
        {"loss", "policy_loss", "value_loss", "kl", "entropy"} summed over pieces.

    Raises:
        ConfigError: ``train_policy=False`` without a value head or critic.
    """
    loss_cfg = loss_cfg or LossConfig()
    do_backward = backward or (lambda loss: loss.backward())
    is_sft = prepared.advantage is None
    inner = getattr(model, "module", model)
    has_head = value_head is not None or (
        isinstance(inner, TreeModel) and inner.value_head is not None
    )
    want_values = prepared.returns is not None and (has_head or critic is not None)
    freeze = not is_sft and not train_policy
    if freeze and not want_values:
        raise ConfigError("train_policy=False (value warm-up) needs a value head or critic")
    terms = _PieceTerms(
        prepared, old, loss_cfg, ppo_cfg or PPOConfig(), critic, is_sft, freeze, want_values
    )
    stats = dict.fromkeys(("loss", "policy_loss", "value_loss", "kl", "entropy"), 0.0)
    dev = _device_of(model)
    for piece in pieces:
        if piece.targets.size == 0:  # never a padding piece: it has one target
            continue
        out = _forward(
            model,
            _piece_tensors(piece, dev),
            value_head,
            temperature=loss_cfg.temperature,
            chunk_size=chunk_size,
            compute_entropy=loss_cfg.entropy_coef > 0 and not freeze,
            compute_values=want_values and critic is None,
            policy_grad=not freeze,
        )
        if piece.padding:
            do_backward(_padding_loss(terms, piece, out))
            continue
        total = _piece_loss(terms, piece, out, stats)
        do_backward(total)
        stats["loss"] += float(total.detach())
    return stats
