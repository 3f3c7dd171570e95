"""Per-call view data from the proxy's call records (``clawrl.proxy.CallRecord``).

For each call: what the harness sent (the request's messages, the ones unchanged since the
previous call folded away), what the model answered (the proxy's parsed reasoning, content
and tool calls), its ``prompt_relation`` (``spliced``: which echoed assistant turns were
replaced by the exact generated ids; ``diverged``: the token position and a side-by-side
token diff against the parent call), flags, policy versions, finish reason, usage and timing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from clawrl.bench.view.tokens import TokenText, token_diff

__all__ = ["call_views", "request_messages"]

_TEXT_CAP = 20_000


def _part_text(p: Any) -> str:
    if isinstance(p, str):
        return p
    if not isinstance(p, dict):
        return json.dumps(p, ensure_ascii=False)
    kind = p.get("type", "")
    if kind in ("text", "input_text", "output_text") or ("text" in p and len(p) <= 3):
        return str(p.get("text", ""))
    if kind == "tool_use":
        return f"[tool call] {p.get('name')}({json.dumps(p.get('input'), ensure_ascii=False)})"
    if kind == "tool_result":
        return f"[tool result {p.get('tool_use_id', '')}] " + _content_text(p.get("content"))
    if kind == "thinking":
        return f"[reasoning] {p.get('thinking', '')}"
    return json.dumps(p, ensure_ascii=False)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return _part_text(content)


def _message(m: Any) -> dict[str, str]:
    """``{"role", "text"}`` of one wire message / Responses item, tool calls included."""
    if not isinstance(m, dict):
        return {"role": "?", "text": str(m)[:_TEXT_CAP]}
    role = str(m.get("role") or m.get("type") or "?")
    parts = []
    if m.get("reasoning_content"):
        parts.append(f"[reasoning] {m['reasoning_content']}")
    parts.append(_content_text(m.get("content")))
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function", {}) if isinstance(tc, dict) else {}
        parts.append(f"[tool call] {fn.get('name')}({fn.get('arguments')})")
    if m.get("type") == "function_call":
        parts.append(f"[tool call] {m.get('name')}({m.get('arguments')})")
    if m.get("type") == "function_call_output":
        parts.append(f"[tool result {m.get('call_id', '')}] {m.get('output', '')}")
    if m.get("tool_call_id"):
        role = f"{role} ({m['tool_call_id']})"
    return {"role": role, "text": "\n".join(p for p in parts if p)[:_TEXT_CAP]}


def request_messages(record: dict[str, Any]) -> tuple[list[Any], str]:
    """The raw messages of a call's request (system prompt first where the API keeps it
    apart), and a note (``""``, or why they are missing: a size-capped body)."""
    body = record.get("request")
    if not isinstance(body, dict):
        return [], "no request body recorded"
    if body.get("_truncated"):
        return [], f"request body not kept (size cap; {body.get('bytes')} bytes)"
    msgs: list[Any] = []
    if body.get("system"):  # Anthropic
        msgs.append({"role": "system", "content": body["system"]})
    if body.get("instructions"):  # Responses
        msgs.append({"role": "system", "content": body["instructions"]})
    raw = body.get("messages")
    if raw is None:
        raw = body.get("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    msgs.extend(raw or [])
    return msgs, ""


def _timing(t: dict[str, Any]) -> dict[str, Any]:
    def gap(a: str, b: str) -> float | None:
        x, y = t.get(a), t.get(b)
        return round(float(y) - float(x), 4) if x is not None and y is not None else None

    return {
        "received": t.get("received"),
        "queue_s": gap("received", "started"),
        "first_token_s": gap("started", "first_token"),
        "generate_s": gap("started", "finished"),
        "total_s": gap("received", "finished"),
    }


def _spliced(
    rec: dict[str, Any], by_id: dict[str, dict[str, Any]], text: TokenText
) -> list[dict[str, Any]]:
    """Each echoed assistant turn the proxy replaced by the exact ids it generated: the
    message as the harness echoed it (OpenAI chat requests, where ``message_index`` indexes
    the request's ``messages``) and the generated text that stands in its place."""
    req = rec.get("request")
    body: dict[str, Any] = req if isinstance(req, dict) else {}
    wire = body.get("messages") if rec.get("api") == "openai.chat" else None
    out = []
    for s in rec.get("spliced") or []:
        if not isinstance(s, dict):
            continue
        src = by_id.get(str(s.get("call_id"))) or {}
        i = s.get("message_index")
        echoed = None
        if isinstance(wire, list) and isinstance(i, int) and 0 <= i < len(wire):
            echoed = _message(wire[i])["text"]
        out.append(
            {
                "message_index": i,
                "call_id": s.get("call_id"),
                "seq": src.get("seq"),
                "echoed": echoed,
                "generated": text.decode(src.get("completion_ids") or [])[:_TEXT_CAP],
            }
        )
    return out


def _relation(
    rec: dict[str, Any], by_id: dict[str, dict[str, Any]], text: TokenText
) -> dict[str, Any]:
    rel = dict(rec.get("prompt_relation") or {})
    parent = by_id.get(str(rel.get("parent_call_id") or ""))
    if parent is not None:
        rel["parent_seq"] = parent.get("seq")
    if rel.get("kind") == "spliced":
        rel["spliced"] = _spliced(rec, by_id, text)
    if rel.get("kind") == "diverged" and parent is not None and rel.get("diverged_at") is not None:
        parent_ids = list(parent.get("prompt_ids") or []) + list(parent.get("completion_ids") or [])
        d = token_diff(parent_ids, rec.get("prompt_ids") or [], int(rel["diverged_at"]))
        d["left_text"] = text.decode(parent_ids[d["at"] : d["at"] + 400])
        d["right_text"] = text.decode((rec.get("prompt_ids") or [])[d["at"] : d["at"] + 400])
        rel["diff"] = d
    return rel


def call_views(records: Sequence[dict[str, Any]], text: TokenText) -> list[dict[str, Any]]:
    """The view data of a rollout's calls (records in ``seq`` order)."""
    by_id = {str(r.get("call_id")): r for r in records}
    out = []
    prev: list[Any] = []
    for rec in records:
        msgs, note = request_messages(rec)
        same = 0
        while same < min(len(prev), len(msgs)) and prev[same] == msgs[same]:
            same += 1
        prev = msgs or prev
        parsed = rec.get("parsed") or {}
        out.append(
            {
                "call_id": rec.get("call_id"),
                "seq": rec.get("seq"),
                "api": rec.get("api"),
                "finish_reason": rec.get("finish_reason"),
                "flags": list(rec.get("flags") or []),
                "policy_version": rec.get("policy_version"),
                "policy_version_end": rec.get("policy_version_end"),
                "usage": rec.get("usage") or {},
                "timing": _timing(rec.get("timing") or {}),
                "sampling": {
                    k: v
                    for k, v in (rec.get("sampling") or {}).items()
                    if k in ("temperature", "top_p", "top_k", "max_tokens", "mode", "backend")
                },
                "error": rec.get("error"),
                "relation": _relation(rec, by_id, text),
                "n_same": same,
                "messages": [_message(m) for m in msgs[same:]],
                "messages_note": note,
                "output": {
                    "reasoning": parsed.get("reasoning"),
                    "content": parsed.get("content"),
                    "tool_calls": parsed.get("tool_calls") or [],
                    "text": text.decode(rec.get("completion_ids") or [])[:_TEXT_CAP],
                },
            }
        )
    return out
