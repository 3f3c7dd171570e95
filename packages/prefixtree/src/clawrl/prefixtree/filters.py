"""The paper's rollout filters (ClawGym II), applied to a tree.

* **Dead leaves** (:func:`remove_dead_leaves`). A call is *dead* iff (1) it is a leaf call of
  its rollout — no other call of the rollout extends its path (nobody continued from its
  output) — and (2) a later call of the same rollout and session (greater ``seq``) has the
  same ``prompt_ids``: the harness retried the same request (timeout, error, malformed
  output) and went on from the retry. Dead calls are removed (with the tokens only they
  covered), repeatedly until none is left. A call that was continued from is never dead,
  even if it was re-sent.
* **Over-branched rollouts** (:func:`filter_over_branched`): a rollout whose tree has more
  than ``max_leaves`` trajectories (leaves) is dropped (its calls removed) or flagged
  ``over_branched`` (kept; :class:`TrajectoryInfo.flags` carries the flag).
* **Side paths** (:func:`tag_side_paths`, docs/architecture.md, "Prefix tree"): a call
  whose prompt does not contain — as a prefix — the rollout's main conversation up to the end
  of its first user turn (subagents, context compaction) gets the ``side_path`` flag, and a
  trajectory whose leaf call is a side path is excluded from credit by default. A branch
  caused by dropped reasoning keeps the system prompt and first user turn, so it is *not* a
  side path: it is ordinary tree structure and is trained.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from clawrl.prefixtree.call import SIDE_PATH_FLAG
from clawrl.prefixtree.errors import InvalidCallError, UnknownCallError
from clawrl.prefixtree.tree import PrefixTree

__all__ = [
    "OVER_BRANCHED_FLAG",
    "FilterReport",
    "apply_filters",
    "filter_over_branched",
    "find_dead_leaves",
    "first_user_turn_end",
    "leaf_counts",
    "remove_dead_leaves",
    "tag_side_paths",
]

#: Rollout flag set by :func:`filter_over_branched` with ``action="flag"``.
OVER_BRANCHED_FLAG = "over_branched"


@dataclass(frozen=True)
class FilterReport:
    """What :func:`apply_filters` did.

    Attributes:
        dead_leaves: call_ids removed as dead leaves.
        over_branched: rollout_ids whose leaf count exceeded the threshold.
        dropped_rollouts: rollout_ids removed (``over_branched`` with ``action="drop"``).
        side_path_calls: call_ids tagged ``side_path`` by this run.
    """

    dead_leaves: tuple[str, ...] = ()
    over_branched: tuple[str, ...] = ()
    dropped_rollouts: tuple[str, ...] = ()
    side_path_calls: tuple[str, ...] = ()


def find_dead_leaves(tree: PrefixTree) -> list[str]:
    """Call ids that are dead leaves now (definition in the module docstring); pure."""
    groups: dict[tuple[str, str, int, int], list[str]] = {}
    for cid in tree.call_ids:
        node, plen = tree.prompt_position(cid)
        e = tree._calls[cid]
        groups.setdefault((e.rollout_id, e.session_id, id(node), plen), []).append(cid)
    dead: list[str] = []
    for cids in groups.values():
        if len(cids) < 2:
            continue
        latest = max(tree._calls[c].seq for c in cids)
        dead.extend(c for c in cids if tree._calls[c].seq < latest and tree.is_leaf_call(c))
    return sorted(dead)


def remove_dead_leaves(tree: PrefixTree) -> tuple[str, ...]:
    """Remove dead leaves until none is left; returns the removed call ids (in order)."""
    removed: list[str] = []
    while True:
        dead = find_dead_leaves(tree)
        if not dead:
            return tuple(removed)
        for cid in dead:
            tree.remove_call(cid)
        removed.extend(dead)


def leaf_counts(tree: PrefixTree) -> dict[str, int]:
    """Number of trajectories (leaves) of each rollout."""
    out = dict.fromkeys(tree.rollouts, 0)
    for rid, _ in tree.leaves():
        out[rid] += 1
    return out


def filter_over_branched(
    tree: PrefixTree, max_leaves: int, action: Literal["drop", "flag"] = "drop"
) -> tuple[str, ...]:
    """Drop or flag rollouts with more than ``max_leaves`` leaves; returns their ids.

    Raises:
        ValueError: ``max_leaves`` < 1 or an unknown ``action``.
    """
    if max_leaves < 1:
        raise ValueError(f"max_leaves must be >= 1, got {max_leaves}")
    if action not in ("drop", "flag"):
        raise ValueError(f"action must be 'drop' or 'flag', got {action!r}")
    over = sorted(r for r, n in leaf_counts(tree).items() if n > max_leaves)
    for rid in over:
        if action == "flag":
            tree.flag_rollout(rid, OVER_BRANCHED_FLAG)
        else:
            for cid in tree.calls_of(rid):
                tree.remove_call(cid)
    return tuple(over)


def first_user_turn_end(
    user_turn_start: Sequence[int], turn_end: Sequence[int]
) -> Callable[[np.ndarray], int]:
    """A function giving the prefix length through the end of the first user turn.

    For a chat template (e.g. ChatML: ``user_turn_start`` = ids of ``<|im_start|>user``,
    ``turn_end`` = ids of ``<|im_end|>``): the returned function finds the first occurrence
    of ``user_turn_start`` in a prompt, then the first ``turn_end`` after it, and returns the
    index just past that ``turn_end``; if either is missing it returns ``len(prompt)``.

    Raises:
        ValueError: an empty marker.
    """
    us = np.asarray(user_turn_start, dtype=np.int64)
    te = np.asarray(turn_end, dtype=np.int64)
    if us.size == 0 or te.size == 0:
        raise ValueError("markers must be non-empty token-id sequences")

    def find(hay: np.ndarray, needle: np.ndarray, frm: int) -> int:
        if hay.shape[0] - frm < needle.shape[0]:
            return -1
        win = np.lib.stride_tricks.sliding_window_view(hay[frm:], needle.shape[0])
        hits = np.flatnonzero((win == needle).all(axis=1))
        return frm + int(hits[0]) if hits.size else -1

    def end_of_first_user_turn(prompt: np.ndarray) -> int:
        p = np.asarray(prompt, dtype=np.int64)
        a = find(p, us, 0)
        if a < 0:
            return int(p.shape[0])
        b = find(p, te, a + us.shape[0])
        return int(p.shape[0]) if b < 0 else b + int(te.shape[0])

    return end_of_first_user_turn


def tag_side_paths(
    tree: PrefixTree,
    anchor_end: Callable[[np.ndarray], int] | None = None,
    main_calls: dict[str, str] | None = None,
) -> tuple[str, ...]:
    """Flag side-path calls ``side_path``; returns the call ids newly flagged.

    Per rollout, the *main call* is the earliest call (smallest (seq, call_id)) not already
    flagged ``side_path`` — or ``main_calls[rollout_id]`` when given. The anchor is the main
    call's ``prompt_ids[:anchor_end(prompt_ids)]``; pass :func:`first_user_turn_end` for the
    exact rule of docs/architecture.md (the cut needs the chat template's marker ids). Without it
    (tokenizer-free default) the anchor is the main prompt's longest common prefix with a
    later prompt of the same session (the whole prompt if there is none): the main
    conversation's next call repeats the first prompt except, with some templates, the
    generation header, so it is never flagged, while subagents
    and compactions share less. The default under-flags (never over-flags) when the main call
    has no continuation. A call of the rollout whose prompt does not start with the anchor is
    a side path.

    Raises:
        UnknownCallError: a ``main_calls`` entry names a call not in that rollout.
        InvalidCallError: ``anchor_end`` returns a length outside [1, len(prompt)].
    """
    newly: list[str] = []
    for rid in sorted(tree.rollouts):
        cids = tree.calls_of(rid)
        if main_calls is not None and rid in main_calls:
            main = main_calls[rid]
            if main not in cids:
                raise UnknownCallError(f"main call {main!r} is not a call of rollout {rid!r}")
        else:
            cands = [c for c in cids if SIDE_PATH_FLAG not in tree._calls[c].flags]
            if not cands:
                continue
            main = cands[0]
        prompt = tree.get_call(main).prompt_ids
        if anchor_end is not None:
            n = int(anchor_end(prompt))
        else:
            n = _default_anchor_len(tree, main, prompt, cids)
        if not 1 <= n <= prompt.shape[0]:
            raise InvalidCallError(f"anchor_end returned {n} for a {prompt.shape[0]}-token prompt")
        # the tree node holding the anchor's last token; a call contains the anchor iff its
        # prompt is at least that long and its path passes through that node
        anchor = tree._calls[main].end
        while anchor.depth >= n:
            assert anchor.parent is not None
            anchor = anchor.parent
        for cid in cids:
            e = tree._calls[cid]
            inside = False
            if e.prompt_len >= n:
                cur = e.end
                while cur.depth > anchor.depth and cur.parent is not None:
                    cur = cur.parent
                inside = cur is anchor
            if not inside and SIDE_PATH_FLAG not in e.flags:
                tree.flag_call(cid, SIDE_PATH_FLAG)
                newly.append(cid)
    return tuple(newly)


def _default_anchor_len(tree: PrefixTree, main: str, prompt: np.ndarray, cids: list[str]) -> int:
    """Longest common prefix of the main prompt with a later prompt of its session."""
    me = tree._calls[main]
    best = -1
    for cid in cids:
        e = tree._calls[cid]
        if cid == main or e.session_id != me.session_id or e.order_key <= me.order_key:
            continue
        other = tree.get_call(cid).prompt_ids
        m = min(other.shape[0], prompt.shape[0])
        ne = other[:m] != prompt[:m]
        best = max(best, int(ne.argmax()) if ne.any() else m)
    return int(prompt.shape[0]) if best < 1 else best


def apply_filters(
    tree: PrefixTree,
    *,
    max_leaves: int | None = None,
    over_branched: Literal["drop", "flag"] = "drop",
    anchor_end: Callable[[np.ndarray], int] | None = None,
) -> FilterReport:
    """Run the three filters in order: dead leaves, over-branched rollouts, side paths.

    Dead leaves go first so that retries do not count as branches. ``max_leaves=None`` skips
    the over-branching filter. Mutates ``tree``; returns what was done.
    """
    dead = remove_dead_leaves(tree)
    over: tuple[str, ...] = ()
    if max_leaves is not None:
        over = filter_over_branched(tree, max_leaves, over_branched)
    side = tag_side_paths(tree, anchor_end)
    return FilterReport(
        dead_leaves=dead,
        over_branched=over,
        dropped_rollouts=over if over_branched == "drop" else (),
        side_path_calls=side,
    )
