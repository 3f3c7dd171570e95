"""Example tests: the known tree-related failure classes of token-level training, the call record, filters,
observations, errors."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from clawrl.prefixtree import (
    OVER_BRANCHED_FLAG,
    SIDE_PATH_FLAG,
    Call,
    DuplicateCallError,
    InvalidCallError,
    MaskTooLargeError,
    MergeConflictError,
    PrefixTree,
    PrefixTreeError,
    SerializationError,
    UnknownCallError,
    apply_filters,
    filter_over_branched,
    find_dead_leaves,
    first_user_turn_end,
    leaf_counts,
    merge_trees,
    remove_dead_leaves,
    tag_side_paths,
)

SYS = [900, 901, 902]  # system prompt
USER1 = [800, 801, 1, 2, 3, 802]  # <user> ... <end>
ASSIST = [700]  # assistant header


def mk(
    cid: str,
    seq: int,
    prompt: list[int],
    completion: list[int],
    session: str = "s",
    version: int = 1,
    flags: tuple[str, ...] = (),
) -> Call:
    lps = [-(0.01 * (seq + 1)) - 0.001 * j for j in range(len(completion))]
    return Call(
        cid,
        session,
        seq,
        np.array(prompt),
        np.array(completion, dtype=np.int64),
        np.array(lps),
        version,
        frozenset(flags),
    )


# ------------------------------------------------------------------ known failure classes


def test_non_append_only_rollout_becomes_a_branch_without_losing_tokens_or_masks() -> None:
    """Failure class 15 (and 4): the harness rewrote history (dropped reasoning)."""
    p0 = SYS + USER1 + ASSIST
    reasoning, answer = [50, 51, 52], [60, 61, 62, 703]
    c0 = mk("c0", 0, p0, reasoning + answer)
    # next prompt: the earlier assistant message without its reasoning, then a tool result
    p1 = p0 + answer + [810, 811]
    c1 = mk("c1", 1, p1 + ASSIST, [70, 71, 703])
    p2 = p1 + ASSIST + [70, 71, 703] + [812] + ASSIST  # append-only after the rewrite
    c2 = mk("c2", 2, p2, [80, 703])
    calls = [c0, c1, c2]
    tree = PrefixTree.from_calls(calls, rollout_id="r")
    tree.check_invariants()
    packed = tree.pack()
    assert packed.num_trajectories == 2  # the rewrite is a branch, not an error
    assert tree.stats().n_branch_points == 1
    for c in calls:  # no lost tokens
        assert np.array_equal(tree.path(c.call_id), c.token_ids)
    by_leaf = {t.leaf_call_id: t for t in packed.trajectories}
    assert set(by_leaf) == {"c0", "c2"}
    # no zeroed masks: every generated token is trainable with its own logprob on its path
    for traj, owners in ((by_leaf["c0"], [c0]), (by_leaf["c2"], [c1, c2])):
        sel = packed.mem_traj == traj.index
        assert traj.n_trainable == sum(c.completion_ids.size for c in owners) == sel.sum()
        want = np.concatenate([c.completion_logprobs for c in owners])
        assert np.array_equal(packed.mem_logprob[sel], want)
        assert np.array_equal(
            packed.input_ids[packed.mem_token[sel]],
            np.concatenate([c.completion_ids for c in owners]),
        )
    # the answer tokens re-rendered in c1's prompt are prompt tokens there (not generated at
    # that place), so the c2 path does not train them
    assert int(packed.trainable.sum()) == sum(c.completion_ids.size for c in calls)


def test_every_trainable_token_has_exactly_one_logprob_slot_including_the_last() -> None:
    """Failure class 10: off-by-one in the gather at the last node of a path."""
    c0 = mk("c0", 0, [1, 2, 3], [4, 5])
    c1 = mk("c1", 1, [1, 2, 3, 4, 5, 6], [7, 8, 9])
    c2 = mk("c2", 2, [1, 2, 3], [4, 10])  # a sibling that ends right after a shared token
    packed = PrefixTree.from_calls([c0, c1, c2]).pack()
    pairs = list(zip(packed.mem_token.tolist(), packed.mem_traj.tolist(), strict=True))
    assert len(pairs) == len(set(pairs))
    for t in packed.trajectories:
        path = packed.path_indices(t)
        mine = packed.mem_token[packed.mem_traj == t.index]
        assert np.array_equal(mine, path[packed.trainable[path]])
        assert t.leaf_token in mine  # the last token of the path has its slot
        # the logits gathered for this trajectory come from its own path, never from the
        # leaf (nothing is predicted after the last token)
        gather = packed.parent_index[mine]
        assert np.all(np.isin(gather, path[:-1]))
        assert gather.size == mine.size
    leaf_c1 = next(t for t in packed.trajectories if t.leaf_call_id == "c1")
    m = (packed.mem_traj == leaf_c1.index) & (packed.mem_token == leaf_c1.leaf_token)
    assert packed.mem_logprob[m].tolist() == [c1.completion_logprobs[-1]]


def test_no_token_attends_across_paths() -> None:
    """Failure class 11: packed sequences must not leak attention across paths."""
    calls = [
        mk("a", 0, [1, 2, 3], [4, 5, 6]),
        mk("b", 1, [1, 2, 3, 4, 9], [10, 11]),
        mk("c", 2, [7, 8], [9]),  # a second root (forest)
    ]
    packed = PrefixTree.from_calls(calls).pack()
    mask = packed.dense_attention_mask()
    paths = [set(packed.path_indices(t).tolist()) for t in packed.trajectories]
    for i in range(packed.num_tokens):
        allowed = set(np.flatnonzero(mask[i]).tolist())
        anc = set(packed.path_to(i).tolist())
        assert allowed == anc
        for p in paths:  # a token on a path only sees tokens of that path
            if i in p:
                assert allowed <= p
    for t in packed.trajectories:  # each path's own mask is the causal mask
        idx = packed.path_indices(t)
        assert np.array_equal(mask[np.ix_(idx, idx)], np.tril(np.ones((idx.size,) * 2, bool)))
    with pytest.raises(MaskTooLargeError):
        packed.dense_attention_mask(max_tokens=packed.num_tokens - 1)


# ------------------------------------------------------------------ observations


def test_two_calls_generating_the_same_token_both_keep_their_observation() -> None:
    a = Call("a", "s", 0, np.array([1, 2]), np.array([3, 4]), np.array([-0.5, -1.0]), 1)
    b = Call("b", "s", 1, np.array([1, 2]), np.array([3, 5]), np.array([-0.7, -2.0]), 2)
    tree = PrefixTree.from_calls([a, b])
    packed = tree.pack()
    i3 = int(np.flatnonzero(packed.input_ids == 3)[0])
    assert packed.n_observations[i3] == 2
    assert math.isclose(packed.logprob_spread[i3], 0.2)
    assert tree.stats().n_multi_observed_tokens == 1
    assert math.isclose(tree.stats().max_logprob_spread, 0.2)
    # each trajectory carries the observation of its own call
    for t in packed.trajectories:
        m = (packed.mem_traj == t.index) & (packed.mem_token == i3)
        own = a if t.leaf_call_id == "a" else b
        assert packed.mem_logprob[m].tolist() == [own.completion_logprobs[0]]
        assert packed.mem_policy_version[m].tolist() == [own.policy_version]
    # the canonical form holds both observations; dropping one changes it
    node_obs = tree.canonical()[0][0][2]
    assert {o[0] for o in node_obs} == {"a", "b"}
    other = PrefixTree.from_calls(
        [a, Call("b", "s", 1, np.array([1, 2]), np.array([3, 5]), np.array([-0.6, -2.0]), 2)]
    )
    assert other != tree


def test_a_later_prompt_containing_generated_tokens_keeps_mark_and_logprob() -> None:
    c0 = mk("c0", 0, [1, 2], [3, 4])
    c1 = mk("c1", 1, [1, 2, 3, 4, 5], [6])
    packed = PrefixTree.from_calls([c0, c1]).pack()
    assert packed.trainable.tolist() == [False, False, True, True, False, True]
    assert packed.mem_logprob.tolist() == [*c0.completion_logprobs.tolist(), -0.02]


def test_group_tree_keeps_per_rollout_membership() -> None:
    shared = [1, 2, 3]
    ra = PrefixTree.from_calls(
        [mk("a0", 0, shared, [4, 5])], rollout_id="A", metadata={"reward": 1.0}
    )
    # rollout B: its prompt contains A's generated tokens (not generated by B there)
    rb = PrefixTree.from_calls(
        [mk("b0", 0, [*shared, 4, 5, 6], [7])], rollout_id="B", metadata={"reward": 0.0}
    )
    rc = PrefixTree.from_calls([mk("c0", 0, shared, [4, 9])], rollout_id="C")
    group = merge_trees(ra, rb, rc)
    packed = group.pack()
    assert [t.rollout_id for t in packed.trajectories] == ["A", "B", "C"]
    assert packed.trajectories[0].metadata == {"reward": 1.0}
    count = packed.membership_count()
    i4 = int(np.flatnonzero(packed.input_ids == 4)[0])
    assert count[i4] == 2  # A and C generated it; B only has it in its prompt
    b = packed.trajectories[1]
    assert packed.input_ids[packed.mem_token[packed.mem_traj == b.index]].tolist() == [7]
    with pytest.raises(MergeConflictError):
        merge_trees(
            ra,
            PrefixTree.from_calls([mk("a9", 0, [5], [])], rollout_id="A", metadata={"reward": 0.5}),
        )


# ------------------------------------------------------------------ filters


def test_dead_leaves_are_retries_superseded_by_a_later_call_with_the_same_prompt() -> None:
    p = SYS + USER1 + ASSIST
    calls = [
        mk("c0", 0, p, [5, 6]),  # timed out / malformed: the harness re-sent it
        mk("c1", 1, p, [5, 7, 8]),  # the retry, continued from
        mk("c2", 2, [*p, 5, 7, 8, 20], [21]),
        mk("c3", 3, [*p, 5, 7, 8, 20], [22]),  # re-sent again: c2 is dead too
        mk("x", 0, p, [5, 6], session="other"),  # another session: not a retry of c0
    ]
    tree = PrefixTree.from_calls(calls, rollout_id="r")
    assert find_dead_leaves(tree) == ["c0", "c2"]
    assert remove_dead_leaves(tree) == ("c0", "c2")
    tree.check_invariants()
    assert sorted(tree.call_ids) == ["c1", "c3", "x"]
    # tokens of the removed calls that others still cover stay
    assert np.array_equal(tree.path("x"), calls[4].token_ids)
    assert leaf_counts(tree) == {"r": 2}


def test_a_resent_call_that_was_continued_from_is_not_dead() -> None:
    p = [1, 2, 3]
    calls = [mk("c0", 0, p, [4]), mk("c1", 1, [*p, 4, 5], [6]), mk("c2", 2, p, [4])]
    tree = PrefixTree.from_calls(calls)
    assert find_dead_leaves(tree) == []


def test_over_branched_rollouts_are_dropped_or_flagged() -> None:
    def bushy(rid: str, leaves: int) -> PrefixTree:
        return PrefixTree.from_calls(
            [mk(f"{rid}{i}", i, [1, 2, 3 + i], [9]) for i in range(leaves)], rollout_id=rid
        )

    group = merge_trees(bushy("a", 2), bushy("b", 5))
    flagged = merge_trees(group)
    assert filter_over_branched(flagged, max_leaves=3, action="flag") == ("b",)
    flags = {t.rollout_id: t.flags for t in flagged.pack().trajectories}
    assert flags["b"] == {OVER_BRANCHED_FLAG} and flags["a"] == frozenset()
    report = apply_filters(group, max_leaves=3)
    assert report.dropped_rollouts == ("b",)
    assert set(group.rollouts) == {"a"}
    group.check_invariants()
    assert {t.rollout_id for t in group.pack().trajectories} == {"a"}
    with pytest.raises(ValueError):
        filter_over_branched(group, max_leaves=0)


def test_side_paths_are_subagents_and_compaction_not_dropped_reasoning() -> None:
    main0 = SYS + USER1 + ASSIST
    calls = [
        mk("m0", 0, main0, [50, 51, 60, 703]),
        # dropped reasoning: branches after the first user turn -> not a side path
        mk("m1", 1, [*main0, 60, 703, 810, *ASSIST], [61, 703]),
        # subagent: another system prompt
        mk("sub", 2, [905, 906, 800, 801, 7, 802, *ASSIST], [62, 703]),
        # compaction: same system prompt, but a summary instead of the first user turn
        mk("cmp", 3, [*SYS, 800, 801, 99, 98, 802, *ASSIST], [63, 703]),
        # a call whose prompt is a proper prefix of the main first turn
        mk("short", 4, SYS, [64]),
    ]
    tree = PrefixTree.from_calls(calls, rollout_id="r")
    # the exact rule of docs/architecture.md: the anchor ends at the end of the first user turn
    cut = first_user_turn_end(user_turn_start=[800], turn_end=[802])
    assert cut(np.array(main0)) == len(SYS) + len(USER1)
    assert cut(np.array([1, 2])) == 2
    assert tag_side_paths(tree, cut) == ("sub", "cmp", "short")
    assert tag_side_paths(tree, cut) == ()  # idempotent
    side = {t.leaf_call_id: t.side_path for t in tree.pack().trajectories}
    assert side == {"m0": False, "m1": False, "sub": True, "cmp": True, "short": True}
    assert SIDE_PATH_FLAG in tree.get_call("sub").flags
    # the tag survives serialization
    assert PrefixTree.from_json(tree.to_json()).get_call("cmp").side_path


def test_default_side_path_anchor_tolerates_a_rerendered_generation_header() -> None:
    """Failure class 1: the first prompt ends with an empty think block that later renders
    drop; without the template's markers the main conversation must still not be flagged."""
    think = [720, 721]  # "<think>\n\n</think>" only in the very first generation prompt
    first = SYS + USER1 + ASSIST
    calls = [
        mk("m0", 0, first + think, [60, 703]),
        mk("m1", 1, [*first, 60, 703, 810, *ASSIST], [61, 703]),
        mk("m2", 2, [*first, 60, 703, 810, *ASSIST, 61, 703, 811, *ASSIST], [62, 703]),
        mk("sub", 3, [905, 906, 800, 801, 7, 802, *ASSIST], [63, 703]),
    ]
    tree = PrefixTree.from_calls(calls, rollout_id="r")
    assert tag_side_paths(tree) == ("sub",)
    # a lone call has no continuation: its whole prompt is the anchor
    lone = PrefixTree.from_calls([mk("a", 0, [1, 2, 3], [4])])
    assert tag_side_paths(lone) == ()


