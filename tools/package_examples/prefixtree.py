"""clawrl-prefixtree alone: the README example (numpy only)."""

import numpy as np
from clawrl.prefixtree import Call, PrefixTree, apply_filters, merge_trees

# Three calls of one rollout, as the proxy records them (token ids, logprobs, version).
records = [
    {
        "call_id": "c0",
        "session_id": "s1",
        "seq": 0,
        "policy_version": 7,
        "prompt_ids": [1, 2, 3],
        "completion_ids": [10, 11],
        "completion_logprobs": [-0.1, -0.2],
    },
    # a retry of the same request: superseded below, so a dead leaf
    {
        "call_id": "c1",
        "session_id": "s1",
        "seq": 1,
        "policy_version": 7,
        "prompt_ids": [1, 2, 3, 10, 11, 4],
        "completion_ids": [99],
        "completion_logprobs": [-3.0],
    },
    {
        "call_id": "c2",
        "session_id": "s1",
        "seq": 2,
        "policy_version": 7,
        "prompt_ids": [1, 2, 3, 10, 11, 4],
        "completion_ids": [12, 13],
        "completion_logprobs": [-0.3, -0.4],
    },
]
tree = PrefixTree.from_calls([Call.from_record(r) for r in records], rollout_id="rollout-a")
report = apply_filters(tree, max_leaves=4)
print(report.dead_leaves)  # ('c1',)

# A second rollout of the same task; merge into the group tree and pack it.
other = PrefixTree.from_calls(
    [Call("d0", "s2", 0, np.array([1, 2, 3]), np.array([20]), np.array([-0.5]), 7)],
    rollout_id="rollout-b",
)
group = merge_trees(tree, other)
packed = group.pack()
print(packed.input_ids)  # [ 1  2  3 10 11  4 12 13 20]  (DFS order)
print(packed.position_ids)  # [0 1 2 3 4 5 6 7 3]           (depth)
print(packed.subtree_end)  # i may attend j iff j <= i < subtree_end[j]
for t in packed.trajectories:
    print(t.rollout_id, packed.unpack(t))  # every trajectory's exact tokens
# per-(token, trajectory) advantages -> per-token sums for the clipped PPO/GRPO term
adv = packed.per_membership(np.array([1.0, -0.5]))
count, a_pos, a_neg = packed.advantage_sums(adv)
print(group.stats().compression_ratio)  # tokens trained flat / unique tokens
assert PrefixTree.from_json(group.to_json()) == group
