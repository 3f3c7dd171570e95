"""The call record: one per model call, written by the proxy, read by everyone.

See docs/architecture.md, "Call record". A record is a JSON object (one line of the session's
capture file, ``<capture_dir>/<run_id>/<session_id>.jsonl``); these ``TypedDict`` s give its
keys and types, so that the proxy that writes it, the clients that return it
(:meth:`AdminClient.records <clawrl.proxy.AdminClient.records>`) and the readers
(``clawrl.prefixtree.Call.from_record``, bench's report) agree on one shape. At run time a
record is a plain ``dict`` (orjson in, orjson out): nothing is converted.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

__all__ = [
    "CLIENT_LEFT_FLAG",
    "CONTEXT_LENGTH_EXCEEDED",
    "CONTEXT_OVERFLOW_FLAG",
    "FINISH_REASONS",
    "NO_MODEL_TURNS_FLAG",
    "CallRecord",
    "CallTiming",
    "CallUsage",
    "ParsedCall",
    "PromptRelation",
]

#: The proxy's own finish reasons, the values of ``CallRecord["finish_reason"]`` (mapped to
#: each wire API's words on the wire).
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "tool_calls", "aborted", "error")

#: ``CallRecord["error_code"]`` of a call refused because its prompt does not fit the context
#: window (the client got HTTP 400, OpenAI ``code`` / Anthropic message of the same meaning).
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
#: Flag of such a refused call's record.
CONTEXT_OVERFLOW_FLAG = "context_overflow"
#: Flag of a refused call whose prompt held no assistant or tool message (nothing the model
#: wrote): the harness's own prompt did not fit.
NO_MODEL_TURNS_FLAG = "no_model_turns"
#: Flag of an ``aborted`` call whose client disconnected before its answer (e.g. its HTTP
#: timeout fired); the record keeps the tokens generated until then.
CLIENT_LEFT_FLAG = "client_left"


class PromptRelation(TypedDict):
    """How the call's prompt relates to the session's earlier calls.

    ``kind``: ``first`` | ``extends`` (the parent's prompt + completion is a prefix) |
    ``spliced`` (it is, after splicing the exact ids of an echoed completion) | ``diverged``
    (it stops matching the parent at token index ``diverged_at``).
    """

    kind: Literal["first", "extends", "spliced", "diverged"]
    parent_call_id: str | None
    diverged_at: int | None


class CallTiming(TypedDict):
    """Unix seconds (float); ``None`` where the call never got there."""

    received: float
    started: float | None
    first_token: float | None
    finished: float | None


class CallUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int


class ParsedCall(TypedDict):
    """What the proxy parsed from the completion text (successful calls only)."""

    reasoning: str | None
    content: str | None
    tool_calls: list[dict[str, Any]]


class _CallRecordRequired(TypedDict):
    call_id: str
    session_id: str
    run_id: str
    seq: int
    api: str
    model: str
    metadata: dict[str, Any]
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    finish_reason: str  # one of FINISH_REASONS
    prompt_relation: PromptRelation
    spliced: list[Any]
    flags: list[str]
    policy_version: int | None
    policy_version_end: int | None
    sampling: dict[str, Any]
    timing: CallTiming
    usage: CallUsage
    request: Any
    response: Any
    error: str | None


class CallRecord(_CallRecordRequired, total=False):
    """One model call (docs/architecture.md, "Call record").

    ids: token ids (int) of the backend's vocabulary; ``completion_logprobs``: natural-log
    probabilities (float, <= 0), one per completion id, under the applied sampling
    (log softmax(logits / T)); ``seq``: 0-based order in which the proxy received the
    session's calls; ``policy_version`` at the start of generation and ``policy_version_end``
    at its end (they differ for a stale call, flagged ``stale``); ``request``/``response``:
    the bodies, size-capped (``{"_truncated": true, "bytes": n}`` past the cap).
    ``parsed`` is present on successful calls, ``backend_extra`` when the backend reports
    more (e.g. SGLang's meta info), ``error_code`` on a call the proxy refused before
    generating (:data:`CONTEXT_LENGTH_EXCEEDED`: the prompt does not fit the context
    window; flagged :data:`CONTEXT_OVERFLOW_FLAG`, and :data:`NO_MODEL_TURNS_FLAG` when the
    prompt held no assistant or tool message).
    """

    parsed: ParsedCall
    backend_extra: dict[str, Any]
    error_code: str
