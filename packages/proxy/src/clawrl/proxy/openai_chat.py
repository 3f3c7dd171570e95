"""OpenAI Chat Completions on the wire: request -> :class:`ChatCall`, outcome -> response.

Supported: messages with roles system / developer (treated as system) / user / assistant /
tool, text content (string or text parts), assistant ``reasoning_content`` (alias
``reasoning``) and ``tool_calls``; ``tools`` (function tools; other tool types are ignored),
``tool_choice`` (``none`` returns tool-call markup as text; others cannot be enforced on the
model and are recorded only), ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
``top_p``, ``top_k`` (extension), ``seed``, ``stream`` with ``stream_options.include_usage``,
``n`` = 1, ``logprobs`` (one entry per generated token — reasoning, tool-call markup and
the stop token included — with the backend's logprob; ``top_logprobs`` 0-20 is accepted,
and each entry's ``top_logprobs`` is empty: the backends return the sampled token's logprob
only). Any other field is tolerated and ignored. Non-text content (images, audio,
files) and ``n`` > 1 are rejected with a typed 400.
"""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
from clawrl.proxy import request_fields as rf
from clawrl.proxy import validation as v
from clawrl.proxy.core import CallOutcome, ChatCall
from clawrl.proxy.errors import (
    ProxyError,
    ProxyRequestError,
    UnsupportedParameterError,
    openai_error_body,
)
from clawrl.proxy.wire import ErrorShape, TokenBytes, WireAPI, WireRequest

__all__ = ["WIRE", "build_response", "parse_request", "stream_events"]

_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _text_part(part: dict[str, Any], kind: str | None, p: str) -> str:
    if kind == "text":
        return v.req_str(part.get("text"), p + ".text")
    if kind in ("image_url", "input_audio", "file", "image", "input_image"):
        raise UnsupportedParameterError(
            f"{p}: content of type {kind!r} is not supported (text-only model)", param=p
        )
    raise ProxyRequestError(f"{p}: unknown content part type {kind!r}", param=p + ".type")


def _text(content: Any, param: str) -> str:
    """Text of a content field: a string, null, or a list of text parts."""
    return v.text_of_parts(content, param, _text_part, bare_strings=True)


def _message(m: Any, i: int) -> dict[str, Any]:
    p = f"messages[{i}]"
    m = v.req_obj(m, p)
    role = v.opt_kind(m.get("role"), p + ".role")
    if role not in _ROLES:
        if role == "function":
            raise UnsupportedParameterError(
                f"{p}.role 'function' is deprecated and not supported; use tools", param=p + ".role"
            )
        raise ProxyRequestError(f"{p}.role must be one of {sorted(_ROLES)}", param=p + ".role")
    if role in ("system", "developer"):
        return {"role": "system", "content": _text(m.get("content"), p + ".content")}
    if role == "user":
        return {"role": "user", "content": _text(m.get("content"), p + ".content")}
    if role == "tool":
        out: dict[str, Any] = {"role": "tool", "content": _text(m.get("content"), p + ".content")}
        tcid = m.get("tool_call_id")
        if tcid is not None:
            out["tool_call_id"] = str(tcid) if isinstance(tcid, str | int) else ""
        return out
    # assistant
    out = {"role": "assistant", "content": _text(m.get("content"), p + ".content")}
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    if reasoning is not None:
        out["reasoning_content"] = _text(reasoning, p + ".reasoning_content")
    calls = m.get("tool_calls")
    if calls is not None:
        tcs: list[dict[str, Any]] = []
        for j, tc in enumerate(v.req_list(calls, p + ".tool_calls")):
            q = f"{p}.tool_calls[{j}]"
            tc = v.req_obj(tc, q)
            fn = v.req_obj(tc.get("function"), q + ".function")
            tcs.append(
                rf.tool_call(
                    v.opt_str(tc.get("id"), q + ".id") or "",
                    v.req_str(fn.get("name"), q + ".function.name"),
                    v.tool_call_arguments(fn.get("arguments"), q + ".function.arguments"),
                )
            )
        if tcs:
            out["tool_calls"] = tcs
    return out


def _tool(t: dict[str, Any], p: str) -> dict[str, Any] | None:
    if v.opt_kind(t.get("type"), p + ".type") not in (None, "function"):
        return None  # custom / built-in tool types: nothing the template can render
    return rf.function_tool(v.req_obj(t.get("function"), p + ".function"), p + ".function")


