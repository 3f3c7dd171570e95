"""Adversarial inputs found by the red-team pass; each was silent corruption or an untyped crash
before its fix."""

from __future__ import annotations

import numpy as np
import pytest
from clawrl.prefixtree import Call, InvalidCallError, PrefixTree, merge_trees


@pytest.mark.parametrize(
    "ids",
    [
        np.array([5, 2**64 - 1], dtype=np.uint64),  # wrapped to -1 by astype(int64)
        [2**63],  # a Python list numpy stores as uint64
    ],
)
def test_token_ids_beyond_int64_are_rejected_not_wrapped(ids: list[int] | np.ndarray) -> None:
    with pytest.raises(InvalidCallError, match="beyond int64"):
        Call("a", "s", 0, ids, [], [])  # type: ignore[arg-type]
    with pytest.raises(InvalidCallError, match="beyond int64"):
        Call("a", "s", 0, [1], ids, [-0.1] * len(ids))  # type: ignore[arg-type]
    rec = {"call_id": "a", "session_id": "s", "seq": 0, "prompt_ids": ids, "completion_ids": []}
    with pytest.raises(InvalidCallError):
        Call.from_record(rec)
    # the largest int64 id is fine
    assert Call("a", "s", 0, [2**63 - 1], [], []).prompt_ids[0] == 2**63 - 1


@pytest.mark.parametrize("field", ["seq", "policy_version"])
def test_seq_and_policy_version_beyond_int64_are_rejected(field: str) -> None:
    # policy_version=2**63 used to be accepted and then crash pack() with OverflowError.
    kw = {"seq": 0, "policy_version": 0, field: 2**63}
    with pytest.raises(InvalidCallError, match=field):
        Call("a", "s", kw["seq"], [1], [2], [-0.1], policy_version=kw["policy_version"])
    ok = Call("a", "s", 0, [1], [2], [-0.1], policy_version=2**63 - 1)
    packed = PrefixTree.from_calls([ok]).pack()
    assert packed.input_ids.tolist() == [1, 2]


def test_flags_as_bytes_are_rejected() -> None:
    # b"ab" iterated to the flag names {"97", "98"}.
    with pytest.raises(InvalidCallError, match="bytes"):
        Call("a", "s", 0, [1], [], [], flags=b"ab")  # type: ignore[arg-type]


def test_deep_branchy_tree_compares_without_recursion_error() -> None:
    # Each call branches one token below the previous one: 2 * 1500 nested nodes. Equality
    # compared nested canonical tuples and hit RecursionError.
    n = 1500
    calls = [
        Call(f"b{i}", "s", i, np.arange(1, i + 2), np.array([500_000 + i]), np.array([-0.1]))
        for i in range(n)
    ]
    tree = PrefixTree.from_calls(calls)
    same = PrefixTree.from_calls(list(reversed(calls)))
    assert tree == same
    assert PrefixTree.from_json(tree.to_json()) == tree
    other = PrefixTree.from_calls(calls[:-1])
    assert tree != other
    hash(tree.canonical())
    assert merge_trees(tree, PrefixTree()) == tree


def test_canonical_form_distinguishes_shapes_with_equal_node_lists() -> None:
    # Flat pre-order + child counts: [1,2]->{3,4} differs from a chain with the same edges.
    a = PrefixTree.from_calls(
        [Call("x", "s", 0, [1, 2], [3], [-0.1]), Call("y", "s", 1, [1, 2], [4], [-0.1])]
    )
    b = PrefixTree.from_calls(
        [Call("x", "s", 0, [1, 2], [3], [-0.1]), Call("y", "s", 1, [1, 2, 3], [4], [-0.1])]
    )
    assert a != b
    assert a.canonical()[0] != b.canonical()[0]
