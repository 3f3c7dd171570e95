"""Model families whose chat template is not the Qwen3 kit's: message adaptation and the tool
prompt injected where a template has no tool support.

Families (``config.json`` ``model_type``):

- ``qwen3`` (the kit's models): rendered exactly as before; tool calls only as
  ``<tool_call>`` blocks.
- ``qwen2`` (Qwen2.5, e.g. Qwen2.5-Coder-0.5B-Instruct): its own ChatML template with tools.
  The template writes ``tool_call.arguments | tojson``, so argument JSON strings are parsed
  to objects first (else they would render as a quoted string), and a missing ``content`` is
  ``""`` (the template concatenates it). Its models answer with ```json fences or bare JSON
  objects as well as ``<tool_call>`` blocks: the parser reads all three
  (:mod:`clawrl.proxy.parse`, "JSON calls").
- ``llama`` (SmolLM2-135M-Instruct): ChatML without tools. The template ignores ``tools``,
  assistant ``tool_calls`` and knows no tool role, so the renderer rewrites the conversation
  before the template sees it (:func:`adapt_messages` with ``inject=True``):

  * the **tool prompt** (:data:`TOOL_PROMPT`) is appended to the system message (a system
    message holding only the tool prompt is inserted when there is none): it lists each tool
    as one JSON line and asks for calls as bare JSON objects
    ``{"name": <tool name>, "arguments": <object>}``, one per line, nothing else;
  * an assistant turn's tool calls are appended to its content in exactly that form (one
    JSON object per line), so the history shows the model the format it is asked to use;
  * a ``tool`` message becomes a ``user`` message
    ``<tool_response>\\n{content}\\n</tool_response>``.

Injection is used for a non-``qwen3`` family whose template renders no trace of a probe
tool (:func:`template_ignores_tools`).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "JSON_CALL_FAMILIES",
    "TOOL_PROMPT",
    "adapt_messages",
    "call_json",
    "template_ignores_tools",
    "tool_prompt",
]

#: Families whose models emit tool calls as fenced or bare JSON objects.
JSON_CALL_FAMILIES = frozenset({"llama", "qwen2"})

#: The injected tool prompt; ``{tools}`` is one JSON line per tool.
TOOL_PROMPT = (
    "# Tools\n\nYou can call these tools (one JSON object per line):\n{tools}\n\n"
    "To call a tool, reply with only a JSON object on its own line, of the form\n"
    '{{"name": "<tool name>", "arguments": {{<arguments as a JSON object>}}}}\n'
    "Write one such line per call and nothing else. Tool results come back in "
    "<tool_response></tool_response>. When no tool is needed, answer in plain text."
)


def tool_prompt(tools: list[dict[str, Any]]) -> str:
    """The tool prompt for ``tools`` (OpenAI function tools)."""
    lines = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return TOOL_PROMPT.format(tools=lines)


def call_json(name: str, arguments: Any) -> str:
    """One call in the JSON form the parser reads: ``{"name": ..., "arguments": {...}}``."""
    return json.dumps({"name": name, "arguments": _args_obj(arguments)}, ensure_ascii=False)


def _args_obj(arguments: Any) -> Any:
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            return json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments
    return arguments


def _adapt_call(tc: dict[str, Any]) -> dict[str, Any]:
    fn = tc.get("function", tc) if isinstance(tc, dict) else {}
    fn = {**fn, "arguments": _args_obj(fn.get("arguments"))}
    return {**tc, "function": fn} if "function" in tc else fn


def adapt_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, inject: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Messages and tools as a non-Qwen3 family's template needs them (module docstring).

    Args:
        messages: renderer-format messages (not modified).
        tools: OpenAI function tools or None.
        inject: the template has no tool support: inject the tool prompt, write tool calls
            into the content and turn tool results into user turns; ``tools`` becomes None.

    Returns:
        (messages, tools) to hand to the template.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls") or []
        if not inject:
            if calls:
                m["tool_calls"] = [_adapt_call(tc) for tc in calls]
            out.append(m)
            continue
        if m.get("role") == "assistant" and calls:
            fns = [tc.get("function", tc) for tc in calls]
            lines = [call_json(str(f.get("name", "")), f.get("arguments")) for f in fns]
            text = m["content"] if isinstance(m["content"], str) else ""
            m["content"] = "\n".join([text, *lines] if text else lines)
            m.pop("tool_calls", None)
        elif m.get("role") == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
        out.append(m)
    if not inject or not tools:
        return out, tools if not inject else None
    prompt = tool_prompt(tools)
    if out and out[0].get("role") == "system" and isinstance(out[0]["content"], str):
        head = out[0]["content"]
        out[0] = {**out[0], "content": f"{head}\n\n{prompt}" if head else prompt}
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out, None


def template_ignores_tools(render: Any) -> bool:
    """Whether ``render(messages, tools)`` (the raw template) writes no trace of a probe tool."""
    probe = [{"type": "function", "function": {"name": "clawrl_probe_tool_q9", "parameters": {}}}]
    chat = [{"role": "user", "content": "hi"}]
    try:
        return "clawrl_probe_tool_q9" not in render(chat, probe)
    except Exception:
        return True
