"""Parsing generated text into reasoning, content and tool calls (Qwen3 format).

Format (what the chat template renders for an assistant turn, and what the model generates
after the generation prompt)::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}\\n<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call><|im_end|>

Rules (ill-formed and unclosed tool calls are common in small models' output):

- a ``<tool_call>`` block whose body is not a JSON object with a string ``name`` and an object
  ``arguments`` (or a JSON string holding one) is *ill-formed*: the whole text after the
  reasoning is returned as content, no tool call, flag ``ill_formed_tool_call``;
- a ``<tool_call>`` without its closing tag is *truncated* when the generation hit the length
  limit (flag ``truncated_tool_call``), ill-formed otherwise; returned as text, never
  completed;
- an unterminated ``<think>`` block (length limit) is all reasoning.

**JSON calls** (``json_calls=True``: the Qwen2 and Llama families, see
:mod:`clawrl.proxy.tool_prompt`; never for Qwen3). When the text has no ``<tool_call>`` tag,
tool calls are also read from JSON objects, under a strict rule so that prose never becomes a
call. A *call object* is a JSON object whose keys are exactly ``name`` and ``arguments`` (or
``parameters``), ``name`` one of the request's declared tool names (``tool_names``; with no
declared tools nothing is a JSON call) and ``arguments`` an object. Accepted placements:

- a fenced block (```` ```json ```` or a bare ```` ``` ````, fence lines on their own) whose
  whole body is one call object, a JSON list of call objects, or call objects one after the
  other separated only by whitespace (how Qwen2.5-Coder writes parallel calls); text outside
  such blocks stays content;
- the whole reply (stripped) being one or more call objects separated only by whitespace.

Anything else — an object inside a sentence, an unknown tool name, extra keys, a fenced block
holding other JSON — is content, unflagged.

The parser is a linear scan (``str.find``), so no input makes it loop or backtrack.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CALL_STYLES",
    "ParsedCompletion",
    "ParsedToolCall",
    "format_assistant_text",
    "parse_completion",
    "restyle_assistant_text",
]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"
#: how :func:`format_assistant_text` writes tool calls: ``tags`` (the chat template's
#: ``<tool_call>`` blocks) or ``fenced`` (each call object in a ```` ```json ```` block, as
#: Qwen2.5-Coder writes them; read back as calls for families with JSON calls)
CALL_STYLES = ("tags", "fenced")


@dataclass(frozen=True)
class ParsedToolCall:
    """One tool call: ``arguments`` is the parsed JSON object."""

    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedCompletion:
    """Generated text split into its parts.

    ``reasoning`` is None when the model produced no think block; ``content`` is the visible
    text (stripped); ``flags`` holds ``ill_formed_tool_call`` / ``truncated_tool_call``.
    """

    reasoning: str | None
    content: str
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)


def _strip_stop(text: str, stop_texts: tuple[str, ...]) -> str:
    changed = True
    while changed:
        changed = False
        for s in stop_texts:
            if s and text.endswith(s):
                text = text[: -len(s)]
                changed = True
    return text


def _parse_tool_body(body: str) -> ParsedToolCall | None:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters"))
    if not isinstance(name, str) or not name:
        return None
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):
        return None
    return ParsedToolCall(name=name, arguments=args)


def _json_call(obj: Any, names: frozenset[str]) -> ParsedToolCall | None:
    if not isinstance(obj, dict) or len(obj) != 2 or "name" not in obj:
        return None
    if not ({"arguments", "parameters"} & obj.keys()) or obj.get("name") not in names:
        return None
    return _parse_tool_body(json.dumps(obj))


def _bare_calls(text: str, names: frozenset[str]) -> list[ParsedToolCall] | None:
    dec = json.JSONDecoder()
    calls: list[ParsedToolCall] = []
    pos, n = 0, len(text)
    while pos < n:
        try:
            obj, pos = dec.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return None
        call = _json_call(obj, names)
        if call is None:
            return None
        calls.append(call)
        while pos < n and text[pos].isspace():
            pos += 1
    return calls or None


def _fenced_calls(text: str, names: frozenset[str]) -> tuple[str, list[ParsedToolCall]]:
    calls: list[ParsedToolCall] = []
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0 or (start > 0 and text[start - 1] != "\n"):
            break
        head_end = text.find("\n", start)
        end = text.find("\n```", head_end) if head_end >= 0 else -1
        if end < 0 or text[start + 3 : head_end].strip() not in ("", "json"):
            break
        body = text[head_end + 1 : end]
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError):  # several call objects one after the other?
            obj = _bare_calls(body.strip(), names)
        if isinstance(obj, list) and obj and all(isinstance(o, ParsedToolCall) for o in obj):
            found: list[ParsedToolCall | None] = list(obj)
        else:
            found = [_json_call(o, names) for o in (obj if isinstance(obj, list) else [obj])]
        close = end + 4
        if found and all(c is not None for c in found):
            kept.append(text[pos:start])
            calls.extend(c for c in found if c is not None)
        else:
            kept.append(text[pos:close])
        pos = close
    kept.append(text[pos:])
    return "\n".join(t.strip() for t in kept if t.strip()), calls


def _json_calls(text: str, names: frozenset[str]) -> tuple[str, list[ParsedToolCall]]:
    """(content, calls) under the JSON-call rule of the module docstring."""
    bare = _bare_calls(text.strip(), names)
    if bare:
        return "", bare
    return _fenced_calls(text, names)


def parse_completion(
    text: str,
    *,
    finish_reason: str,
    stop_texts: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>"),
    parse_tool_calls: bool = True,
    json_calls: bool = False,
    tool_names: Collection[str] = (),
) -> ParsedCompletion:
    """Split generated ``text`` into reasoning, content and tool calls.

    Args:
        text: the decoded completion (special tokens kept).
        finish_reason: the backend's finish reason ("stop", "length", ...); "length" marks an
            unterminated tool call as truncated.
        stop_texts: turn-terminator texts removed from the end.
        parse_tool_calls: False returns tool-call markup as plain content (``tool_choice:
            none``).
        json_calls: also read fenced / bare JSON calls (module docstring, "JSON calls").
        tool_names: the request's declared tool names (JSON calls must name one).
    """
    text = _strip_stop(text, stop_texts)
    reasoning: str | None = None
    rest = text
    lead = text.lstrip()
    if lead.startswith(THINK_OPEN):
        body = lead[len(THINK_OPEN) :]
        end = body.find(THINK_CLOSE)
        if end < 0:
            return ParsedCompletion(reasoning=body.strip("\n"), content="")
        reasoning = body[:end].strip("\n")
        rest = body[end + len(THINK_CLOSE) :]
    if not parse_tool_calls:
        return ParsedCompletion(reasoning=reasoning, content=rest.strip())
    if TOOL_OPEN not in rest:
        if json_calls and tool_names and "{" in rest:
            content, found = _json_calls(rest, frozenset(tool_names))
            if found:
                return ParsedCompletion(reasoning=reasoning, content=content, tool_calls=found)
        return ParsedCompletion(reasoning=reasoning, content=rest.strip())
    calls: list[ParsedToolCall] = []
    texts: list[str] = []
    pos = 0
    while True:
        start = rest.find(TOOL_OPEN, pos)
        if start < 0:
            texts.append(rest[pos:])
            break
        texts.append(rest[pos:start])
        end = rest.find(TOOL_CLOSE, start + len(TOOL_OPEN))
        if end < 0:
            flag = "truncated_tool_call" if finish_reason == "length" else "ill_formed_tool_call"
            return ParsedCompletion(reasoning=reasoning, content=rest.strip(), flags=[flag])
        call = _parse_tool_body(rest[start + len(TOOL_OPEN) : end])
        if call is None:
            return ParsedCompletion(
                reasoning=reasoning, content=rest.strip(), flags=["ill_formed_tool_call"]
            )
        calls.append(call)
        pos = end + len(TOOL_CLOSE)
    content = "\n".join(t.strip() for t in texts if t.strip())
    return ParsedCompletion(reasoning=reasoning, content=content, tool_calls=calls)


def format_assistant_text(
    *,
    content: str = "",
    reasoning: str | None = None,
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    call_style: str = "tags",
) -> str:
    """The text a model in this format generates for an assistant turn (without the stop).

    Used to script completions (oracle trajectories, harness tests). With ``call_style``
    ``tags`` it matches the chat template's rendering of the same assistant message; with
    ``fenced`` each call is a ```` ```json ```` block holding the call object (indented, as
    Qwen2.5-Coder writes calls), which :func:`parse_completion` reads with ``json_calls``.

    Raises:
        ValueError: ``call_style`` is not one of :data:`CALL_STYLES`.
    """
    if call_style not in CALL_STYLES:
        raise ValueError(f"call_style must be one of {', '.join(CALL_STYLES)}, got {call_style!r}")
    out = ""
    if reasoning:
        out += f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n"
    out += content
    for name, args in tool_calls or []:
        if out:
            out += "\n"
        if call_style == "fenced":
            body = json.dumps({"name": name, "arguments": args}, indent=2, ensure_ascii=False)
            out += f"```json\n{body}\n```"
            continue
        out += (
            f'{TOOL_OPEN}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '
            f"{json.dumps(args, ensure_ascii=False)}}}\n{TOOL_CLOSE}"
        )
    return out


def restyle_assistant_text(text: str, call_style: str) -> str:
    """``text`` (an assistant turn as :func:`format_assistant_text` writes it with ``tags``)
    with its tool calls written in ``call_style``; reasoning and content unchanged.

    Raises:
        ValueError: ``call_style`` is unknown, or ``text`` holds an ill-formed tool call.
    """
    parsed = parse_completion(text, finish_reason="stop", stop_texts=())
    if parsed.flags:
        raise ValueError(f"cannot restyle an assistant turn with {parsed.flags[0]}: {text[:80]!r}")
    return format_assistant_text(
        content=parsed.content,
        reasoning=parsed.reasoning,
        tool_calls=[(c.name, c.arguments) for c in parsed.tool_calls],
        call_style=call_style,
    )
