"""ScriptedBackend: a *test backend* that returns predetermined completions per session.

Not a model. Used for deterministic tool-call round trips in tests, oracle trajectories
(a task's solution emitted as tool calls in the harness's own schema) and cold-start data.

Each session has a queue of :class:`ScriptedCompletion`; every generation for that session
pops the next one (a session with an empty queue gets ``default``). A completion is given as
*text* in the model's output format (see :func:`clawrl.proxy.format_assistant_text`), which
is tokenized with the model's tokenizer and ended with the turn terminator, or as exact
token *ids*. Generation honours ``max_tokens`` (finish "length") and the stop ids (the
completion ends at the first stop id, which is kept), like a real engine.

Logprobs: every token's logprob is ``logprob`` (default 0.0, i.e. probability 1): the
scripted policy is deterministic. Records produced with this backend carry
``backend: "scripted"`` in their sampling section and must not be trained on as on-policy
samples.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    TokenDelta,
)

__all__ = ["ScriptedBackend", "ScriptedCompletion"]


@dataclass(frozen=True)
class ScriptedCompletion:
    """One predetermined completion: ``text`` (tokenized, stop id appended when
    ``end_turn``) or ``ids`` (used as given)."""

    text: str | None = None
    ids: Sequence[int] | None = None
    end_turn: bool = True

    def __post_init__(self) -> None:
        if (self.text is None) == (self.ids is None):
            raise ValueError("give exactly one of text or ids")


class ScriptedBackend(InferenceBackend):
    """Test backend returning predetermined completions per session (see module docstring).

    Args:
        encode: text -> token ids (the model's tokenizer, no special tokens added).
        stop_token_ids: ids that end a turn; the first is appended to text completions.
        vocab_size: size of the vocabulary (ids given must be below it).
        max_context: prompt + completion limit in tokens.
        default: completion for a session whose queue is empty (None: such a generation
            fails with finish_reason "error").
        logprob: the logprob recorded for every token.
        token_delay_s: seconds between streamed tokens (to test aborts and disconnects).
    """

    name = "scripted"

    def __init__(
        self,
        *,
        encode: Callable[[str], list[int]],
        stop_token_ids: Sequence[int],
        vocab_size: int,
        max_context: int = 32768,
        default: ScriptedCompletion | None = ScriptedCompletion(text="Done."),
        logprob: float = 0.0,
        token_delay_s: float = 0.0,
    ):
        if not stop_token_ids:
            raise ValueError("stop_token_ids must not be empty")
        self._encode = encode
        self._stop = tuple(int(t) for t in stop_token_ids)
        self._vocab_size = int(vocab_size)
        self._max_context = int(max_context)
        self.default = default
        self.logprob = float(logprob)
        self.token_delay_s = float(token_delay_s)
        self._queues: dict[str | None, deque[ScriptedCompletion]] = defaultdict(deque)
        self._aborted: set[str] = set()
        self._version = 0
        self.requests: list[GenerationRequest] = []  #: every request seen (for tests)

    @classmethod
    def from_model_dir(cls, path: str | Path, **kwargs: object) -> ScriptedBackend:
        """A scripted backend using the tokenizer and stop ids of an HF model directory."""
        from clawrl.proxy.render import ChatRenderer

        r = ChatRenderer.from_model_dir(path)
        max_context = _max_positions(Path(path))
        kw: dict[str, object] = {"max_context": max_context} if max_context else {}
        kw.update(kwargs)
        return cls(
            encode=r.encode,
            stop_token_ids=r.stop_token_ids,
            vocab_size=r.vocab_size,
            **kw,  # type: ignore[arg-type]
        )

    # -- scripting ---------------------------------------------------------------------------

    def script(
        self, session_id: str | None, completions: Sequence[ScriptedCompletion | str]
    ) -> None:
        """Append completions to a session's queue (``None``: requests without a session)."""
        q = self._queues[session_id]
        for c in completions:
            q.append(ScriptedCompletion(text=c) if isinstance(c, str) else c)

    def remaining(self, session_id: str | None) -> int:
        """Completions still queued for a session."""
        return len(self._queues.get(session_id, ()))

    def completion_ids(self, completion: ScriptedCompletion) -> list[int]:
        """The token ids a completion stands for."""
        if completion.ids is not None:
            return [int(t) for t in completion.ids]
        assert completion.text is not None
        ids = self._encode(completion.text)
        if completion.end_turn:
            ids.append(self._stop[0])
        return ids

    # -- InferenceBackend --------------------------------------------------------------------

    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        self.requests.append(request)
        version = self._version
        q = self._queues.get(request.session_id)
        completion = q.popleft() if q else self.default
        if completion is None:
            yield GenerationResult([], [], "error", version, version, error="script exhausted")
            return
        ids = self.completion_ids(completion)
        vocab = self.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise BackendError(f"scripted ids outside the vocabulary: {bad[:5]}")
        finish: str = "length"
        out: list[int] = []
        for t in ids:
            if len(out) >= request.sampling.max_tokens:
                break
            out.append(t)
            if t in request.sampling.stop_token_ids:
                finish = "stop"
                break
        else:
            finish = "stop" if out and out[-1] in self._stop else "length"
        emitted: list[int] = []
        for t in out:
            if request.request_id in self._aborted:
                self._aborted.discard(request.request_id)
                yield GenerationResult(
                    emitted, [self.logprob] * len(emitted), "aborted", version, self._version
                )
                return
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            emitted.append(t)
            yield TokenDelta([t], [self.logprob])
        self._aborted.discard(request.request_id)
        yield GenerationResult(
            out,
            [self.logprob] * len(out),
            "stop" if finish == "stop" else "length",
            version,
            self._version,
        )

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)

    async def update_weights(self, path: str, version: int) -> None:
        """No weights: only the policy version changes."""
        self._version = int(version)


def _max_positions(path: Path) -> int | None:
    import json

    cfg = path / "config.json"
    if not cfg.exists():
        return None
    value = json.loads(cfg.read_text()).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None
