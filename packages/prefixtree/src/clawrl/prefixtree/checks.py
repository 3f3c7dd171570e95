"""Checking and comparing prefix trees: invariants I1–I5 and the canonical form.

The bodies of :meth:`PrefixTree.check_invariants` and :meth:`PrefixTree.canonical`
(invariants as stated in :mod:`clawrl.prefixtree.tree`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from clawrl.prefixtree.errors import PrefixTreeError

if TYPE_CHECKING:
    from clawrl.prefixtree.node import Node
    from clawrl.prefixtree.tree import PrefixTree

__all__ = ["InvariantError", "canonical_form", "check_invariants"]


class InvariantError(PrefixTreeError, AssertionError):
    """A tree invariant (I1–I5 of :mod:`clawrl.prefixtree.tree`) does not hold."""


def check_invariants(tree: PrefixTree) -> None:
    """Check I1–I5 (:mod:`clawrl.prefixtree.tree` docstring). O(tokens). Raises :class:`InvariantError`."""

    def fail(msg: str) -> None:
        raise InvariantError(msg)

    root = tree._root
    if root.tokens.shape[0] or root.ends or root.obs or root.depth:
        fail("I1: root must have an empty edge, depth 0, no ends, no observations")
    seen_ends: dict[str, Node] = {}
    for node in tree.nodes():
        parent = node.parent
        assert parent is not None
        length = int(node.tokens.shape[0])
        if length == 0 or node.tokens.dtype != np.int64 or node.tokens.ndim != 1:
            fail(f"I2: empty or non-int64 edge at {node!r}")
        if parent.children.get(int(node.tokens[0])) is not node:
            fail(f"I2: {node!r} is not keyed by its first token in its parent")
        if node.depth != parent.end_depth:
            fail(f"I2: depth {node.depth} != parent end depth {parent.end_depth}")
        if not node.ends and len(node.children) < 2:
            fail(f"I3: {node!r} has no call end and fewer than two children")
        for cid in node.ends:
            if cid in seen_ends or cid not in tree._calls:
                fail(f"I4: call {cid!r} ends twice or is unknown")
            seen_ends[cid] = node
        for cid, o in node.obs.items():
            if cid not in tree._calls:
                fail(f"I5: observation of unknown call {cid!r}")
            if cid != o.call_id or o.start < 0 or o.start >= length:
                fail(f"I5: bad observation span of {cid!r} at {node!r}")
            if o.logprobs.shape != (length - o.start,):
                fail(f"I5: observation of {cid!r} has {o.logprobs.shape} logprobs")
    for cid, e in tree._calls.items():
        if e.prompt_len < 1 or e.completion_len < 0:
            fail(f"call {cid!r} has an empty prompt")
        if seen_ends.get(cid) is not e.end:
            fail(f"I4: call {cid!r} does not end at its recorded node")
        if e.end.end_depth != e.prompt_len + e.completion_len:
            fail(f"I4: call {cid!r} path length differs from its token count")
        for n in tree.path_nodes(e.end):
            has = cid in n.obs
            should = n.end_depth > e.prompt_len
            if has != should:
                fail(f"I5: call {cid!r} observation presence wrong at {n!r}")
            if has and n.obs[cid].start != max(0, e.prompt_len - n.depth):
                fail(f"I5: call {cid!r} observation starts at the wrong offset")
    for rid in {e.rollout_id for e in tree._calls.values()}:
        if rid not in tree._rollouts:
            fail(f"rollout {rid!r} of a call is not registered")


def canonical_form(tree: PrefixTree) -> tuple[Any, ...]:
    """:meth:`PrefixTree.canonical` (the form is described there)."""
    import orjson

    entries: list[tuple[Any, ...]] = []
    for node in tree.nodes():  # pre-order, children by first token
        obs = tuple(
            sorted(
                (o.call_id, o.start, tuple(o.logprobs.tolist()), o.policy_version)
                for o in node.obs.values()
            )
        )
        entries.append(
            (tuple(node.tokens.tolist()), tuple(sorted(node.ends)), obs, len(node.children))
        )
    roots = tuple(entries)
    opt = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    calls = tuple(
        sorted(
            (
                e.call_id,
                e.session_id,
                e.seq,
                e.rollout_id,
                e.prompt_len,
                e.completion_len,
                e.policy_version,
                tuple(sorted(e.flags)),
                orjson.dumps(e.metadata, option=opt),
            )
            for e in tree._calls.values()
        )
    )
    rollouts = tuple(
        sorted(
            (r.rollout_id, orjson.dumps(r.metadata, option=opt), tuple(sorted(r.flags)))
            for r in tree._rollouts.values()
        )
    )
    return (roots, calls, rollouts)
