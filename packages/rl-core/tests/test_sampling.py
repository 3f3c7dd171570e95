"""The sampler's logprobs mean what the trainer computes (docs/architecture.md, "Logprobs"), at any temperature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import (
    ConfigError,
    TokenSequence,
    TreeBatch,
    old_pass,
    pack_token_sequences,
    sample_completions,
    split_by_token_budget,
)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_rollout_logprobs_equal_trainer_logprobs(
    tiny_model_factory: Callable[..., Any], temperature: float
) -> None:
    model = tiny_model_factory(torch.float64, seed=1)
    torch.manual_seed(0)
    done = sample_completions(model, [[1, 2], [1, 3], [1, 2]], 5, temperature=temperature)
    seqs = [
        TokenSequence(
            list(c.prompt_ids) + list(c.token_ids),
            [False, False] + [True] * 5,
            [0.0, 0.0, *c.logprobs],
            rollout_id=f"r{i}",
        )
        for i, c in enumerate(done)
    ]
    batch = TreeBatch.from_trees([pack_token_sequences(seqs)])
    old = old_pass(model, batch, split_by_token_budget(batch), temperature=temperature)
    diff = old.logprobs[batch.mem_token] - batch.mem_logprob
    assert np.abs(diff).max() < 1e-9  # KV-cached decoding vs one tree forward, float64
    assert all(len(c.token_ids) == 5 and all(lp <= 0 for lp in c.logprobs) for c in done)


def test_sampler_errors(tiny_model_factory: Callable[..., Any]) -> None:
    model = tiny_model_factory(torch.float32)
    with pytest.raises(ConfigError):
        sample_completions(model, [[1], [1, 2]], 3)
    with pytest.raises(ConfigError):
        sample_completions(model, [[1]], 3, temperature=0.0)
    with pytest.raises(ConfigError):
        sample_completions(model, [], 3)
