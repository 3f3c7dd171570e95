"""Packed prefix trees on the training side: build, validate, batch and split by token budget.

The layout is the contract of ``clawrl.prefixtree.PackedTree`` (DFS order, ``position_ids`` =
depth, ``parent_index``, ``subtree_end``; token ``i`` attends token ``j`` iff
``j <= i < subtree_end[j]``; a sparse list of (token, trajectory) memberships of trainable
tokens). Every tree is built and packed by ``clawrl.prefixtree`` (one packer, one child
order). This module:

* :func:`pack_token_sequences` — an adapter for whole token sequences with a per-token
  trainable mask (tests, benchmarks, examples): each sequence becomes ``clawrl.prefixtree``
  :class:`~clawrl.prefixtree.Call` s, packed by :meth:`~clawrl.prefixtree.PrefixTree.pack`;
* :func:`validate_packed_tree` — checks the contract, raising :class:`PackingError`;
* :class:`TreeBatch` — several trees concatenated into one forest with global trajectory
  indices (what one training step consumes);
* :func:`split_by_token_budget` — cuts a forest into :class:`TreePiece` s of at most
  ``token_budget`` tokens each without changing any result (see its docstring for why).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from clawrl.prefixtree import (
    MEMBERSHIP_ARRAYS,
    SIDE_PATH_FLAG,
    TOKEN_ARRAYS,
    Call,
    PackedSizes,
    PackedTree,
    PrefixTree,
    PrefixTreeError,
    TrajectoryInfo,
)
from clawrl.rl_core.errors import PackingError, TokenBudgetError

__all__ = [
    "TokenSequence",
    "TreeBatch",
    "TreePiece",
    "pack_token_sequences",
    "padding_piece",
    "split_by_token_budget",
    "validate_packed_tree",
]


@dataclass(frozen=True)
class TokenSequence:
    """One root-to-node token sequence of a rollout, to pack with :func:`pack_token_sequences`.

    Attributes:
        token_ids: the tokens, in order.
        trainable: one bool per token; True where the rollout generated the token (RL) or
            where it is an assistant token (SFT). The first token never is (nothing predicts
            it).
        logprobs: one rollout logprob per token (natural log, <= 0; ignored where not
            trainable). ``None`` means 0.0 everywhere (SFT).
        policy_versions: one policy version (>= 0) per token (ignored where not trainable);
            ``None`` means 0.
        rollout_id: the rollout the sequence belongs to (its reward and GRPO group).
        call_id: becomes ``TrajectoryInfo.leaf_call_id`` of the trajectory ending here.
        side_path: mark the trajectory ending in this sequence as a side path.
        metadata: the rollout's metadata (``group_id``, ...), copied to every trajectory of
            the rollout; sequences of one rollout must carry equal metadata.
    """

    token_ids: Sequence[int]
    trainable: Sequence[bool]
    logprobs: Sequence[float] | None = None
    policy_versions: Sequence[int] | None = None
    rollout_id: str = ""
    call_id: str = ""
    side_path: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


def _sequence_calls(seq: TokenSequence, s_idx: int, first_seq: int) -> list[Call]:
    """The sequence as prefixtree calls: one call per maximal run of trainable tokens with
    one policy version (prompt = every token before the run, completion = the run), and a
    last call with an empty completion if the sequence ends in non-trainable tokens. The
    last call's path is the whole sequence; call ids are ``"<s_idx>.<run>"``."""
    n = len(seq.token_ids)
    if n == 0:
        raise PackingError(f"sequence {s_idx} is empty")
    for name, arr in (
        ("trainable", seq.trainable),
        ("logprobs", seq.logprobs),
        ("policy_versions", seq.policy_versions),
    ):
        if arr is not None and len(arr) != n:
            raise PackingError(f"sequence {s_idx}: {name} has {len(arr)} entries for {n} tokens")
    ids = np.asarray(seq.token_ids, dtype=np.int64)
    train = np.asarray(seq.trainable, dtype=bool).copy()
    train[0] = False
    lp = np.zeros(n) if seq.logprobs is None else np.asarray(seq.logprobs, dtype=np.float64)
    ver = (
        np.zeros(n, dtype=np.int64)
        if seq.policy_versions is None
        else np.asarray(seq.policy_versions, dtype=np.int64)
    )
    # run boundaries: where trainable flips, or the version changes inside a trainable run
    cut = np.flatnonzero((train[1:] != train[:-1]) | (train[1:] & (ver[1:] != ver[:-1]))) + 1
    bounds = [0, *cut.tolist(), n]
    spans = [(a, b) for a, b in itertools.pairwise(bounds) if train[a]]
    if not spans or spans[-1][1] < n:
        spans.append((n, n))
    flags = frozenset({SIDE_PATH_FLAG}) if seq.side_path else frozenset()
    try:
        return [
            Call(
                call_id=f"{s_idx}.{j}",
                session_id=seq.rollout_id,
                seq=first_seq + j,
                prompt_ids=ids[:a],
                completion_ids=ids[a:b],
                completion_logprobs=lp[a:b],
                policy_version=int(ver[a]) if a < n else 0,
                flags=flags if j == len(spans) - 1 else frozenset(),
            )
            for j, (a, b) in enumerate(spans)
        ]
    except PrefixTreeError as exc:
        raise PackingError(f"sequence {s_idx}: {exc}") from exc


