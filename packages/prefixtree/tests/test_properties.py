"""Hypothesis property tests of the prefix tree, its packing and its serialization.

Arbitrary calls over a 4-token alphabet, built by extending prefixes of earlier calls so that
sharing, splits, calls ending inside edges and doubly-generated tokens are all common.
Example counts: the ``clawrl-prefixtree`` profile below (override with
``PREFIXTREE_MAX_EXAMPLES``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from clawrl.prefixtree import (
    MEMBERSHIP_ARRAYS,
    TOKEN_ARRAYS,
    Call,
    PackedTree,
    PrefixTree,
    merge_trees,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

settings.register_profile(
    "clawrl-prefixtree",
    max_examples=int(os.environ.get("PREFIXTREE_MAX_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("clawrl-prefixtree")


@st.composite
def call_lists(draw: Any, max_calls: int = 8, n_rollouts: int = 1) -> list[tuple[str, Call]]:
    """[(rollout_id, call)]: calls sharing prefixes of earlier calls' paths."""
    n = draw(st.integers(1, max_calls))
    paths: list[list[int]] = []
    out: list[tuple[str, Call]] = []
    for i in range(n):
        prefix: list[int] = []
        if paths and draw(st.booleans()):
            base = draw(st.sampled_from(paths))
            prefix = base[: draw(st.integers(0, len(base)))]
        toks = prefix + draw(st.lists(st.integers(0, 3), max_size=6))
        if not toks:
            toks = [draw(st.integers(0, 3))]
        plen = draw(st.integers(1, len(toks)))
        ncomp = len(toks) - plen
        logprobs = draw(
            st.lists(
                st.floats(-6.0, 0.0, allow_nan=False, allow_subnormal=False),
                min_size=ncomp,
                max_size=ncomp,
            )
        )
        rollout = f"r{draw(st.integers(0, n_rollouts - 1))}"
        session = f"{rollout}-s{draw(st.integers(0, 1))}"
        call = Call(
            call_id=f"c{i}",
            session_id=session,
            seq=draw(st.integers(0, 5)),
            prompt_ids=np.array(toks[:plen]),
            completion_ids=np.array(toks[plen:], dtype=np.int64),
            completion_logprobs=np.array(logprobs, dtype=np.float64),
            policy_version=draw(st.integers(0, 3)),
        )
        out.append((rollout, call))
        paths.append(toks)
    return out


def build(calls: list[tuple[str, Call]]) -> PrefixTree:
    tree = PrefixTree()
    for rid, c in calls:
        tree.insert(c, rollout_id=rid)
    tree.check_invariants()
    return tree


# ------------------------------------------------------------------ tree properties


@PROFILE
@given(data=st.data(), calls=call_lists(n_rollouts=2))
def test_insertion_order_does_not_change_the_tree(data: Any, calls: list[tuple[str, Call]]) -> None:
    perm = data.draw(st.permutations(calls))
    a, b = build(calls), build(perm)
    assert a.canonical() == b.canonical()
    assert a == b


@PROFILE
@given(calls=call_lists(n_rollouts=2))
def test_every_call_is_a_root_to_node_path(calls: list[tuple[str, Call]]) -> None:
    tree = build(calls)
    for rid, c in calls:
        assert np.array_equal(tree.path(c.call_id), c.token_ids)
        assert tree.get_call(c.call_id) == c
        assert tree.rollout_of(c.call_id) == rid
        assert tree.match_prefix(c.token_ids) == c.num_tokens


@PROFILE
@given(calls=call_lists(max_calls=10))
def test_tree_tokens_at_most_flat_tokens_equal_iff_nothing_shared(
    calls: list[tuple[str, Call]],
) -> None:
    tree = build(calls)
    flat = sum(c.num_tokens for _, c in calls)
    unique = tree.num_tokens
    assert unique <= flat
    firsts = [int(c.prompt_ids[0]) for _, c in calls]
    nothing_shared = len(set(firsts)) == len(firsts)
    assert (unique == flat) == nothing_shared
    st_ = tree.stats()
    assert (st_.flat_tokens, st_.unique_tokens) == (flat, unique)
    assert tree.pack().num_tokens == unique


