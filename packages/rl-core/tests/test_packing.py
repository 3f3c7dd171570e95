"""Packing contract, forest batching and token-budget splitting."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    ConfigError,
    PackingError,
    TokenBudgetError,
    TokenSequence,
    TreeBatch,
    pack_token_sequences,
    split_by_token_budget,
    tree_attention_mask,
    tree_forward,
    validate_packed_tree,
)
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n_seq=st.integers(1, 10), roots=st.integers(1, 3))
def test_pack_contract_and_paths(
    seq_factory: Callable[..., Any], seed: int, n_seq: int, roots: int
) -> None:
    seqs = seq_factory(random.Random(seed), n_seq, roots=roots)
    tree = pack_token_sequences(seqs)
    validate_packed_tree(tree)
    batch = TreeBatch.from_trees([tree])
    inputs = {tuple(s.token_ids) for s in seqs}
    # every leaf path is one of the inputs; every input is a prefix of some leaf path
    paths = [
        tuple(int(t) for t in batch.input_ids[batch.path(k)]) for k in range(batch.num_trajectories)
    ]
    assert set(paths) <= inputs
    assert all(any(p[: len(s)] == s for p in paths) for s in inputs)
    assert len(tree.input_ids) <= sum(len(s) for s in inputs)
    # memberships: exactly the trainable tokens on each path
    for k in range(batch.num_trajectories):
        on_path = [int(t) for t in batch.path(k) if batch.trainable[t]]
        assert sorted(batch.mem_token[batch.mem_traj == k].tolist()) == sorted(on_path)
        assert tree.trajectories[k].n_trainable == len(on_path)
    # dense mask = ancestor-or-self relation
    mask = tree_attention_mask(torch.as_tensor(tree.subtree_end))[0, 0].numpy()
    for i in range(len(tree.input_ids)):
        anc = set()
        j = i
        while j >= 0:
            anc.add(j)
            j = int(tree.parent_index[j])
        assert set(np.nonzero(mask[i])[0].tolist()) == anc


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n_seq=st.integers(1, 10), extra=st.integers(0, 8))
def test_split_pieces_are_closed_and_within_budget(
    seq_factory: Callable[..., Any],
    seed: int,
    n_seq: int,
    extra: int,
) -> None:
    tree = pack_token_sequences(seq_factory(random.Random(seed), n_seq, roots=2))
    batch = TreeBatch.from_trees([tree, tree])
    budget = int(batch.position_ids.max()) + 1 + extra
    pieces = split_by_token_budget(batch, budget)
    owned = np.concatenate([np.arange(p.start, p.stop) for p in pieces])
    np.testing.assert_array_equal(owned, np.arange(batch.num_tokens))
    mems = np.sort(np.concatenate([p.membership_index for p in pieces]))
    np.testing.assert_array_equal(mems, np.arange(batch.num_memberships))
    for p in pieces:
        assert p.num_tokens <= budget
        g = p.token_index
        # local parents map to global parents; local ancestors = global ancestors
        has_par = p.parent_index >= 0
        np.testing.assert_array_equal(g[p.parent_index[has_par]], batch.parent_index[g[has_par]])
        assert np.all(batch.parent_index[g[~has_par]] == -1)
        assert np.array_equal(batch.mem_token[p.membership_index], g[p.targets[p.mem_target]])
    if batch.num_tokens > budget:
        assert len(pieces) > 1


def test_split_errors() -> None:
    tree = pack_token_sequences([TokenSequence([1, 2, 3, 4], [False, True, True, True])])
    batch = TreeBatch.from_trees([tree])
    with pytest.raises(TokenBudgetError, match="longer than token_budget=3"):
        split_by_token_budget(batch, 3)
    assert len(split_by_token_budget(batch, 4)) == 1


def test_validate_and_pack_errors() -> None:
    tree = pack_token_sequences(
        [TokenSequence([1, 2, 3], [False, True, True]), TokenSequence([1, 5], [False, True])]
    )
    validate_packed_tree(tree)
    bad_par = dataclasses.replace(tree, parent_index=np.array([-1, 0, 2, 0]))
    with pytest.raises(PackingError, match="parent_index"):
        validate_packed_tree(bad_par)
    bad_pos = dataclasses.replace(tree, position_ids=np.array([0, 1, 1, 1]))
    with pytest.raises(PackingError, match="depth"):
        validate_packed_tree(bad_pos)
    bad_end = dataclasses.replace(tree, subtree_end=np.array([4, 4, 3, 4]))
    with pytest.raises(PackingError, match="subtree"):
        validate_packed_tree(bad_end)
    bad_mem = dataclasses.replace(tree, mem_token=np.array([0, 1, 2]))
    with pytest.raises(PackingError, match=r"non-trainable|root"):
        validate_packed_tree(bad_mem)
    with pytest.raises(PackingError, match="shape"):
        validate_packed_tree(dataclasses.replace(tree, trainable=np.array([True])))
    with pytest.raises(PackingError):
        TreeBatch.from_trees([])
    with pytest.raises(PackingError, match="empty"):
        pack_token_sequences([TokenSequence([], [])])
    with pytest.raises(PackingError, match="trainable has"):
        pack_token_sequences([TokenSequence([1, 2], [True])])


def test_forward_errors(tiny_model_factory: Callable[..., Any]) -> None:
    model = tiny_model_factory()
    ids = torch.tensor([1, 2, 3])
    pos = torch.tensor([0, 1, 2])
    par = torch.tensor([-1, 0, 1])
    end = torch.tensor([3, 3, 3])
    with pytest.raises(PackingError, match="no predecessor"):
        tree_forward(model, ids, pos, par, end, torch.tensor([0, 1]))
    with pytest.raises(PackingError, match="shape"):
        tree_forward(model, ids, pos[:2], par, end, torch.tensor([1]))
    with pytest.raises(ConfigError, match="temperature"):
        tree_forward(model, ids, pos, par, end, torch.tensor([1]), temperature=0.0)
    eager = tiny_model_factory(attn="eager")
    out_e = tree_forward(eager, ids, pos, par, end, torch.tensor([1, 2]))
    out_s = tree_forward(model, ids, pos, par, end, torch.tensor([1, 2]))
    torch.testing.assert_close(out_e.logprobs, out_s.logprobs)  # additive mask for eager


def test_first_token_is_never_a_target() -> None:
    tree = pack_token_sequences([TokenSequence([1, 2], [True, True])])
    assert tree.trainable.tolist() == [False, True]
    validate_packed_tree(tree)
    batch = TreeBatch.from_trees([tree])
    assert split_by_token_budget(batch)[0].targets.tolist() == [1]