def pack_token_sequences(sequences: Sequence[TokenSequence]) -> PackedTree:
    """Pack whole token sequences with ``clawrl.prefixtree`` (one tree; several roots form a
    forest).

    Each sequence is turned into calls of its rollout (see ``TokenSequence.trainable``),
    inserted into one :class:`~clawrl.prefixtree.PrefixTree` and packed by
    :meth:`~clawrl.prefixtree.PrefixTree.pack`, so the layout, the child order (ascending
    first token) and the trajectory rule are prefixtree's: a rollout's trajectories are its
    maximal sequences — a sequence that is a prefix of another sequence of the *same*
    rollout adds none, while every rollout keeps its own trajectories even where its tokens
    equal, or are a prefix of, another rollout's. A trajectory's memberships are the tokens
    on its path that a sequence of its rollout marks trainable, with that rollout's logprob
    and policy version (where several sequences of the rollout mark the same token,
    prefixtree's choice: one on the trajectory's path first, then the earliest).
    ``TrajectoryInfo.leaf_call_id`` is the ``call_id`` of a sequence ending at the leaf;
    ``PackedTree.call_ids`` name the internal calls ``"<sequence index>.<run index>"``.

    Cost: O(total tokens) numpy work and O(calls) Python steps.

    Raises:
        PackingError: empty input, an empty sequence, per-token lists of the wrong length,
            invalid values (a positive logprob, a negative token id or version), or two
            sequences of one rollout with different metadata.
    """
    if not sequences:
        raise PackingError("pack_token_sequences needs at least one sequence")
    tree = PrefixTree()
    metadata: dict[str, dict[str, Any]] = {}
    leaf_name: dict[str, str] = {}
    n_calls = 0
    for s_idx, seq in enumerate(sequences):
        calls = _sequence_calls(seq, s_idx, n_calls)
        n_calls += len(calls)
        for call in calls:
            tree.insert(call, rollout_id=seq.rollout_id)
        leaf_name[calls[-1].call_id] = seq.call_id
        have = metadata.setdefault(seq.rollout_id, dict(seq.metadata))
        if have != seq.metadata:
            raise PackingError(
                f"sequence {s_idx}: rollout {seq.rollout_id!r} already has metadata {have!r}, "
                f"this sequence carries {seq.metadata!r}"
            )
    for rid, meta in metadata.items():
        tree.set_rollout_metadata(rid, meta)
    packed = tree.pack()
    trajs = tuple(
        dataclasses.replace(t, leaf_call_id=leaf_name.get(t.leaf_call_id, t.leaf_call_id))
        for t in packed.trajectories
    )
    return dataclasses.replace(packed, trajectories=trajs)


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
class TreeBatch(PackedSizes):
    """Several packed trees concatenated into one forest (global token/trajectory indices).

    Token arrays have length N (sum over trees), membership arrays length M; ``trajectories``
    is the concatenation (``TrajectoryInfo.index`` renumbered; ``leaf_token`` shifted).
    ``tree_of_traj[k]`` is the input tree of trajectory k.
    """

    tree_of_traj: np.ndarray

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
            k: [] for k in (*TOKEN_ARRAYS, *MEMBERSHIP_ARRAYS, "tree_of_traj")
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
            trajs += [
                dataclasses.replace(
                    tr, index=tr.index + trj_off, leaf_token=tr.leaf_token + tok_off
                )
                for tr in tree.trajectories
            ]
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

    ``padding`` marks a stand-in piece (:func:`padding_piece`) that only keeps a sharded
    (FSDP) rank's number of forwards equal to the others': it is forwarded and backpropagated
    with a zero loss, and owns no token, target result or membership of the batch.
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
    padding: bool = False

    @property
    def num_tokens(self) -> int:
        return int(self.token_index.shape[0])


