"""The wire-API protocol: what a client API module gives the model app's one call handler.

:mod:`~clawrl.proxy.openai_chat`, :mod:`~clawrl.proxy.anthropic_messages` and
:mod:`~clawrl.proxy.openai_responses` each export ``WIRE``, a :class:`WireAPI`. The handler
(``ProxyApp._call``) reads the body (:func:`read_json`), parses it (:func:`parse_body`: the
API's ``parse_request``, with unexpected parser exceptions turned into a typed 400), runs the
call through :class:`~clawrl.proxy.ProxyCore`, and answers with the API's
``build_response`` or ``stream_events``; errors take the API's ``error_body`` /
``sse_error`` shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import orjson
from clawrl.proxy.core import CallOutcome, ChatCall
from clawrl.proxy.errors import PayloadTooLargeError, ProxyError, ProxyRequestError
from clawrl.proxy.validation import MAX_JSON_DEPTH, check_json_depth
from starlette.requests import Request

__all__ = [
    "CallWire",
    "ErrorShape",
    "TokenBytes",
    "WireAPI",
    "WireRequest",
    "parse_body",
    "read_json",
]

log = logging.getLogger("clawrl.proxy")

_T = TypeVar("_T")

#: the error shape an API's clients expect (also names the API in logs)
ErrorShape = Literal["openai", "anthropic", "responses"]
#: token id -> its bytes (the renderer's ``token_bytes``), for logprob details
TokenBytes = Callable[[int], bytes]


@dataclass(frozen=True)
class WireRequest:
    """A parsed request: the normalised call plus the API's own answer options.

    ``include_usage``: OpenAI Chat's ``stream_options.include_usage`` (the other APIs always
    report usage).
    """

    call: ChatCall
    include_usage: bool = False


class WireAPI(Protocol):
    """One client API of the model app (see the module docstring)."""

    @property
    def error_shape(self) -> ErrorShape: ...

    def parse_request(self, body: Any) -> WireRequest:
        """Validate a request body.

        Raises:
            ProxyRequestError: a field is malformed (400); UnsupportedParameterError: a
                feature the proxy does not serve.
        """
        ...

    def build_response(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> dict[str, Any]:
        """The non-streamed answer object (also the call record's response)."""
        ...

    def stream_events(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> list[bytes]:
        """The SSE events of the streamed answer (pseudo-streaming of the parsed call)."""
        ...

    def error_body(self, err: ProxyError) -> dict[str, Any]:
        """The API's error object for a non-streamed error answer."""
        ...

    def sse_error(self, err: ProxyError) -> bytes:
        """The API's SSE error event, for an error after the stream has started."""
        ...


@dataclass(frozen=True)
class CallWire:
    """A :class:`WireAPI` made of an API module's functions, for an API whose request is
    just a :class:`ChatCall` and whose answers depend on the outcome and the call only
    (Anthropic Messages, OpenAI Responses; token bytes are not used)."""

    error_shape: ErrorShape
    parse: Callable[[Any], ChatCall]
    build: Callable[[CallOutcome, ChatCall], dict[str, Any]]
    stream: Callable[[CallOutcome, ChatCall], list[bytes]]
    error: Callable[[ProxyError], dict[str, Any]]
    sse: Callable[[ProxyError], bytes]

    def parse_request(self, body: Any) -> WireRequest:
        return WireRequest(self.parse(body))

    def build_response(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> dict[str, Any]:
        return self.build(outcome, request.call)

    def stream_events(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> list[bytes]:
        return self.stream(outcome, request.call)

    def error_body(self, err: ProxyError) -> dict[str, Any]:
        return self.error(err)

    def sse_error(self, err: ProxyError) -> bytes:
        return self.sse(err)


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body of ``request``.

    Raises:
        PayloadTooLargeError: more than ``limit`` bytes.
        ProxyRequestError: not valid JSON, or nested deeper than
            :data:`~clawrl.proxy.validation.MAX_JSON_DEPTH` levels (code ``json_too_deep``).
    """
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise PayloadTooLargeError(f"request body of {cl} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if "depth" in str(e) or "recursion" in str(e).lower():
            raise ProxyRequestError(
                f"the request body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels",
                param="body",
                code="json_too_deep",
            ) from e
        raise ProxyRequestError(f"the request body is not valid JSON: {e}") from e
    # fewer brackets than the limit cannot nest deeper than it
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH:
        check_json_depth(body)
    return body


def parse_body(parse: Callable[[Any], _T], body: Any) -> _T:
    """``parse(body)`` (an API's ``parse_request``); an unexpected exception from a parser
    (which only reads the client's JSON) is the client's malformed request: a typed 400,
    never a 500.

    Raises:
        ProxyRequestError: the body is malformed.
    """
    try:
        return parse(body)
    except ProxyError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as e:
        log.warning("malformed request not caught by its parser", exc_info=True)
        raise ProxyRequestError(f"malformed request: {type(e).__name__}: {e}") from e
