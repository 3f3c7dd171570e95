"""Losses on a packed tree: per-(token, trajectory) terms scattered into per-token sums.

Notation: m indexes memberships (token t_m observed in trajectory τ_m), w_m ≥ 0 its weight
(aggregation × corrections), A_m its advantage, r_t = π_θ(t) / π_old(t) the per-token ratio
(π_old does not depend on the trajectory: a token has one prefix). See docs/architecture.md,
"Losses on a tree equal losses on paths": with A⁺ = max(A, 0) and A⁻ = max(−A, 0) the clipped
PPO term
−min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) equals −A⁺·min(r, 1+ε_high) + A⁻·max(r, 1−ε_low), which
is linear in A⁺ and A⁻, so

    Σ_m w_m ℓ(r_{t_m}, A_m) = Σ_t [ −c⁺_t·min(r_t, 1+ε_high) + c⁻_t·max(r_t, 1−ε_low) ],
    c⁺_t = Σ_{m: t_m = t} w_m A⁺_m,   c⁻_t = Σ_{m: t_m = t} w_m A⁻_m,

one forward over the tree gives the flat per-path loss and gradients, shared tokens computed
once. The value loss (clipping is not linear in the per-trajectory target) is computed on the
membership list by a gather, which is equally exact.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch
from clawrl.rl_core.config import Aggregation
from clawrl.rl_core.errors import ConfigError
from torch import Tensor

__all__ = [
    "aggregation_weights",
    "clipped_surrogate_loss",
    "entropy_bonus",
    "kl_k3",
    "reference_kl_loss",
    "scatter_to_tokens",
    "sft_loss",
    "value_loss",
]


def aggregation_weights(
    mode: Aggregation,
    mem_token: np.ndarray,
    mem_traj: np.ndarray,
    included: np.ndarray | None = None,
    traj_groups: Sequence[Hashable] | None = None,
) -> np.ndarray:
    """Per-membership weights w_m so that the loss is Σ_m w_m ℓ_m. Over included
    memberships (excluded ones, e.g. side paths, get 0), with |τ| = included memberships of
    trajectory τ:

    * ``token_mean``:  L = (1 / Σ_τ |τ|) Σ_τ Σ_{t∈τ} ℓ_{t,τ} — every (token, trajectory)
      observation counts, as in flat token-mean over the batch; a shared token counts once per
      trajectory through it.
    * ``sequence_mean``:  L = (1/|T|) Σ_τ (1/|τ|) Σ_{t∈τ} ℓ_{t,τ} — each trajectory weighs
      the same.
    * ``prompt_mean``:  L = (1/|G|) Σ_g (1 / Σ_{τ∈g} |τ|) Σ_{τ∈g} Σ_{t∈τ} ℓ_{t,τ} — each group
      (prompt/task) weighs the same, token-mean inside it.
    * ``unique_token_mean``:  L = (1/|U|) Σ_{t∈U} (1/k_t) Σ_{τ∋t} ℓ_{t,τ} — a shared token
      counts once (its k_t observations share weight 1/|U|); U = tokens with an included
      membership.

    ``token_mean`` vs ``unique_token_mean``: they differ only where trajectories share
    trainable tokens (a rollout whose harness branched: a trunk generated once, then k
    leaves). ``token_mean`` is the flat token-level mean of DAPO (Yu et al. 2025, §3.3
    "Token-Level Policy Gradient Loss") over the k separate paths, so the trunk weighs k
    times; ``unique_token_mean`` weighs it once, as the tree would if it were one sample.
    The ClawGym II paper's tree GRPO counts a shared prefix's tokens once in the loss
    (from secondary summaries: the paper's own equation was not available to
    check), i.e. ``unique_token_mean``; DeepSeekMath's original GRPO objective (Shao et al.
    2024, eq. 3: (1/G) Σ_i (1/|o_i|) Σ_t) is ``sequence_mean``. Recommendation: use
    ``unique_token_mean`` to follow the paper on branching rollouts (a harness that retries
    or drops reasoning otherwise trains its trunk k times as hard); ``token_mean``
    (``LossConfig``'s default, kept for compatibility) is the choice when the tree must
    reproduce flat per-path training exactly. For append-only rollouts (one trajectory
    each) the two are equal.

    Args:
        mode: one of the four names above.
        mem_token, mem_traj: int [M].
        included: bool [M] (default all).
        traj_groups: group key per trajectory (``prompt_mean`` only).

    Returns:
        float64 [M], summing to 1 when any membership is included (else all 0).

    Raises:
        ConfigError: unknown mode, or ``prompt_mean`` without ``traj_groups``.
    """
    tok = np.asarray(mem_token, dtype=np.int64)
    trj = np.asarray(mem_traj, dtype=np.int64)
    inc = np.ones(tok.shape, dtype=bool) if included is None else np.asarray(included, bool)
    w = np.zeros(tok.shape, dtype=np.float64)
    if not inc.any():
        return w
    n_traj = int(trj.max()) + 1
    if mode == "token_mean":
        w[inc] = 1.0 / inc.sum()
    elif mode == "sequence_mean":
        size = np.bincount(trj[inc], minlength=n_traj)
        w[inc] = 1.0 / (size[trj[inc]] * np.count_nonzero(size))
    elif mode == "prompt_mean":
        if traj_groups is None or len(traj_groups) < n_traj:
            raise ConfigError("prompt_mean needs one group key per trajectory")
        keys: dict[Hashable, int] = {}
        gid_traj = np.asarray([keys.setdefault(g, len(keys)) for g in traj_groups], np.int64)
        gid = gid_traj[trj[inc]]
        size = np.bincount(gid)
        w[inc] = 1.0 / (size[gid] * np.count_nonzero(size))
    elif mode == "unique_token_mean":
        k = np.bincount(tok[inc])
        w[inc] = 1.0 / (k[tok[inc]] * np.count_nonzero(k))
    else:
        raise ConfigError(f"unknown aggregation mode {mode!r}")
    return w


def scatter_to_tokens(values: Tensor, index: Tensor, size: int) -> Tensor:
    """c_t = Σ_{m: index_m = t} values_m. values [m], index int64 [m] → [size]."""
    return values.new_zeros(size).index_add_(0, index, values)


def clipped_surrogate_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    coef_pos: Tensor,
    coef_neg: Tensor,
    eps_low: float,
    eps_high: float,
) -> Tensor:
    """Σ_t [ −c⁺_t·min(r_t, 1+ε_high) + c⁻_t·max(r_t, 1−ε_low) ],  r_t = exp(logπ_θ − logπ_old).

    PPO (Schulman et al. 2017, eq. 7) with decoupled clip ranges (DAPO "clip-higher", Yu et
    al. 2025) in the per-token scattered form of the module docstring.

    Args:
        logprobs: [T] log π_θ (with grad); old_logprobs: [T] log π_old (detached).
        coef_pos, coef_neg: [T] c⁺ = Σ w·A⁺ and c⁻ = Σ w·A⁻ per token (≥ 0).

    Returns:
        scalar loss.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    hi = torch.clamp(ratio, max=1.0 + eps_high)
    lo = torch.clamp(ratio, min=1.0 - eps_low)
    return (-coef_pos * hi + coef_neg * lo).sum()


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref) (Schulman 2020, "Approximating KL"):
    k3 = exp(Δ) − Δ − 1 with Δ = log π_ref − log π_θ; ≥ 0, unbiased for samples from π_θ."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def reference_kl_loss(logprobs: Tensor, ref_logprobs: Tensor, token_weight: Tensor) -> Tensor:
    """Σ_t c_t·k3_t with c_t = Σ_{m: t_m = t} w_m (multiply by β outside)."""
    return (token_weight * kl_k3(logprobs, ref_logprobs)).sum()


