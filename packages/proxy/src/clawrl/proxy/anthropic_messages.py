"""Anthropic Messages on the wire: request -> :class:`ChatCall`, outcome -> response / SSE.

Supported: ``system`` (string or text blocks), messages with roles user / assistant and
``system`` inside ``messages`` (Claude Code), content as a string or blocks — ``text``,
``thinking`` (the reasoning; ``signature`` ignored), ``redacted_thinking`` (dropped),
``tool_use``, ``tool_result`` (string or text blocks; becomes a tool turn) — ``tools`` (custom
tools; server tool types are ignored), ``tool_choice`` (``none`` returns tool-call markup as
text), ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``stream``. Tolerated and
ignored: ``thinking``, ``context_management``, ``output_config``, ``metadata``,
``stop_sequences``, ``cache_control`` anywhere, ``defer_loading``, ``service_tier`` and any
unknown field. Images and documents are rejected with a typed 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
from clawrl.proxy import validation as v
from clawrl.proxy.core import CallOutcome, ChatCall
from clawrl.proxy.errors import (
    ProxyError,
    ProxyRequestError,
    UnsupportedParameterError,
    anthropic_error_body,
)
from clawrl.proxy.request_fields import call_fields, function_tool, tool_call, tool_list
from clawrl.proxy.wire import CallWire, WireAPI

__all__ = ["WIRE", "build_response", "parse_count_tokens", "parse_request", "stream_events"]

_UNSUPPORTED_BLOCKS = {"image", "document", "search_result", "container_upload"}


def _system_part(b: dict[str, Any], kind: str | None, q: str) -> str:
    if kind not in (None, "text"):
        raise ProxyRequestError(f"{q} must be a text block", param=f"{q}.type")
    return v.req_str(b.get("text"), f"{q}.text")


def _system_text(content: Any, param: str) -> str:
    return v.text_of_parts(content, param, _system_part, sep="\n")


def _bad_block(kind: str | None, q: str) -> ProxyRequestError:
    """The error for a block of type ``kind`` (at ``q``) a message cannot hold."""
    if kind in _UNSUPPORTED_BLOCKS:
        return UnsupportedParameterError(f"{q}: {kind} blocks are not supported", param=q)
    return ProxyRequestError(f"{q}: unknown block type {kind!r}", param=q + ".type")


def _result_part(b: dict[str, Any], kind: str | None, q: str) -> str:
    if kind == "text":
        return v.req_str(b.get("text"), q + ".text")
    raise _bad_block(kind, q)


def _result_text(content: Any, param: str) -> str:
    return v.text_of_parts(content, param, _result_part, sep="\n")


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [v.req_obj(b, f"{param}[{i}]") for i, b in enumerate(v.req_list(content, param))]


def _typed(
    blocks: list[dict[str, Any]], param: str
) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """Each block with its param and its ``type``, read as the walk reaches it."""
    for j, b in enumerate(blocks):
        q = f"{param}[{j}]"
        yield q, v.opt_kind(b.get("type"), q + ".type"), b


def _assistant_message(blocks: list[dict[str, Any]], param: str) -> dict[str, Any]:
    reasoning: list[str] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for q, kind, b in _typed(blocks, param):
        if kind == "text":
            texts.append(v.req_str(b.get("text"), q + ".text"))
        elif kind == "thinking":
            reasoning.append(v.req_str(b.get("thinking"), q + ".thinking"))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            args = b.get("input")
            calls.append(
                tool_call(
                    v.opt_str(b.get("id"), q + ".id") or "",
                    v.req_str(b.get("name"), q + ".name"),
                    v.req_obj(args, q + ".input") if args is not None else {},
                )
            )
        else:
            raise _bad_block(kind, q)
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        msg["reasoning_content"] = "\n".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _user_messages(blocks: list[dict[str, Any]], param: str) -> list[dict[str, Any]]:
    """A user turn: its text blocks as user messages, each ``tool_result`` as a tool turn."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for q, kind, b in _typed(blocks, param):
        if kind == "text":
            pending.append(v.req_str(b.get("text"), q + ".text"))
        elif kind == "tool_result":
            if pending:
                out.append({"role": "user", "content": "\n".join(pending)})
                pending = []
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": v.opt_str(b.get("tool_use_id"), q + ".tool_use_id") or "",
                    "content": _result_text(b.get("content"), q + ".content"),
                }
            )
        else:
            raise _bad_block(kind, q)
    if pending or not blocks:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out


