"""A rollout's (or group's) prefix tree for the viewer, built with ``clawrl.prefixtree``.

:func:`build_tree` makes the tree of every call with token ids (failed calls included, so
that the drawing shows what happened), then marks, with the prefix tree's own filters and
without removing anything: dead leaves (:func:`~clawrl.prefixtree.find_dead_leaves`), side
paths (the proxy's ``side_path`` flag and :func:`~clawrl.prefixtree.tag_side_paths`), and
over-branching (:func:`~clawrl.prefixtree.leaf_counts` above ``max_leaves``).

:func:`tree_html` draws it as nested HTML lists (one item per node: depth range, tokens,
the trajectories sharing it, the calls ending there, a decoded preview); :func:`heat_paths`
gives, per trajectory (root-to-leaf path), its tokens with the recorded logprob of each
trained token — the tokens a call generated on a path that is trained (not a dead leaf, not
a side path, from a trainable call).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clawrl.bench.view.tokens import TokenText

__all__ = ["ViewTree", "build_tree", "heat_paths", "tree_html"]

_PREVIEW = 48


@dataclass
class ViewTree:
    """A built tree and what the filters found.

    Attributes:
        tree: the :class:`~clawrl.prefixtree.PrefixTree` (``None`` with ``error``).
        seq: call_id → ``#seq`` label (group trees: ``<harness> s<sample>#seq``).
        dead: dead-leaf call ids; side: side-path call ids; untrainable: calls whose
            completion is not trained on (failed / aborted / empty).
        over_branched: rollout ids with more leaves than ``max_leaves``.
        error: why no tree could be built.
    """

    tree: Any = None
    seq: dict[str, str] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    side: set[str] = field(default_factory=set)
    untrainable: set[str] = field(default_factory=set)
    over_branched: set[str] = field(default_factory=set)
    error: str = ""

    @property
    def n_leaves(self) -> int:
        """Trajectories (leaves) of the tree: ``len(tree.leaves())``."""
        return len(self.tree.leaves()) if self.tree is not None else 0


def build_tree(
    records_by_rollout: dict[str, Sequence[dict[str, Any]]], max_leaves: int | None = None
) -> ViewTree:
    """The prefix tree of one rollout (one key) or a group (several), marked (module doc)."""
    from clawrl.prefixtree import (
        SIDE_PATH_FLAG,
        Call,
        PrefixTree,
        PrefixTreeError,
        find_dead_leaves,
        is_trainable_record,
        leaf_counts,
        merge_trees,
        tag_side_paths,
    )

    out = ViewTree()
    trees = []
    several = len(records_by_rollout) > 1
    try:
        for rid, recs in records_by_rollout.items():
            usable = [r for r in recs if r.get("prompt_ids")]
            if not usable:
                continue
            for r in usable:
                label = f"#{r.get('seq')}"
                md = r.get("metadata") or {}
                tag = f"{md.get('harness', '')} s{md.get('sample_index', '?')}" if several else ""
                out.seq[str(r["call_id"])] = f"{tag}{label}" if tag else label
                if not is_trainable_record(r):
                    out.untrainable.add(str(r["call_id"]))
            calls = Call.from_records(usable, trainable_only=False)
            trees.append(PrefixTree.from_calls(calls, rollout_id=rid))
        if not trees:
            out.error = "no calls with token ids"
            return out
        tree = trees[0] if len(trees) == 1 else merge_trees(*trees)
    except PrefixTreeError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    out.tree = tree
    out.dead = set(find_dead_leaves(tree))
    out.side = {c.call_id for c in tree.calls() if SIDE_PATH_FLAG in c.flags}
    out.side |= set(tag_side_paths(tree))
    if max_leaves is not None:
        out.over_branched = {r for r, n in leaf_counts(tree).items() if n > max_leaves}
    return out


def _node_html(vt: ViewTree, node: Any, text: TokenText, below: dict[int, int]) -> str:
    """One ``<li>``: the node's edge and, nested, its children."""
    toks = [int(t) for t in node.tokens]
    ends = sorted(node.ends, key=lambda c: vt.seq.get(c, c))
    classes = ["tnode"]
    if node.obs:
        classes.append("gen")
    if not node.children:
        classes.append("leaf")
    if any(c in vt.dead for c in ends) and not node.children:
        classes.append("dead")
    if any(c in vt.side for c in ends):
        classes.append("side")
    if len(node.children) > 1:
        classes.append("branch")
    badges = []
    for c in ends:
        tags = [t for t, s in (("dead", vt.dead), ("side path", vt.side)) if c in s]
        if c in vt.untrainable:
            tags.append("untrained")
        label = vt.seq.get(c, c) + (f" ({', '.join(tags)})" if tags else "")
        badges.append(f'<span class="end" data-call="{html.escape(c)}">{html.escape(label)}</span>')
    preview = ""
    if toks:
        head = text.decode(toks[:_PREVIEW])
        preview = (
            head if len(toks) <= 2 * _PREVIEW else head + " … " + text.decode(toks[-_PREVIEW:])
        )
    shared = below.get(id(node), 0)
    info = (
        f'<span class="span">[{node.depth}, {node.end_depth})</span> '
        f'<span class="ntok">{len(toks)} tok</span> '
        f'<span class="shared" title="trajectories through this node">×{shared}</span>'
    )
    if len(node.children) > 1:
        info += f' <span class="bp">branch at {node.end_depth}: {len(node.children)} ways</span>'
    kids = "".join(_node_html(vt, ch, text, below) for ch in node.children.values())
    return (
        f'<li class="{" ".join(classes)}"><div class="edge">{info} {"".join(badges)}'
        f'<div class="preview">{html.escape(preview)}</div></div>'
        + (f"<ul>{kids}</ul>" if kids else "")
        + "</li>"
    )


