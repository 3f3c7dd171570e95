"""Training–inference consistency corrections and their metrics.

ρ_m = π_old(t_m) / π_rollout,m per membership, with π_old the trainer's policy before the update
and π_rollout the probability the engine recorded for that observation. All functions take
log ρ (float64 NumPy) and return weights/masks that multiply the membership weights w_m.
"""

from __future__ import annotations

import numpy as np
from clawrl.rl_core.errors import ConfigError

__all__ = [
    "correction_metrics",
    "geometric_sequence_mask",
    "ratio_mask",
    "truncated_importance_weights",
]


def truncated_importance_weights(log_ratio: np.ndarray, cap: float) -> np.ndarray:
    """Token-level truncated importance sampling: w_m = min(ρ_m, c).

    (Ionides 2008; used for engine/trainer mismatch by Yao et al. 2025 "Your efficient RL
    framework secretly brings you off-policy RL", and the ClawGym II paper:
    w_t = min(π_old(a_t) / π_rollout(a_t), c).)

    Raises:
        ConfigError: cap ≤ 0.
    """
    if cap <= 0:
        raise ConfigError("cap must be > 0")
    return np.minimum(np.exp(np.asarray(log_ratio, dtype=np.float64)), cap)


def ratio_mask(log_ratio: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    """IcePop-style token masking: keep m iff low ≤ ρ_m ≤ high (a None bound is open).

    Returns bool [M] (True = keep)."""
    rho = np.exp(np.asarray(log_ratio, dtype=np.float64))
    keep = np.ones(rho.shape, dtype=bool)
    if low is not None:
        keep &= rho >= low
    if high is not None:
        keep &= rho <= high
    return keep


def geometric_sequence_mask(
    log_ratio: np.ndarray,
    mem_traj: np.ndarray,
    low: float | None,
    high: float | None,
) -> np.ndarray:
    """Sequence-level geometric masking: ρ̄_τ = exp(mean_{m∈τ} log ρ_m), the geometric mean
    of ρ over trajectory τ's trainable tokens; keep every membership of τ iff
    low ≤ ρ̄_τ ≤ high (a None bound is open).

    Returns bool [M] (True = keep)."""
    lr = np.asarray(log_ratio, dtype=np.float64)
    tr = np.asarray(mem_traj, dtype=np.int64)
    if lr.size == 0:
        return np.ones(0, dtype=bool)
    n = np.bincount(tr)
    mean_log = np.bincount(tr, weights=lr) / np.maximum(n, 1)
    geo = np.exp(mean_log)
    keep_traj = np.ones(geo.shape, dtype=bool)
    if low is not None:
        keep_traj &= geo >= low
    if high is not None:
        keep_traj &= geo <= high
    return keep_traj[tr]


def correction_metrics(
    log_ratio: np.ndarray,
    keep: np.ndarray,
    mem_policy_version: np.ndarray,
    current_version: int,
) -> dict[str, float]:
    """Mismatch metrics over memberships.

    Returns:
        ``mean_abs_logprob_diff`` / ``max_abs_logprob_diff``: mean / max |log π_old − log
        π_rollout| (nats); ``ratio_p01 … ratio_p99``: quantiles of ρ; ``fraction_masked``:
        share of memberships dropped by the masks; ``staleness_mean`` / ``staleness_max``:
        current_version − policy version of the observation. Empty input gives zeros.
    """
    lr = np.asarray(log_ratio, dtype=np.float64)
    if lr.size == 0:
        keys = (
            "mean_abs_logprob_diff",
            "max_abs_logprob_diff",
            "ratio_p01",
            "ratio_p10",
            "ratio_p50",
            "ratio_p90",
            "ratio_p99",
            "fraction_masked",
            "staleness_mean",
            "staleness_max",
        )
        return dict.fromkeys(keys, 0.0)
    absd = np.abs(lr)
    q = np.quantile(np.exp(lr), [0.01, 0.1, 0.5, 0.9, 0.99])
    stale = current_version - np.asarray(mem_policy_version, dtype=np.int64)
    return {
        "mean_abs_logprob_diff": float(absd.mean()),
        "max_abs_logprob_diff": float(absd.max()),
        "ratio_p01": float(q[0]),
        "ratio_p10": float(q[1]),
        "ratio_p50": float(q[2]),
        "ratio_p90": float(q[3]),
        "ratio_p99": float(q[4]),
        "fraction_masked": float(1.0 - np.asarray(keep, dtype=bool).mean()),
        "staleness_mean": float(stale.mean()),
        "staleness_max": float(stale.max()),
    }
