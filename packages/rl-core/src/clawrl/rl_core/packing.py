"""Packed prefix trees on the training side: build, validate, batch and split by token budget.

The layout is the contract of ``clawrl.prefixtree.PackedTree`` (DFS order, ``position_ids`` =
depth, ``parent_index``, ``subtree_end``; token ``i`` attends token ``j`` iff
``j <= i < subtree_end[j]``; a sparse list of (token, trajectory) memberships of trainable
tokens). This module:

* :func:`pack_token_sequences` — a small trie builder from whole token sequences (used by SFT
  and by tests; rollouts from the proxy are packed by ``clawrl.prefixtree``);
* :func:`validate_packed_tree` — checks the contract, raising :class:`PackingError`;
* :class:`TreeBatch` — several trees concatenated into one forest with global trajectory
  indices (what one training step consumes);
* :func:`split_by_token_budget` — cuts a forest into :class:`TreePiece` s of at most
  ``token_budget`` tokens each without changing any result (see its docstring for why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from clawrl.prefixtree import PackedTree, TrajectoryInfo
from clawrl.rl_core.errors import PackingError, TokenBudgetError

__all__ = [
    "TokenSequence",
    "TreeBatch",
    "TreePiece",
    "pack_token_sequences",
    "split_by_token_budget",
    "validate_packed_tree",
]


@dataclass(frozen=True)
class TokenSequence:
    """One root-to-node token sequence to insert into a prefix tree.

    Attributes:
        token_ids: the tokens, in order.
        trainable: one bool per token; True where this sequence's call generated the token
            (RL) or where it is an assistant token (SFT).
        logprobs: one rollout logprob per token (natural log; ignored where not trainable).
            ``None`` means 0.0 everywhere (SFT).
        policy_versions: one policy version per token (ignored where not trainable);
            ``None`` means 0.
        rollout_id: the rollout the sequence belongs to.
        call_id: id of the call (or SFT turn) that produced the sequence.
        side_path: mark the trajectories ending in this sequence as side paths.
        metadata: copied to the :class:`TrajectoryInfo` of each trajectory ending here.
    """

    token_ids: Sequence[int]
    trainable: Sequence[bool]
    logprobs: Sequence[float] | None = None
    policy_versions: Sequence[int] | None = None
    rollout_id: str = ""
    call_id: str = ""
    side_path: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class _Node:
    __slots__ = ("children", "logprob", "seq", "token", "trainable", "version")

    def __init__(self, token: int) -> None:
        self.token = token
        self.children: dict[int, _Node] = {}
        self.trainable = False
        self.logprob = 0.0
        self.version = 0
        self.seq = -1  # index of the last sequence that ended exactly here


def pack_token_sequences(sequences: Sequence[TokenSequence]) -> PackedTree:
    """Insert whole token sequences into a token trie and pack it (DFS order).

    A token is trainable iff some sequence marks it trainable at that position (the first such
    sequence's logprob and policy version are kept); a sequence's first token never is (it has
    no predecessor to predict it from). Trajectories are the root-to-leaf paths;
    a sequence that is a prefix of another one ends at an interior node and adds no
    trajectory. Memberships: one per (trainable token, trajectory through it). Sequences may
    start with different tokens (several roots: a forest).

    Cost: O(total tokens) Python operations — meant for SFT data and tests, not for 10⁸ tokens.

    Raises:
        PackingError: empty input, an empty sequence, or per-token lists of the wrong length.
    """
    if not sequences:
        raise PackingError("pack_token_sequences needs at least one sequence")
    root = _Node(-1)
    for s_idx, seq in enumerate(sequences):
        n = len(seq.token_ids)
        if n == 0:
            raise PackingError(f"sequence {s_idx} is empty")
        for name, arr in (
            ("trainable", seq.trainable),
            ("logprobs", seq.logprobs),
            ("policy_versions", seq.policy_versions),
        ):
            if arr is not None and len(arr) != n:
                raise PackingError(
                    f"sequence {s_idx}: {name} has {len(arr)} entries for {n} tokens"
                )
        node = root
        for k, tok in enumerate(seq.token_ids):
            child = node.children.get(int(tok))
            if child is None:
                child = _Node(int(tok))
                node.children[int(tok)] = child
            node = child
            if seq.trainable[k] and k > 0 and not node.trainable:
                node.trainable = True
                node.logprob = float(seq.logprobs[k]) if seq.logprobs is not None else 0.0
                node.version = int(seq.policy_versions[k]) if seq.policy_versions is not None else 0
        node.seq = s_idx

    ids: list[int] = []
    depth: list[int] = []
    parent: list[int] = []
    end: list[int] = []
    trainable: list[bool] = []
    logprob: list[float] = []
    version: list[int] = []
    leaves: list[tuple[int, int]] = []  # (token index, sequence index for metadata)
    # iterative DFS; children in insertion order
    stack: list[tuple[_Node, int, int, int]] = [
        (c, 0, -1, -1) for c in reversed(list(root.children.values()))
    ]
    open_: list[int] = []  # indices whose subtree_end is pending, with their depth
    while stack:
        node, d, par, last_seq = stack.pop()
        while open_ and depth[open_[-1]] >= d:
            end[open_.pop()] = len(ids)
        idx = len(ids)
        ids.append(node.token)
        depth.append(d)
        parent.append(par)
        end.append(-1)
        trainable.append(node.trainable)
        logprob.append(node.logprob)
        version.append(node.version)
        open_.append(idx)
        seq_here = node.seq if node.seq >= 0 else last_seq
        if not node.children:
            leaves.append((idx, seq_here))
        for c in reversed(list(node.children.values())):
            stack.append((c, d + 1, idx, seq_here))
    while open_:
        end[open_.pop()] = len(ids)

    parent_a = np.asarray(parent, dtype=np.int64)
    train_a = np.asarray(trainable, dtype=bool)
    mem_tok: list[int] = []
    mem_trj: list[int] = []
    trajs: list[TrajectoryInfo] = []
    for t_idx, (leaf, s_idx) in enumerate(leaves):
        path = []
        j = leaf
        while j >= 0:
            path.append(j)
            j = int(parent_a[j])
        path.reverse()
        tr = [p for p in path if train_a[p]]
        mem_tok.extend(tr)
        mem_trj.extend([t_idx] * len(tr))
        seq = sequences[s_idx]
        trajs.append(
            TrajectoryInfo(
                index=t_idx,
                rollout_id=seq.rollout_id,
                leaf_call_id=seq.call_id,
                leaf_token=leaf,
                length=len(path),
                n_trainable=len(tr),
                side_path=seq.side_path,
                metadata=dict(seq.metadata),
            )
        )
    mem_token = np.asarray(mem_tok, dtype=np.int64)
    return PackedTree(
        input_ids=np.asarray(ids, dtype=np.int64),
        position_ids=np.asarray(depth, dtype=np.int64),
        parent_index=parent_a,
        subtree_end=np.asarray(end, dtype=np.int64),
        trainable=train_a,
        mem_token=mem_token,
        mem_traj=np.asarray(mem_trj, dtype=np.int64),
        mem_logprob=np.asarray(logprob, dtype=np.float64)[mem_token],
        mem_policy_version=np.asarray(version, dtype=np.int64)[mem_token],
        trajectories=tuple(trajs),
    )


def validate_packed_tree(tree: PackedTree) -> None:
    """Check that ``tree`` follows the ``PackedTree`` contract; O(N + M).

    Checks: 1-D arrays of equal length N ≥ 1 (M for memberships); ``parent_index[i] < i``
    (-1 only at depth 0); ``position_ids[i] = position_ids[parent]+1``;
    ``i < subtree_end[i] <= subtree_end[parent]`` and ``subtree_end[i] = i + |subtree(i)|``
    (contiguous DFS subtrees); memberships point at trainable, non-root
    tokens and existing trajectories.

    Raises:
        PackingError: with the first violated rule.
    """
    n = int(np.asarray(tree.input_ids).shape[0]) if np.ndim(tree.input_ids) == 1 else -1
    if n < 1:
        raise PackingError("input_ids must be a non-empty 1-D array")
    for name in ("position_ids", "parent_index", "subtree_end", "trainable"):
        a = np.asarray(getattr(tree, name))
        if a.shape != (n,):
            raise PackingError(f"{name} has shape {a.shape}, expected ({n},)")
    m = np.asarray(tree.mem_token).shape
    for name in ("mem_traj", "mem_logprob", "mem_policy_version"):
        if np.asarray(getattr(tree, name)).shape != m or len(m) != 1:
            raise PackingError(f"{name} must be 1-D with the length of mem_token {m}")
    par = np.asarray(tree.parent_index, dtype=np.int64)
    pos = np.asarray(tree.position_ids, dtype=np.int64)
    end = np.asarray(tree.subtree_end, dtype=np.int64)
    idx = np.arange(n)
    if np.any(par >= idx) or np.any(par < -1):
        raise PackingError("parent_index[i] must be in [-1, i)")
    root = par < 0
    if np.any(pos[root] != 0):
        raise PackingError("a root token (parent -1) must have position id 0")
    if np.any(pos[~root] != pos[par[~root]] + 1):
        raise PackingError("position_ids must equal depth (parent's position + 1)")
    if np.any(end <= idx) or np.any(end > n):
        raise PackingError("subtree_end[i] must be in (i, N]")
    if np.any(end[~root] > end[par[~root]]) or np.any(idx[~root] >= end[par[~root]]):
        raise PackingError("a token's subtree must lie inside its parent's subtree")
    size = np.ones(n, dtype=np.int64)
    for i in range(n - 1, 0, -1):  # parents precede children: accumulate subtree sizes
        if par[i] >= 0:
            size[par[i]] += size[i]
    if np.any(end != idx + size):
        raise PackingError("subtree_end must be i + (size of i's subtree) in DFS order")
    mt = np.asarray(tree.mem_token, dtype=np.int64)
    if mt.size:
        if mt.min() < 0 or mt.max() >= n:
            raise PackingError("mem_token out of range")
        if not np.all(np.asarray(tree.trainable, dtype=bool)[mt]):
            raise PackingError("a membership points at a non-trainable token")
        if np.any(par[mt] < 0):
            raise PackingError("a root token cannot be trainable (it has no predecessor)")
        tj = np.asarray(tree.mem_traj, dtype=np.int64)
        if tj.min() < 0 or tj.max() >= len(tree.trajectories):
            raise PackingError("mem_traj out of range")


@dataclass(frozen=True)
class TreeBatch:
    """Several packed trees concatenated into one forest (global token/trajectory indices).

    Token arrays have length N (sum over trees), membership arrays length M; ``trajectories``
    is the concatenation (``TrajectoryInfo.index`` renumbered; ``leaf_token`` shifted).
    ``tree_of_traj[k]`` is the input tree of trajectory k.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    parent_index: np.ndarray
    subtree_end: np.ndarray
    trainable: np.ndarray
    mem_token: np.ndarray
    mem_traj: np.ndarray
    mem_logprob: np.ndarray
    mem_policy_version: np.ndarray
    trajectories: tuple[TrajectoryInfo, ...]
    tree_of_traj: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_memberships(self) -> int:
        return int(self.mem_token.shape[0])

    @property
    def num_trajectories(self) -> int:
        return len(self.trajectories)

    @classmethod
    def from_trees(cls, trees: Sequence[PackedTree], validate: bool = True) -> TreeBatch:
        """Concatenate ``trees`` (validated with :func:`validate_packed_tree` unless
        ``validate=False``).

        Raises:
            PackingError: no tree, or a tree violating the contract.
        """
        if not trees:
            raise PackingError("a TreeBatch needs at least one tree")
        tok_off = 0
        trj_off = 0
        parts: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "input_ids",
                "position_ids",
                "parent_index",
                "subtree_end",
                "trainable",
                "mem_token",
                "mem_traj",
                "mem_logprob",
                "mem_policy_version",
                "tree_of_traj",
            )
        }
        trajs: list[TrajectoryInfo] = []
        for t_i, tree in enumerate(trees):
            if validate:
                validate_packed_tree(tree)
            n = int(tree.input_ids.shape[0])
            par = np.asarray(tree.parent_index, dtype=np.int64)
            parts["input_ids"].append(np.asarray(tree.input_ids, dtype=np.int64))
            parts["position_ids"].append(np.asarray(tree.position_ids, dtype=np.int64))
            parts["parent_index"].append(np.where(par >= 0, par + tok_off, -1))
            parts["subtree_end"].append(np.asarray(tree.subtree_end, dtype=np.int64) + tok_off)
            parts["trainable"].append(np.asarray(tree.trainable, dtype=bool))
            parts["mem_token"].append(np.asarray(tree.mem_token, dtype=np.int64) + tok_off)
            parts["mem_traj"].append(np.asarray(tree.mem_traj, dtype=np.int64) + trj_off)
            parts["mem_logprob"].append(np.asarray(tree.mem_logprob, dtype=np.float64))
            parts["mem_policy_version"].append(np.asarray(tree.mem_policy_version, dtype=np.int64))
            parts["tree_of_traj"].append(np.full(len(tree.trajectories), t_i, dtype=np.int64))
            for tr in tree.trajectories:
                trajs.append(
                    TrajectoryInfo(
                        index=tr.index + trj_off,
                        rollout_id=tr.rollout_id,
                        leaf_call_id=tr.leaf_call_id,
                        leaf_token=tr.leaf_token + tok_off,
                        length=tr.length,
                        n_trainable=tr.n_trainable,
                        side_path=tr.side_path,
                        metadata=tr.metadata,
                    )
                )
            tok_off += n
            trj_off += len(tree.trajectories)
        arrays = {k: np.concatenate(v) for k, v in parts.items()}
        return cls(trajectories=tuple(trajs), **arrays)

    def path(self, traj: int) -> np.ndarray:
        """Token indices (root → leaf) of trajectory ``traj``; int64 [length]."""
        out = []
        j = int(self.trajectories[traj].leaf_token)
        while j >= 0:
            out.append(j)
            j = int(self.parent_index[j])
        return np.asarray(out[::-1], dtype=np.int64)


