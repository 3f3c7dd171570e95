"""Model families: tree forward, loss and gradients equal the flat per-path
computation for tiny random Llama (tied embeddings, as SmolLM2) and Qwen2 configs (float64).

Qwen2's special case is its sliding-window layers: with ``use_sliding_window`` the tree forward
passes a per-layer-type mask (``forward._tree_masks``); a single tree mask would leave the
sliding layers unwindowed and the logprobs would differ from the path forward.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    CorrectionConfig,
    LossConfig,
    TreeBatch,
    pack_token_sequences,
    split_by_token_budget,
    tree_forward,
)
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from .conftest import VOCAB, f64_rmsnorms, perturb_weights, tiny_sizes


def make_family_model(family: str, seed: int = 0) -> Any:
    """A tiny random model of ``family`` ("llama" tied like SmolLM2; "qwen2"; "qwen2-sliding"
    with a 3-token window on its second layer), float64."""
    common: dict[str, Any] = dict(vocab_size=VOCAB, attn_implementation="sdpa", **tiny_sizes())
    torch.manual_seed(seed)
    if family == "llama":
        model: Any = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, **common))
    elif family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=False, **common))
    else:
        cfg = Qwen2Config(use_sliding_window=True, sliding_window=3, max_window_layers=1, **common)
        model = Qwen2ForCausalLM(cfg)
    model = model.double()
    f64_rmsnorms(model)
    perturb_weights(model)
    return model


FAMILIES = ["llama", "qwen2", "qwen2-sliding"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_family_tree_logprobs_equal_per_path(
    family: str, seed: int, seq_factory: Callable[..., Any], path_logprobs: Callable[..., Any]
) -> None:
    model = make_family_model(family, seed)
    if family == "llama":
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    batch = TreeBatch.from_trees([pack_token_sequences(seq_factory(random.Random(seed), 7))])
    assert int(batch.position_ids.max()) >= 4  # deeper than the sliding window
    tg = np.nonzero(batch.parent_index >= 0)[0]
    out = tree_forward(
        model,
        *(
            torch.as_tensor(a)
            for a in (batch.input_ids, batch.position_ids, batch.parent_index, batch.subtree_end)
        ),
        torch.as_tensor(tg),
        temperature=0.7,
        chunk_size=5,
    )
    per = np.full(batch.num_tokens, np.nan)
    per[tg] = out.logprobs.detach().numpy()
    for k in range(batch.num_trajectories):
        path = batch.path(k)
        ref = path_logprobs(model, batch.input_ids[path], 0.7).detach().numpy()
        np.testing.assert_allclose(per[path[1:]], ref[1:], rtol=0, atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["grpo", "ppo"])
def test_family_tree_loss_and_grads_equal_flat(
    family: str, mode: str, seq_factory: Callable[..., Any], tree_vs_flat: Callable[..., Any]
) -> None:
    from clawrl.rl_core import ValueHead

    seed = 3
    rng = random.Random(seed)
    model = make_family_model(family, seed)
    head = None
    if mode == "ppo":
        head = ValueHead(model.config.hidden_size).double()
        with torch.no_grad():
            head.linear.weight.normal_(0, 0.3)
    seqs = seq_factory(rng, 6)
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    tree_vs_flat(
        model,
        batch,
        split_by_token_budget(batch, None),
        seqs,
        rng,
        mode=mode,
        seed=seed,
        cfg=LossConfig(clip_eps_low=0.1, clip_eps_high=0.3, aggregation="token_mean"),
        corr=CorrectionConfig(tis_cap=1.5, mask_low=0.05, mask_high=20.0),
        head=head,
    )
