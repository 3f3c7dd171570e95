"""The inference-backend interface: the contract between the proxy server and every backend
(embedded, sglang, scripted, null)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "BackendError",
    "GenerationRequest",
    "GenerationResult",
    "InferenceBackend",
    "SamplingParams",
    "TokenDelta",
]

#: The proxy's own finish vocabulary at the backend level ("tool_calls" is decided by the
#: server after parsing, never by a backend).
BackendFinishReason = Literal["stop", "length", "aborted", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters actually applied to one generation.

    ``temperature`` T > 0 means logprobs are log softmax(logits / T); T == 0 means greedy
    (logprobs then are of the T = 1 distribution). ``top_k`` = -1 disables top-k.
    ``max_tokens`` is the number of completion tokens at most. Generation stops on any of
    ``stop_token_ids`` (the stop token is included in the completion ids).
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_ids: list[int]
    sampling: SamplingParams
    session_id: str | None = None


@dataclass(frozen=True)
class TokenDelta:
    """New tokens of a streamed generation (one or more), each with its logprob."""

    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class GenerationResult:
    """Final result of a generation (the last item a backend's ``generate`` yields)."""

    completion_ids: list[int]
    completion_logprobs: list[float]
    finish_reason: BackendFinishReason
    policy_version: int
    policy_version_end: int
    error: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


class BackendError(Exception):
    """The backend could not serve a request (down, overloaded, crashed)."""


class InferenceBackend(abc.ABC):
    """prompt ids -> completion ids + logprobs + finish reason, plus weight management."""

    name: str = "base"

    #: the state behind the common properties: subclasses set them in ``__init__`` (or, when
    #: only the server knows them, in :meth:`start`)
    _version: int = 0
    _max_context: int | None = None
    _vocab_size: int | None = None

    @property
    def policy_version(self) -> int:
        """The policy version of the weights this backend generates with."""
        return self._version

    @property
    def max_context(self) -> int:
        """Maximum prompt + completion length in tokens.

        Raises:
            BackendError: unknown yet (not given and :meth:`start` not called).
        """
        if self._max_context is None:
            raise BackendError(f"{type(self).__name__}.max_context is unknown: call start() first")
        return self._max_context

    @property
    def vocab_size(self) -> int:
        """Embedding rows of the served model.

        Raises:
            BackendError: unknown yet (not given and :meth:`start` not called).
        """
        if self._vocab_size is None:
            raise BackendError(f"{type(self).__name__}.vocab_size is unknown: call start() first")
        return self._vocab_size

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Start the backend (load a model, connect to a server)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenDelta | GenerationResult]:
        """Stream ``TokenDelta`` items, then exactly one ``GenerationResult``.

        Raises:
            BackendError: the backend is unavailable.
        """

    @abc.abstractmethod
    async def abort(self, request_id: str) -> None:
        """Abort a running generation; its result has finish_reason "aborted"."""

    @abc.abstractmethod
    async def update_weights(self, path: str, version: int) -> None:
        """Load weights from an HF checkpoint directory; policy_version becomes ``version``."""

    async def adopt_weights(self, path: str, version: int) -> None:
        """The weights of ``path`` were just loaded as ``version`` into the server this
        backend shares with other clients (another worker of ``proxy serve --workers``):
        policy_version becomes ``version``. A backend whose weights live in this process
        loads them (:meth:`update_weights`, the default)."""
        await self.update_weights(path, version)

    async def pause(self) -> None:  # noqa: B027 - optional hook
        """Stop admitting new generations (in-flight ones finish)."""

    async def resume(self) -> None:  # noqa: B027 - optional hook
        """Admit generations again."""

    async def health(self) -> bool:
        return True