@dataclass(frozen=True)
class TreePiece:
    """A self-contained slice of a :class:`TreeBatch` for one forward pass.

    Local token ``k`` is global token ``token_index[k]``. The first ``n_context`` local tokens
    are context (the ancestors of the first owned token, recomputed but not trained here);
    the rest are the owned global range ``[start, stop)``. ``parent_index``/``subtree_end``
    are local. ``membership_index`` lists the global memberships whose token is owned;
    ``mem_local_token`` their local token index. ``targets`` are the local indices of owned
    trainable tokens (where logprobs are computed); ``mem_target`` maps each membership to
    its position in ``targets``.
    """

    token_index: np.ndarray
    input_ids: np.ndarray
    position_ids: np.ndarray
    parent_index: np.ndarray
    subtree_end: np.ndarray
    n_context: int
    start: int
    stop: int
    targets: np.ndarray
    membership_index: np.ndarray
    mem_target: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.token_index.shape[0])


def _make_piece(
    batch: TreeBatch, start: int, stop: int, mem_order: np.ndarray, mem_sorted_tok: np.ndarray
) -> TreePiece:
    # ancestor chain of `start` (all of its ancestors precede it in DFS order)
    chain = []
    j = int(batch.parent_index[start])
    while j >= 0:
        chain.append(j)
        j = int(batch.parent_index[j])
    ctx = np.asarray(chain[::-1], dtype=np.int64)
    tok = np.concatenate([ctx, np.arange(start, stop, dtype=np.int64)])
    n_ctx = len(ctx)
    par_g = batch.parent_index[tok]
    par = np.full(len(tok), -1, dtype=np.int64)
    inside = par_g >= start
    par[inside] = n_ctx + par_g[inside] - start
    in_ctx = (par_g >= 0) & ~inside
    par[in_ctx] = np.searchsorted(ctx, par_g[in_ctx])  # ctx is ascending (DFS order)
    end = n_ctx + (np.minimum(batch.subtree_end[tok], stop) - start)
    lo, hi = np.searchsorted(mem_sorted_tok, [start, stop])
    mem_idx = np.sort(mem_order[lo:hi])
    has_par = batch.parent_index[start:stop] >= 0
    owned_train = np.nonzero(batch.trainable[start:stop] & has_par)[0].astype(np.int64) + n_ctx
    pos_of_local = np.full(len(tok), -1, dtype=np.int64)
    pos_of_local[owned_train] = np.arange(len(owned_train))
    mem_local = batch.mem_token[mem_idx] - start + n_ctx
    return TreePiece(
        token_index=tok,
        input_ids=batch.input_ids[tok],
        position_ids=batch.position_ids[tok],
        parent_index=par,
        subtree_end=end,
        n_context=n_ctx,
        start=start,
        stop=stop,
        targets=owned_train,
        membership_index=mem_idx,
        mem_target=pos_of_local[mem_local],
    )