def parse_request(body: Any) -> tuple[ChatCall, bool]:
    """Validate a Chat Completions body.

    Returns:
        The normalised call and whether usage is to be streamed (``include_usage``).

    Raises:
        ProxyRequestError: a field is malformed; UnsupportedParameterError: n > 1, images.
    """
    body = v.req_obj(body, "body")
    msgs = v.req_list(body.get("messages"), "messages")
    if not msgs:
        raise ProxyRequestError("messages must not be empty", param="messages")
    messages = [_message(m, i) for i, m in enumerate(msgs)]
    n = v.opt_int(body.get("n"), "n", minimum=1)
    if n is not None and n != 1:
        raise UnsupportedParameterError("only n = 1 is supported", param="n")
    tools = rf.tool_list(body.get("tools"), _tool)
    parse_tool_calls = rf.openai_tool_choice(body)
    max_tokens = v.opt_int(body.get("max_completion_tokens"), "max_completion_tokens", minimum=1)
    legacy = v.opt_int(body.get("max_tokens"), "max_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = legacy
    include_usage = False
    so = body.get("stream_options")
    if so is not None:
        include_usage = bool(
            v.opt_bool(
                v.req_obj(so, "stream_options").get("include_usage"), "stream_options.include_usage"
            )
        )
    want_logprobs = bool(v.opt_bool(body.get("logprobs"), "logprobs"))
    top_logprobs = v.opt_int(body.get("top_logprobs"), "top_logprobs", minimum=0, maximum=20)
    call = ChatCall(
        api="openai.chat",
        messages=messages,
        tools=tools,
        parse_tool_calls=parse_tool_calls,
        logprobs=want_logprobs,
        top_logprobs=top_logprobs or 0,
        **rf.call_fields(body, max_tokens),
    )
    return call, include_usage


def _wire_finish(finish: str) -> str:
    return {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}.get(finish, "stop")


def _usage(o: CallOutcome) -> dict[str, int]:
    return {
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
    }


def _tool_calls(o: CallOutcome) -> list[dict[str, Any]]:
    return [
        {
            "id": "call_" + tid,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for tid, c in zip(o.tool_call_ids, o.parsed.tool_calls, strict=True)
    ]


def logprobs_of(o: CallOutcome, call: ChatCall, decode: Any) -> dict[str, Any] | None:
    """The ``logprobs`` object of a choice (``{"content": [{token, logprob, bytes,
    top_logprobs}]}``), or None when the request did not ask for it. ``decode`` maps one id
    to its bytes."""
    if not call.logprobs:
        return None
    content = []
    for tid, lp in zip(o.completion_ids, o.completion_logprobs, strict=False):
        raw: bytes = decode(tid)
        content.append(
            {
                "token": raw.decode("utf-8", errors="replace"),
                "logprob": float(lp),
                "bytes": list(raw),
                "top_logprobs": [],
            }
        )
    return {"content": content, "refusal": None}


def build_response(
    o: CallOutcome, call: ChatCall, created: int | None = None, decode: Any = None
) -> dict[str, Any]:
    """The non-streamed ``chat.completion`` object."""
    msg: dict[str, Any] = {"role": "assistant", "content": o.parsed.content or None}
    if o.parsed.reasoning is not None:
        msg["reasoning_content"] = o.parsed.reasoning
    if o.parsed.tool_calls:
        msg["tool_calls"] = _tool_calls(o)
    elif msg["content"] is None:
        msg["content"] = ""
    return {
        "id": "chatcmpl-" + o.call_id,
        "object": "chat.completion",
        "created": created if created is not None else int(time.time()),
        "model": call.model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": logprobs_of(o, call, decode) if decode is not None else None,
                "finish_reason": _wire_finish(o.finish_reason),
            }
        ],
        "usage": _usage(o),
    }


def stream_events(
    o: CallOutcome, call: ChatCall, include_usage: bool, decode: Any = None
) -> list[bytes]:
    """SSE ``data:`` lines of a ``chat.completion.chunk`` stream (pseudo-streaming: the
    whole generation is already parsed), ending with ``data: [DONE]``."""
    created = int(time.time())
    base = {
        "id": "chatcmpl-" + o.call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": call.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        obj = dict(base)
        obj["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if include_usage:
            obj["usage"] = None
        obj.update(extra)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    if o.parsed.reasoning:
        out.append(chunk({"reasoning_content": o.parsed.reasoning}))
    if o.parsed.content:
        out.append(chunk({"content": o.parsed.content}))
    for i, tc in enumerate(_tool_calls(o)):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": tc["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": i, "function": {"arguments": tc["function"]["arguments"]}}
                    ]
                }
            )
        )
    final = dict(base)
    final["choices"] = [
        {
            "index": 0,
            "delta": {},
            "logprobs": logprobs_of(o, call, decode) if decode is not None else None,
            "finish_reason": _wire_finish(o.finish_reason),
        }
    ]
    if include_usage:
        final["usage"] = None
    out.append(b"data: " + orjson.dumps(final) + b"\n\n")
    if include_usage:
        obj = dict(base)
        obj["choices"] = []
        obj["usage"] = _usage(o)
        out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


class _ChatCompletionsWire:
    """OpenAI Chat Completions as a :class:`~clawrl.proxy.wire.WireAPI`."""

    error_shape: ErrorShape = "openai"

    def parse_request(self, body: Any) -> WireRequest:
        call, include_usage = parse_request(body)
        return WireRequest(call, include_usage=include_usage)

    def build_response(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> dict[str, Any]:
        return build_response(outcome, request.call, decode=decode)

    def stream_events(
        self, outcome: CallOutcome, request: WireRequest, decode: TokenBytes
    ) -> list[bytes]:
        return stream_events(outcome, request.call, request.include_usage, decode=decode)

    def error_body(self, err: ProxyError) -> dict[str, Any]:
        return openai_error_body(err)

    def sse_error(self, err: ProxyError) -> bytes:
        return b"data: " + orjson.dumps(openai_error_body(err)) + b"\n\n"


#: this module as the model app's wire API
WIRE: WireAPI = _ChatCompletionsWire()