def test_a_call_flagged_side_path_by_the_proxy_is_not_the_main_call() -> None:
    calls = [mk("t", 0, [5, 5, 5], [1], flags=(SIDE_PATH_FLAG,)), mk("m", 1, [1, 2], [3])]
    tree = PrefixTree.from_calls(calls)
    assert tag_side_paths(tree) == ()
    assert [t.side_path for t in tree.pack().trajectories] == [False, True]


# ------------------------------------------------------------------ call record


def record(**over: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "call_id": "k1",
        "session_id": "s1",
        "seq": 3,
        "api": "openai.chat",
        "prompt_ids": [1, 2, 3],
        "completion_ids": [4, 5],
        "completion_logprobs": [-0.5, -0.25],
        "finish_reason": "stop",
        "policy_version": 2,
        "flags": ["ill_formed_tool_call"],
        "prompt_relation": {"kind": "extends", "parent_call_id": "k0", "diverged_at": None},
        "request": {"huge": "body"},
        "metadata": {"task": "t"},
    }
    rec.update(over)
    return rec


def test_call_from_record_reads_a_proxy_record() -> None:
    c = Call.from_record(orjson.loads(orjson.dumps(record())))
    assert (c.call_id, c.session_id, c.seq, c.policy_version) == ("k1", "s1", 3, 2)
    assert c.prompt_ids.dtype == np.int64 and c.completion_logprobs.dtype == np.float64
    assert c.flags == {"ill_formed_tool_call"}
    assert c.metadata["finish_reason"] == "stop" and c.metadata["task"] == "t"
    assert c.metadata["prompt_relation"]["kind"] == "extends"
    assert "request" not in c.metadata
    assert Call.from_record({**c.to_record()}) == c
    assert Call.from_record(record(flags={"side_path": True, "x": False})).side_path
    empty = Call.from_record(record(completion_ids=[], completion_logprobs=None))
    assert empty.completion_ids.size == 0
    with pytest.raises(ValueError):  # arrays are read-only
        c.prompt_ids[0] = 7


