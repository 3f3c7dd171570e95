"""A radix (compressed) tree over token-id sequences, built from model calls.

One node type (:class:`Node`) and a handful of operations, each documented with the invariant
it keeps, in the style of SGLang's radix cache (``match_prefix``, ``insert``, split a node,
remove). The tree is the structure of docs/architecture.md, "Prefix tree": each call's
``prompt_ids + completion_ids`` is a root-to-node path; a call attaches at the longest
existing prefix; a token is *trainable* iff some call generated it, and every call that
generated it keeps its own observation (logprob, policy version), keyed by call_id.

Tree invariants (checked by :meth:`PrefixTree.check_invariants`, tested by Hypothesis):

* **I1 root**: the root has an empty edge, depth 0, no call ends and no observations.
* **I2 edges**: every other node has a non-empty int64 edge; ``child.depth = parent.depth +
  len(parent.tokens)``; a node's children are keyed by the first token of their edge (so two
  children never start with the same token).
* **I3 compressed**: every non-root node has a call ending at its last token or at least two
  children. Together with I2 this makes the tree a function of the *set* of inserted calls:
  the node boundaries are exactly the branch points and the call ends (insertion order does
  not matter; :meth:`PrefixTree.canonical` is equal for equal sets).
* **I4 ends**: a call ends at the last token of exactly one node; the root-to-node path of
  that node is ``prompt_ids + completion_ids``.
* **I5 observations**: a node holds an observation of call c iff c's completion overlaps the
  node's edge; the observation covers ``tokens[start:]`` (a completion is a suffix of its
  path, so it always reaches the node's end) and holds one logprob per covered token.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from clawrl.prefixtree.call import Call
from clawrl.prefixtree.checks import InvariantError, canonical_form, check_invariants
from clawrl.prefixtree.errors import (
    DuplicateCallError,
    InvalidCallError,
    PrefixTreeError,
    UnknownCallError,
)
from clawrl.prefixtree.node import _EMPTY_TOKENS, Node, Observation, _lcp, _Seq
from clawrl.prefixtree.stats import TreeStats, tree_stats

if TYPE_CHECKING:
    from clawrl.prefixtree.pack import PackedTree

__all__ = [
    "InvariantError",
    "MergeConflictError",
    "Node",
    "Observation",
    "PrefixTree",
    "RolloutInfo",
    "TreeStats",
    "merge_trees",
]


class MergeConflictError(PrefixTreeError, ValueError):
    """Two trees being merged disagree (same rollout_id with different metadata/flags)."""


@dataclass(frozen=True)
class RolloutInfo:
    """A rollout held by the tree.

    Attributes:
        rollout_id: the rollout's id (by default the session_id of its calls).
        metadata: free-form JSON-serializable metadata (task id, harness, group id, reward).
        flags: rollout-level flags set by filters (e.g. ``over_branched``).
    """

    rollout_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    flags: frozenset[str] = frozenset()


@dataclass(slots=True)
class _CallEntry:
    """What the tree keeps of an inserted call (its tokens live in the tree)."""

    call_id: str
    session_id: str
    seq: int
    rollout_id: str
    prompt_len: int
    completion_len: int
    policy_version: int
    flags: frozenset[str]
    metadata: dict[str, Any]
    end: Node

    @property
    def order_key(self) -> tuple[int, str]:
        return (self.seq, self.call_id)


class PrefixTree:
    """A radix tree of the calls of one rollout, or of a group of rollouts.

    Build one with :meth:`insert` (or :meth:`from_calls`); merge rollout trees into a group
    tree with :func:`merge_trees`; filter with :mod:`clawrl.prefixtree.filters`; lay out for
    tree attention with :meth:`pack`; store with :meth:`to_json` / :meth:`from_json`.

    Insertion cost: one vectorised comparison against the previously inserted call (finds
    the common prefix in O(length) numpy work), then O(nodes below that point) Python steps;
    only new tokens are copied.
    """

    def __init__(self) -> None:
        self._root = Node(_EMPTY_TOKENS, None, 0)
        self._calls: dict[str, _CallEntry] = {}
        self._rollouts: dict[str, RolloutInfo] = {}
        self._hint: tuple[_Seq, Node] | None = None

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_calls(
        cls,
        calls: Iterable[Call],
        *,
        rollout_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> PrefixTree:
        """A tree of ``calls`` (one rollout when ``rollout_id`` is given).

        Args:
            calls: the calls; inserted in (seq, call_id) order.
            rollout_id: rollout of every call; ``None``: each call's ``session_id``.
            metadata: rollout metadata (requires ``rollout_id``).

        Raises:
            InvalidCallError, DuplicateCallError: see :meth:`insert`.
        """
        tree = cls()
        if metadata is not None:
            if rollout_id is None:
                raise InvalidCallError("rollout metadata needs an explicit rollout_id")
            tree.set_rollout_metadata(rollout_id, metadata)
        calls = list(calls)
        for call in calls:
            if not isinstance(call, Call):
                raise InvalidCallError(f"from_calls() takes Calls, got {type(call).__name__}")
        for call in sorted(calls, key=lambda c: (c.seq, c.call_id)):
            tree.insert(call, rollout_id=rollout_id)
        return tree

    @property
    def root(self) -> Node:
        """The root node (empty edge). Read-only use: mutate only through the methods."""
        return self._root

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    @property
    def call_ids(self) -> tuple[str, ...]:
        """Ids of the inserted calls, in insertion order."""
        return tuple(self._calls)

    @property
    def rollouts(self) -> dict[str, RolloutInfo]:
        """The rollouts held by the tree (a copy), by rollout_id."""
        return dict(self._rollouts)

    def rollout_of(self, call_id: str) -> str:
        """The rollout_id of a call. Raises :class:`UnknownCallError`."""
        return self._entry(call_id).rollout_id

    def calls_of(self, rollout_id: str) -> list[str]:
        """Call ids of a rollout, in (seq, call_id) order."""
        return [
            e.call_id
            for e in sorted(self._calls.values(), key=lambda e: e.order_key)
            if e.rollout_id == rollout_id
        ]

    def set_rollout_metadata(self, rollout_id: str, metadata: dict[str, Any]) -> None:
        """Set (replace) the metadata of a rollout; creates the rollout entry if needed."""
        old = self._rollouts.get(rollout_id, RolloutInfo(rollout_id))
        self._rollouts[rollout_id] = RolloutInfo(rollout_id, dict(metadata), old.flags)

    def flag_rollout(self, rollout_id: str, flag: str) -> None:
        """Add a rollout-level flag. Raises :class:`UnknownCallError` for an unknown rollout."""
        if rollout_id not in self._rollouts:
            raise UnknownCallError(f"unknown rollout {rollout_id!r}")
        old = self._rollouts[rollout_id]
        self._rollouts[rollout_id] = RolloutInfo(rollout_id, old.metadata, old.flags | {flag})

    def flag_call(self, call_id: str, flag: str) -> None:
        """Add a flag to a call (e.g. ``side_path``). Raises :class:`UnknownCallError`."""
        e = self._entry(call_id)
        e.flags = e.flags | {flag}

    def _entry(self, call_id: str) -> _CallEntry:
        try:
            return self._calls[call_id]
        except KeyError:
            raise UnknownCallError(f"unknown call {call_id!r}") from None

    # ----------------------------------------------------------------- core operations

    def match_prefix(self, token_ids: Sequence[int] | np.ndarray) -> int:
        """Length of the longest prefix of ``token_ids`` that is a path of the tree.

        Pure; O(matched nodes) vectorised comparisons.
        """
        seq = _Seq(np.asarray(token_ids, dtype=np.int64), _EMPTY_TOKENS)
        node, pos = self._root, 0
        while pos < seq.n:
            child = node.children.get(seq.at(pos))
            if child is None:
                break
            k = seq.mismatch(pos, child.tokens)
            pos += k
            if k < child.tokens.shape[0]:
                break
            node = child
        return pos

    def _split(self, node: Node, k: int) -> Node:
        """Split ``node``'s edge after ``k`` tokens (0 < k < len); returns the new upper node.

        Keeps I2 and I5; the upper node has one child and no end, so I3 holds again only once
        the caller adds an end or a second child there (``insert`` always does). The lower
        part keeps the identity of ``node`` (so references to call ends stay valid).
        """
        parent = node.parent
        assert parent is not None and 0 < k < node.tokens.shape[0]
        upper = Node(node.tokens[:k], parent, node.depth)
        parent.children[int(node.tokens[0])] = upper
        node.tokens = node.tokens[k:]
        node.depth += k
        node.parent = upper
        upper.children[int(node.tokens[0])] = node
        lower_obs: dict[str, Observation] = {}
        for cid, o in node.obs.items():
            if o.start < k:
                upper.obs[cid] = Observation(
                    cid, o.start, o.logprobs[: k - o.start], o.policy_version
                )
                lower_obs[cid] = Observation(cid, 0, o.logprobs[k - o.start :], o.policy_version)
            else:
                lower_obs[cid] = Observation(cid, o.start - k, o.logprobs, o.policy_version)
        node.obs = lower_obs
        return upper

    def _merge_into_child(self, node: Node) -> None:
        """Merge a non-root node with no end and one child into that child (restores I3)."""
        parent = node.parent
        assert parent is not None and not node.ends and len(node.children) == 1
        (child,) = node.children.values()
        length = int(node.tokens.shape[0])
        merged = np.concatenate((node.tokens, child.tokens))
        merged.flags.writeable = False
        new_obs: dict[str, Observation] = {}
        for cid, o in child.obs.items():
            up = node.obs.get(cid)
            if up is not None:
                lp = np.concatenate((up.logprobs, o.logprobs))
                new_obs[cid] = Observation(cid, up.start, lp, o.policy_version)
            else:
                new_obs[cid] = Observation(cid, o.start + length, o.logprobs, o.policy_version)
        assert set(node.obs) <= set(child.obs)
        child.tokens = merged
        child.depth = node.depth
        child.obs = new_obs
        child.parent = parent
        parent.children[int(merged[0])] = child

    def insert(self, call: Call, rollout_id: str | None = None) -> None:
        """Insert a call: attach its path at the longest existing prefix.

        Walks down from the root (or, faster, from the common prefix with the previously
        inserted call, which is the same place: a path's position in a trie is unique),
        splitting the node where the call diverges or ends, and adds a new leaf for the rest.
        Then records the call's end (I4) and one observation per node its completion
        overlaps (I5). Tokens already in the tree keep their marks and other observations:
        a later call whose prompt contains generated tokens at the same place does not
        change them, and two calls generating the same token both keep theirs.

        Args:
            call: the call.
            rollout_id: its rollout; ``None``: ``call.session_id``.

        Raises:
            DuplicateCallError: the call_id is already in the tree with other content or
                another rollout (inserting the identical call again is a no-op).
        """
        if not isinstance(call, Call):
            raise InvalidCallError(f"insert() takes a Call, got {type(call).__name__}")
        rid = call.session_id if rollout_id is None else rollout_id
        if call.call_id in self._calls:
            if self._entry(call.call_id).rollout_id == rid and self.get_call(call.call_id) == call:
                return
            raise DuplicateCallError(f"call {call.call_id!r} is already in the tree")
        seq = _Seq(call.prompt_ids, call.completion_ids)
        node, pos = self._root, 0
        if self._hint is not None:
            hseq, hnode = self._hint
            lcp = _lcp(seq, hseq)
            if lcp > 0:
                while hnode.depth >= lcp:
                    assert hnode.parent is not None
                    hnode = hnode.parent
                off = lcp - hnode.depth
                if off < hnode.tokens.shape[0]:
                    hnode = self._split(hnode, off)
                node, pos = hnode, lcp
        while pos < seq.n:
            key = seq.at(pos)
            child = node.children.get(key)
            if child is None:
                leaf = Node(seq.copy_slice(pos, seq.n), node, pos)
                node.children[key] = leaf
                node, pos = leaf, seq.n
                break
            k = seq.mismatch(pos, child.tokens)
            if k < child.tokens.shape[0]:
                child = self._split(child, k)
            node, pos = child, pos + k
        node.ends.add(call.call_id)
        plen = seq.np_
        cur: Node | None = node
        while cur is not None and cur is not self._root and cur.end_depth > plen:
            start = max(0, plen - cur.depth)
            a = cur.depth + start - plen
            lp = call.completion_logprobs[a : a + int(cur.tokens.shape[0]) - start]
            cur.obs[call.call_id] = Observation(call.call_id, start, lp, call.policy_version)
            cur = cur.parent
        self._calls[call.call_id] = _CallEntry(
            call_id=call.call_id,
            session_id=call.session_id,
            seq=call.seq,
            rollout_id=rid,
            prompt_len=plen,
            completion_len=seq.n - plen,
            policy_version=call.policy_version,
            flags=call.flags,
            metadata=dict(call.metadata),
            end=node,
        )
        if rid not in self._rollouts:
            self._rollouts[rid] = RolloutInfo(rid)
        self._hint = (seq, node)

    def remove_call(self, call_id: str) -> None:
        """Remove a call: its end, its observations, and the tokens only it covered.

        Keeps I1–I5: deletes nodes left with no end and no child (bottom-up), then merges a
        node left with no end and one child into that child. A rollout whose last call is
        removed disappears from :attr:`rollouts`.

        Raises:
            UnknownCallError: the call is not in the tree.
        """
        e = self._entry(call_id)
        del self._calls[call_id]
        self._hint = None
        end = e.end
        end.ends.discard(call_id)
        cur = end
        while cur is not self._root and cur.obs.pop(call_id, None) is not None:
            assert cur.parent is not None
            cur = cur.parent
        cur = end
        while cur is not self._root and not cur.ends and not cur.children:
            parent = cur.parent
            assert parent is not None
            del parent.children[int(cur.tokens[0])]
            cur = parent
        if cur is not self._root and not cur.ends and len(cur.children) == 1:
            self._merge_into_child(cur)
        if not any(x.rollout_id == e.rollout_id for x in self._calls.values()):
            self._rollouts.pop(e.rollout_id, None)

    # ----------------------------------------------------------------- reading

    def nodes(self) -> Iterator[Node]:
        """Non-root nodes in DFS order, children by ascending first token (packing order)."""
        stack = [self._root.children[k] for k in sorted(self._root.children, reverse=True)]
        while stack:
            node = stack.pop()
            yield node
            if node.children:
                stack.extend(node.children[k] for k in sorted(node.children, reverse=True))

    def path_nodes(self, node: Node) -> list[Node]:
        """Nodes from the root's child down to ``node`` (inclusive)."""
        out = []
        cur: Node | None = node
        while cur is not None and cur is not self._root:
            out.append(cur)
            cur = cur.parent
        out.reverse()
        return out

    def path(self, call_id: str) -> np.ndarray:
        """int64 [P + C]: the call's root-to-node path (= its prompt + completion)."""
        nodes = self.path_nodes(self._entry(call_id).end)
        return np.concatenate([n.tokens for n in nodes]) if nodes else _EMPTY_TOKENS.copy()

    def get_call(self, call_id: str) -> Call:
        """The call as inserted (arrays rebuilt from the tree; flags include tags added later).

        Raises:
            UnknownCallError: the call is not in the tree.
        """
        e = self._entry(call_id)
        toks = self.path(call_id)
        lps = [n.obs[call_id].logprobs for n in self.path_nodes(e.end) if call_id in n.obs]
        return Call(
            call_id=e.call_id,
            session_id=e.session_id,
            seq=e.seq,
            prompt_ids=toks[: e.prompt_len],
            completion_ids=toks[e.prompt_len :],
            completion_logprobs=np.concatenate(lps) if lps else np.zeros(0),
            policy_version=e.policy_version,
            flags=e.flags,
            metadata=dict(e.metadata),
        )

    def calls(self) -> list[Call]:
        """All calls (see :meth:`get_call`), in insertion order."""
        return [self.get_call(cid) for cid in self._calls]

    def _subtree_rollouts(self) -> dict[int, set[str]]:
        """id(node) -> rollouts with a call ending in the node's subtree (post-order)."""
        out: dict[int, set[str]] = {}
        for node in reversed(list(self.nodes())):
            s = {self._calls[c].rollout_id for c in node.ends}
            for ch in node.children.values():
                s |= out[id(ch)]
            out[id(node)] = s
        return out

    def leaves(self) -> list[tuple[str, Node]]:
        """Trajectory ends: (rollout_id, node) where a call of the rollout ends and no call
        of the same rollout continues below. In DFS order of the node, then rollout_id."""
        sub = self._subtree_rollouts()
        out: list[tuple[str, Node]] = []
        for node in self.nodes():
            own = {self._calls[c].rollout_id for c in node.ends}
            below: set[str] = set()
            for ch in node.children.values():
                below |= sub[id(ch)]
            out.extend((r, node) for r in sorted(own - below))
        return out

    def is_leaf_call(self, call_id: str) -> bool:
        """True if no other call of the call's rollout extends its path strictly."""
        e = self._entry(call_id)
        stack = list(e.end.children.values())
        while stack:
            n = stack.pop()
            if any(self._calls[c].rollout_id == e.rollout_id for c in n.ends):
                return False
            stack.extend(n.children.values())
        return True

    def prompt_position(self, call_id: str) -> tuple[Node, int]:
        """(node, prompt length) identifying where the call's prompt ends in the tree.

        Two calls have equal ``prompt_ids`` iff their prompt positions are equal (a path's
        position in a trie is unique).
        """
        e = self._entry(call_id)
        n = e.end
        while n.depth >= e.prompt_len:
            assert n.parent is not None
            n = n.parent
        return n, e.prompt_len

    # ----------------------------------------------------------------- comparing

    def canonical(self) -> tuple[Any, ...]:
        """A hashable form equal for trees holding the same calls, whatever the order.

        ``(nodes, calls, rollouts)``: nodes as a flat tuple in pre-order (children visited by
        first token), each ``(edge tokens, sorted ends, sorted observations (call_id, start,
        logprobs, policy_version), number of children)`` — the child counts fix the shape, and
        flatness keeps comparing and hashing free of recursion however deep the tree; calls as
        sorted (call_id, session_id, seq, rollout_id, prompt_len, completion_len,
        policy_version, flags, metadata JSON); rollouts as sorted (id, metadata JSON, flags).
        Observations are a set: two calls that generated the same token both appear.
        """
        return canonical_form(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrefixTree):
            return NotImplemented
        return self.canonical() == other.canonical()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PrefixTree(calls={len(self._calls)}, rollouts={len(self._rollouts)}, "
            f"tokens={self.num_tokens})"
        )

    @property
    def num_tokens(self) -> int:
        """Unique tokens stored in the tree (N of the packed tree)."""
        return sum(int(n.tokens.shape[0]) for n in self.nodes())

    def check_invariants(self) -> None:
        """Check I1–I5 (module docstring). O(tokens). Raises :class:`InvariantError`."""
        check_invariants(self)

    # ----------------------------------------------------------------- summaries

    def stats(self) -> TreeStats:
        """Size and shape figures (see :class:`TreeStats`). O(nodes + observed tokens)."""
        return tree_stats(self)

    def pack(self) -> PackedTree:
        """Lay the tree out for tree attention: see :func:`clawrl.prefixtree.pack.pack_tree`."""
        from clawrl.prefixtree.pack import pack_tree

        return pack_tree(self)

    def to_json(self) -> bytes:
        """Serialize with orjson: see :func:`clawrl.prefixtree.serialize.dumps`."""
        from clawrl.prefixtree.serialize import dumps

        return dumps(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> PrefixTree:
        """Load a tree written by :meth:`to_json`: see :func:`clawrl.prefixtree.serialize.loads`."""
        from clawrl.prefixtree.serialize import loads

        return loads(data)


def merge_trees(*trees: PrefixTree) -> PrefixTree:
    """A new tree holding the calls and rollouts of all ``trees`` (e.g. a GRPO group tree).

    Equal to inserting every call into one tree (so merging is commutative and associative;
    per-rollout trajectories and memberships are kept, since every call keeps its rollout).
    A call present in several trees with identical content is kept once.

    Raises:
        MergeConflictError: a rollout_id appears in two trees with different metadata/flags.
        DuplicateCallError: a call_id appears in two trees with different content.
    """
    out = PrefixTree()
    for t in trees:
        for rid, info in t._rollouts.items():
            have = out._rollouts.get(rid)
            if have is not None and (have.metadata, have.flags) != (info.metadata, info.flags):
                raise MergeConflictError(f"rollout {rid!r} differs between merged trees")
            out._rollouts[rid] = info
    for t in trees:
        for cid in sorted(t._calls, key=lambda c: (t._calls[c].rollout_id, t._calls[c].order_key)):
            out.insert(t.get_call(cid), rollout_id=t._calls[cid].rollout_id)
    return out
