"""Request checks of the embedded backend: its typed errors and the validation run before a
request is queued (prompt ids, context window, sampling parameters)."""

from __future__ import annotations

import math

from clawrl.proxy.backends.base import BackendError, GenerationRequest

__all__ = ["EmbeddedRequestError", "PromptTooLongError", "check_request"]


class EmbeddedRequestError(BackendError, ValueError):
    """A request the embedded backend refuses: empty prompt, ids outside the vocabulary,
    bad sampling parameters, duplicate request id. The request is never started."""


class PromptTooLongError(EmbeddedRequestError):
    """``len(prompt_ids) + max_tokens`` exceeds the backend's ``max_context``."""


def check_request(request: GenerationRequest, vocab: int, window: int) -> None:
    """Check a request for a model of ``vocab`` tokens and a ``window``-token context.

    Raises:
        EmbeddedRequestError: empty prompt, an id outside ``[0, vocab)``, bad sampling
            parameters.
        PromptTooLongError: ``len(prompt_ids) + max_tokens > window``.
    """
    sp = request.sampling
    ids = request.prompt_ids
    if not ids:
        raise EmbeddedRequestError("prompt_ids is empty")
    for i, t in enumerate(ids):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise EmbeddedRequestError(
                f"prompt_ids[{i}] = {t!r} is outside the vocabulary [0, {vocab})"
            )
    if isinstance(sp.max_tokens, bool) or not isinstance(sp.max_tokens, int) or sp.max_tokens < 1:
        raise EmbeddedRequestError(f"max_tokens must be an integer >= 1, got {sp.max_tokens!r}")
    if len(ids) + sp.max_tokens > window:
        raise PromptTooLongError(
            f"prompt ({len(ids)} tokens) + max_tokens ({sp.max_tokens}) exceeds the "
            f"context window of {window} tokens"
        )
    if not math.isfinite(sp.temperature) or sp.temperature < 0:
        raise EmbeddedRequestError(f"temperature must be finite and >= 0, got {sp.temperature}")
    if not 0 < sp.top_p <= 1:
        raise EmbeddedRequestError(f"top_p must be in (0, 1], got {sp.top_p}")
    if sp.top_k != -1 and sp.top_k < 1:
        raise EmbeddedRequestError(f"top_k must be -1 (off) or >= 1, got {sp.top_k}")
    bad_stop = [t for t in sp.stop_token_ids if not 0 <= t < vocab]
    if bad_stop:
        raise EmbeddedRequestError(f"stop_token_ids outside the vocabulary: {bad_stop[:5]}")
