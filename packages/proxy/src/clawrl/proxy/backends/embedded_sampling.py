"""Token sampling of the embedded backend: temperature, top-k / top-p truncation and an
exact inverse-CDF draw, with the logprob of the distribution sampled from."""

from __future__ import annotations

import torch
from clawrl.proxy.backends.base import SamplingParams

__all__ = ["sample_token"]


def sample_token(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[int, float]:
    """Pick the next token from one row of logits and return ``(token_id, logprob)``.

    Args:
        logits: shape ``(vocab,)``, any float dtype (computed in float32).
        sampling: temperature ``T``, ``top_p``, ``top_k``.
        generator: CPU random generator (unused when ``T == 0``).

    Returns:
        The token and its natural-log probability under the distribution sampled from:
        ``log_softmax(logits / T)`` (``T > 0``, no truncation); the truncated distribution
        renormalised (``top_p < 1`` or ``top_k > 0``); ``log_softmax(logits)`` with the argmax
        token when ``T == 0`` (greedy).
    """
    logits = logits.float()
    if sampling.temperature == 0:
        token = int(torch.argmax(logits).item())
        return token, float(torch.log_softmax(logits, dim=-1)[token].item())
    scaled = logits / sampling.temperature
    if sampling.top_k > 0 or sampling.top_p < 1.0:
        scaled = _truncate(scaled, sampling.top_k, sampling.top_p)
    logp = torch.log_softmax(scaled, dim=-1)
    token = _inverse_cdf_sample(logp.exp().cpu(), generator)
    return token, float(logp[token].item())


def _inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one index with probability ``probs[i] / sum(probs)`` (inverse-CDF, float64).

    Exact, and ~25x faster than ``torch.multinomial`` on a 150k vocabulary on CPU. A
    zero-probability index is never drawn: ``searchsorted(right=True)`` returns the first
    index whose cumulative mass exceeds ``u``, and a zero-mass index has the same cumulative
    mass as the one before it.
    """
    cdf = torch.cumsum(probs.double(), dim=0)
    u = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    index = int(torch.searchsorted(cdf, u.reshape(1), right=True).item())
    if index >= probs.shape[0]:  # u rounded up to the total mass: the last possible index
        index = int(torch.nonzero(probs)[-1].item())
    return index


def _truncate(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf (at least one kept)."""
    out = scaled
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(out, top_k).values[-1]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        # stable: tied logits keep index order, so which of them the nucleus keeps is fixed
        # (the first maximal one, argmax's, always) rather than up to the sort's internals
        sorted_logits, order = torch.sort(out, descending=True, stable=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each token
        drop_sorted = before >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out
