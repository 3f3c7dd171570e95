"""Tree-packed forward, losses and gradients equal the flat per-path computation (float64)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    CorrectionConfig,
    LossConfig,
    OldPass,
    PPOConfig,
    TreeBatch,
    ValueHead,
    loss_backward,
    old_pass,
    pack_token_sequences,
    prepare_rl,
    prepare_sft,
    split_by_token_budget,
    tree_forward,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _all_nonroot(batch: TreeBatch) -> np.ndarray:
    return np.nonzero(batch.parent_index >= 0)[0]


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    n_seq=st.integers(1, 7),
    budget=st.sampled_from([None, 9, 16]),
    temperature=st.sampled_from([1.0, 0.7]),
    roots=st.integers(1, 2),
)
def test_packed_logprobs_equal_per_path(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    path_logprobs: Callable[..., torch.Tensor],
    seed: int,
    n_seq: int,
    budget: int | None,
    temperature: float,
    roots: int,
) -> None:
    """Failure classes 10–11: every token's logprob (incl. each path's last node) equals the
    one from a separate forward of its own path — no off-by-one, no cross-path attention."""
    model = tiny_model_factory()
    seqs = seq_factory(random.Random(seed), n_seq, roots=roots)
    tree = pack_token_sequences(seqs)
    batch = TreeBatch.from_trees([tree, tree])  # a forest of two copies
    per_tok = np.full(batch.num_tokens, np.nan)
    ent_tok = np.full(batch.num_tokens, np.nan)
    max_len = int(batch.position_ids.max()) + 1
    if budget is not None and budget < max_len:
        budget = max_len
    for piece in split_by_token_budget(batch, budget):
        tg = np.nonzero(piece.parent_index[piece.n_context :] >= 0)[0] + piece.n_context
        out = tree_forward(
            model,
            *(
                torch.as_tensor(a)
                for a in (
                    piece.input_ids,
                    piece.position_ids,
                    piece.parent_index,
                    piece.subtree_end,
                )
            ),
            torch.as_tensor(tg),
            temperature=temperature,
            chunk_size=5,
            compute_entropy=True,
        )
        assert out.entropy is not None
        per_tok[piece.token_index[tg]] = out.logprobs.detach().numpy()
        ent_tok[piece.token_index[tg]] = out.entropy.detach().numpy()
    covered = _all_nonroot(batch)
    assert not np.isnan(per_tok[covered]).any()
    for k in range(batch.num_trajectories):
        path = batch.path(k)
        ref = path_logprobs(model, batch.input_ids[path], temperature).detach().numpy()
        np.testing.assert_allclose(per_tok[path[1:]], ref[1:], rtol=0, atol=1e-10)
        assert path[-1] == batch.trajectories[k].leaf_token
        # entropy of the softmax at the predecessor, recomputed on the path
        x = torch.as_tensor(batch.input_ids[path])[None]
        lg = torch.log_softmax(model(input_ids=x).logits[0] / temperature, -1)
        ent = -(lg.exp() * lg).sum(-1)[:-1].detach().numpy()
        np.testing.assert_allclose(ent_tok[path[1:]], ent, rtol=0, atol=1e-10)


def _grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    out = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    return out


def _case(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    mode: str,
    seed: int,
    n_seq: int,
    budget: int | None,
) -> tuple[random.Random, Any, ValueHead | None, list[Any], TreeBatch, list[Any]] | None:
    """One property case: the rng (after drawing the sequences), a tiny model, a value head
    for PPO, the sequences packed into a batch and its token-budget pieces; None when the
    batch has no membership."""
    rng = random.Random(seed)
    model = tiny_model_factory(seed=seed % 3)
    head = None
    if mode == "ppo":
        head = ValueHead(model.config.hidden_size).double()
        torch.manual_seed(seed)
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    seqs = seq_factory(rng, n_seq, side_prob=0.2)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    if batch.num_memberships == 0:
        return None
    max_len = int(batch.position_ids.max()) + 1
    pieces = split_by_token_budget(batch, None if budget is None else max(budget, max_len))
    return rng, model, head, seqs, batch, pieces


@pytest.mark.parametrize("mode", ["ppo", "grpo", "sft"])
@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    n_seq=st.integers(1, 6),
    aggregation=st.sampled_from(
        ["token_mean", "sequence_mean", "prompt_mean", "unique_token_mean"]
    ),
    budget=st.sampled_from([None, 14]),
)
def test_tree_loss_and_grads_equal_flat(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    flat_loss: Callable[..., torch.Tensor],
    mode: str,
    seed: int,
    n_seq: int,
    aggregation: str,
    budget: int | None,
) -> None:
    case = _case(tiny_model_factory, seq_factory, mode, seed, n_seq, budget)
    if case is None:
        return
    rng, model, head, seqs, batch, pieces = case
    cfg = LossConfig(clip_eps_low=0.1, clip_eps_high=0.3, aggregation=aggregation)  # type: ignore[arg-type]
    ppo = PPOConfig(gamma=0.9, lam=0.8, value_coef=0.7, value_clip=0.05)
    old = old_pass(model, batch, pieces, value_head=head)
    # perturb π_old per token so ratios leave the clip range in both directions
    noise = np.random.default_rng(seed).normal(0, 0.3, batch.num_tokens)
    v_noise = np.random.default_rng(seed + 1).normal(0, 0.1, batch.num_tokens)
    old = OldPass(
        logprobs=old.logprobs + noise, values=None if old.values is None else old.values + v_noise
    )  # clip active
    rewards = {s.rollout_id: rng.random() for s in seqs}
    corr = CorrectionConfig(tis_cap=1.5, mask_low=0.05, mask_high=20.0)
    if mode == "sft":
        prepared = prepare_sft(batch, cfg)
    else:
        prepared = prepare_rl(
            batch, old, rewards, algorithm=mode, loss_cfg=cfg, ppo_cfg=ppo, corr_cfg=corr
        )
    params = list(model.parameters()) + (list(head.parameters()) if head else [])
    for p in params:
        p.grad = None
    stats = loss_backward(
        model,
        batch,
        pieces,
        prepared,
        None if mode == "sft" else old,
        loss_cfg=cfg,
        ppo_cfg=ppo,
        value_head=head,
        chunk_size=4,
    )
    g_tree = _grads(params)
    flat = flat_loss(model, batch, prepared, old, mode, cfg, ppo, head)
    flat.backward()
    g_flat = _grads(params)
    assert stats["loss"] == pytest.approx(float(flat.detach()), rel=1e-6, abs=1e-12)
    scale = max(float(g.abs().max()) for g in g_flat) or 1.0
    for gt, gf in zip(g_tree, g_flat, strict=True):
        torch.testing.assert_close(gt, gf, rtol=1e-6, atol=1e-9 * scale)


def _flat_kl_entropy(
    model: Any, ref_model: Any, batch: TreeBatch, prepared: Any, cfg: LossConfig
) -> torch.Tensor:
    """Oracle for the KL and entropy terms: each trajectory forwarded alone through the
    policy and the reference (plain causal attention), per membership
    w_m · (β_KL · k3(log π_θ, log π_ref) − β_H · H(π_θ(·|prefix))), summed."""
    total = torch.zeros((), dtype=torch.float64)
    for k in range(batch.num_trajectories):
        path = batch.path(k)
        x = torch.as_tensor(batch.input_ids[path])[None]
        lp_all = torch.log_softmax(model(input_ids=x).logits[0] / cfg.temperature, -1)
        with torch.no_grad():
            ref_all = torch.log_softmax(ref_model(input_ids=x).logits[0] / cfg.temperature, -1)
        pos_of = {int(t): p for p, t in enumerate(path)}
        for m in np.nonzero(batch.mem_traj == k)[0]:
            t = int(batch.mem_token[m])
            p = pos_of[t]
            tok = int(batch.input_ids[t])
            lp, ref = lp_all[p - 1, tok], ref_all[p - 1, tok]
            d = ref - lp
            k3 = torch.exp(d) - d - 1.0
            ent = -(lp_all[p - 1].exp() * lp_all[p - 1]).sum()
            w = float(prepared.weight[m])
            total = total + w * (cfg.kl_coef * k3 - cfg.entropy_coef * ent)
    return total


@pytest.mark.parametrize("mode", ["ppo", "grpo"])
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 10_000),
    n_seq=st.integers(1, 6),
    aggregation=st.sampled_from(["token_mean", "sequence_mean", "unique_token_mean"]),
    budget=st.sampled_from([None, 14]),
)
def test_tree_loss_and_grads_equal_flat_with_kl_and_entropy(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    flat_loss: Callable[..., torch.Tensor],
    mode: str,
    seed: int,
    n_seq: int,
    aggregation: str,
    budget: int | None,
) -> None:
    """The KL (k3 to a reference model) and entropy terms on: tree loss and gradients equal
    the flat per-trajectory computation, whose reference logprobs come from its own
    per-path forward of the reference model (not from the old pass)."""
    case = _case(tiny_model_factory, seq_factory, mode, seed, n_seq, budget)
    if case is None:
        return
    rng, model, head, seqs, batch, pieces = case
    ref_model = tiny_model_factory(seed=seed % 3 + 10)  # another policy: KL well above 0
    cfg = LossConfig(
        clip_eps_low=0.1,
        clip_eps_high=0.3,
        aggregation=aggregation,  # type: ignore[arg-type]
        kl_coef=0.3,
        entropy_coef=0.05,
    )
    ppo = PPOConfig(gamma=0.9, lam=0.8, value_coef=0.7, value_clip=0.05)
    old = old_pass(model, batch, pieces, value_head=head, ref_model=ref_model)
    assert old.ref_logprobs is not None
    noise = np.random.default_rng(seed).normal(0, 0.3, batch.num_tokens)
    old = OldPass(logprobs=old.logprobs + noise, values=old.values, ref_logprobs=old.ref_logprobs)
    rewards = {s.rollout_id: rng.random() for s in seqs}
    corr = CorrectionConfig(tis_cap=1.5)
    prepared = prepare_rl(
        batch, old, rewards, algorithm=mode, loss_cfg=cfg, ppo_cfg=ppo, corr_cfg=corr
    )
    params = list(model.parameters()) + (list(head.parameters()) if head else [])
    for p in params:
        p.grad = None
    stats = loss_backward(
        model,
        batch,
        pieces,
        prepared,
        old,
        loss_cfg=cfg,
        ppo_cfg=ppo,
        value_head=head,
        chunk_size=4,
    )
    g_tree = _grads(params)
    flat = flat_loss(model, batch, prepared, old, mode, cfg, ppo, head)
    extra = _flat_kl_entropy(model, ref_model, batch, prepared, cfg)
    (flat + extra).backward()
    g_flat = _grads(params)
    assert stats["loss"] == pytest.approx(float((flat + extra).detach()), rel=1e-6, abs=1e-12)
    assert (float(extra.detach()) != 0.0) == bool(prepared.weight.any())  # side paths: 0
    scale = max(float(g.abs().max()) for g in g_flat) or 1.0
    for gt, gf in zip(g_tree, g_flat, strict=True):
        torch.testing.assert_close(gt, gf, rtol=1e-6, atol=1e-9 * scale)
