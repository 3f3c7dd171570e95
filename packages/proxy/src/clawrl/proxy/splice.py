"""Token-in/token-out: splicing exact generated ids into echoed assistant turns, and the
relation of a prompt to the session's earlier calls.

Matching an echoed assistant message to an earlier generation uses a *canonical key*:
reasoning and content stripped of surrounding whitespace, and tool calls as (name, arguments
JSON with sorted keys and no spacing) — tool-call ids are ignored (harnesses rewrite them) and
argument JSON is compared after parsing (harnesses re-serialise it), with numbers
canonicalised the way JavaScript's ``JSON.stringify`` writes them (``30.0`` and ``30``,
``1e3`` and ``1000`` are equal) and ``""`` / null arguments equal to ``{}`` (a JS harness
echoes a call without arguments as ``"arguments": ""``). A harness that dropped or
changed part of the turn (e.g. its reasoning) produces a different key: the turn is then
rendered by the template and the prompt *diverges* from the earlier call, which the prefix
tree turns into a branch.

``prompt_relation`` of a call (DESIGN.md "Call record"):

- ``first``: the session has no earlier call;
- ``extends``: some earlier call's prompt + completion is a prefix of this prompt, and no
  splice was needed (the template reproduced the generated ids);
- ``spliced``: as ``extends``, but generated ids were substituted for at least one echoed
  assistant turn;
- ``diverged``: no earlier call is contained; ``parent_call_id`` is the call sharing the
  longest prefix, ``diverged_at`` the first token index where they differ.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from clawrl.proxy.errors import ContextLengthExceededError
from clawrl.proxy.record import PromptRelation
from clawrl.proxy.render import ChatRenderer

__all__ = ["CallHistory", "PromptBuild", "SpliceMemory", "build_prompt", "canonical_key"]


def js_number(x: int | float) -> int | float:
    """A JSON number as JavaScript's ``JSON.stringify`` writes it back after parsing: a double,
    written without a fraction when integral (``30.0`` -> ``30``, ``1e3`` -> ``1000``), so
    ``30`` and ``30.0`` and ``3e1`` are one value. Integers beyond a double's range are kept."""
    try:
        f = float(x)
    except OverflowError:
        return x
    if f != f or f in (float("inf"), float("-inf")):
        return x
    if f.is_integer() and abs(f) < 1e21:  # JS switches to exponent notation at 1e21
        return int(f)
    return f


def _canonical_json(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        return js_number(v)
    if isinstance(v, list):
        return [_canonical_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _canonical_json(x) for k, x in v.items()}
    return v


def _canonical_args(args: Any) -> Any:
    """Tool-call arguments compared by value: parsed from a JSON string, numbers as JS writes
    them (:func:`js_number`), ``None`` and a blank string as ``{}``."""
    if args is None:
        return {}
    if isinstance(args, str):
        if not args.strip():
            return {}
        try:
            parsed = json.loads(args)
        except (ValueError, RecursionError):
            return ["raw", args.strip()]
        return _canonical_json(parsed)
    return _canonical_json(args)


def canonical_key(
    reasoning: str | None, content: str | None, tool_calls: list[tuple[str, Any]]
) -> bytes:
    """Canonical form of an assistant turn (see module docstring)."""
    calls = [[name, _canonical_args(args)] for name, args in tool_calls]
    try:
        return orjson.dumps(
            [(reasoning or "").strip(), (content or "").strip(), calls],
            option=orjson.OPT_SORT_KEYS,
        )
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(
            [(reasoning or "").strip(), (content or "").strip(), calls], sort_keys=True, default=str
        ).encode()


def message_key(message: dict[str, Any]) -> bytes:
    """Canonical key of an assistant message dict (the renderer's message format)."""
    calls: list[tuple[str, Any]] = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function", tc)
        calls.append((str(fn.get("name", "")), fn.get("arguments", {})))
    content = message.get("content")
    if not isinstance(content, str):
        content = ""
    reasoning = message.get("reasoning_content")
    return canonical_key(reasoning if isinstance(reasoning, str) else None, content, calls)


@dataclass(frozen=True)
class Generation:
    """An earlier generation of the session: its call, prompt and exact completion ids."""

    call_id: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]


