"""The prefix tree's node type, its observations, and the token matching ``insert`` uses.

:class:`Node` and :class:`Observation` are the building blocks of
:class:`clawrl.prefixtree.tree.PrefixTree` (and importable from there); ``_Seq`` / ``_lcp``
compare a call's ``prompt + completion`` against tree edges and against the previously
inserted call without concatenating them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Node", "Observation", "observation_coverage"]

_EMPTY_TOKENS = np.zeros(0, dtype=np.int64)
_EMPTY_TOKENS.flags.writeable = False


class Observation(NamedTuple):
    """One call's observation of the tokens it generated inside one node.

    Attributes:
        call_id: the call that generated the tokens.
        start: offset in the node's edge of the first covered token; the observation covers
            ``node.tokens[start:]`` (invariant I5).
        logprobs: float64 [len(node.tokens) - start], the recorded logprob of each covered
            token (natural log).
        policy_version: the call's policy version.
    """

    call_id: str
    start: int
    logprobs: np.ndarray
    policy_version: int


class Node:
    """The tree's one node type: an edge of tokens below a parent.

    Attributes:
        tokens: int64 [L] edge tokens (L >= 1 except at the root).
        parent: the parent node (``None`` at the root).
        children: child nodes keyed by the first token of their edge.
        depth: depth (position id) of ``tokens[0]`` on every path through the node.
        ends: call_ids of the calls whose path ends at ``tokens[-1]``.
        obs: observations keyed by call_id (see :class:`Observation`).
    """

    __slots__ = ("children", "depth", "ends", "obs", "parent", "tokens")

    def __init__(self, tokens: np.ndarray, parent: Node | None, depth: int) -> None:
        self.tokens = tokens
        self.parent = parent
        self.depth = depth
        self.children: dict[int, Node] = {}
        self.ends: set[str] = set()
        self.obs: dict[str, Observation] = {}

    @property
    def end_depth(self) -> int:
        """Depth just past the node's last token (= the path length at the node's end)."""
        return self.depth + int(self.tokens.shape[0])

    def __repr__(self) -> str:
        return (
            f"Node(depth={self.depth}, len={self.tokens.shape[0]}, "
            f"children={len(self.children)}, ends={sorted(self.ends)}, obs={len(self.obs)})"
        )


def _first_mismatch(x: np.ndarray, y: np.ndarray) -> int:
    """Index of the first i with x[i] != y[i] (x, y of equal length), or len(x)."""
    n = int(x.shape[0])
    if n == 0:
        return 0
    ne = x != y
    i = int(ne.argmax())
    return i if bool(ne[i]) else n


class _Seq:
    """``prompt + completion`` seen as one sequence, without concatenating them."""

    __slots__ = ("c", "n", "np_", "p")

    def __init__(self, p: np.ndarray, c: np.ndarray) -> None:
        self.p = p
        self.c = c
        self.np_ = int(p.shape[0])
        self.n = self.np_ + int(c.shape[0])

    def at(self, i: int) -> int:
        return int(self.p[i]) if i < self.np_ else int(self.c[i - self.np_])

    def piece(self, a: int, b: int) -> np.ndarray:
        """tokens[a:b] when [a, b) lies inside one part (a view)."""
        if b <= self.np_:
            return self.p[a:b]
        return self.c[a - self.np_ : b - self.np_]

    def copy_slice(self, a: int, b: int) -> np.ndarray:
        """A new int64 array holding tokens[a:b]."""
        if b <= self.np_ or a >= self.np_:
            out = self.piece(a, b).copy()
        else:
            out = np.concatenate((self.p[a:], self.c[: b - self.np_]))
        out.flags.writeable = False
        return out

    def mismatch(self, pos: int, edge: np.ndarray) -> int:
        """Length of the common prefix of tokens[pos:] and ``edge``."""
        m = min(int(edge.shape[0]), self.n - pos)
        cut = min(max(self.np_, pos), pos + m)  # split [pos, pos+m) at the part boundary
        k = 0
        for a, b in ((pos, cut), (cut, pos + m)):
            if b <= a:
                continue
            j = _first_mismatch(edge[a - pos : b - pos], self.piece(a, b))
            k += j
            if j < b - a:
                return k
        return k


def _lcp(x: _Seq, y: _Seq) -> int:
    """Length of the longest common prefix of two sequences (vectorised, no copies)."""
    m = min(x.n, y.n)
    a = 0
    # cut [0, m) where either sequence switches from prompt to completion
    for b in sorted((min(x.np_, m), min(y.np_, m), m)):
        if b <= a:
            continue
        j = _first_mismatch(x.piece(a, b), y.piece(a, b))
        if j < b - a:
            return a + j
        a = b
    return m


def observation_coverage(node: Node) -> tuple[np.ndarray, np.ndarray]:
    """(count int64 [L], spread float64 [L]) over the node's edge tokens: how many calls
    observed each token, and max − min of its observed logprobs (0 where fewer than two)."""
    length = int(node.tokens.shape[0])
    cnt = np.zeros(length, dtype=np.int64)
    if len(node.obs) < 2:
        for o in node.obs.values():
            cnt[o.start :] += 1
        return cnt, np.zeros(length, dtype=np.float64)
    hi = np.full(length, -np.inf)
    lo = np.full(length, np.inf)
    for o in node.obs.values():
        cnt[o.start :] += 1
        hi[o.start :] = np.maximum(hi[o.start :], o.logprobs)
        lo[o.start :] = np.minimum(lo[o.start :], o.logprobs)
    return cnt, np.where(cnt > 1, hi - lo, 0.0)
