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

With ``TrainerConfig.fsdp`` the models are sharded instead (:func:`shard_tree_module`, FSDP2's
``fully_shard``): every forward and backward all-gathers a layer's parameters and every
backward reduce-scatters its gradients, collectives every rank must join, so each rank's
pieces are padded to the same count with :func:`~clawrl.rl_core.padding_piece` (zero loss)
per no-grad pass and per minibatch (:func:`pad_pieces`, :func:`minibatch_pad_sizes`), and the
reduce-scatter sums (divide factor 1) instead of averaging, which replaces
:func:`allreduce_grads`.
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from clawrl.prefixtree import PackedTree
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.forward import _decoder
from clawrl.rl_core.packing import TreePiece, padding_piece
from clawrl.rl_core.step import OldPass
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

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


# ---------------------------------------------------------------------------------- FSDP
def shard_tree_module(
    module: nn.Module, body: nn.Module, mesh: DeviceMesh, *, heads: Sequence[nn.Module] = ()
) -> None:
    """Shard ``module`` in place with FSDP2: ``fully_shard`` on each decoder layer of
    ``body`` (a transformers causal LM inside ``module``: its decoder's ``layers``), on each
    of ``heads`` (value heads: a group of their own, as their dtype may differ from the
    body's, and a group holds one dtype), then on ``module`` itself (the root group:
    embeddings, final norm, vocabulary head).

    Every group reduce-scatters with ``ReduceOp.SUM`` and divide factor 1 (FSDP2 averages by
    default): the ranks' losses already carry the global normalisation, so their gradients
    add up to the one-process gradient, as :func:`allreduce_grads` does for DDP.

    Raises:
        ConfigError: no decoder layers, or ``body`` is already sharded (another Trainer of
            the same model).
    """
    if any(isinstance(m, FSDPModule) for m in module.modules()):
        raise ConfigError(
            f"{type(body).__name__} is already sharded (FSDP): one Trainer per model with fsdp"
        )
    layers = getattr(_decoder(body), "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ConfigError(f"fsdp: no decoder layers (`layers`) in {type(body).__name__}")
    # FSDP2 warns when a sharded module returns a view (an in-place op on it would skip the
    # pre-backward hook): the value heads' outputs are views (squeeze), never changed in place
    warnings.filterwarnings(
        "ignore",
        message=r"FSDP2-wrapped module \((FSDPTreeModel|FSDPCritic|FSDPValueHead)\) returned",
        category=UserWarning,
    )
    for sub in [*layers, *heads]:
        fully_shard(sub, mesh=mesh)
    fully_shard(module, mesh=mesh)
    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)  # SUM also where PREMUL_SUM is missing


def pad_pieces(pieces: Sequence[TreePiece], n: int) -> list[TreePiece]:
    """``pieces`` followed by padding pieces up to ``n`` (FSDP: equal forwards per rank)."""
    return [*pieces, *(padding_piece() for _ in range(n - len(pieces)))]


def minibatch_pad_sizes(counts: Sequence[int], n_mb: int) -> list[int]:
    """The most pieces any rank has in minibatch ``k`` (:func:`~clawrl.rl_core.trainer.
    minibatch_indices` deals rank ``r``'s ``counts[r]`` pieces into ``n_mb`` near-equal
    parts, sized by the count alone), for ``k < n_mb``."""
    sizes = [[len(p) for p in np.array_split(np.arange(c), max(1, min(n_mb, c)))] for c in counts]
    return [max(s[k] if k < len(s) else 0 for s in sizes) for k in range(n_mb)]


def clip_grad_norm_sharded(params: Sequence[nn.Parameter], max_norm: float) -> float:
    """Clip the gradients of (FSDP-sharded) parameters to the global 2-norm ``max_norm``;
    returns the norm before clipping, the one-process one (the shards' norms are combined
    over ranks: a collective)."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return float(total)