def tree_html(vt: ViewTree, text: TokenText) -> str:
    """Nested ``<ul class="ptree">`` of the tree (an error note without one)."""
    if vt.tree is None:
        return f'<p class="note">no tree: {html.escape(vt.error)}</p>'
    below: dict[int, int] = {}
    for _rid, leaf in vt.tree.leaves():
        n = leaf
        while n is not None:
            below[id(n)] = below.get(id(n), 0) + 1
            n = n.parent
    root = vt.tree.root
    kids = "".join(_node_html(vt, ch, text, below) for ch in root.children.values())
    return f'<ul class="ptree" data-leaves="{vt.n_leaves}">{kids}</ul>'


def _leaf_call(vt: ViewTree, rid: str, node: Any) -> str:
    """The call of rollout ``rid`` that ends at the leaf ``node`` (latest seq first)."""
    ends = [c for c in node.ends if vt.tree.rollout_of(c) == rid]
    return sorted(ends, key=lambda c: vt.tree.get_call(c).seq)[-1]


def _update_values(
    vt: ViewTree, rid: str, leaf: Any, n: int, tokens: dict[str, dict[str, list[Any]]]
) -> dict[str, list[Any]]:
    """``{"adv": [...], "iw": [...]}`` aligned with the path's ``n`` tokens from the update's
    record of this trajectory (keyed by one of the rollout's calls ending at ``leaf``), or
    ``{}`` when the run recorded none for it."""
    rec = next((tokens[c] for c in leaf.ends if vt.tree.rollout_of(c) == rid and c in tokens), None)
    if rec is None:
        return {}
    adv: list[Any] = [None] * n
    iw: list[Any] = [None] * n
    for j, pos in enumerate(rec.get("position") or []):
        if 0 <= int(pos) < n:
            adv[int(pos)] = (rec.get("advantage") or [None] * (j + 1))[j]
            iw[int(pos)] = (rec.get("importance_weight") or [None] * (j + 1))[j]
    return {"adv": adv, "iw": iw}


def heat_paths(
    vt: ViewTree, tokens: dict[str, dict[str, list[Any]]] | None = None
) -> list[dict[str, Any]]:
    """Per trajectory: ``{"leaf_call", "label", "trained", "why", "ids", "lp"}``, plus
    ``"adv"`` and ``"iw"`` where ``tokens`` (a train rollout's update record, see
    :class:`~clawrl.bench.view.sources.ViewRollout`) has the trajectory.

    ``ids``: the path's tokens; ``lp``: per token the recorded logprob where the token is
    trained (generated by a trainable call on this path), else ``None``; ``adv`` / ``iw``:
    per token the advantage and importance weight the update used (``None`` elsewhere).
    ``trained`` is false for a dead leaf or a side path (``why`` says which): then no token
    is coloured.
    """
    if vt.tree is None:
        return []
    out = []
    for rid, leaf in vt.tree.leaves():
        call = _leaf_call(vt, rid, leaf)
        why = "dead leaf" if call in vt.dead else "side path" if call in vt.side else ""
        nodes = vt.tree.path_nodes(leaf)
        on_path = {c for n in nodes for c in n.ends}
        ids: list[int] = []
        lps: list[float | None] = []
        for n in nodes:
            obs = [o for c, o in n.obs.items() if c in on_path and c not in vt.untrainable]
            for i, t in enumerate(n.tokens):
                ids.append(int(t))
                cover = [o for o in obs if o.start <= i]
                lp = float(cover[0].logprobs[i - cover[0].start]) if cover and not why else None
                lps.append(lp)
        out.append(
            {
                "leaf_call": call,
                "rollout": rid,
                "label": vt.seq.get(call, call),
                "trained": not why,
                "why": why,
                "ids": ids,
                "lp": [None if x is None else round(x, 4) for x in lps],
                **(_update_values(vt, rid, leaf, len(ids), tokens) if tokens and not why else {}),
            }
        )
    return out