def padding_piece(token_id: int = 0) -> TreePiece:
    """A two-token stand-in piece (``padding=True``): token ``token_id`` twice, the second a
    child of the first and the one target, so a forward and backward over it touch every
    parameter a real piece's do. It belongs to no batch (``token_index`` is -1), has no
    memberships, and :func:`~clawrl.rl_core.old_pass` / :func:`~clawrl.rl_core.loss_backward`
    record nothing for it and backpropagate zero."""
    i64 = np.int64
    return TreePiece(
        token_index=np.full(2, -1, dtype=i64),
        input_ids=np.full(2, token_id, dtype=i64),
        position_ids=np.arange(2, dtype=i64),
        parent_index=np.asarray([-1, 0], dtype=i64),
        subtree_end=np.full(2, 2, dtype=i64),
        n_context=0,
        start=0,
        stop=0,
        targets=np.asarray([1], dtype=i64),
        membership_index=np.zeros(0, dtype=i64),
        mem_target=np.zeros(0, dtype=i64),
        padding=True,
    )


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


def split_by_token_budget(
    batch: TreeBatch,
    token_budget: int | None = None,
    *,
    token_ranges: Sequence[tuple[int, int]] | None = None,
) -> list[TreePiece]:
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
        token_budget: most tokens per piece (context included); ``None`` = one piece per
            range.
        token_ranges: cover only these global token ranges ``[lo, hi)`` (ascending, disjoint;
            a multi-process rank's trees, see :func:`clawrl.rl_core.partition_by_tokens`);
            ``None`` = the whole forest. A piece never crosses a range boundary.

    Raises:
        TokenBudgetError: a path is longer than ``token_budget`` (depth + 1 > budget).
        PackingError: a range outside ``[0, N]`` or out of order.
    """
    n = batch.num_tokens
    ranges = [(0, n)] if token_ranges is None else [(int(a), int(b)) for a, b in token_ranges]
    prev = 0
    for lo, hi in ranges:
        if not prev <= lo <= hi <= n:
            raise PackingError(f"token range [{lo}, {hi}) is out of order or outside [0, {n}]")
        prev = hi
    mem_order = np.argsort(batch.mem_token, kind="stable")
    mem_sorted_tok = batch.mem_token[mem_order]
    if token_budget is None:
        return [_make_piece(batch, a, b, mem_order, mem_sorted_tok) for a, b in ranges if a < b]
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
    for lo, hi in ranges:
        a = lo
        while a < hi:
            b = min(hi, a + token_budget - int(depth[a]))
            pieces.append(_make_piece(batch, a, b, mem_order, mem_sorted_tok))
            a = b
    return pieces