def split_by_token_budget(batch: TreeBatch, token_budget: int | None = None) -> list[TreePiece]:
    """Cut a forest into pieces of at most ``token_budget`` tokens without changing results.

    Each piece owns a contiguous DFS range ``[a, b)`` and prepends the ancestor chain of
    ``a`` as context. That set is closed under "ancestor of": if ``j < a <= i`` and ``j`` is
    an ancestor of ``i`` then ``a`` lies in ``j``'s subtree ``[j, subtree_end[j])``, so ``j``
    is an ancestor of ``a``. Hence every owned token sees exactly its ancestors, its hidden
    states, logprobs and loss terms are those of the full forward, and the gradient of the
    total loss is the sum over pieces (each token's loss terms are owned by one piece).
    Greedy: ``b`` is as large as ``depth(a) + (b - a) <= token_budget`` allows.

    Args:
        batch: the forest.
        token_budget: most tokens per piece (context included); ``None`` = one piece.

    Raises:
        TokenBudgetError: a path is longer than ``token_budget`` (depth + 1 > budget).
    """
    n = batch.num_tokens
    mem_order = np.argsort(batch.mem_token, kind="stable")
    mem_sorted_tok = batch.mem_token[mem_order]
    if token_budget is None:
        return [_make_piece(batch, 0, n, mem_order, mem_sorted_tok)]
    if token_budget < 1:
        raise TokenBudgetError(f"token_budget must be >= 1, got {token_budget}")
    depth = batch.position_ids
    too_deep = np.nonzero(depth + 1 > token_budget)[0]
    if too_deep.size:
        raise TokenBudgetError(
            f"token {int(too_deep[0])} sits at depth {int(depth[too_deep[0]])}: its path is "
            f"longer than token_budget={token_budget}"
        )
    pieces = []
    a = 0
    while a < n:
        b = min(n, a + token_budget - int(depth[a]))
        pieces.append(_make_piece(batch, a, b, mem_order, mem_sorted_tok))
        a = b
    return pieces