def test_a_failed_call_record_with_null_version_reads() -> None:
    """The proxy writes policy_version null and an empty completion for a failed call."""
    c = Call.from_record(
        record(
            policy_version=None,
            completion_ids=[],
            completion_logprobs=[],
            finish_reason="error",
            flags=["stale"],
            run_id="run-1",
        )
    )
    assert c.policy_version == 0 and c.completion_ids.size == 0
    assert c.metadata["run_id"] == "run-1" and c.flags == {"stale"}
    tree = PrefixTree.from_calls([c])
    assert tree.pack().num_memberships == 0 and tree.pack().num_trajectories == 1


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"prompt_ids": []}, "prompt_ids is empty"),
        ({"completion_logprobs": [-0.1]}, "one logprob per generated token"),
        ({"completion_logprobs": [float("nan"), -1.0]}, "finite"),
        ({"completion_logprobs": [0.5, -1.0]}, "<= 0"),
        ({"prompt_ids": [1, -2]}, "negative"),
        ({"prompt_ids": [1.5]}, "integers"),
        ({"prompt_ids": [[1], [2]]}, "1-D"),
        ({"seq": -1}, "seq"),
        ({"call_id": ""}, "call_id"),
        ({"completion_logprobs": None}, "no completion_logprobs"),
        ({"metadata": [1]}, "metadata"),
    ],
)
def test_bad_call_records_raise_invalid_call_error(over: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidCallError, match=match):
        Call.from_record(record(**over))


