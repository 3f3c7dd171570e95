"""Multi-process training (``accelerate launch --num_processes N``): who trains which trees.

Every rank holds the whole batch (the same trees and rewards; the train loop's rank 0
collects them and broadcasts). Each tree is trained on exactly one rank:

1. :func:`partition_by_tokens` deals the trees to ranks by packed token count (greedy
   longest-processing-time, deterministic, so every rank computes the same partition
   without communicating);
2. each rank runs the no-grad pass on its own trees' pieces; :func:`allreduce_old_pass`
   gathers π_old (V_old, π_ref) for every token on every rank;
3. advantages, corrections and aggregation weights are computed on the *whole* batch on
   every rank (NumPy float64, identical everywhere), so the loss normalisation is global —
   a token-mean over all ranks' memberships, never a mean of per-rank means;
4. each rank backpropagates its own pieces, the local gradients are summed over ranks
   (:func:`allreduce_grads`; not averaged: the weights already carry the global
   normalisation) and every rank takes the same optimiser step.

The model is still passed through ``accelerator.prepare`` (DDP broadcasts rank 0's
parameters at wrap time), but forwards call the unwrapped module, so no DDP hook or buffer
broadcast runs a collective inside a forward: ranks may own different numbers of pieces.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from clawrl.prefixtree import PackedTree
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.step import OldPass
from torch import nn

__all__ = ["broadcast_batch", "partition_by_tokens"]


def partition_by_tokens(sizes: Sequence[int], n_parts: int) -> list[list[int]]:
    """Deal items (trees) with ``sizes`` (packed token counts) into ``n_parts`` parts of
    near-equal total size.

    Greedy longest-processing-time (Graham 1969): items by size descending (ties: lower
    index first) go to the part with the smallest total so far (ties: lower part index).
    Its largest part is at most 4/3 − 1/(3·n_parts) times the optimum. Deterministic.

    Returns:
        ``n_parts`` lists of item indices, each ascending (a part may be empty when there
        are fewer items than parts).

    Raises:
        ConfigError: ``n_parts < 1`` or a negative size.
    """
    if n_parts < 1:
        raise ConfigError(f"n_parts must be >= 1, got {n_parts}")
    if any(s < 0 for s in sizes):
        raise ConfigError("sizes must be >= 0")
    heap = [(0, p) for p in range(n_parts)]
    parts: list[list[int]] = [[] for _ in range(n_parts)]
    for i in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        load, p = heapq.heappop(heap)
        parts[p].append(i)
        heapq.heappush(heap, (load + int(sizes[i]), p))
    return [sorted(p) for p in parts]


def broadcast_batch(
    trees: Sequence[PackedTree] | None,
    rewards: Mapping[str, float] | None,
    accelerator: Accelerator,
) -> tuple[list[PackedTree], dict[str, float]]:
    """Rank 0's batch on every rank: only rank 0 runs rollouts (see the README's
    "Multi-process training"); the others pass ``None`` and wait here.

    Collective (``accelerate.utils.broadcast_object_list``: the objects are pickled in memory
    and sent over the process group, nothing is read from disk). One process: returned as is.

    Raises:
        ConfigError: rank 0 passed ``None``.
    """
    if accelerator.is_main_process and (trees is None or rewards is None):
        raise ConfigError("rank 0 must pass the batch (trees and rewards)")
    if accelerator.num_processes == 1:
        assert trees is not None and rewards is not None
        return list(trees), dict(rewards)
    box: list[object] = [None, None]
    if accelerator.is_main_process:
        box = [list(trees or ()), dict(rewards or {})]
    broadcast_object_list(box, from_process=0)
    got_trees, got_rewards = box
    assert isinstance(got_trees, list) and isinstance(got_rewards, dict)
    return got_trees, got_rewards


def tree_token_ranges(sizes: Sequence[int], trees: Iterable[int]) -> list[tuple[int, int]]:
    """Global token ranges ``[lo, hi)`` of the given trees in a batch of trees with ``sizes``
    (ascending, adjacent trees merged)."""
    offsets = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
    out: list[tuple[int, int]] = []
    for t in sorted(trees):
        lo, hi = int(offsets[t]), int(offsets[t + 1])
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _allreduce_filled(a: np.ndarray | None, accelerator: Accelerator) -> np.ndarray | None:
    """Combine per-rank arrays where each entry is filled (not NaN) on at most one rank."""
    if a is None:
        return None
    filled = ~np.isnan(a)
    both = torch.as_tensor(np.stack([np.where(filled, a, 0.0), filled.astype(np.float64)]))
    red = accelerator.reduce(both.to(accelerator.device), reduction="sum").cpu().numpy()
    return np.where(red[1] > 0, red[0], np.nan)


def allreduce_old_pass(old: OldPass, accelerator: Accelerator) -> OldPass:
    """Every rank's share of the no-grad pass, combined: float64 [N] arrays with each token's
    value from the rank that owns it (NaN where no rank computed one)."""
    if accelerator.num_processes == 1:
        return old
    lp = _allreduce_filled(old.logprobs, accelerator)
    assert lp is not None
    return OldPass(
        logprobs=lp,
        values=_allreduce_filled(old.values, accelerator),
        ref_logprobs=_allreduce_filled(old.ref_logprobs, accelerator),
    )


def allreduce_grads(params: Sequence[nn.Parameter], accelerator: Accelerator) -> None:
    """Sum ``.grad`` over ranks in place (one flat all-reduce).

    A parameter without a gradient on some rank counts as zero there; one without a gradient
    on every rank keeps ``grad = None`` (so AdamW skips it, as in one process).
    """
    if accelerator.num_processes == 1:
        return
    dev = accelerator.device
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev)
    has = accelerator.reduce(has, reduction="sum")
    live = [p for p, h in zip(params, has.tolist(), strict=True) if h > 0]
    if not live:
        return
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in live])  # type: ignore[union-attr]
    flat = accelerator.reduce(flat, reduction="sum")
    off = 0
    for p in live:
        k = p.numel()
        p.grad.copy_(flat[off : off + k].view_as(p))  # type: ignore[union-attr]
        off += k


def allreduce_stats(stats: dict[str, float], accelerator: Accelerator) -> dict[str, float]:
    """Sum per-rank loss statistics (each rank's sum over its own pieces) over ranks."""
    if accelerator.num_processes == 1:
        return stats
    keys = sorted(stats)
    t = torch.tensor([stats[k] for k in keys], dtype=torch.float64, device=accelerator.device)
    red = accelerator.reduce(t, reduction="sum").tolist()
    return dict(zip(keys, red, strict=True))
