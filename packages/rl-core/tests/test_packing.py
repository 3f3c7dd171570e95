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
    # brute force from the inputs: packed token index of every root-to-token prefix
    index_of = {
        tuple(int(t) for t in tree.input_ids[tree.path_to(i)]): i for i in range(tree.num_tokens)
    }
    assert len(tree.input_ids) == len(
        {tuple(s.token_ids[:j]) for s in seqs for j in range(1, len(s.token_ids) + 1)}
    )
    marked = {
        index_of[tuple(s.token_ids[: i + 1])]
        for s in seqs
        for i in range(1, len(s.token_ids))
        if s.trainable[i]
    }
    assert set(np.flatnonzero(batch.trainable).tolist()) == marked
    # a rollout's trajectories are exactly its maximal sequences (not a strict prefix of
    # another sequence of the same rollout), one each, whatever other rollouts hold
    by_rollout: dict[str, list[TokenSequence]] = {}
    for s in seqs:
        by_rollout.setdefault(s.rollout_id, []).append(s)
    paths: dict[str, list[tuple[int, ...]]] = {}
    for k, tr in enumerate(batch.trajectories):
        paths.setdefault(tr.rollout_id, []).append(
            tuple(int(t) for t in batch.input_ids[batch.path(k)])
        )
    for rid, own in by_rollout.items():
        toks = {tuple(s.token_ids) for s in own}
        maximal = {t for t in toks if not any(len(u) > len(t) and u[: len(t)] == t for u in toks)}
        assert sorted(paths[rid]) == sorted(maximal)
    assert set(paths) == set(by_rollout)
    # memberships: the tokens on the path that a sequence of the trajectory's rollout marks
    for k, tr in enumerate(batch.trajectories):
        path = tuple(int(t) for t in batch.input_ids[batch.path(k)])
        want = {
            index_of[path[: i + 1]]
            for s in by_rollout[tr.rollout_id]
            for i in range(1, min(len(s.token_ids), len(path)))
            if s.trainable[i] and tuple(s.token_ids[: i + 1]) == path[: i + 1]
        }
        got = batch.mem_token[batch.mem_traj == k].tolist()
        assert sorted(got) == sorted(want) and len(got) == len(want)
        assert tree.trajectories[k].n_trainable == len(want)
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


# ------------------------------------------------------------------ every rollout is kept


def _grpo_adv_by_rollout(seqs: list[TokenSequence], rewards: dict[str, float]) -> dict[str, float]:
    """Pack ``seqs`` (one GRPO group per ``group_id``), run ``prepare_rl`` and read back the
    advantage each rollout's memberships carry (they must all agree within a rollout)."""
    from clawrl.rl_core import OldPass, prepare_rl

    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    old = OldPass(logprobs=np.zeros(batch.num_tokens))
    prepared = prepare_rl(batch, old, rewards, algorithm="grpo")
    assert prepared.advantage is not None
    out: dict[str, set[float]] = {}
    for m, k in enumerate(batch.mem_traj.tolist()):
        rid = batch.trajectories[k].rollout_id
        out.setdefault(rid, set()).add(round(float(prepared.advantage[m]), 9))
    assert all(len(v) == 1 for v in out.values()), out
    return {rid: v.pop() for rid, v in out.items()}


@pytest.mark.parametrize(
    "tokens",
    [
        # r1 repeats r0's tokens exactly
        [[1, 2, 3], [1, 2, 3], [1, 4, 5], [1, 6, 7]],
        # r1's tokens are a prefix of r0's
        [[1, 2, 3, 4], [1, 2, 3], [1, 4, 5], [1, 6, 7]],
    ],
    ids=["identical", "prefix"],
)
def test_identical_and_prefix_rollouts_keep_their_own_reward(tokens: list[list[int]]) -> None:
    """A rollout whose tokens equal, or are a prefix of, another rollout's must stay
    in the group: rewards {1, 1, 0, 0} give GRPO advantages ±0.866 (std with ddof 1), not the
    1.155 / −0.577 / −0.577 of a group that lost one of the reward-1 rollouts."""
    rewards = {"r0": 1.0, "r1": 1.0, "r2": 0.0, "r3": 0.0}
    seqs = [
        TokenSequence(
            token_ids=t,
            trainable=[False] + [True] * (len(t) - 1),
            logprobs=[0.0] + [-0.5] * (len(t) - 1),
            rollout_id=f"r{k}",
            call_id=f"c{k}",
            metadata={"group_id": "g"},
        )
        for k, t in enumerate(tokens)
    ]
    adv = _grpo_adv_by_rollout(seqs, rewards)
    assert sorted(adv) == ["r0", "r1", "r2", "r3"], adv
    half = 0.5 / np.std([1.0, 1.0, 0.0, 0.0], ddof=1)  # 0.866
    assert adv == pytest.approx({"r0": half, "r1": half, "r2": -half, "r3": -half}, abs=1e-5)


