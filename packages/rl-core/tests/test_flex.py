"""flex_attention BlockMask built from the O(N) tree description."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from clawrl.rl_core import PackingError, pack_token_sequences, tree_attention_mask, tree_forward
from clawrl.rl_core.flex import tree_block_mask, tree_block_structure
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n_seq=st.integers(1, 30), block=st.sampled_from([1, 4, 16]))
def test_block_structure_matches_dense_mask(
    seq_factory: Callable[..., Any], seed: int, n_seq: int, block: int
) -> None:
    tree = pack_token_sequences(seq_factory(random.Random(seed), n_seq, max_new=12, roots=2))
    end = torch.as_tensor(tree.subtree_end)
    dense = tree_attention_mask(end)[0, 0]
    n = dense.shape[0]
    nb = (n + block - 1) // block
    pad = torch.zeros(nb * block, nb * block, dtype=torch.bool)
    pad[:n, :n] = dense
    tiles = pad.view(nb, block, nb, block).permute(0, 2, 1, 3)
    any_ = tiles.any(-1).any(-1)
    # a tile is full when every *existing* (q, kv) pair attends
    exists = torch.zeros_like(pad)
    exists[:n, :n] = True
    ex = exists.view(nb, block, nb, block).permute(0, 2, 1, 3)
    all_ = (tiles | ~ex).all(-1).all(-1)
    partial, full = tree_block_structure(end, block)
    assert torch.equal(full, all_ & any_)
    assert torch.equal(partial, any_ & ~all_)


def test_block_mask_equals_create_block_mask_and_attention(
    seq_factory: Callable[..., Any],
) -> None:
    tree = pack_token_sequences(seq_factory(random.Random(3), 30, max_new=20))
    end = torch.as_tensor(tree.subtree_end)
    n = end.shape[0]
    bm = tree_block_mask(end, 16)

    def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (kv <= q) & (q < end[kv])

    ref = create_block_mask(mask_mod, 1, 1, n, n, device="cpu", BLOCK_SIZE=16)
    assert torch.equal(bm.to_dense(), ref.to_dense())
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex on CPU warns that it is unoptimised
        out = flex_attention(q, k, v, block_mask=bm)
    ref_out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=tree_attention_mask(end)
    )
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)


def test_block_mask_errors() -> None:
    with pytest.raises(PackingError):
        tree_block_structure(torch.tensor([[1]]))
    with pytest.raises(PackingError):
        tree_block_structure(torch.tensor([1]), block_size=0)


@pytest.mark.slow
def test_model_forward_with_flex_matches_sdpa(
    tiny_model_factory: Callable[..., Any], seq_factory: Callable[..., Any]
) -> None:
    """A Qwen3 loaded with attn_implementation='flex_attention' takes the BlockMask (forward
    only: flex has no CPU backward; compiles through inductor, ~1 min on CPU)."""
    tree = pack_token_sequences(seq_factory(random.Random(0), 8))

    def t(a: Any) -> torch.Tensor:
        return torch.as_tensor(a)

    tg = t((tree.parent_index >= 0).nonzero()[0])
    args = (t(tree.input_ids), t(tree.position_ids), t(tree.parent_index), t(tree.subtree_end), tg)
    flex = tiny_model_factory(torch.float32, attn="flex_attention")
    sdpa = tiny_model_factory(torch.float32, attn="sdpa")
    with torch.no_grad():
        a = tree_forward(flex, *args)
        b = tree_forward(sdpa, *args)
    torch.testing.assert_close(a.logprobs, b.logprobs, rtol=1e-5, atol=1e-5)
