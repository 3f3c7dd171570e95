"""Advantages on the membership list: GRPO per group, GAE along each path, batch whitening.

All functions are NumPy, float64, no gradients (advantages are constants in the loss).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from clawrl.rl_core.errors import ConfigError

__all__ = ["gae_along_paths", "grpo_advantages", "whiten_advantages"]


def grpo_advantages(
    rewards: np.ndarray,
    groups: Sequence[Hashable],
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO group-relative advantages (Shao et al. 2024, DeepSeekMath eq. 3 outcome form).

        Â_i = (R_i − mean_{j∈g(i)} R_j) / (std_{j∈g(i)} R_j + ε)     (scale_by_std)
        Â_i =  R_i − mean_{j∈g(i)} R_j                                (no-std, Dr. GRPO)

    std is the sample standard deviation (ddof = 1); a group of one rollout, or of equal
    rewards, gets Â = 0.
    Every retained trajectory of a rollout then takes the rollout's Â.

    Args:
        rewards: float [R], one reward per rollout.
        groups: R hashable group keys (a task, or a (task, harness) pair).

    Returns:
        float64 [R].

    Raises:
        ConfigError: lengths differ, eps < 0, or a reward is not finite.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or len(groups) != r.shape[0]:
        raise ConfigError("rewards must be 1-D with one group key per reward")
    if eps < 0:
        raise ConfigError("eps must be >= 0")
    if not np.all(np.isfinite(r)):
        raise ConfigError("rewards must be finite")
    keys: dict[Hashable, int] = {}
    gid = np.asarray([keys.setdefault(g, len(keys)) for g in groups], dtype=np.int64)
    n_g = np.bincount(gid)
    mean = np.bincount(gid, weights=r) / n_g
    centred = r - mean[gid]
    if not scale_by_std:
        return centred
    var = np.bincount(gid, weights=centred**2) / np.maximum(n_g - 1, 1)
    denom = np.sqrt(var)[gid] + eps
    # a group with identical rewards has centred == 0: its Â is 0 even when eps == 0
    return np.divide(centred, denom, out=np.zeros_like(centred), where=denom > 0)


def gae_along_paths(
    values: np.ndarray,
    traj_rewards: np.ndarray,
    mem_traj: np.ndarray,
    mem_depth: np.ndarray,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation along each trajectory's trainable tokens.

    The time steps of trajectory τ are its trainable tokens in path order k = 0..K−1; the
    only reward is the outcome R_τ after the last one (V_K = 0) — Schulman et al. 2016:

        δ_k = r_k + γ V_{k+1} − V_k,   r_k = R_τ·[k = K−1]
        Â_k = Σ_l (γλ)^l δ_{k+l},      value target G_k = Â_k + V_k

    With γ = λ = 1 (the paper's setting) this is Â_k = R_τ − V_k and G_k = R_τ, computed in
    that closed form. Each (token, trajectory) membership gets its own Â and G: a token
    shared by several trajectories has one V but one target per trajectory.

    Args:
        values: float [M], V(s) before each membership's token (detached).
        traj_rewards: float [n_traj].
        mem_traj: int [M] trajectory of each membership.
        mem_depth: int [M] depth (position id) of each membership's token, orders a path.

    Returns:
        (advantages [M], returns [M]) float64, in the input membership order.

    Raises:
        ConfigError: shapes differ or γ, λ outside [0, 1].
    """
    v = np.asarray(values, dtype=np.float64)
    tr = np.asarray(mem_traj, dtype=np.int64)
    dep = np.asarray(mem_depth, dtype=np.int64)
    rew = np.asarray(traj_rewards, dtype=np.float64)
    if not (v.shape == tr.shape == dep.shape) or v.ndim != 1:
        raise ConfigError("values, mem_traj and mem_depth must be 1-D of equal length")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise ConfigError("gamma and lam must be in [0, 1]")
    if gamma == 1.0 and lam == 1.0:
        adv = rew[tr] - v
        return adv, adv + v
    order = np.lexsort((dep, tr))  # by trajectory, then along the path
    vs, ts = v[order], tr[order]
    m = len(vs)
    last = np.ones(m, dtype=bool)
    last[:-1] = ts[1:] != ts[:-1]
    v_next = np.zeros(m)
    v_next[:-1] = np.where(last[:-1], 0.0, vs[1:])
    delta = np.where(last, rew[ts], 0.0) + gamma * v_next - vs
    # reverse rank within the trajectory: 0 at the last step
    start = np.ones(m, dtype=bool)
    start[1:] = ts[1:] != ts[:-1]
    seg_start = np.maximum.accumulate(np.where(start, np.arange(m), 0))
    seg_len = np.bincount(seg_start, minlength=m)[seg_start]
    rrank = seg_start + seg_len - 1 - np.arange(m)
    adv_s = np.zeros(m)
    idx_by_rank = np.argsort(rrank, kind="stable")
    bounds = np.searchsorted(rrank[idx_by_rank], np.arange(int(rrank.max()) + 2 if m else 1))
    for r in range(len(bounds) - 1):
        idx = idx_by_rank[bounds[r] : bounds[r + 1]]
        nxt = np.where(last[idx], 0.0, adv_s[np.minimum(idx + 1, m - 1)])
        adv_s[idx] = delta[idx] + gamma * lam * nxt
    adv = np.empty(m)
    adv[order] = adv_s
    return adv, adv + v


def whiten_advantages(
    advantages: np.ndarray,
    mask: np.ndarray | None = None,
    *,
    eps: float = 1e-8,
) -> np.ndarray:
    """Batch advantage whitening (normalisation) over the trainable tokens.

        Â ← (Â − mean(Â)) / (std(Â) + ε),   mean and std over the memberships in ``mask``

    Token-level, as PPO implementations do it (verl's and OpenRLHF's ``masked_whiten``;
    Andrychowicz et al. 2021, "What Matters in On-Policy RL", §3.3). A membership is one
    (trainable token, trajectory) pair, the unit of the flat per-path computation, so the
    tree gives the flat result. std is the population standard deviation (ddof = 0). Outside
    ``mask`` the same affine map applies (those memberships carry no loss weight).

    Args:
        advantages: float [M] per membership.
        mask: bool [M], the memberships that set mean and std (default: all).
        eps: ε ≥ 0; a batch with one distinct advantage gets Â = 0 even with ε = 0.

    Returns:
        float64 [M]; an empty mask returns the advantages unchanged.

    Raises:
        ConfigError: shapes differ, eps < 0, or an advantage is not finite.
    """
    a = np.asarray(advantages, dtype=np.float64)
    m = np.ones(a.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if a.ndim != 1 or m.shape != a.shape:
        raise ConfigError("advantages and mask must be 1-D of equal length")
    if eps < 0:
        raise ConfigError("eps must be >= 0")
    if not np.all(np.isfinite(a)):
        raise ConfigError("advantages must be finite")
    if not m.any():
        return a.copy()
    centred = a - a[m].mean()
    denom = float(np.sqrt(np.mean(centred[m] ** 2))) + eps
    if denom == 0.0:
        return np.zeros_like(a)
    return centred / denom