@st.composite
def _groups_with_duplicates_and_prefixes(draw: st.DrawFn) -> tuple[list[TokenSequence], bool]:
    """GRPO groups whose rollouts often repeat, cut or extend each other's tokens."""
    pool: list[list[int]] = []
    seqs: list[TokenSequence] = []
    for g in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 5))):
            rid = f"g{g}r{r}"
            for c in range(draw(st.integers(1, 3))):
                kind = draw(st.sampled_from(["fresh", "copy", "prefix", "extend"]))
                if kind == "fresh" or not pool:
                    toks = [
                        draw(st.integers(0, 2)),
                        *draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)),
                    ]
                else:
                    base = draw(st.sampled_from(pool))
                    if kind == "copy":
                        toks = list(base)
                    elif kind == "prefix":
                        toks = base[: draw(st.integers(2, max(2, len(base))))]
                    else:
                        toks = base + draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
                pool.append(toks)
                n = len(toks)
                mask = [False, *draw(st.lists(st.booleans(), min_size=n - 1, max_size=n - 1))]
                mask[-1] = True  # every sequence generated at least its last token
                seqs.append(
                    TokenSequence(
                        token_ids=toks,
                        trainable=mask,
                        logprobs=[-0.25 * (1 + k % 3) for k in range(n)],
                        rollout_id=rid,
                        call_id=f"{rid}c{c}",
                        metadata={"group_id": f"g{g}"},
                    )
                )
    return seqs, draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(data=_groups_with_duplicates_and_prefixes(), reward_seed=st.integers(0, 10**6))
def test_every_rollout_keeps_its_reward_and_advantage(
    data: tuple[list[TokenSequence], bool], reward_seed: int
) -> None:
    """Every rollout given to the packer is in the packed batch with its own reward and
    advantage: the GRPO advantages read back from the memberships equal
    ``grpo_advantages`` over the rollouts as given (one tree per group, or all groups in one
    tree), whatever tokens the rollouts share."""
    from clawrl.rl_core import grpo_advantages

    seqs, one_tree = data
    rng = random.Random(reward_seed)
    rollouts = list(dict.fromkeys(s.rollout_id for s in seqs))
    rewards = {rid: float(rng.choice([0.0, 0.5, 1.0])) for rid in rollouts}
    group = {s.rollout_id: s.metadata["group_id"] for s in seqs}
    if one_tree:
        batch_seqs = seqs
        adv = _grpo_adv_by_rollout(batch_seqs, rewards)
    else:
        from clawrl.rl_core import OldPass, prepare_rl

        trees = [
            pack_token_sequences([s for s in seqs if s.metadata["group_id"] == g])
            for g in dict.fromkeys(group.values())
        ]
        batch = TreeBatch.from_trees(trees)
        prepared = prepare_rl(
            batch, OldPass(logprobs=np.zeros(batch.num_tokens)), rewards, algorithm="grpo"
        )
        assert prepared.advantage is not None
        adv = {}
        for m, k in enumerate(batch.mem_traj.tolist()):
            rid = batch.trajectories[k].rollout_id
            adv.setdefault(rid, round(float(prepared.advantage[m]), 9))
            assert adv[rid] == round(float(prepared.advantage[m]), 9)
    expected = grpo_advantages(
        np.asarray([rewards[r] for r in rollouts]), [group[r] for r in rollouts]
    )
    assert sorted(adv) == sorted(rollouts)
    assert adv == pytest.approx(dict(zip(rollouts, expected.tolist(), strict=True)), abs=1e-8)


def test_sequence_adapter_carries_logprobs_versions_names_and_side_paths() -> None:
    """Per-token logprobs and policy versions (a run of trainable tokens may change version),
    the sequence's call_id as ``leaf_call_id``, its side-path mark and its rollout metadata
    reach the packed trajectories; two sequences of one rollout must agree on metadata."""
    seqs = [
        TokenSequence(
            token_ids=[7, 1, 2, 3, 9, 4],
            trainable=[True, True, True, False, False, True],
            logprobs=[-9.0, -0.1, -0.2, -9.0, -9.0, -0.4],
            policy_versions=[0, 3, 4, 0, 0, 5],
            rollout_id="a",
            call_id="main",
            metadata={"group_id": "g"},
        ),
        TokenSequence(
            token_ids=[7, 1, 8],
            trainable=[False, False, True],
            logprobs=[0.0, 0.0, -0.8],
            rollout_id="b",
            call_id="sub",
            side_path=True,
            metadata={"group_id": "g"},
        ),
    ]
    tree = pack_token_sequences(seqs)
    validate_packed_tree(tree)
    assert tree.input_ids.tolist() == [7, 1, 2, 3, 9, 4, 8]  # children by ascending token
    by_rollout = {t.rollout_id: t for t in tree.trajectories}
    a, b = by_rollout["a"], by_rollout["b"]
    assert (a.leaf_call_id, a.side_path, a.metadata) == ("main", False, {"group_id": "g"})
    assert (b.leaf_call_id, b.side_path, b.length) == ("sub", True, 3)
    mine = tree.mem_traj == a.index
    assert tree.mem_token[mine].tolist() == [1, 2, 5]  # the first token is never trainable
    assert tree.mem_logprob[mine].tolist() == [-0.1, -0.2, -0.4]
    assert tree.mem_policy_version[mine].tolist() == [3, 4, 5]
    assert tree.mem_token[tree.mem_traj == b.index].tolist() == [6]
    with pytest.raises(PackingError, match="metadata"):
        pack_token_sequences([seqs[0], dataclasses.replace(seqs[1], rollout_id="a", metadata={})])
    with pytest.raises(PackingError, match="sequence 0"):
        pack_token_sequences([TokenSequence([1, 2], [False, True], logprobs=[0.0, 0.5])])
    with pytest.raises(PackingError, match="at least one"):
        pack_token_sequences([])
