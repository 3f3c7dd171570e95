"""Packing a prefix tree for tree attention (contract shared with clawrl-rl-core).

STUB written by the coordinator to fix the data layout; the prefixtree implementation fills
in how a ``PackedTree`` is produced. Field names and meanings below are a contract that
clawrl-rl-core relies on: add fields freely, do not rename or change these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TrajectoryInfo:
    """One trajectory (root-to-leaf path) of a packed tree.

    Attributes:
        index: position in ``PackedTree.trajectories`` (= the value used in ``mem_traj``).
        rollout_id: the rollout the trajectory belongs to (all trajectories of a rollout share
            its reward).
        leaf_call_id: call_id of the call whose path ends at this leaf.
        leaf_token: index (in packed DFS order) of the last token of the path.
        length: number of tokens on the path (root to leaf inclusive).
        n_trainable: number of trainable tokens on the path.
        side_path: True if the path is a side path (subagent, compaction) — excluded from
            credit by default.
        metadata: free-form metadata of the rollout (task id, harness, group id, ...).
    """

    index: int
    rollout_id: str
    leaf_call_id: str
    leaf_token: int
    length: int
    n_trainable: int
    side_path: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PackedTree:
    """A prefix tree laid out in DFS order for one forward pass with tree attention.

    N = number of unique tokens in the tree; M = number of (token, trajectory) memberships of
    trainable tokens.

    Attributes:
        input_ids: int64 [N], token ids in DFS order.
        position_ids: int64 [N], depth of each token on its path (0 at a root).
        parent_index: int64 [N], index of the token's predecessor on its own path, -1 at a
            root. The logprob of token i is read from the logits at ``parent_index[i]``.
        subtree_end: int64 [N], exclusive end of token i's subtree in DFS order: token i may
            attend token j iff ``j <= i < subtree_end[j]``.
        trainable: bool [N], True iff some call generated the token.
        mem_token: int64 [M], token index of each membership (only trainable tokens).
        mem_traj: int64 [M], trajectory index (into ``trajectories``) of each membership.
        mem_logprob: float64 [M], rollout logprob of that observation (natural log, the
            logprob recorded by the call of that trajectory which generated the token).
        mem_policy_version: int64 [M], policy version that generated that observation.
        trajectories: one ``TrajectoryInfo`` per root-to-leaf path.
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
