"""OpenAI Responses on the wire: request -> :class:`ChatCall`, outcome -> response / SSE.

Input: ``instructions`` (a system message first), ``input`` as a string (one user message)
or a list of items —

- ``message`` items (``type`` may be omitted) with role ``system`` / ``developer`` (both
  become system messages), ``user``, ``assistant``; content a string or parts
  (``input_text``, ``output_text``, ``text``, ``refusal``; images and files -> typed 400);
- ``reasoning`` items -> the assistant turn's reasoning: the exact text is read back from
  ``encrypted_content`` when it is one this proxy issued, else from ``content``
  (``reasoning_text`` parts) or ``summary`` (``summary_text`` parts);
- ``function_call`` -> an assistant tool call; ``function_call_output`` -> a tool message;
  consecutive reasoning / assistant message / function_call items form one assistant turn;
- ``item_reference`` and built-in tool call items (``web_search_call``, …) are skipped.

Tools: ``function`` tools (flat: ``name``, ``description``, ``parameters``) are offered to the
model. Built-in tool types (``web_search``, ``file_search``, ``computer_use_preview``,
``code_interpreter``, ``image_generation``, ``mcp``, ``local_shell``), ``custom`` (free-form
grammar) tools and ``namespace`` groups are accepted and **not offered** to the model (it
cannot call what the harness would have to execute server-side, and a namespace's nested
tools would need the harness's own dispatch names); they stay in the recorded request.

Tolerated and ignored: ``store``, ``include``, ``prompt_cache_key``, ``client_metadata``,
``metadata``, ``reasoning``, ``parallel_tool_calls``, ``previous_response_id`` (this proxy
keeps no server-side conversation state; the full input is expected), ``text``,
``truncation``, ``service_tier``, ``user``, ``safety_identifier`` and any unknown field.
``max_output_tokens`` caps the completion; ``tool_choice: "none"`` returns tool-call markup
as text.

Output: a ``reasoning`` item (``summary`` and ``content`` hold the text; ``encrypted_content``
= ``clawrl:<call_id>:<base64 text>`` so an echo maps back to the exact generation), a
``message`` item with one ``output_text`` part, one ``function_call`` item per tool call
(``call_id`` = ``call_<hex>``, ``id`` = ``fc_<hex>``, ``arguments`` a JSON string). Streamed
as the Responses SSE events (``response.created`` … ``response.completed``, each with
``sequence_number``; also when the token limit cut the generation: the response's ``status``
is then ``incomplete`` — OpenAI would send ``response.incomplete``, which Codex retries as a
failed stream); errors after the 200 as an ``error`` event.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
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
from clawrl.proxy.wire import CallWire, WireAPI

__all__ = [
    "WIRE",
    "build_response",
    "decode_reasoning_token",
    "encode_reasoning_token",
    "error_event",
    "parse_request",
    "stream_events",
]

_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}
_UNSUPPORTED_PARTS = {"input_image", "input_file", "input_audio", "image_url", "image", "file"}
_SKIPPED_ITEMS = {
    "item_reference",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "local_shell_call",
    "local_shell_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "compaction",
}
_TOKEN_PREFIX = "clawrl:"


def encode_reasoning_token(call_id: str, reasoning: str) -> str:
    """The ``encrypted_content`` of a reasoning item: ``clawrl:<call_id>:<base64 utf-8>``."""
    return f"{_TOKEN_PREFIX}{call_id}:" + base64.b64encode(reasoning.encode()).decode()


def decode_reasoning_token(token: str) -> tuple[str, str] | None:
    """``(call_id, reasoning)`` of a token made by :func:`encode_reasoning_token`, else None."""
    if not token.startswith(_TOKEN_PREFIX):
        return None
    call_id, sep, b64 = token[len(_TOKEN_PREFIX) :].partition(":")
    if not sep:
        return None
    try:
        return call_id, base64.b64decode(b64, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def _text_part(part: dict[str, Any], kind: str | None, p: str) -> str:
    if kind in _TEXT_PARTS:
        return v.req_str(part.get("text"), p + ".text")
    if kind == "refusal":
        return v.req_str(part.get("refusal"), p + ".refusal")
    if kind in _UNSUPPORTED_PARTS:
        raise UnsupportedParameterError(
            f"{p}: content of type {kind!r} is not supported (text-only model)", param=p
        )
    raise ProxyRequestError(f"{p}: unknown content part type {kind!r}", param=p + ".type")


def _text(content: Any, param: str) -> str:
    return v.text_of_parts(content, param, _text_part)


def _reasoning_text(item: dict[str, Any], p: str) -> str:
    enc = v.opt_str(item.get("encrypted_content"), p + ".encrypted_content")
    if enc:
        decoded = decode_reasoning_token(enc)
        if decoded is not None:
            return decoded[1]
    if item.get("content"):
        return _text(item.get("content"), p + ".content")
    summary = item.get("summary")
    if summary is None:
        return ""
    parts = v.req_list(summary, p + ".summary")
    return "\n\n".join(
        _text([v.req_obj(s, f"{p}.summary[{i}]")], f"{p}.summary") for i, s in enumerate(parts)
    )


def _convert_input(items: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant turn being assembled

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            out.append(turn)
            turn = None

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": ""}
        return turn

    for i, item in enumerate(items):
        p = f"input[{i}]"
        item = v.req_obj(item, p)
        kind = v.opt_kind(item.get("type"), p + ".type")
        if kind is None and "role" in item:
            kind = "message"
        if kind == "message":
            role = v.opt_kind(item.get("role"), p + ".role")
            if role not in ("system", "developer", "user", "assistant"):
                raise ProxyRequestError(
                    f"{p}.role must be system, developer, user or assistant", param=p + ".role"
                )
            text = _text(item.get("content"), p + ".content")
            if role == "assistant":
                t = assistant()
                if t.get("tool_calls"):  # text after a tool call starts a new turn
                    flush()
                    t = assistant()
                t["content"] += text
                continue
            flush()
            out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "reasoning":
            text = _reasoning_text(item, p)
            t = assistant()
            if t["content"] or t.get("tool_calls"):
                flush()
                t = assistant()
            t["reasoning_content"] = (t.get("reasoning_content", "") + "\n" + text).lstrip("\n")
        elif kind == "function_call":
            t = assistant()
            t.setdefault("tool_calls", []).append(
                rf.tool_call(
                    v.opt_str(item.get("call_id"), p + ".call_id") or "",
                    v.req_str(item.get("name"), p + ".name"),
                    v.tool_call_arguments(item.get("arguments"), p + ".arguments"),
                )
            )
        elif kind == "function_call_output":
            flush()
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": v.opt_str(item.get("call_id"), p + ".call_id") or "",
                    "content": _text(item.get("output"), p + ".output"),
                }
            )
        elif kind in _SKIPPED_ITEMS:
            continue
        else:
            raise ProxyRequestError(f"{p}: unknown input item type {kind!r}", param=p + ".type")
    flush()
    return out


def _tool(t: dict[str, Any], p: str) -> dict[str, Any] | None:
    kind = t.get("type")
    if not isinstance(kind, str):
        raise ProxyRequestError(f"{p}.type must be a string", param=p + ".type")
    if kind != "function":
        return None  # built-in, custom and namespace tools: not offered (module docstring)
    return rf.function_tool(t, p)


def parse_request(body: Any) -> ChatCall:
    """Validate a Responses body.

    Raises:
        ProxyRequestError: a field is malformed or the input is empty;
        UnsupportedParameterError: images, files, audio.
    """
    body = v.req_obj(body, "body")
    raw = body.get("input")
    if isinstance(raw, str):
        messages = [{"role": "user", "content": raw}]
    else:
        items = v.req_list(raw, "input")
        messages = _convert_input(items)
    instructions = v.opt_str(body.get("instructions"), "instructions")
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    if not messages:
        raise ProxyRequestError("input must not be empty", param="input")
    parse_tool_calls = rf.openai_tool_choice(body)
    fields = rf.call_fields(
        body, v.opt_int(body.get("max_output_tokens"), "max_output_tokens", minimum=1)
    )
    for name in ("store", "parallel_tool_calls", "background"):
        v.opt_bool(body.get(name), name)
    if v.opt_bool(body.get("background"), "background"):
        raise UnsupportedParameterError(
            "background responses are not supported", param="background"
        )
    include = body.get("include")
    if include is not None:
        for i, x in enumerate(v.req_list(include, "include")):
            v.req_str(x, f"include[{i}]")
    return ChatCall(
        api="openai.responses",
        messages=messages,
        tools=rf.tool_list(body.get("tools"), _tool),
        parse_tool_calls=parse_tool_calls,
        **fields,
    )


def _hex(o: CallOutcome) -> str:
    return o.call_id.removeprefix("call-")


def _output(o: CallOutcome) -> list[dict[str, Any]]:
    h = _hex(o)
    items: list[dict[str, Any]] = []
    if o.parsed.reasoning is not None:
        r = o.parsed.reasoning
        items.append(
            {
                "type": "reasoning",
                "id": "rs_" + h,
                "summary": [{"type": "summary_text", "text": r}],
                "content": [{"type": "reasoning_text", "text": r}],
                "encrypted_content": encode_reasoning_token(o.call_id, r),
                "status": "completed",
            }
        )
    if o.parsed.content or not o.parsed.tool_calls:
        items.append(
            {
                "type": "message",
                "id": "msg_" + h,
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": o.parsed.content,
                        "annotations": [],
                        "logprobs": [],
                    }
                ],
            }
        )
    for tid, c in zip(o.tool_call_ids, o.parsed.tool_calls, strict=True):
        items.append(
            {
                "type": "function_call",
                "id": "fc_" + tid,
                "call_id": "call_" + tid,
                "name": c.name,
                "arguments": json.dumps(c.arguments, ensure_ascii=False),
                "status": "completed",
            }
        )
    return items


def _usage(o: CallOutcome) -> dict[str, Any]:
    return {
        "input_tokens": o.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": o.prompt_tokens + o.completion_tokens,
    }


def _envelope(o: CallOutcome, call: ChatCall, created: int) -> dict[str, Any]:
    body = call.body or {}
    return {
        "id": "resp_" + _hex(o),
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "model": call.model,
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": call.max_tokens,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "previous_response_id": None,
        "store": bool(body.get("store", False)),
        "temperature": call.temperature,
        "top_p": call.top_p,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": None, "summary": None},
        "truncation": "disabled",
        "metadata": {},
    }


def build_response(o: CallOutcome, call: ChatCall, created: int | None = None) -> dict[str, Any]:
    """The non-streamed ``response`` object (status ``incomplete`` when the token limit cut
    the generation)."""
    r = _envelope(o, call, created if created is not None else int(time.time()))
    r["output"] = _output(o)
    r["usage"] = _usage(o)
    if o.finish_reason == "length":
        r["status"] = "incomplete"
        r["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        r["status"] = "completed"
    return r


def stream_events(o: CallOutcome, call: ChatCall) -> list[bytes]:
    """The SSE events of a streamed response (pseudo-streaming of the parsed generation)."""
    created = int(time.time())
    full = build_response(o, call, created)
    start = _envelope(o, call, created)
    out: list[bytes] = []

    def ev(kind: str, **data: Any) -> None:
        payload = {"type": kind, "sequence_number": len(out), **data}
        out.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n")

    ev("response.created", response=start)
    ev("response.in_progress", response=start)
    for idx, item in enumerate(full["output"]):
        if item["type"] == "reasoning":
            _reasoning_events(ev, idx, item)
        elif item["type"] == "message":
            _message_events(ev, idx, item)
        else:
            _function_call_events(ev, idx, item)
        ev("response.output_item.done", output_index=idx, item=item)
    # A generation cut by the token limit still ends with ``response.completed`` (its
    # ``status`` says ``incomplete``): OpenAI sends ``response.incomplete`` there, which Codex
    # treats as a failed stream and retries — a truncated generation must be consumable by
    # the harness, as ``finish_reason: length`` is on Chat Completions.
    ev("response.completed", response=full)
    return out


_Emit = Callable[..., None]


def _reasoning_events(ev: _Emit, idx: int, item: dict[str, Any]) -> None:
    """A reasoning item's events: its summary part, then its reasoning text."""
    added = dict(item, summary=[], content=[], encrypted_content=None, status="in_progress")
    ev("response.output_item.added", output_index=idx, item=added)
    at = {"item_id": item["id"], "output_index": idx}
    text = item["summary"][0]["text"]
    part = {"type": "summary_text", "text": ""}
    ev("response.reasoning_summary_part.added", **at, summary_index=0, part=part)
    ev("response.reasoning_summary_text.delta", **at, summary_index=0, delta=text)
    ev("response.reasoning_summary_text.done", **at, summary_index=0, text=text)
    done = {"type": "summary_text", "text": text}
    ev("response.reasoning_summary_part.done", **at, summary_index=0, part=done)
    ev("response.reasoning_text.delta", **at, content_index=0, delta=text)
    ev("response.reasoning_text.done", **at, content_index=0, text=text)


