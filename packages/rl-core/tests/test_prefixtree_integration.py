"""Through the real builder: proxy-style calls → clawrl.prefixtree → rl-core == flat paths."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from clawrl.prefixtree import Call, PackedTree, PrefixTree, merge_trees
from clawrl.rl_core import (
    CorrectionConfig,
    LossConfig,
    OldPass,
    PPOConfig,
    TreeBatch,
    ValueHead,
    loss_backward,
    old_pass,
    prepare_rl,
    split_by_token_budget,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VOCAB = 24


def _rollout_calls(rng: random.Random, rid: str, n_calls: int) -> list[Call]:
    calls: list[Call] = []
    prompt = [rng.randrange(VOCAB) for _ in range(3)]
    for j in range(n_calls):
        if calls:
            prev = calls[-1]
            if rng.random() < 0.7:  # harness appends: previous prompt + completion + env
                prompt = (
                    list(prev.prompt_ids)
                    + list(prev.completion_ids)
                    + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 3))]
                )
            else:  # harness rewrote history (dropped reasoning): diverges
                cut = rng.randint(1, len(prev.prompt_ids))
                prompt = list(prev.prompt_ids[:cut]) + [
                    rng.randrange(VOCAB) for _ in range(rng.randint(1, 3))
                ]
        comp = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))]
        calls.append(
            Call(
                f"{rid}-c{j}",
                f"sess-{rid}",
                j,
                np.asarray(prompt),
                np.asarray(comp),
                np.asarray([-rng.uniform(0.1, 3) for _ in comp]),
                policy_version=rng.randrange(3),
            )
        )
    return calls


def _group_trees(rng: random.Random, n_groups: int, group_size: int) -> list[PackedTree]:
    trees = []
    for g in range(n_groups):
        rollouts = [
            PrefixTree.from_calls(
                _rollout_calls(rng, f"g{g}r{k}", rng.randint(1, 4)),
                rollout_id=f"g{g}r{k}",
                metadata={"group_id": f"g{g}"},
            )
            for k in range(group_size)
        ]
        trees.append(merge_trees(*rollouts).pack())
    return trees


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seed=st.integers(0, 10**6), algorithm=st.sampled_from(["grpo", "ppo"]))
def test_prefixtree_packed_groups_equal_flat(
    tiny_model_factory: Callable[..., Any],
    flat_loss: Callable[..., torch.Tensor],
    path_logprobs: Callable[..., torch.Tensor],
    seed: int,
    algorithm: str,
) -> None:
    rng = random.Random(seed)
    trees = _group_trees(rng, 2, 3)
    batch = TreeBatch.from_trees(trees)
    # rl-core's path reconstruction == prefixtree's own unpacking
    k = 0
    for tree in trees:
        for t in tree.trajectories:
            np.testing.assert_array_equal(batch.input_ids[batch.path(k)], tree.unpack(t))
            k += 1
    model = tiny_model_factory(seed=seed % 2)
    head = ValueHead(model.config.hidden_size).double() if algorithm == "ppo" else None
    if head is not None:
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    pieces = split_by_token_budget(batch, int(batch.position_ids.max()) + 3)
    old = old_pass(model, batch, pieces, value_head=head)
    # logprobs of every membership == the per-path forward
    for traj in range(batch.num_trajectories):
        path = batch.path(traj)
        ref = path_logprobs(model, batch.input_ids[path]).detach().numpy()
        pos = {int(t): p for p, t in enumerate(path)}
        for m in np.nonzero(batch.mem_traj == traj)[0]:
            t = int(batch.mem_token[m])
            assert abs(old.logprobs[t] - ref[pos[t]]) < 1e-10
    noise = np.random.default_rng(seed).normal(0, 0.3, batch.num_tokens)
    old = OldPass(logprobs=old.logprobs + noise, values=old.values)
    rewards = {t.rollout_id: rng.random() for t in batch.trajectories}
    cfg = LossConfig(clip_eps_low=0.2, clip_eps_high=0.28, aggregation="sequence_mean")
    ppo = PPOConfig(value_clip=None)
    prepared = prepare_rl(
        batch,
        old,
        rewards,
        algorithm=algorithm,
        loss_cfg=cfg,
        ppo_cfg=ppo,
        corr_cfg=CorrectionConfig(tis_cap=2.0),
    )
    params = list(model.parameters()) + (list(head.parameters()) if head else [])
    stats = loss_backward(
        model, batch, pieces, prepared, old, loss_cfg=cfg, ppo_cfg=ppo, value_head=head
    )
    g_tree = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    ppo_clip = PPOConfig(value_clip=1e9)  # oracle writes the clipped form; huge clip = none
    flat = flat_loss(model, batch, prepared, old, algorithm, cfg, ppo_clip, head)
    flat.backward()
    assert abs(stats["loss"] - float(flat.detach())) <= 1e-6 * max(1.0, abs(float(flat.detach())))
    for gt, p in zip(g_tree, params, strict=True):
        gf = p.grad if p.grad is not None else torch.zeros_like(p)
        torch.testing.assert_close(gt, gf, rtol=1e-6, atol=1e-10)
