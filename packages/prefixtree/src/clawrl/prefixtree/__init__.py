"""Token prefix trees for agent rollouts: insert, merge, filter, pack for tree attention.

Build a :class:`PrefixTree` from a rollout's :class:`Call` records, merge the rollouts of a
group with :func:`merge_trees`, clean it with the paper's filters (:func:`apply_filters`),
lay it out for one forward pass with tree attention (:meth:`PrefixTree.pack` →
:class:`PackedTree`), and store it with :meth:`PrefixTree.to_json`.
"""

from clawrl.prefixtree.call import (
    SIDE_PATH_FLAG,
    UNTRAINABLE_FINISH_REASONS,
    Call,
    is_trainable_record,
)
from clawrl.prefixtree.errors import (
    DuplicateCallError,
    InvalidCallError,
    MaskTooLargeError,
    PrefixTreeError,
    SerializationError,
    UnknownCallError,
)
from clawrl.prefixtree.filters import (
    OVER_BRANCHED_FLAG,
    FilterReport,
    apply_filters,
    filter_over_branched,
    find_dead_leaves,
    first_user_turn_end,
    leaf_counts,
    remove_dead_leaves,
    tag_side_paths,
)
from clawrl.prefixtree.pack import (
    MEMBERSHIP_ARRAYS,
    TOKEN_ARRAYS,
    PackedSizes,
    PackedTree,
    TrajectoryInfo,
    pack_tree,
)
from clawrl.prefixtree.serialize import FORMAT_VERSION, dumps, loads
from clawrl.prefixtree.tree import (
    InvariantError,
    MergeConflictError,
    Node,
    Observation,
    PrefixTree,
    RolloutInfo,
    TreeStats,
    merge_trees,
)

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "MEMBERSHIP_ARRAYS",
    "OVER_BRANCHED_FLAG",
    "SIDE_PATH_FLAG",
    "TOKEN_ARRAYS",
    "UNTRAINABLE_FINISH_REASONS",
    "Call",
    "DuplicateCallError",
    "FilterReport",
    "InvalidCallError",
    "InvariantError",
    "MaskTooLargeError",
    "MergeConflictError",
    "Node",
    "Observation",
    "PackedSizes",
    "PackedTree",
    "PrefixTree",
    "PrefixTreeError",
    "RolloutInfo",
    "SerializationError",
    "TrajectoryInfo",
    "TreeStats",
    "UnknownCallError",
    "__version__",
    "apply_filters",
    "dumps",
    "filter_over_branched",
    "find_dead_leaves",
    "first_user_turn_end",
    "is_trainable_record",
    "leaf_counts",
    "loads",
    "merge_trees",
    "pack_tree",
    "remove_dead_leaves",
    "tag_side_paths",
]