def _message_events(ev: _Emit, idx: int, item: dict[str, Any]) -> None:
    """A message item's events: its one output_text part (no delta when it is empty)."""
    ev(
        "response.output_item.added",
        output_index=idx,
        item=dict(item, content=[], status="in_progress"),
    )
    at = {"item_id": item["id"], "output_index": idx, "content_index": 0}
    part = item["content"][0]
    ev("response.content_part.added", **at, part=dict(part, text=""))
    if part["text"]:
        ev("response.output_text.delta", **at, delta=part["text"], logprobs=[])
    ev("response.output_text.done", **at, text=part["text"], logprobs=[])
    ev("response.content_part.done", **at, part=part)


def _function_call_events(ev: _Emit, idx: int, item: dict[str, Any]) -> None:
    """A function_call item's events: its arguments in one delta."""
    added = dict(item, arguments="", status="in_progress")
    ev("response.output_item.added", output_index=idx, item=added)
    at = {"item_id": item["id"], "output_index": idx}
    ev("response.function_call_arguments.delta", **at, delta=item["arguments"])
    done = {"name": item["name"], "arguments": item["arguments"]}
    ev("response.function_call_arguments.done", **at, **done)


def error_event(err: ProxyError) -> bytes:
    """The SSE ``error`` event of a failure after the stream began."""
    payload = {
        "type": "error",
        "sequence_number": 0,
        "code": err.code or err.error_type,
        "message": err.message,
        "param": err.param,
    }
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


#: this module as the model app's wire API
WIRE: WireAPI = CallWire(
    "responses", parse_request, build_response, stream_events, openai_error_body, error_event
)
