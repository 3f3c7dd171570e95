"""The steps of :func:`clawrl.prefixtree.pack.pack_tree`: node layout, trajectory ends,
token arrays, observation spans and memberships.

Kept apart from :mod:`clawrl.prefixtree.pack`, whose :class:`PackedTree` is the contract with
clawrl-rl-core; nothing here is public.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from clawrl.prefixtree.node import observation_coverage

if TYPE_CHECKING:
    from clawrl.prefixtree.node import Node
    from clawrl.prefixtree.tree import PrefixTree


def no_ints() -> np.ndarray:
    """A fresh empty int64 array (never a shared read-only one)."""
    return np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where every node of a tree lies in the packed DFS order (node k = ``nodes[k]``).

    ``starts[k]`` / ``lens[k]``: first packed token and edge length of node k; ``parents[k]``:
    its parent's number (-1 below the root); ``ends[k]``: exclusive end of its subtree.
    Calls are numbered in insertion order (``call_ids``), rollouts in sorted order
    (``rollout_ids``); ``call_roll[c]`` is the rollout number of call c.
    """

    tree: PrefixTree
    nodes: list[Node]
    index: dict[int, int]
    starts_l: list[int]
    lens_l: list[int]
    parents: list[int]
    ends_l: list[int]
    n_tok: int
    call_ids: tuple[str, ...]
    cidx: dict[str, int]
    rollout_ids: list[str]
    call_roll: list[int]
    starts: np.ndarray
    lens: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, tree: PrefixTree) -> Layout:
        nodes = list(tree.nodes())
        index = {id(n): k for k, n in enumerate(nodes)}
        call_ids = tuple(tree._calls)
        rollout_ids = sorted(tree._rollouts)
        ridx = {r: i for i, r in enumerate(rollout_ids)}
        lens_l = [int(n.tokens.shape[0]) for n in nodes]
        starts_l: list[int] = []
        acc = 0
        for ln in lens_l:
            starts_l.append(acc)
            acc += ln
        parents = [index.get(id(n.parent), -1) for n in nodes]
        # reverse DFS order visits children before parents
        ends_l = [s + ln for s, ln in zip(starts_l, lens_l, strict=True)]
        for k in range(len(nodes) - 1, -1, -1):
            p = parents[k]
            if p >= 0 and ends_l[k] > ends_l[p]:
                ends_l[p] = ends_l[k]
        return cls(
            tree=tree,
            nodes=nodes,
            index=index,
            starts_l=starts_l,
            lens_l=lens_l,
            parents=parents,
            ends_l=ends_l,
            n_tok=acc,
            call_ids=call_ids,
            cidx={c: i for i, c in enumerate(call_ids)},
            rollout_ids=rollout_ids,
            call_roll=[ridx[tree._calls[c].rollout_id] for c in call_ids],
            starts=np.asarray(starts_l, dtype=np.int64),
            lens=np.asarray(lens_l, dtype=np.int64),
            ends=np.asarray(ends_l, dtype=np.int64),
        )

    @property
    def one_rollout(self) -> bool:
        return len(self.rollout_ids) <= 1


def trajectory_leaves(lay: Layout) -> list[tuple[int, int]]:
    """(node, rollout number) of every trajectory end, in DFS order of the node, then rollout.

    A trajectory ends where a call of the rollout ends and none of it continues below; with
    one rollout, that is every childless node.
    """
    leaves: list[tuple[int, int]] = []
    if lay.one_rollout:
        leaves = [(k, 0) for k, n in enumerate(lay.nodes) if not n.children]
        return leaves
    below: list[set[int]] = [set() for _ in lay.nodes]
    for k in range(len(lay.nodes) - 1, -1, -1):  # children before parents
        own = {lay.call_roll[lay.cidx[c]] for c in lay.nodes[k].ends}
        leaves.extend((k, r) for r in sorted(own - below[k], reverse=True))
        p = lay.parents[k]
        if p >= 0:
            below[p] |= own | below[k]
    leaves.reverse()
    return leaves