class SpliceMemory:
    """Per-session map canonical key -> generations with that key (latest last)."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, list[Generation]] = {}

    def remember(self, key: bytes, generation: Generation) -> None:
        self._by_key.setdefault(key, []).append(generation)

    def lookup(self, key: bytes, expected_prompt: list[int]) -> Generation | None:
        """The generation for ``key``: preferably one whose prompt is ``expected_prompt``
        (the same place in the conversation: the ids so far plus the generation prompt),
        else the latest."""
        gens = self._by_key.get(key)
        if not gens:
            return None
        n = len(expected_prompt)
        for g in reversed(gens):
            if len(g.prompt_ids) == n and list(g.prompt_ids) == expected_prompt:
                return g
        return gens[-1]

    def clear(self) -> None:
        self._by_key.clear()


@dataclass
class PromptBuild:
    """Prompt ids of a request, with where generated ids were spliced in.

    ``spliced``: ``[{"message_index", "call_id"}]`` for each echoed assistant turn replaced by
    the exact ids of an earlier generation that differ from the template's render.
    ``matched``: same for every echoed turn matched (also where the render was identical).
    ``unit_ends``: token offset after each unit, with the unit's first message role.
    """

    ids: list[int]
    spliced: list[dict[str, Any]] = field(default_factory=list)
    matched: list[dict[str, Any]] = field(default_factory=list)
    unit_ends: list[tuple[int, str]] = field(default_factory=list)


def build_prompt(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    memory: SpliceMemory | None,
    *,
    max_tokens: int | None = None,
) -> PromptBuild:
    """Render ``messages`` (+ generation prompt) to ids, splicing generated ids for echoed
    assistant turns found in ``memory``.

    Text in the client's strings that spells a control token is encoded as text
    (:meth:`ChatRenderer.encode_unit`).

    Args:
        max_tokens: stop tokenizing once the prompt has more ids than this.

    Raises:
        ProxyRequestError: the template cannot render the conversation.
        ContextLengthExceededError: the prompt has more than ``max_tokens`` ids.
    """
    units = renderer.segments(messages, tools)
    defused: list[str | None] = [None] * len(units)
    (safe_messages, safe_tools), changed = renderer.defuse([messages, tools])
    if changed:
        safe_units = renderer.segments(safe_messages, safe_tools)
        if [(u.first, u.last) for u in safe_units] == [(u.first, u.last) for u in units]:
            defused = [u.text for u in safe_units]
        else:  # the template split the defused conversation differently: encode it instead
            units = safe_units
            messages = safe_messages
    out = PromptBuild(ids=[])
    gp = renderer.generation_prompt
    end_text = renderer.turn_end_text
    stops = renderer.stop_token_ids

    def check_room() -> None:
        if max_tokens is not None and len(out.ids) > max_tokens:
            raise ContextLengthExceededError(
                f"the prompt has more than {max_tokens} tokens (the room in the context window)",
                param="messages",
            )

    for ui, u in enumerate(units):
        role = messages[u.first].get("role", "") if 0 <= u.first < len(messages) else ""
        if memory is not None and u.first == u.last and role == "assistant":
            msg = messages[u.first]
            gen = memory.lookup(message_key(msg), out.ids + renderer.generation_prompt_ids)
            idx = u.text.rfind(end_text) if end_text else -1
            if gen is not None and u.text.startswith(gp) and idx >= 0:
                comp = list(gen.completion_ids)
                if not comp or comp[-1] not in stops:
                    comp.append(stops[0])  # a length-truncated turn, closed as the template does
                trailer = u.text[idx + len(end_text) :]
                new = renderer.generation_prompt_ids + comp + renderer.encode_cached(trailer)
                plain = renderer.encode_unit(u.text, defused[ui])
                info = {"message_index": u.first, "call_id": gen.call_id}
                out.matched.append(info)
                if new != plain:
                    out.spliced.append(info)
                out.ids.extend(new)
                out.unit_ends.append((len(out.ids), role))
                check_room()
                continue
        out.ids.extend(renderer.encode_unit(u.text, defused[ui]))
        out.unit_ends.append((len(out.ids), role))
        check_room()
    return out


class CallHistory:
    """Earlier calls of a session as token arrays (prompt + completion), for relations."""

    def __init__(self) -> None:
        self._calls: list[tuple[str, np.ndarray]] = []
        self.anchor: list[int] | None = None
        self._last: tuple[list[int], np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call_id: str, prompt_ids: list[int], completion_ids: list[int]) -> None:
        cached = self._last
        if cached is not None and cached[0] is prompt_ids and len(cached[1]) == len(prompt_ids):
            head = cached[1]  # converted by relation() for this very prompt
        else:
            head = np.frombuffer(array("q", prompt_ids), dtype=np.int64)
        tail = np.frombuffer(array("q", completion_ids), dtype=np.int64)
        self._calls.append((call_id, np.concatenate([head, tail])))
        self._last = None

    def relation(self, prompt_ids: list[int], spliced: bool) -> PromptRelation:
        """``{kind, parent_call_id, diverged_at}`` of a new prompt (see module docstring).

        The parent is the longest earlier call contained in the prompt (ties: the latest);
        when none is contained, the call sharing the longest prefix (ties: the latest).
        Cost: O(total tokens of earlier calls) vectorised; O(prompt) when the latest
        longest call is contained (the usual case of an appending harness).
        """
        if not self._calls:
            return {"kind": "first", "parent_call_id": None, "diverged_at": None}
        new = np.frombuffer(array("q", prompt_ids), dtype=np.int64)
        self._last = (prompt_ids, new)
        m = len(new)
        # Longest contained call: visit calls by decreasing length (latest first on ties).
        order = sorted(
            range(len(self._calls)), key=lambda i: (len(self._calls[i][1]), i), reverse=True
        )
        best_lcp, best_id, best_idx = -1, "", -1
        for i in order:
            call_id, seq = self._calls[i]
            n = min(len(seq), m)
            neq = seq[:n] != new[:n]
            j = int(neq.argmax()) if n else 0
            lcp = j if n and neq[j] else n
            if lcp == len(seq):
                return {
                    "kind": "spliced" if spliced else "extends",
                    "parent_call_id": call_id,
                    "diverged_at": None,
                }
            if lcp > best_lcp or (lcp == best_lcp and i > best_idx):
                best_lcp, best_id, best_idx = lcp, call_id, i
        return {"kind": "diverged", "parent_call_id": best_id, "diverged_at": best_lcp}