def _convert_messages(msgs: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        m = v.req_obj(m, p)
        role = v.opt_kind(m.get("role"), p + ".role")
        if role not in ("user", "assistant", "system"):
            raise ProxyRequestError(
                f"{p}.role must be user, assistant or system", param=p + ".role"
            )
        if role == "system":
            out.append(
                {"role": "system", "content": _system_text(m.get("content"), p + ".content")}
            )
            continue
        blocks = _blocks(m.get("content"), p + ".content")
        if role == "assistant":
            out.append(_assistant_message(blocks, p + ".content"))
        else:
            out.extend(_user_messages(blocks, p + ".content"))
    return out


def _tool(t: dict[str, Any], p: str) -> dict[str, Any] | None:
    if v.opt_kind(t.get("type"), p + ".type") not in (None, "custom"):
        return None  # server tools (web_search_..., bash_...): not rendered for this model
    return function_tool(t, p, "input_schema", schema_default=True)


def _messages_and_tools(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    msgs = v.req_list(body.get("messages"), "messages")
    if not msgs:
        raise ProxyRequestError("messages must not be empty", param="messages")
    messages = _convert_messages(msgs)
    system = _system_text(body.get("system"), "system")
    if body.get("system") is not None:
        messages.insert(0, {"role": "system", "content": system})
    return messages, tool_list(body.get("tools"), _tool)


def parse_request(body: Any) -> ChatCall:
    """Validate a Messages body.

    Raises:
        ProxyRequestError: a field is malformed; UnsupportedParameterError: images, documents.
    """
    body = v.req_obj(body, "body")
    messages, tools = _messages_and_tools(body)
    tool_choice = body.get("tool_choice")
    choice_type = None
    if tool_choice is not None:
        choice_type = v.opt_kind(
            v.req_obj(tool_choice, "tool_choice").get("type"), "tool_choice.type"
        )
        if choice_type not in ("auto", "any", "tool", "none"):
            raise ProxyRequestError(
                "tool_choice.type must be auto, any, tool or none", param="tool_choice.type"
            )
    max_tokens = v.opt_int(body.get("max_tokens"), "max_tokens", minimum=1)
    return ChatCall(
        api="anthropic.messages",
        messages=messages,
        tools=tools,
        parse_tool_calls=choice_type != "none",
        **call_fields(body, max_tokens, temperature_max=1, seed=False),
    )


def parse_count_tokens(body: Any) -> ChatCall:
    """Validate a ``/v1/messages/count_tokens`` body (no ``max_tokens``)."""
    body = v.req_obj(body, "body")
    messages, tools = _messages_and_tools(body)
    return ChatCall(
        api="anthropic.messages",
        model=v.opt_str(body.get("model"), "model") or "",
        messages=messages,
        tools=tools,
        body=body,
    )


def _stop_reason(finish: str) -> str:
    return {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}.get(
        finish, "end_turn"
    )


def _content_blocks(o: CallOutcome) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if o.parsed.reasoning is not None:
        blocks.append({"type": "thinking", "thinking": o.parsed.reasoning, "signature": o.call_id})
    if o.parsed.content or not o.parsed.tool_calls:
        blocks.append({"type": "text", "text": o.parsed.content})
    for tid, c in zip(o.tool_call_ids, o.parsed.tool_calls, strict=True):
        blocks.append(
            {"type": "tool_use", "id": "toolu_" + tid, "name": c.name, "input": c.arguments}
        )
    return blocks


def _usage(o: CallOutcome) -> dict[str, Any]:
    return {
        "input_tokens": o.prompt_tokens,
        "output_tokens": o.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def build_response(o: CallOutcome, call: ChatCall) -> dict[str, Any]:
    """The non-streamed ``message`` object."""
    return {
        "id": "msg_" + o.call_id.removeprefix("call-"),
        "type": "message",
        "role": "assistant",
        "model": call.model,
        "content": _content_blocks(o),
        "stop_reason": _stop_reason(o.finish_reason),
        "stop_sequence": None,
        "usage": _usage(o),
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def stream_events(o: CallOutcome, call: ChatCall) -> list[bytes]:
    """The SSE events of a streamed message (pseudo-streaming of the parsed generation)."""
    full = build_response(o, call)
    start = dict(full)
    start["content"] = []
    start["stop_reason"] = None
    start["usage"] = dict(full["usage"], output_tokens=0)
    out = [_event("message_start", {"type": "message_start", "message": start})]
    for i, b in enumerate(full["content"]):
        block, deltas = _block_stream(b)
        start_ev = {"type": "content_block_start", "index": i, "content_block": block}
        out.append(_event("content_block_start", start_ev))
        for d in deltas:
            delta_ev = {"type": "content_block_delta", "index": i, "delta": d}
            out.append(_event("content_block_delta", delta_ev))
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": full["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": o.completion_tokens}
    out.append(_event("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return out


def _block_stream(b: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A content block's ``content_block_start`` block (empty) and its deltas."""
    if b["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}, [
            {"type": "thinking_delta", "thinking": b["thinking"]},
            {"type": "signature_delta", "signature": b["signature"]},
        ]
    if b["type"] == "text":
        deltas = [{"type": "text_delta", "text": b["text"]}] if b["text"] else []
        return {"type": "text", "text": ""}, deltas
    block = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
    partial = json.dumps(b["input"], ensure_ascii=False)
    return block, [{"type": "input_json_delta", "partial_json": partial}]


def _sse_error(err: ProxyError) -> bytes:
    return b"event: error\ndata: " + orjson.dumps(anthropic_error_body(err)) + b"\n\n"


#: this module as the model app's wire API
WIRE: WireAPI = CallWire(
    "anthropic", parse_request, build_response, stream_events, anthropic_error_body, _sse_error
)
