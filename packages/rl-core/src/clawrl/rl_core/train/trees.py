"""Captured rollouts → prefix trees: one tree per rollout (with the paper's filters), one
group tree per (task, harness) group, packed for one tree-attention forward.

Filters (clawrl.prefixtree's ``apply_filters``): dead leaves (harness retries) removed,
rollouts with more than ``max_leaves`` trajectories dropped, side paths (subagents,
compaction) flagged and excluded from credit by the loss.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clawrl.prefixtree import Call, PackedTree, PrefixTree, apply_filters, merge_trees
from clawrl.rl_core.distributed import partition_by_tokens

__all__ = ["BuiltTrees", "RolloutData", "build_group_trees", "merge_into", "shuffled_rewards"]


@dataclass(frozen=True)
class RolloutData:
    """What the loop trains on from one rollout: its id, group, harness, reward, records."""

    rollout_id: str
    group_id: str
    task_id: str
    harness: str
    reward: float
    records: Sequence[Mapping[str, Any]]


def shuffled_rewards(data: Sequence[RolloutData], rng: random.Random) -> list[RolloutData]:
    """``data`` with its rewards permuted among the rollouts by ``rng`` (the shuffled-reward
    control: same reward distribution and groups, no information about which rollout earned
    which reward)."""
    rewards = [d.reward for d in data]
    rng.shuffle(rewards)
    return [dataclasses.replace(d, reward=r) for d, r in zip(data, rewards, strict=True)]


@dataclass
class BuiltTrees:
    """Packed group trees and what the filters did.

    Attributes:
        trees: one packed tree per group (every rollout of the group merged).
        rewards: reward per rollout id kept in ``trees``.
        groups: group id per rollout id kept.
        flat_tokens: Σ over calls of prompt + completion tokens (a forward per call).
        unique_tokens: tokens in the packed trees.
        per_harness: harness → (flat tokens, tokens of that harness's rollouts merged into
            one tree): how much each harness's shared system prompt and tools save.
        dead_leaves, dropped_rollouts, side_path_calls, empty_rollouts: filter counts.
    """

    trees: list[PackedTree] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    flat_tokens: int = 0
    unique_tokens: int = 0
    n_trajectories: int = 0
    dead_leaves: int = 0
    dropped_rollouts: int = 0
    side_path_calls: int = 0
    empty_rollouts: int = 0
    per_harness: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def compression(self) -> float:
        """flat tokens / unique tokens (1.0 when empty)."""
        return self.flat_tokens / self.unique_tokens if self.unique_tokens else 1.0


def merge_into(trees: Sequence[PrefixTree], parts: int = 1) -> list[PrefixTree]:
    """``trees`` merged into at most ``parts`` trees: all into one (``parts`` <= 1), else
    dealt into parts of near-equal unique-token count
    (:func:`~clawrl.rl_core.partition_by_tokens`), each part merged; one tree is kept as is.
    """
    if len(trees) <= 1:
        return list(trees)
    if parts <= 1:
        return [merge_trees(*trees)]
    dealt = partition_by_tokens([t.stats().unique_tokens for t in trees], parts)
    return [merge_trees(*[trees[i] for i in part]) for part in dealt if part]


def build_group_trees(
    rollouts: Sequence[RolloutData],
    *,
    max_leaves: int | None = 8,
    merge_groups: bool = False,
    parts: int = 1,
) -> BuiltTrees:
    """Build, filter, merge per group and pack.

    With ``merge_groups`` the group trees of the batch are merged further into ``parts``
    trees (:func:`merge_into`; the system prompt and tool schemas shared by every task are
    then computed once per tree; GRPO groups come from ``groups`` / the trajectories'
    ``group_id`` metadata, so advantages are unchanged). ``parts`` > 1 (the trainer ranks
    under ``accelerate launch``): whole group trees are dealt into that many parts, so each
    rank trains one tree and the loss is the one-tree loss (groups share no trainable
    token). A rollout without a trainable call (no record, or only failed / aborted calls)
    is left out and counted in ``empty_rollouts``.
    """
    out = BuiltTrees()
    by_group: dict[str, list[PrefixTree]] = {}
    by_harness: dict[str, list[PrefixTree]] = {}
    for ro in rollouts:
        calls = Call.from_records(ro.records)
        if not calls:
            out.empty_rollouts += 1
            continue
        meta = {"group_id": ro.group_id, "task_id": ro.task_id, "harness": ro.harness}
        tree = PrefixTree.from_calls(calls, rollout_id=ro.rollout_id, metadata=meta)
        report = apply_filters(tree, max_leaves=max_leaves, over_branched="drop")
        out.dead_leaves += len(report.dead_leaves)
        out.side_path_calls += len(report.side_path_calls)
        if report.dropped_rollouts:
            out.dropped_rollouts += 1
            continue
        out.flat_tokens += tree.stats().flat_tokens
        by_group.setdefault(ro.group_id, []).append(tree)
        by_harness.setdefault(ro.harness, []).append(tree)
        out.rewards[ro.rollout_id] = float(ro.reward)
        out.groups[ro.rollout_id] = ro.group_id
    group_trees = [merge_trees(*ts) if len(ts) > 1 else ts[0] for ts in by_group.values()]
    for h, ts in by_harness.items():
        st = (merge_trees(*ts) if len(ts) > 1 else ts[0]).stats()
        out.per_harness[h] = (sum(t.stats().flat_tokens for t in ts), st.unique_tokens)
    if merge_groups:
        group_trees = merge_into(group_trees, parts)
    for group in group_trees:
        packed = group.pack()
        out.unique_tokens += int(packed.input_ids.shape[0])
        out.n_trajectories += len(packed.trajectories)
        out.trees.append(packed)
    return out