@PROFILE
@given(data=st.data(), calls=call_lists(max_calls=9, n_rollouts=3))
def test_merge_is_insert_all_commutative_and_associative(
    data: Any, calls: list[tuple[str, Call]]
) -> None:
    parts = [data.draw(st.integers(0, 2)) for _ in calls]
    a, b, c = (build([x for x, p in zip(calls, parts, strict=True) if p == k]) for k in range(3))
    whole = build(calls)
    ab = merge_trees(a, b)
    ab.check_invariants()
    assert ab == build([x for x, p in zip(calls, parts, strict=True) if p < 2])
    assert merge_trees(a, b) == merge_trees(b, a)
    assert merge_trees(merge_trees(a, b), c) == merge_trees(a, merge_trees(b, c)) == whole
    assert merge_trees(a, b, c, a) == whole  # an identical call is kept once


@PROFILE
@given(data=st.data(), calls=call_lists(max_calls=8, n_rollouts=2))
def test_remove_call_equals_building_without_it(data: Any, calls: list[tuple[str, Call]]) -> None:
    tree = build(calls)
    removed = data.draw(st.sets(st.sampled_from([c.call_id for _, c in calls])))
    for cid in data.draw(st.permutations(sorted(removed))):
        tree.remove_call(cid)
        tree.check_invariants()
    assert tree == build([x for x in calls if x[1].call_id not in removed])


# ------------------------------------------------------------------ packing properties


def brute_force_paths(p: PackedTree) -> list[list[int]]:
    """Root-to-token index path of every token, by following parent_index."""
    out = []
    for i in range(p.num_tokens):
        path = []
        j = i
        while j >= 0:
            path.append(j)
            j = int(p.parent_index[j])
        out.append(path[::-1])
    return out


@PROFILE
@given(calls=call_lists(n_rollouts=2))
def test_pack_unpack_returns_every_path(calls: list[tuple[str, Call]]) -> None:
    tree = build(calls)
    p = tree.pack()
    by_rollout: dict[str, list[np.ndarray]] = {}
    for t in p.trajectories:
        toks = p.unpack(t)
        assert np.array_equal(toks, tree.path(t.leaf_call_id))
        assert t.length == toks.shape[0] == p.position_ids[t.leaf_token] + 1
        by_rollout.setdefault(t.rollout_id, []).append(toks)
    # every call is a prefix of a trajectory of its rollout; every leaf path is a call
    for rid, c in calls:
        path = c.token_ids
        assert any(
            t.shape[0] >= path.shape[0] and np.array_equal(t[: path.shape[0]], path)
            for t in by_rollout[rid]
        )
    for i, path in enumerate(brute_force_paths(p)):
        assert p.position_ids[i] == len(path) - 1
        assert np.array_equal(p.path_to(i), path)


