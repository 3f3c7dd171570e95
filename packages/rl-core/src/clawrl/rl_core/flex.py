"""GPU fast path: a flex_attention ``BlockMask`` for tree attention, built in O(N + (N/B)²).

``create_block_mask`` evaluates a Python mask function over every (q-block, kv-block) pair
(4–6 s for a 27k-token tree, longer than the training step). The tree's
mask is fully described by ``subtree_end`` (token q attends token k iff
``k <= q < subtree_end[k]``), so the block structure is computed directly with tensor ops:

* kv token k is attended by the queries ``[k, subtree_end[k])``, i.e. q-blocks
  ``k // B … (subtree_end[k] − 1) // B``; a difference array over those intervals, summed per
  kv block, marks every non-empty (q-block, kv-block) pair — O(N + nb²);
* a pair is *full* (no masking inside) iff the kv block's last token precedes the q block's
  first one and ``min(subtree_end over the kv block) >= end of the q block``;
* the rest are *partial*: flex evaluates ``mask_mod`` (one gather of ``subtree_end``) inside
  them only.

flex_attention has no backward on CPU; on CPU this module is only used to check the block
structure (tests) — training on CPU uses sdpa with a dense boolean mask.
"""

from __future__ import annotations

import torch
from clawrl.rl_core.errors import PackingError
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask

__all__ = ["tree_block_mask", "tree_block_structure"]


def tree_block_structure(subtree_end: Tensor, block_size: int = 128) -> tuple[Tensor, Tensor]:
    """(partial, full) bool [nb, nb] block matrices (rows = q blocks, cols = kv blocks).

    Raises:
        PackingError: ``subtree_end`` is not 1-D int, or block_size < 1.
    """
    if subtree_end.ndim != 1 or subtree_end.dtype not in (torch.int32, torch.int64):
        raise PackingError("subtree_end must be a 1-D integer tensor")
    if block_size < 1:
        raise PackingError("block_size must be >= 1")
    n = subtree_end.shape[0]
    dev = subtree_end.device
    end = subtree_end.to(torch.int64)
    nb = (n + block_size - 1) // block_size
    idx = torch.arange(n, device=dev)
    kb = idx // block_size
    q_lo = kb
    q_hi = (end - 1) // block_size
    diff = torch.zeros(nb, nb + 1, dtype=torch.int32, device=dev)
    ones = torch.ones(n, dtype=torch.int32, device=dev)
    diff.index_put_((kb, q_lo), ones, accumulate=True)
    diff.index_put_((kb, q_hi + 1), -ones, accumulate=True)
    nonempty = (diff.cumsum(1)[:, :nb] > 0).T  # [q block, kv block]
    min_end = torch.full((nb,), n + 1, dtype=torch.int64, device=dev).scatter_reduce(
        0, kb, end, reduce="amin"
    )
    blocks = torch.arange(nb, device=dev)
    q_end = torch.clamp((blocks + 1) * block_size, max=n)
    # full: every kv k of the block precedes every q (last k <= first q) and every q < end[k]
    kv_last = q_end - 1
    q_first = blocks * block_size
    full = (kv_last[None, :] <= q_first[:, None]) & (min_end[None, :] >= q_end[:, None])
    return nonempty & ~full, full


def _to_indices(m: Tensor) -> tuple[Tensor, Tensor]:
    num = m.sum(-1).to(torch.int32)
    # True columns first, ascending (stable sort of the negated mask)
    order = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num[None, None], order[None, None]


def tree_block_mask(subtree_end: Tensor, block_size: int = 128) -> BlockMask:
    """BlockMask of the tree attention rule ``k <= q < subtree_end[k]`` for one packed tree
    (batch 1, heads broadcast), on ``subtree_end.device``.

    Args:
        subtree_end: int64 [N].
        block_size: flex block size (128 on current GPUs).

    Raises:
        PackingError: as :func:`tree_block_structure`.
    """
    partial, full = tree_block_structure(subtree_end, block_size)
    n = subtree_end.shape[0]
    nb = partial.shape[0]
    end_pad = torch.zeros(nb * block_size, dtype=torch.int64, device=subtree_end.device)
    end_pad[:n] = subtree_end.to(torch.int64)

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return (kv <= q) & (q < end_pad[kv])

    kv_num, kv_idx = _to_indices(partial)
    full_num, full_idx = _to_indices(full)
    return BlockMask.from_kv_blocks(
        kv_num,
        kv_idx,
        full_num,
        full_idx,
        BLOCK_SIZE=block_size,
        mask_mod=mask_mod,
        seq_lengths=(n, n),
    )