def test_missing_record_keys_raise() -> None:
    rec = record()
    del rec["prompt_ids"]
    with pytest.raises(InvalidCallError, match="prompt_ids"):
        Call.from_record(rec)
    with pytest.raises(InvalidCallError):
        Call.from_record([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------ errors


def test_duplicates_unknowns_and_bad_documents() -> None:
    c = mk("a", 0, [1, 2], [3])
    tree = PrefixTree.from_calls([c])
    tree.insert(c)  # the identical call again: a no-op
    assert len(tree) == 1
    with pytest.raises(DuplicateCallError):
        tree.insert(mk("a", 1, [1, 2], [3]))
    with pytest.raises(DuplicateCallError):
        tree.insert(c, rollout_id="other")
    with pytest.raises(UnknownCallError, match="nope"):
        tree.remove_call("nope")
    with pytest.raises(PrefixTreeError):
        tree.get_call("nope")
    for bad in (b"{", b"[]", b'{"format": "clawrl.prefixtree", "version": 99}'):
        with pytest.raises(SerializationError):
            PrefixTree.from_json(bad)
    doc = orjson.loads(tree.to_json())
    doc["calls"][0]["prompt_len"] = 1  # now the observation offsets are inconsistent
    with pytest.raises(SerializationError):
        PrefixTree.from_json(orjson.dumps(doc))
    doc = orjson.loads(tree.to_json())
    doc["nodes"][0]["parent"] = 3
    with pytest.raises(SerializationError):
        PrefixTree.from_json(orjson.dumps(doc))
    tree.set_rollout_metadata("s", {"bad": object()})
    with pytest.raises(SerializationError):
        tree.to_json()
    packed = PrefixTree.from_calls([c]).pack()
    with pytest.raises(PrefixTreeError):
        packed.scatter_sum(np.ones(packed.num_memberships + 1))
    with pytest.raises(PrefixTreeError):
        packed.per_membership(np.ones(3))


def test_empty_tree_packs_to_empty_arrays() -> None:
    packed = PrefixTree().pack()
    assert packed.num_tokens == 0 and packed.num_memberships == 0
    assert packed.trajectories == ()
    assert PrefixTree().stats().compression_ratio == 1.0