@PROFILE
@given(calls=call_lists(n_rollouts=2))
def test_linear_mask_description_equals_brute_force_ancestor_mask(
    calls: list[tuple[str, Call]],
) -> None:
    p = build(calls).pack()
    n = p.num_tokens
    brute = np.zeros((n, n), dtype=bool)
    for i, path in enumerate(brute_force_paths(p)):
        brute[i, path] = True
    assert np.array_equal(p.dense_attention_mask(), brute)
    q, k = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    assert np.array_equal(p.attends(q, k), brute)
    for bs in (1, 2, 3, 8):
        partial, full = p.block_mask(bs)
        nb = -(-n // bs)
        assert partial.shape == full.shape == (nb, nb)
        for a in range(nb):
            for b in range(nb):
                blk = brute[a * bs : (a + 1) * bs, b * bs : (b + 1) * bs]
                assert partial[a, b] == blk.any()
                assert full[a, b] == blk.all()


def expected_memberships(
    calls: list[tuple[str, Call]], p: PackedTree
) -> dict[tuple[int, int], tuple[float, int, str]]:
    """(token, trajectory) -> (logprob, version, call_id) by brute force over paths."""
    # a trie position is identified by its root path of token ids
    gen: dict[tuple[str, tuple[int, ...]], list[tuple[int, str, float, int, tuple[int, ...]]]] = {}
    for rid, c in calls:
        toks = tuple(c.token_ids.tolist())
        plen = c.prompt_ids.shape[0]
        for j in range(plen, len(toks)):
            gen.setdefault((rid, toks[: j + 1]), []).append(
                (c.seq, c.call_id, float(c.completion_logprobs[j - plen]), c.policy_version, toks)
            )
    out = {}
    for t in p.trajectories:
        idx = p.path_indices(t)
        path = tuple(p.input_ids[idx].tolist())
        for d, i in enumerate(idx.tolist()):
            obs = gen.get((t.rollout_id, path[: d + 1]))
            if not obs:
                continue
            on = [o for o in obs if path[: len(o[4])] == o[4]]
            _seq, cid, lp, ver, _ = min(on or obs)
            out[(i, t.index)] = (lp, ver, cid)
    return out


@PROFILE
@given(data=st.data(), calls=call_lists(n_rollouts=3))
def test_membership_scatter_sums_equal_brute_force_over_paths(
    data: Any, calls: list[tuple[str, Call]]
) -> None:
    p = build(calls).pack()
    expected = expected_memberships(calls, p)
    got = {
        (int(i), int(t)): (float(lp), int(v), p.call_ids[int(c)])
        for i, t, lp, v, c in zip(
            p.mem_token, p.mem_traj, p.mem_logprob, p.mem_policy_version, p.mem_call, strict=True
        )
    }
    assert len(got) == p.num_memberships  # exactly one slot per (token, trajectory)
    assert got == expected
    adv = np.array(
        data.draw(
            st.lists(st.floats(-3, 3), min_size=p.num_trajectories, max_size=p.num_trajectories)
        ),
        dtype=np.float64,
    )
    count, a_pos, a_neg = p.advantage_sums(p.per_membership(adv))
    b_count = np.zeros(p.num_tokens, dtype=np.int64)
    b_pos = np.zeros(p.num_tokens)
    b_neg = np.zeros(p.num_tokens)
    for i, t in expected:
        b_count[i] += 1
        b_pos[i] += max(adv[t], 0.0)
        b_neg[i] += max(-adv[t], 0.0)
    assert np.array_equal(count, b_count)
    np.testing.assert_allclose(a_pos, b_pos, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a_neg, b_neg, rtol=1e-12, atol=1e-12)
    weights = p.per_membership(np.arange(p.num_trajectories, dtype=np.float64) + 1.0)
    b_w = np.zeros(p.num_tokens)
    for i, t in expected:
        b_w[i] += t + 1.0
    np.testing.assert_allclose(p.scatter_sum(weights), b_w)
    # trainable = generated by some call; each trajectory's count = its memberships
    assert np.array_equal(p.trainable, np.asarray(p.n_observations) > 0)
    for t in p.trajectories:
        assert t.n_trainable == sum(1 for (_, tt) in expected if tt == t.index)


@PROFILE
@given(calls=call_lists(n_rollouts=2))
def test_serialization_round_trips(calls: list[tuple[str, Call]]) -> None:
    tree = build(calls)
    tree.set_rollout_metadata(calls[0][0], {"task": "t1", "reward": 0.5})
    back = PrefixTree.from_json(tree.to_json())
    assert back == tree
    for _, c in calls:
        assert back.get_call(c.call_id) == c
    p, q = tree.pack(), back.pack()
    for name in (*TOKEN_ARRAYS, *MEMBERSHIP_ARRAYS):
        assert np.array_equal(getattr(p, name), getattr(q, name)), name
    assert p.trajectories == q.trajectories


@pytest.mark.parametrize("seed", range(3))
def test_larger_random_trees_match_brute_force(seed: int) -> None:
    """A few bigger trees (40 calls, 3 rollouts) through the same oracles."""
    rng = np.random.default_rng(seed)
    calls: list[tuple[str, Call]] = []
    paths: list[np.ndarray] = []
    for i in range(40):
        base = paths[rng.integers(len(paths))] if paths and rng.random() < 0.8 else np.zeros(0)
        toks = np.concatenate(
            (base[: rng.integers(0, base.shape[0] + 1)], rng.integers(0, 3, rng.integers(1, 12)))
        ).astype(np.int64)
        plen = int(rng.integers(1, toks.shape[0] + 1))
        c = Call(
            f"c{i}",
            "s",
            int(rng.integers(0, 9)),
            toks[:plen],
            toks[plen:],
            -rng.random(toks.shape[0] - plen),
            int(rng.integers(0, 2)),
        )
        calls.append((f"r{rng.integers(0, 3)}", c))
        paths.append(toks)
    tree = build(calls)
    p = tree.pack()
    expected = expected_memberships(calls, p)
    got = {
        (int(i), int(t)): (float(lp), int(v), p.call_ids[int(c)])
        for i, t, lp, v, c in zip(
            p.mem_token, p.mem_traj, p.mem_logprob, p.mem_policy_version, p.mem_call, strict=True
        )
    }
    assert got == expected
    assert tree == build(list(reversed(calls)))
    assert PrefixTree.from_json(tree.to_json()) == tree


# ------------------------------------------------------------------ the trajectory set


def brute_force_trajectories(calls: list[tuple[str, Call]]) -> list[tuple[str, tuple[int, ...]]]:
    """The trajectory set defined without the tree (docs/architecture.md, "Prefix tree"): per
    rollout,
    the maximal call paths — a call ends a trajectory iff no other call of its rollout has a
    prompt + completion that strictly extends its own; calls with equal paths end one
    trajectory. Sorted (rollout_id, path tokens), each once."""
    out: set[tuple[str, tuple[int, ...]]] = set()
    for rid, c in calls:
        toks = tuple(c.token_ids.tolist())
        extended = any(
            r2 == rid and len(t2) > len(toks) and t2[: len(toks)] == toks
            for r2, t2 in ((r, tuple(d.token_ids.tolist())) for r, d in calls)
        )
        if not extended:
            out.add((rid, toks))
    return sorted(out)


@PROFILE
@given(calls=call_lists(n_rollouts=3))
def test_trajectories_are_the_maximal_call_paths_of_each_rollout(
    calls: list[tuple[str, Call]],
) -> None:
    """pack()'s trajectories, PrefixTree.leaves() and is_leaf_call() all equal the brute-force
    set: no call that another call of its rollout extends ends a trajectory, every maximal
    one does, exactly once; the leaf call is one of the calls with that path, the smallest
    (seq, call_id)."""
    expected = brute_force_trajectories(calls)
    tree = build(calls)
    p = tree.pack()
    got = [(t.rollout_id, tuple(p.unpack(t).tolist())) for t in p.trajectories]
    assert len(got) == len(set(got))  # one trajectory per (rollout, maximal path)
    assert sorted(got) == expected
    leaves = sorted(
        (rid, tuple(np.concatenate([n.tokens for n in tree.path_nodes(node)]).tolist()))
        for rid, node in tree.leaves()
    )
    assert leaves == expected
    ends = {(rid, tuple(c.token_ids.tolist())) for rid, c in calls if tree.is_leaf_call(c.call_id)}
    assert sorted(ends) == expected
    for t in p.trajectories:
        same = [
            (c.seq, c.call_id)
            for rid, c in calls
            if rid == t.rollout_id and tuple(c.token_ids.tolist()) == got[t.index][1]
        ]
        assert t.leaf_call_id == min(same)[1]
