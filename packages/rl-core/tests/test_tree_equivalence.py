"""Tree-packed forward, losses and gradients equal the flat per-path computation (float64)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    CorrectionConfig,
    LossConfig,
    TreeBatch,
    ValueHead,
    pack_token_sequences,
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


class LossCase(NamedTuple):
    """One drawn case of the loss-equivalence properties."""

    seed: int
    n_seq: int
    aggregation: str
    budget: int | None


def loss_cases(aggregations: list[str]) -> st.SearchStrategy[LossCase]:
    return st.builds(
        LossCase,
        seed=st.integers(0, 10_000),
        n_seq=st.integers(1, 6),
        aggregation=st.sampled_from(aggregations),
        budget=st.sampled_from([None, 14]),
    )


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


def _check_loss(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    tree_vs_flat: Callable[..., Any],
    mode: str,
    case: LossCase,
    *,
    kl: bool,
) -> None:
    """One property case: a tiny model (a value head for PPO), its sequences packed into a
    batch and cut into token-budget pieces; the tree loss and gradients equal the flat
    per-trajectory computation (nothing to check when the batch has no membership).

    ``kl``: the KL (k3 to a reference model) and entropy terms on, the flat side's reference
    logprobs from its own per-path forward of the reference model (not from the old pass);
    otherwise the old values are perturbed too and IcePop masking is on."""
    rng = random.Random(case.seed)
    model = tiny_model_factory(seed=case.seed % 3)
    head = None
    if mode == "ppo":
        head = ValueHead(model.config.hidden_size).double()
        torch.manual_seed(case.seed)
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    seqs = seq_factory(rng, case.n_seq, side_prob=0.2)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    if batch.num_memberships == 0:
        return
    max_len = int(batch.position_ids.max()) + 1
    budget = None if case.budget is None else max(case.budget, max_len)
    pieces = split_by_token_budget(batch, budget)
    # another policy as the reference: KL well above 0
    ref_model = tiny_model_factory(seed=case.seed % 3 + 10) if kl else None
    cfg = LossConfig(
        clip_eps_low=0.1,
        clip_eps_high=0.3,
        aggregation=case.aggregation,  # type: ignore[arg-type]
        kl_coef=0.3 if kl else 0.0,
        entropy_coef=0.05 if kl else 0.0,
    )
    if kl:
        corr = CorrectionConfig(tis_cap=1.5)
    else:
        corr = CorrectionConfig(tis_cap=1.5, mask_low=0.05, mask_high=20.0)
    prepared, extra = tree_vs_flat(
        model,
        batch,
        pieces,
        seqs,
        rng,
        mode=mode,
        seed=case.seed,
        cfg=cfg,
        corr=corr,
        head=head,
        ref_model=ref_model,
        value_noise=not kl,
        flat_extra=(
            None
            if ref_model is None
            else lambda prepared: _flat_kl_entropy(model, ref_model, batch, prepared, cfg)
        ),
    )
    if kl:
        assert extra is not None
        assert (float(extra.detach()) != 0.0) == bool(prepared.weight.any())  # side paths: 0


@pytest.fixture(scope="module")
def loss_check(
    tiny_model_factory: Callable[..., Any],
    seq_factory: Callable[..., Any],
    tree_vs_flat: Callable[..., Any],
) -> Callable[..., None]:
    """:func:`_check_loss` with the model, sequence and tree-vs-flat helpers bound."""
    return functools.partial(_check_loss, tiny_model_factory, seq_factory, tree_vs_flat)


@pytest.mark.parametrize("mode", ["ppo", "grpo", "sft"])
@SETTINGS
@given(case=loss_cases(["token_mean", "sequence_mean", "prompt_mean", "unique_token_mean"]))
def test_tree_loss_and_grads_equal_flat(
    loss_check: Callable[..., None], mode: str, case: LossCase
) -> None:
    loss_check(mode, case, kl=False)


@pytest.mark.parametrize("mode", ["ppo", "grpo"])
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=loss_cases(["token_mean", "sequence_mean", "unique_token_mean"]))
def test_tree_loss_and_grads_equal_flat_with_kl_and_entropy(
    loss_check: Callable[..., None], mode: str, case: LossCase
) -> None:
    """The KL (k3 to a reference model) and entropy terms on: tree loss and gradients equal
    the flat per-trajectory computation, whose reference logprobs come from its own
    per-path forward of the reference model (not from the old pass)."""
    loss_check(mode, case, kl=True)
