"""The types of one model call through the proxy: the normalised request (``ChatCall``), its
outcome before the API module answers (``CallOutcome``), the trainer's sampling policy
(``TrainingSampling``) and ``ClientDisconnected``. Re-exported by ``clawrl.proxy.core``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clawrl.proxy.parse import ParsedCompletion
from clawrl.proxy.record import CallRecord

__all__ = ["CallOutcome", "ChatCall", "ClientDisconnected", "TrainingSampling"]


class ClientDisconnected(Exception):
    """The client went away before its answer was ready; the call was recorded as aborted."""


@dataclass(frozen=True)
class TrainingSampling:
    """Sampling parameters the trainer imposes on every generation while training.

    ``temperature`` T > 0 (logprobs are log softmax(logits / T)); ``top_p`` = 1 and
    ``top_k`` = -1 for RL (docs/architecture.md, "Logprobs"); ``max_tokens`` an optional
    cap on completion tokens (the harness's own cap and the context window also apply).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError("temperature must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")


@dataclass
class ChatCall:
    """A chat request normalised from any wire API (messages in the renderer's format)."""

    api: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    parse_tool_calls: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stream: bool = False
    body: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass
class CallOutcome:
    """A finished generation, before the API module answers."""

    call_id: str
    parsed: ParsedCompletion
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    tool_call_ids: list[str]
    record: CallRecord = field(default_factory=lambda: CallRecord())  # type: ignore[typeddict-item]
    completion_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
