"""Advantages, aggregation weights, losses and corrections against hand-computed cases."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    ConfigError,
    OldPass,
    PPOConfig,
    TreeBatch,
    aggregation_weights,
    clipped_surrogate_loss,
    correction_metrics,
    gae_along_paths,
    geometric_sequence_mask,
    grpo_advantages,
    kl_k3,
    pack_token_sequences,
    prepare_rl,
    ratio_mask,
    truncated_importance_weights,
    value_loss,
    whiten_advantages,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_grpo_hand_computed() -> None:
    r = np.array([1.0, 0.0, 0.5, 0.2, 0.2])
    g = ["a", "a", "a", "b", "b"]
    adv = grpo_advantages(r, g, eps=0.0)
    # group a: mean 0.5, sample std 0.5 -> (1, -1, 0); group b: std 0 -> 0/0+eps... eps=0
    np.testing.assert_allclose(adv[:3], [1.0, -1.0, 0.0])
    adv_b = grpo_advantages(r, g, eps=1e-6)
    np.testing.assert_allclose(adv_b[3:], [0.0, 0.0])
    np.testing.assert_allclose(
        grpo_advantages(r, g, scale_by_std=False), [0.5, -0.5, 0.0, 0.0, 0.0]
    )
    assert grpo_advantages(np.array([0.7]), ["x"]) == pytest.approx([0.0])
    with pytest.raises(ConfigError):
        grpo_advantages(np.array([1.0, math.nan]), ["a", "a"])
    with pytest.raises(ConfigError):
        grpo_advantages(np.array([1.0]), ["a", "b"])


def _gae_loop(values: list[float], reward: float, gamma: float, lam: float) -> list[float]:
    adv, nxt_adv, nxt_v = [0.0] * len(values), 0.0, 0.0
    for k in reversed(range(len(values))):
        r = reward if k == len(values) - 1 else 0.0
        delta = r + gamma * nxt_v - values[k]
        nxt_adv = delta + gamma * lam * nxt_adv
        adv[k] = nxt_adv
        nxt_v = values[k]
    return adv


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), gamma=st.floats(0, 1), lam=st.floats(0, 1))
def test_gae_matches_per_path_loop(seed: int, gamma: float, lam: float) -> None:
    rng = random.Random(seed)
    n_traj = rng.randint(1, 4)
    rows = []  # (traj, depth, value)
    for t in range(n_traj):
        depths = sorted(rng.sample(range(1, 30), rng.randint(1, 8)))
        rows += [(t, d, rng.uniform(-1, 1)) for d in depths]
    rng.shuffle(rows)  # membership order is arbitrary
    tr = np.array([r[0] for r in rows])
    dep = np.array([r[1] for r in rows])
    val = np.array([r[2] for r in rows])
    rew = np.array([rng.uniform(0, 1) for _ in range(n_traj)])
    adv, ret = gae_along_paths(val, rew, tr, dep, gamma=gamma, lam=lam)
    for t in range(n_traj):
        idx = [i for i in np.argsort(dep) if tr[i] == t]
        ref = _gae_loop([val[i] for i in idx], rew[t], gamma, lam)
        np.testing.assert_allclose(adv[idx], ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ret[idx], np.asarray(ref) + val[idx], atol=1e-12)
    if gamma == 1.0 and lam == 1.0:
        np.testing.assert_allclose(adv, rew[tr] - val)


def test_whiten_advantages_hand_computed() -> None:
    a = np.array([1.0, 3.0, 100.0, 5.0])
    m = np.array([True, True, False, True])
    # over the mask: mean 3, population std sqrt(8/3)
    sd = math.sqrt(8 / 3)
    np.testing.assert_allclose(whiten_advantages(a, m, eps=0.0), [-2 / sd, 0.0, 97 / sd, 2 / sd])
    np.testing.assert_allclose(
        whiten_advantages(np.array([-1.0, 1.0])), [-1 / (1 + 1e-8), 1 / (1 + 1e-8)], rtol=1e-12
    )
    np.testing.assert_array_equal(whiten_advantages(np.array([0.4, 0.4]), eps=0.0), [0.0, 0.0])
    np.testing.assert_array_equal(whiten_advantages(a, np.zeros(4, bool)), a)
    for bad in (
        dict(advantages=np.array([1.0, math.inf])),
        dict(advantages=a, mask=np.ones(3, bool)),
        dict(advantages=a, eps=-1.0),
    ):
        with pytest.raises(ConfigError):
            whiten_advantages(**bad)  # type: ignore[arg-type]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    n_seq=st.integers(1, 7),
    gamma=st.sampled_from([1.0, 0.9]),
    lam=st.sampled_from([1.0, 0.8]),
)
def test_whitened_ppo_advantages_equal_flat(
    seq_factory: Callable[..., Any],
    seed: int,
    n_seq: int,
    gamma: float,
    lam: float,
) -> None:
    """PPO with ``whiten_advantages``: the tree's advantages equal the flat computation —
    GAE along each trajectory's own trainable tokens (a per-path loop), then mean/std over
    the flat list of every non-side-path trajectory's tokens — also where trajectories share
    a token (one V, one advantage per trajectory)."""
    rng = random.Random(seed)
    seqs = seq_factory(rng, n_seq, side_prob=0.3)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    if batch.num_memberships == 0:
        return
    npr = np.random.default_rng(seed)
    lp = np.zeros(batch.num_tokens)
    lp[batch.mem_token] = batch.mem_logprob  # on-policy: ρ = 1
    old = OldPass(logprobs=lp, values=npr.normal(0.4, 0.3, batch.num_tokens))
    rewards = {s.rollout_id: rng.random() for s in seqs}
    ppo = PPOConfig(gamma=gamma, lam=lam, whiten_advantages=True)
    got = prepare_rl(batch, old, rewards, algorithm="ppo", ppo_cfg=ppo)
    raw = prepare_rl(batch, old, rewards, algorithm="ppo", ppo_cfg=PPOConfig(gamma=gamma, lam=lam))
    flat: dict[int, float] = {}  # membership -> flat GAE advantage
    side = np.asarray([t.side_path for t in batch.trajectories])
    for k, traj in enumerate(batch.trajectories):
        mem = np.nonzero(batch.mem_traj == k)[0]
        mem = mem[np.argsort(batch.position_ids[batch.mem_token[mem]])]
        ref = _gae_loop(
            [float(old.values[batch.mem_token[m]]) for m in mem],
            rewards[traj.rollout_id],
            gamma,
            lam,
        )
        flat.update(zip(mem.tolist(), ref, strict=True))
    a = np.asarray([flat[m] for m in range(batch.num_memberships)])
    inc = ~side[batch.mem_traj]
    np.testing.assert_allclose(raw.advantage, a, rtol=1e-10, atol=1e-12)
    if not inc.any():
        np.testing.assert_allclose(got.advantage, a)
        return
    pool = a[inc]  # the flat list: every counted (token, trajectory) once
    want = (a - pool.mean()) / (pool.std() + 1e-8)
    np.testing.assert_allclose(got.advantage, want, rtol=1e-9, atol=1e-9)
    assert got.metrics["advantage_mean"] == pytest.approx(pool.mean())  # reported before
    assert got.metrics["advantage_std"] == pytest.approx(pool.std())
    if pool.std() > 1e-6:
        assert got.advantage[inc].mean() == pytest.approx(0.0, abs=1e-9)
        assert got.advantage[inc].std() == pytest.approx(1.0, rel=1e-4)


def test_aggregation_weights_hand_computed() -> None:
    # token 5 shared by trajectories 0 and 1; trajectory 2 is its own group
    tok = np.array([5, 6, 5, 7, 8, 9])
    trj = np.array([0, 0, 1, 1, 1, 2])
    groups = ["g", "g", "h"]
    np.testing.assert_allclose(aggregation_weights("token_mean", tok, trj), [1 / 6] * 6)
    np.testing.assert_allclose(
        aggregation_weights("sequence_mean", tok, trj), [1 / 6, 1 / 6, 1 / 9, 1 / 9, 1 / 9, 1 / 3]
    )
    np.testing.assert_allclose(
        aggregation_weights("prompt_mean", tok, trj, None, groups), [1 / 10] * 5 + [1 / 2]
    )
    # unique tokens {5,6,7,8,9}: token 5 split between its two observations
    np.testing.assert_allclose(
        aggregation_weights("unique_token_mean", tok, trj),
        [1 / 10, 1 / 5, 1 / 10, 1 / 5, 1 / 5, 1 / 5],
    )
    inc = np.array([True, True, True, True, True, False])
    w = aggregation_weights("sequence_mean", tok, trj, inc)
    np.testing.assert_allclose(w, [1 / 4, 1 / 4, 1 / 6, 1 / 6, 1 / 6, 0])
    assert aggregation_weights("token_mean", tok, trj, np.zeros(6, bool)).sum() == 0
    with pytest.raises(ConfigError):
        aggregation_weights("prompt_mean", tok, trj)


def test_clipped_surrogate_hand_computed() -> None:
    lp = torch.log(torch.tensor([1.5, 0.5, 1.1], dtype=torch.float64)).requires_grad_()
    old = torch.zeros(3, dtype=torch.float64)
    # token 0: A=+2 (r=1.5 > 1+0.3 -> clipped at 1.3, no grad); token 1: A=-1 (r=0.5 <
    # 1-0.2 -> clipped at 0.8, no grad); token 2: A=+1 and A=-1 from two trajectories
    c_pos = torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64)
    c_neg = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    loss = clipped_surrogate_loss(lp, old, c_pos, c_neg, eps_low=0.2, eps_high=0.3)
    assert float(loss.detach()) == pytest.approx(-2 * 1.3 + 1 * 0.8 + (-1.1 + 1.1))
    loss.backward()
    assert lp.grad is not None
    np.testing.assert_allclose(lp.grad.numpy(), [0.0, 0.0, 0.0], atol=1e-15)
    lp2 = torch.log(torch.tensor([1.1], dtype=torch.float64)).requires_grad_()
    clipped_surrogate_loss(
        lp2,
        torch.zeros(1, dtype=torch.float64),
        torch.tensor([3.0], dtype=torch.float64),
        torch.zeros(1, dtype=torch.float64),
        0.2,
        0.3,
    ).backward()
    assert lp2.grad is not None and float(lp2.grad[0]) == pytest.approx(-3 * 1.1)


def test_value_loss_and_kl_hand_computed() -> None:
    v = torch.tensor([1.0, 0.0], dtype=torch.float64)
    old = torch.tensor([0.5, 0.0], dtype=torch.float64)
    g = torch.tensor([0.0, 1.0], dtype=torch.float64)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    # m0: (1-0)^2=1 vs clipped 0.5+0.2=0.7 -> 0.49, max 1; m1: 1 vs 1 -> 1
    assert float(value_loss(v, old, g, w, clip=0.2)) == pytest.approx(0.5 * (1 + 2))
    assert float(value_loss(v, old, g, w)) == pytest.approx(0.5 * (1 + 2))
    v2 = torch.tensor([0.0], dtype=torch.float64)
    # V moved from 1.0 to 0 towards target -1: clipped V = 0.8, (0.8+1)^2=3.24 > 1
    assert float(
        value_loss(
            v2,
            torch.tensor([1.0], dtype=torch.float64),
            torch.tensor([-1.0], dtype=torch.float64),
            torch.tensor([1.0], dtype=torch.float64),
            clip=0.2,
        )
    ) == pytest.approx(0.5 * 3.24)
    k3 = kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert float(k3) == pytest.approx(0.5 - math.log(0.5) - 1)
    assert float(kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0]))) == 0.0


def test_corrections_hand_computed() -> None:
    log_ratio = np.log(np.array([0.25, 1.0, 3.0, 0.5]))
    np.testing.assert_allclose(truncated_importance_weights(log_ratio, 2.0), [0.25, 1.0, 2.0, 0.5])
    np.testing.assert_array_equal(ratio_mask(log_ratio, 0.5, 2.0), [False, True, False, True])
    np.testing.assert_array_equal(ratio_mask(log_ratio, None, 2.0), [True, True, False, True])
    traj = np.array([0, 0, 1, 1])
    # geometric means: traj0 sqrt(0.25*1)=0.5, traj1 sqrt(3*0.5)=1.2247
    np.testing.assert_array_equal(
        geometric_sequence_mask(log_ratio, traj, 0.6, 1.5), [False, False, True, True]
    )
    np.testing.assert_array_equal(
        geometric_sequence_mask(log_ratio, traj, 0.4, 1.2), [True, True, False, False]
    )
    keep = ratio_mask(log_ratio, 0.5, 2.0)
    m = correction_metrics(log_ratio, keep, np.array([3, 4, 4, 2]), current_version=5)
    assert m["mean_abs_logprob_diff"] == pytest.approx(np.mean(np.abs(log_ratio)))
    assert m["max_abs_logprob_diff"] == pytest.approx(math.log(4))
    assert m["fraction_masked"] == pytest.approx(0.5)
    assert m["staleness_mean"] == pytest.approx(1.75) and m["staleness_max"] == 3
    assert m["ratio_p50"] == pytest.approx(0.75)
    assert (
        correction_metrics(np.array([]), np.array([], bool), np.array([]), 0)["fraction_masked"]
        == 0.0
    )
    with pytest.raises(ConfigError):
        truncated_importance_weights(log_ratio, 0.0)


def _one_call_batch(engine_probs: list[float], metadata: dict[str, Any] | None = None) -> Any:
    """A one-call rollout: prompt [1, 2], one generated token per engine prob."""
    from clawrl.prefixtree import Call, PrefixTree

    n = len(engine_probs)
    call = Call(
        call_id="c0",
        session_id="s0",
        seq=0,
        prompt_ids=np.array([1, 2]),
        completion_ids=np.arange(3, 3 + n),
        completion_logprobs=np.log(np.asarray(engine_probs)),
    )
    meta = {"group_id": "g"} if metadata is None else metadata
    tree = PrefixTree.from_calls([call], rollout_id="r0", metadata=meta)
    return TreeBatch.from_trees([tree.pack()])


def test_tis_weight_is_trainer_prob_over_engine_prob() -> None:
    """The TIS weight is min(π_old / π_rollout, c) — trainer over engine (Yao et al. 2025,
    "Your efficient RL framework secretly brings you off-policy RL training":
    min(π_fsdp(a; θ_old) / π_vllm(a; θ_old), C); ClawGym II: w_t = min(π_old / π_rollout, c)).
    The ratios 0.5, 3 → 2 (capped), 1 here would be 2, 1/3, 1 the other way round."""
    from clawrl.rl_core import CorrectionConfig, LossConfig

    engine = [0.5, 0.1, 0.4]
    trainer_p = [0.25, 0.3, 0.4]
    batch = _one_call_batch(engine)
    lp = np.full(batch.num_tokens, np.nan)
    lp[batch.mem_token] = np.log(trainer_p)
    old = OldPass(logprobs=lp)
    loss = LossConfig(aggregation="token_mean")
    prep = prepare_rl(
        batch, old, {"r0": 1.0}, loss_cfg=loss, corr_cfg=CorrectionConfig(tis_cap=2.0)
    )
    np.testing.assert_allclose(prep.weight, np.array([0.5, 2.0, 1.0]) / 3, rtol=1e-12)
    # IcePop masking reads the same ρ: keep 0.6 ≤ ρ ≤ 2.5 → only the third token
    masked = prepare_rl(
        batch,
        old,
        {"r0": 1.0},
        loss_cfg=loss,
        corr_cfg=CorrectionConfig(tis_cap=None, mask_low=0.6, mask_high=2.5),
    )
    np.testing.assert_allclose(masked.weight, np.array([0.0, 0.0, 1.0]) / 3, rtol=1e-12)


def test_missing_group_is_a_typed_error() -> None:
    """GRPO without a group for a rollout raises MissingGroupError (a ConfigError) instead
    of making it a group of one with Â ≡ 0; the groups argument or the metadata key fixes it."""
    from clawrl.rl_core import LossConfig, MissingGroupError

    batch = _one_call_batch([0.5, 0.5], metadata={"task": "t"})
    old = OldPass(logprobs=np.log(np.full(batch.num_tokens, 0.5)))
    with pytest.raises(MissingGroupError, match="no group for rollouts \\['r0'\\]"):
        prepare_rl(batch, old, {"r0": 1.0})
    with pytest.raises(ConfigError):
        prepare_rl(
            batch,
            old,
            {"r0": 1.0},
            algorithm="ppo",
            loss_cfg=LossConfig(aggregation="prompt_mean"),
        )
    assert prepare_rl(batch, old, {"r0": 1.0}, groups={"r0": "g"}).advantage is not None
    grouped = _one_call_batch([0.5, 0.5], metadata={"group_id": "g"})
    assert prepare_rl(grouped, old, {"r0": 1.0}).advantage is not None


def test_unique_token_mean_counts_a_shared_trunk_once() -> None:
    """A rollout that branched: a 2-token generated trunk, then 3 leaves of one generated
    token each (3 trajectories, 9 memberships, 5 unique trainable tokens). token_mean gives
    each trunk token 3/9 of the loss (counted once per path); unique_token_mean 1/5, as
    much as a leaf token (counted once, as in the paper's tree GRPO)."""
    from clawrl.prefixtree import Call, PrefixTree
    from clawrl.rl_core import CorrectionConfig, LossConfig

    calls = [Call("c0", "s", 0, np.array([1, 2]), np.array([3, 4]), np.log([0.5, 0.5]))]
    calls += [
        Call(f"c{i}", "s", i, np.array([1, 2, 3, 4, 10 + i]), np.array([20 + i]), [-0.7])
        for i in (1, 2, 3)
    ]
    tree = PrefixTree.from_calls(calls, rollout_id="r0", metadata={"group_id": "g"})
    batch = TreeBatch.from_trees([tree.pack()])
    assert batch.num_trajectories == 3 and batch.num_memberships == 9
    old = OldPass(logprobs=np.full(batch.num_tokens, -0.7))
    trunk = np.isin(batch.input_ids[batch.mem_token], [3, 4])
    no_tis = CorrectionConfig(tis_cap=None)
    for mode, per_trunk_token in (("token_mean", 3 / 9), ("unique_token_mean", 1 / 5)):
        loss = LossConfig(aggregation=mode)  # type: ignore[arg-type]
        w = prepare_rl(batch, old, {"r0": 1.0}, loss_cfg=loss, corr_cfg=no_tis).weight
        assert w.sum() == pytest.approx(1.0)
        assert w[trunk].sum() == pytest.approx(2 * per_trunk_token)