def token_arrays(lay: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, position_ids, parent_index, subtree_end), each int64 [N]."""
    nodes, starts, lens = lay.nodes, lay.starts, lay.lens
    # few, in-place N-sized allocations: fresh pages are a large part of the cost here
    input_ids = np.concatenate([n.tokens for n in nodes]) if nodes else no_ints()
    depths = np.asarray([n.depth for n in nodes], dtype=np.int64)
    parent_index = np.arange(-1, lay.n_tok - 1, dtype=np.int64)
    position_ids = np.repeat(depths - starts, lens)  # depth of a node's first token - start
    position_ids += parent_index
    position_ids += 1
    if nodes:
        par = np.asarray(lay.parents, dtype=np.int64)
        safe = np.maximum(par, 0)
        parent_index[starts] = np.where(par >= 0, starts[safe] + lens[safe] - 1, -1)
    return input_ids, position_ids, parent_index, np.repeat(lay.ends, lens)


@dataclass(frozen=True, slots=True)
class Spans:
    """The observations of a tree, per packed token and per node.

    ``count`` / ``spread``: number of observations and logprob spread of each token.
    Nodes observed by one call become segments handled in bulk (``segments``: start, end,
    node's subtree end, call, rollout, version; ``segment_logprobs``); nodes observed by
    several calls (``shared_nodes``) are resolved per trajectory (:func:`resolve_shared`).
    """

    count: np.ndarray
    spread: np.ndarray
    segments: list[tuple[int, int, int, int, int, int]]
    segment_logprobs: list[np.ndarray]
    shared_nodes: list[int]


def observation_spans(lay: Layout) -> Spans:
    cnt = np.zeros(lay.n_tok, dtype=np.int64)
    spread = np.zeros(lay.n_tok, dtype=np.float64)
    seg: list[tuple[int, int, int, int, int, int]] = []
    seg_lp: list[np.ndarray] = []
    shared: list[int] = []
    for k, n in enumerate(lay.nodes):
        if not n.obs:
            continue
        s0 = lay.starts_l[k]
        e0 = s0 + lay.lens_l[k]
        if len(n.obs) == 1:
            (o,) = n.obs.values()
            a = s0 + o.start
            ci = lay.cidx[o.call_id]
            cnt[a:e0] = 1
            seg.append((a, e0, lay.ends_l[k], ci, lay.call_roll[ci], o.policy_version))
            seg_lp.append(o.logprobs)
            continue
        shared.append(k)
        cnt[s0:e0], spread[s0:e0] = observation_coverage(n)
    return Spans(cnt, spread, seg, seg_lp, shared)


class Memberships(NamedTuple):
    """Parallel [M] arrays of (token, trajectory) memberships."""

    token: np.ndarray
    traj: np.ndarray
    logprob: np.ndarray
    version: np.ndarray
    call: np.ndarray


def single_call_memberships(
    lay: Layout, spans: Spans, leaf_tok: np.ndarray, leaf_roll: np.ndarray
) -> Memberships:
    """Memberships from the single-call segments, by trajectory, then token (vectorised)."""
    if not (spans.segments and leaf_tok.shape[0]):
        e = no_ints()
        return Memberships(e, e, np.zeros(0, dtype=np.float64), e, e)
    sa = np.asarray(spans.segments, dtype=np.int64)
    seg_a, seg_e, seg_nend, seg_c, seg_r, seg_v = sa.T
    on = (seg_a[None, :] <= leaf_tok[:, None]) & (leaf_tok[:, None] < seg_nend[None, :])
    if not lay.one_rollout:
        on &= seg_r[None, :] == leaf_roll[:, None]
    ti, si = np.nonzero(on)  # row-major: by trajectory, then segment (= token) order
    seg_len = (seg_e - seg_a)[si]
    offs = np.cumsum(seg_len) - seg_len
    m = int(seg_len.sum())
    token = np.repeat(seg_a[si] - offs, seg_len)
    token += np.arange(m, dtype=np.int64)
    lp = (
        np.concatenate([spans.segment_logprobs[j] for j in si.tolist()]).astype(
            np.float64, copy=False
        )
        if m
        else np.zeros(0, dtype=np.float64)
    )
    return Memberships(
        token,
        np.repeat(ti.astype(np.int64), seg_len),
        lp,
        np.repeat(seg_v[si], seg_len),
        np.repeat(seg_c[si], seg_len),
    )


def add_shared_memberships(
    lay: Layout,
    shared_nodes: list[int],
    mem: Memberships,
    leaf_tok: np.ndarray,
    leaf_roll: np.ndarray,
) -> Memberships:
    """``mem`` plus the memberships inside nodes observed by several calls, re-sorted by
    trajectory, then token."""
    cx = np.asarray(shared_nodes, dtype=np.int64)
    xt, xk, xl, xv, xc = [mem.token], [mem.traj], [mem.logprob], [mem.version], [mem.call]
    for t in range(int(leaf_tok.shape[0])):
        leaf = int(leaf_tok[t])
        rid = lay.rollout_ids[int(leaf_roll[t])]
        for k in cx[(lay.starts[cx] <= leaf) & (leaf < lay.ends[cx])].tolist():
            res = resolve_shared(lay, k, rid, leaf)
            if res is None:
                continue
            xt.append(res[0])
            xk.append(np.full(res[0].shape[0], t, dtype=np.int64))
            xl.append(res[1])
            xv.append(res[2])
            xc.append(np.asarray([lay.cidx[c] for c in res[3]], dtype=np.int64))
    token, traj = np.concatenate(xt), np.concatenate(xk)
    order = np.lexsort((token, traj))
    return Memberships(
        token[order],
        traj[order],
        np.concatenate(xl)[order],
        np.concatenate(xv)[order],
        np.concatenate(xc)[order],
    )


def resolve_shared(
    lay: Layout, k: int, rid: str, leaf: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]] | None:
    """Memberships of one trajectory inside node k, observed by several calls.

    Per token, the observation of the best call of rollout ``rid`` covering it: calls on the
    trajectory (end node ancestor-or-self of the leaf) first, then smallest (seq, call_id).
    Returns (token indices, logprobs, versions, call ids) or None if no call of the rollout
    observed a token of the node.
    """
    entries = lay.tree._calls
    node = lay.nodes[k]

    def priority(cid: str) -> tuple[bool, int, str]:
        e = entries[cid]
        j = lay.index[id(e.end)]
        on = lay.starts_l[j] <= leaf < lay.ends_l[j]
        return (not on, e.seq, cid)

    cands = sorted(
        (cid for cid in node.obs if entries[cid].rollout_id == rid), key=priority, reverse=True
    )
    if not cands:
        return None
    length = int(node.tokens.shape[0])
    lp = np.zeros(length, dtype=np.float64)
    ver = np.zeros(length, dtype=np.int64)
    who = np.full(length, -1, dtype=np.int64)
    for j, cid in enumerate(cands):  # worst first; the best overwrites
        o = node.obs[cid]
        lp[o.start :] = o.logprobs
        ver[o.start :] = o.policy_version
        who[o.start :] = j
    covered = np.flatnonzero(who >= 0)
    return (
        covered + lay.starts_l[k],
        lp[covered],
        ver[covered],
        [cands[j] for j in who[covered].tolist()],
    )
