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
from typing import Any

import orjson
from clawrl.proxy.core import CallOutcome, ChatCall
from clawrl.proxy.errors import (
    ProxyError,
    ProxyRequestError,
    UnsupportedParameterError,
    anthropic_error_body,
)
from clawrl.proxy.validation import (
    opt_bool,
    opt_int,
    opt_kind,
    opt_number,
    opt_str,
    opt_top_k,
    req_list,
    req_obj,
    req_str,
    text_of_parts,
)
from clawrl.proxy.wire import CallWire, WireAPI

__all__ = ["WIRE", "build_response", "parse_count_tokens", "parse_request", "stream_events"]

_UNSUPPORTED_BLOCKS = {"image", "document", "search_result", "container_upload"}


def _system_part(b: dict[str, Any], kind: str | None, q: str) -> str:
    if kind not in (None, "text"):
        raise ProxyRequestError(f"{q} must be a text block", param=f"{q}.type")
    return req_str(b.get("text"), f"{q}.text")


def _system_text(v: Any, param: str) -> str:
    return text_of_parts(v, param, _system_part, sep="\n")


def _result_part(b: dict[str, Any], kind: str | None, q: str) -> str:
    if kind == "text":
        return req_str(b.get("text"), q + ".text")
    if kind in _UNSUPPORTED_BLOCKS:
        raise UnsupportedParameterError(f"{q}: {kind} blocks are not supported", param=q)
    raise ProxyRequestError(f"{q}: unknown block type {kind!r}", param=q + ".type")


def _result_text(v: Any, param: str) -> str:
    return text_of_parts(v, param, _result_part, sep="\n")


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [req_obj(b, f"{param}[{i}]") for i, b in enumerate(req_list(content, param))]


def _convert_messages(msgs: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(msgs):
        p = f"messages[{i}]"
        m = req_obj(m, p)
        role = opt_kind(m.get("role"), p + ".role")
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
            reasoning: list[str] = []
            texts: list[str] = []
            calls: list[dict[str, Any]] = []
            for j, b in enumerate(blocks):
                q = f"{p}.content[{j}]"
                kind = opt_kind(b.get("type"), q + ".type")
                if kind == "text":
                    texts.append(req_str(b.get("text"), q + ".text"))
                elif kind == "thinking":
                    reasoning.append(req_str(b.get("thinking"), q + ".thinking"))
                elif kind == "redacted_thinking":
                    continue
                elif kind == "tool_use":
                    args = b.get("input")
                    calls.append(
                        {
                            "id": opt_str(b.get("id"), q + ".id") or "",
                            "type": "function",
                            "function": {
                                "name": req_str(b.get("name"), q + ".name"),
                                "arguments": req_obj(args, q + ".input")
                                if args is not None
                                else {},
                            },
                        }
                    )
                elif kind in _UNSUPPORTED_BLOCKS:
                    raise UnsupportedParameterError(
                        f"{q}: {kind} blocks are not supported", param=q
                    )
                else:
                    raise ProxyRequestError(f"{q}: unknown block type {kind!r}", param=q + ".type")
            msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
            if reasoning:
                msg["reasoning_content"] = "\n".join(reasoning)
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        pending: list[str] = []
        for j, b in enumerate(blocks):
            q = f"{p}.content[{j}]"
            kind = opt_kind(b.get("type"), q + ".type")
            if kind == "text":
                pending.append(req_str(b.get("text"), q + ".text"))
            elif kind == "tool_result":
                if pending:
                    out.append({"role": "user", "content": "\n".join(pending)})
                    pending = []
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": opt_str(b.get("tool_use_id"), q + ".tool_use_id") or "",
                        "content": _result_text(b.get("content"), q + ".content"),
                    }
                )
            elif kind in _UNSUPPORTED_BLOCKS:
                raise UnsupportedParameterError(f"{q}: {kind} blocks are not supported", param=q)
            else:
                raise ProxyRequestError(f"{q}: unknown block type {kind!r}", param=q + ".type")
        if pending or not blocks:
            out.append({"role": "user", "content": "\n".join(pending)})
    return out


def _tools(v: Any) -> list[dict[str, Any]] | None:
    if v is None:
        return None
    tools: list[dict[str, Any]] = []
    for i, t in enumerate(req_list(v, "tools")):
        p = f"tools[{i}]"
        t = req_obj(t, p)
        if opt_kind(t.get("type"), p + ".type") not in (None, "custom"):
            continue  # server tools (web_search_..., bash_...): not rendered for this model
        spec: dict[str, Any] = {"name": req_str(t.get("name"), p + ".name")}
        if t.get("description") is not None:
            spec["description"] = req_str(t.get("description"), p + ".description")
        spec["parameters"] = req_obj(t.get("input_schema", {}), p + ".input_schema")
        tools.append({"type": "function", "function": spec})
    return tools or None


def _messages_and_tools(
    body: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    msgs = req_list(body.get("messages"), "messages")
    if not msgs:
        raise ProxyRequestError("messages must not be empty", param="messages")
    messages = _convert_messages(msgs)
    system = _system_text(body.get("system"), "system")
    if body.get("system") is not None:
        messages.insert(0, {"role": "system", "content": system})
    return messages, _tools(body.get("tools"))


def parse_request(body: Any) -> ChatCall:
    """Validate a Messages body.

    Raises:
        ProxyRequestError: a field is malformed; UnsupportedParameterError: images, documents.
    """
    body = req_obj(body, "body")
    messages, tools = _messages_and_tools(body)
    tool_choice = body.get("tool_choice")
    choice_type = None
    if tool_choice is not None:
        choice_type = opt_kind(req_obj(tool_choice, "tool_choice").get("type"), "tool_choice.type")
        if choice_type not in ("auto", "any", "tool", "none"):
            raise ProxyRequestError(
                "tool_choice.type must be auto, any, tool or none", param="tool_choice.type"
            )
    top_p = opt_number(body.get("top_p"), "top_p", minimum=0, maximum=1)
    if top_p == 0:
        raise ProxyRequestError("top_p must be > 0", param="top_p")
    return ChatCall(
        api="anthropic.messages",
        model=opt_str(body.get("model"), "model") or "",
        messages=messages,
        tools=tools,
        parse_tool_calls=choice_type != "none",
        max_tokens=opt_int(body.get("max_tokens"), "max_tokens", minimum=1),
        temperature=opt_number(body.get("temperature"), "temperature", minimum=0, maximum=1),
        top_p=top_p,
        top_k=opt_top_k(body.get("top_k")),
        stream=bool(opt_bool(body.get("stream"), "stream")),
        body=body,
    )


def parse_count_tokens(body: Any) -> ChatCall:
    """Validate a ``/v1/messages/count_tokens`` body (no ``max_tokens``)."""
    body = req_obj(body, "body")
    messages, tools = _messages_and_tools(body)
    return ChatCall(
        api="anthropic.messages",
        model=opt_str(body.get("model"), "model") or "",
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
