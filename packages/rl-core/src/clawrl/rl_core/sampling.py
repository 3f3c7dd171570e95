"""A minimal sampler for examples, tests and benchmarks (no inference server).

Production rollouts come from the proxy's inference backend; this samples from a HF causal LM
in plain torch, recording logprobs as docs/architecture.md defines them:
log softmax(logits / T)[token]
at temperature T, top_p = 1, no top_k.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from clawrl.rl_core.errors import ConfigError
from torch import nn

__all__ = ["Completion", "sample_completions"]


@dataclass(frozen=True)
class Completion:
    """One sampled completion: ``token_ids`` and their ``logprobs`` (natural log)."""

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@torch.no_grad()
def sample_completions(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """Sample one completion of exactly ``max_new_tokens`` tokens per prompt (no stop token).

    All prompts must have the same length (they are batched). Uses the global torch RNG
    unless ``generator`` is given.

    Raises:
        ConfigError: empty or ragged prompts, temperature ≤ 0, max_new_tokens < 1.
    """
    if not prompts or len({len(p) for p in prompts}) != 1 or len(prompts[0]) == 0:
        raise ConfigError("prompts must be non-empty and of equal length")
    if temperature <= 0 or max_new_tokens < 1:
        raise ConfigError("need temperature > 0 and max_new_tokens >= 1")
    dev = next(model.parameters()).device
    x = torch.as_tensor([list(p) for p in prompts], dtype=torch.int64, device=dev)
    # transformers 5 renamed past_key_values -> cache
    cache_kw = (
        "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    )
    lps = []
    past: Any = None
    inp = x
    for _ in range(max_new_tokens):
        out = model(input_ids=inp, use_cache=True, **{cache_kw: past})
        past = out.cache if hasattr(out, "cache") else out.past_key_values
        logits = out.logits[:, -1]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
        logp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(logp.exp(), 1, generator=generator)
        lps.append(logp.gather(-1, tok))
        x = torch.cat([x, tok], dim=1)
        inp = tok
    lp = torch.cat(lps, dim=1).double().cpu()
    n_p = len(prompts[0])
    return [
        Completion(
            prompt_ids=tuple(int(t) for t in prompts[i]),
            token_ids=tuple(int(t) for t in x[i, n_p:].tolist()),
            logprobs=tuple(float(v) for v in lp[i].tolist()),
        )
        for i in range(len(prompts))
    ]
