"""Request parsing the three wire APIs share: the call fields every API reads alike (model,
sampling, stream), the ``tools`` list walk, the function-tool spec and the echoed tool call
in the chat template's shape, and OpenAI's ``tool_choice``. Each API module keeps only its
own field names and rules; every failure is a :class:`ProxyRequestError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clawrl.proxy.errors import ProxyRequestError
from clawrl.proxy.validation import (
    opt_bool,
    opt_number,
    opt_seed,
    opt_str,
    opt_top_k,
    req_list,
    req_obj,
    req_str,
)

__all__ = [
    "call_fields",
    "function_tool",
    "openai_tool_choice",
    "tool_call",
    "tool_list",
]


def call_fields(
    body: dict[str, Any],
    max_tokens: int | None,
    *,
    temperature_max: float = 2,
    seed: bool = True,
) -> dict[str, Any]:
    """The :class:`~clawrl.proxy.ChatCall` fields every API reads the same way: ``model``
    (default ``""``), ``max_tokens`` (read by the caller, each API names it differently),
    ``temperature`` in ``[0, temperature_max]``, ``top_p`` in ``(0, 1]``, ``top_k``,
    ``seed`` (when the API has one), ``stream`` and the raw ``body``.

    Raises:
        ProxyRequestError: a field is malformed or out of range.
    """
    top_p = opt_number(body.get("top_p"), "top_p", minimum=0, maximum=1)
    if top_p == 0:
        raise ProxyRequestError("top_p must be > 0", param="top_p")
    fields: dict[str, Any] = {
        "model": opt_str(body.get("model"), "model") or "",
        "max_tokens": max_tokens,
        "temperature": opt_number(
            body.get("temperature"), "temperature", minimum=0, maximum=temperature_max
        ),
        "top_p": top_p,
        "top_k": opt_top_k(body.get("top_k")),
        "stream": bool(opt_bool(body.get("stream"), "stream")),
        "body": body,
    }
    if seed:
        fields["seed"] = opt_seed(body.get("seed"))
    return fields


def tool_list(
    v: Any, tool: Callable[[dict[str, Any], str], dict[str, Any] | None]
) -> list[dict[str, Any]] | None:
    """The ``tools`` field: ``None`` or an array of objects; ``tool(obj, its param)`` gives
    the template's tool or ``None`` for a tool type the model is not offered. ``None`` when
    no tool is left.

    Raises:
        ProxyRequestError: ``v`` is not an array, an entry not an object, or as ``tool``.
    """
    if v is None:
        return None
    tools: list[dict[str, Any]] = []
    for i, t in enumerate(req_list(v, "tools")):
        p = f"tools[{i}]"
        spec = tool(req_obj(t, p), p)
        if spec is not None:
            tools.append(spec)
    return tools or None


def function_tool(
    t: dict[str, Any], p: str, schema_key: str = "parameters", *, schema_default: bool = False
) -> dict[str, Any]:
    """``{"type": "function", "function": {name, description?, parameters?}}`` from the
    object ``t`` (at ``p``) holding ``name``, ``description`` and the JSON schema under
    ``schema_key``; with ``schema_default`` an absent schema is ``{}`` (Anthropic's
    ``input_schema``), else it is left out.

    Raises:
        ProxyRequestError: ``name`` missing or not a string, ``description`` not a string,
            the schema not an object.
    """
    spec: dict[str, Any] = {"name": req_str(t.get("name"), p + ".name")}
    if t.get("description") is not None:
        spec["description"] = req_str(t.get("description"), p + ".description")
    if schema_default:
        spec["parameters"] = req_obj(t.get(schema_key, {}), f"{p}.{schema_key}")
    elif t.get(schema_key) is not None:
        spec["parameters"] = req_obj(t.get(schema_key), f"{p}.{schema_key}")
    return {"type": "function", "function": spec}


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An echoed assistant tool call in the chat template's (OpenAI) shape."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_tool_choice(body: dict[str, Any]) -> bool:
    """Whether tool calls are parsed, from OpenAI's ``tool_choice`` (Chat and Responses):
    ``"none"`` returns tool-call markup as text; ``"auto"``, ``"required"`` and an object
    cannot be enforced on the model and are recorded only.

    Raises:
        ProxyRequestError: another value.
    """
    choice = body.get("tool_choice")
    if choice is not None and not (
        choice in ("none", "auto", "required") or isinstance(choice, dict)
    ):
        raise ProxyRequestError(
            "tool_choice must be 'none', 'auto', 'required' or an object", param="tool_choice"
        )
    return choice != "none"