def entropy_bonus(entropy: Tensor, token_weight: Tensor) -> Tensor:
    """Σ_t c_t·H_t, the weighted mean entropy (subtract β_H times it from the loss)."""
    return (token_weight * entropy).sum()


def sft_loss(logprobs: Tensor, token_weight: Tensor) -> Tensor:
    """Negative log-likelihood −Σ_t c_t log π_θ(t), c_t = Σ_{m: t_m = t} w_m (assistant
    tokens only carry memberships)."""
    return -(token_weight * logprobs).sum()


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    weight: Tensor,
    clip: float | None = None,
) -> Tensor:
    """Σ_m w_m · ½ max((V − G)², (V_old + clip(V − V_old, −ε_v, ε_v) − G)²) on memberships.

    PPO value clipping (as in OpenAI baselines ppo2); without ``clip`` it is
    Σ_m w_m · ½ (V − G)². V and V_old are gathered per membership (V of its token's state);
    G is the membership's own target, so a shared token learns the mean of its targets.

    Args:
        values: [m] V_θ (with grad); old_values: [m] V_old; returns: [m] G; weight: [m] w.
    """
    err = (values - returns) ** 2
    if clip is not None:
        v_clip = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (v_clip - returns) ** 2)
    return 0.5 * (weight * err).sum()
