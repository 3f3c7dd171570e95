"""NullBackend: a *benchmark fixture* that returns one fixed completion at once.

It does no inference; it exists to measure what the proxy itself adds per call (HTTP,
validation, rendering, tokenization, splicing, capture) — see ``tools/perf/bench_proxy.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from clawrl.proxy.backends.base import (
    BackendFinishReason,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    TokenDelta,
)

__all__ = ["NullBackend"]


class NullBackend(InferenceBackend):
    """Benchmark fixture: every generation returns ``completion_ids`` (truncated to
    ``max_tokens``) with logprob 0.0, without awaiting anything.

    Args:
        completion_ids: the fixed completion (should end with a stop id).
        vocab_size: vocabulary size reported.
        max_context: context window reported.
    """

    name = "null"

    def __init__(self, completion_ids: Sequence[int], *, vocab_size: int, max_context: int = 32768):
        self.completion_ids = [int(t) for t in completion_ids]
        self._vocab_size = int(vocab_size)
        self._max_context = int(max_context)
        self._version = 0

    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        ids = self.completion_ids[: request.sampling.max_tokens]
        lps = [0.0] * len(ids)
        finish: BackendFinishReason = "stop" if len(ids) == len(self.completion_ids) else "length"
        yield TokenDelta(ids, lps)
        yield GenerationResult(ids, lps, finish, self._version, self._version)

    async def abort(self, request_id: str) -> None:
        return None

    async def update_weights(self, path: str, version: int) -> None:
        self._version = int(version)
