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

``prompt_relation`` of a call (docs/architecture.md, "Call record"):

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
from clawrl.proxy.render import ChatRenderer, RenderUnit

__all__ = [
    "CallHistory",
    "PromptBuild",
    "PromptCache",
    "SpliceMemory",
    "build_prompt",
    "canonical_key",
    "text_chars",
]


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


def _is_prompt(prompt: tuple[int, ...], head: list[int], tail: list[int]) -> bool:
    """``list(prompt) == head + tail`` without building either list."""
    n = len(head)
    return prompt[n:] == tuple(tail) and prompt[:n] == tuple(head)


class SpliceMemory:
    """Per-session map canonical key -> generations with that key (latest last)."""

    def __init__(self) -> None:
        self._by_key: dict[bytes, list[Generation]] = {}

    def remember(self, key: bytes, generation: Generation) -> None:
        self._by_key.setdefault(key, []).append(generation)

    def version(self, key: bytes) -> int:
        """Number of generations remembered with ``key``."""
        gens = self._by_key.get(key)
        return len(gens) if gens else 0

    def lookup(
        self, key: bytes, ids_so_far: list[int], generation_prompt: list[int]
    ) -> Generation | None:
        """The generation for ``key``: preferably one whose prompt is ``ids_so_far +
        generation_prompt`` (the same place in the conversation), else the latest."""
        gens = self._by_key.get(key)
        if not gens:
            return None
        n = len(ids_so_far) + len(generation_prompt)
        for g in reversed(gens):
            if len(g.prompt_ids) == n and _is_prompt(g.prompt_ids, ids_so_far, generation_prompt):
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


def text_chars(value: Any) -> int:
    """Characters in the strings (and object keys) of a JSON-like value."""
    n = 0
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            n += len(v)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return n


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values render alike: equal, with the same types (``1``, ``1.0`` and
    ``True`` are ``==`` in Python, not in a template's ``tojson``) and the same key order."""
    if a is b:
        return True
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend(zip(x.values(), y.values(), strict=True))
        elif isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


@dataclass
class _BuiltUnit:
    """One unit of a built prompt, as :class:`PromptCache` keeps it for the next call.

    ``key``/``version``: for a single assistant message, its canonical key and the number
    of generations :class:`SpliceMemory` held for that key when the unit was built (a new
    generation with the key could change the splice). ``info``: its ``matched`` entry.
    """

    first: int
    last: int
    role: str
    end: int
    key: bytes | None = None
    version: int = 0
    info: dict[str, Any] | None = None
    spliced: bool = False


@dataclass
class _CachedPrompt:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tools_chars: int
    chars: list[int]  # chars[i]: characters of the client's strings in messages[:i]
    units: list[_BuiltUnit]
    ids: list[int]


class PromptCache:
    """The last prompt built for a session, so that the next prompt of a conversation that
    appends re-renders and re-tokenizes only its new messages.

    The messages the new request shares with the last one (compared by value, from the
    start) keep their units' ids; the result is exactly :func:`build_prompt` without a
    cache (its per-unit tokenization is a function of the unit and of the ids before it).
    A unit is not reused when its grouping may change (a run of tool messages that the new
    request extends) or when the splice memory has gained a generation with the key of a
    reused assistant turn since. Only for segmentable templates (:meth:`ChatRenderer.segments`).
    """

    def __init__(self) -> None:
        self._last: _CachedPrompt | None = None

    def clear(self) -> None:
        self._last = None

    def common_prefix(self, messages: list[dict[str, Any]], tools: Any) -> int:
        """Number of leading messages equal to the last prompt's (0 when the tools differ)."""
        last = self._last
        if last is None or not same_json(tools, last.tools):
            return 0
        n = min(len(messages), len(last.messages))
        k = 0
        old = last.messages
        while k < n and same_json(messages[k], old[k]):
            k += 1
        return k

    def text_chars(self, messages: list[dict[str, Any]], tools: Any) -> int:
        """:func:`text_chars` of ``[messages, tools]``, counting only what is new."""
        last = self._last
        k = self.common_prefix(messages, tools)
        if last is None or (k == 0 and tools != last.tools):
            return text_chars([messages, tools])
        return last.tools_chars + last.chars[k] + text_chars(messages[k:])

    def reusable(
        self, messages: list[dict[str, Any]], tools: Any, memory: SpliceMemory | None
    ) -> list[_BuiltUnit]:
        """The leading units of the last prompt that the prompt of ``messages`` shares."""
        last = self._last
        k = self.common_prefix(messages, tools)
        if last is None or k == 0:
            return []
        out: list[_BuiltUnit] = []
        for u in last.units:
            if u.last >= k:
                break
            grows = k < len(messages) and messages[k].get("role") == "tool"
            if u.role == "tool" and u.last == k - 1 and grows:
                break  # the new request extends this run of tool messages
            if u.key is not None and (memory is None or memory.version(u.key) != u.version):
                break
            out.append(u)
        if out and out[-1].last < 0:
            # Only the tools-only head unit (tools, no system message; it covers no message)
            # is kept: the units from message 0 on are rendered with their head again
            # (``segments(start=0)``), so keeping it would write the tools block twice.
            return []
        return out

    def store(
        self,
        messages: list[dict[str, Any]],
        tools: Any,
        units: list[_BuiltUnit],
        ids: list[int],
    ) -> None:
        last = self._last
        k = self.common_prefix(messages, tools)
        if last is not None and k:
            chars = last.chars[: k + 1]
            tools_chars = last.tools_chars
        else:
            chars = [0]
            tools_chars = text_chars(tools)
        for m in messages[len(chars) - 1 :]:
            chars.append(chars[-1] + text_chars(m))
        self._last = _CachedPrompt(list(messages), tools, tools_chars, chars, units, ids)


def build_prompt(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    memory: SpliceMemory | None,
    *,
    max_tokens: int | None = None,
    cache: PromptCache | None = None,
) -> PromptBuild:
    """Render ``messages`` (+ generation prompt) to ids, splicing generated ids for echoed
    assistant turns found in ``memory``.

    Text in the client's strings that spells a control token is encoded as text
    (:meth:`ChatRenderer.encode_unit`).

    Args:
        max_tokens: stop tokenizing once the prompt has more ids than this.
        cache: the session's :class:`PromptCache`: the messages shared with its last prompt
            are not rendered or tokenized again (same ids), and this prompt is kept in it.

    Raises:
        ProxyRequestError: the template cannot render the conversation.
        ContextLengthExceededError: the prompt has more than ``max_tokens`` ids.
    """
    reused = (
        cache.reusable(messages, tools, memory)
        if cache is not None and renderer.segmentable
        else []
    )
    start = reused[-1].last + 1 if reused else 0
    split = _split(renderer, messages, tools, start)
    if split is None and start:  # the defused suffix splits differently: build it whole
        reused, start = [], 0
        split = _split(renderer, messages, tools, 0)
    out = PromptBuild(ids=[])
    built: list[_BuiltUnit] = []
    if reused:
        out.ids = cache._last.ids[: reused[-1].end] if cache and cache._last else []
        for b in reused:
            if b.info is not None:
                out.matched.append(b.info)
                if b.spliced:
                    out.spliced.append(b.info)
            out.unit_ends.append((b.end, b.role))
        built.extend(reused)
    if split is None:  # the template split the defused conversation differently
        units, messages, defused = _defused_units(renderer, messages, tools)
        if cache is not None:  # encoded from defused messages throughout: nothing to reuse
            cache.clear()
            cache = None
    else:
        units, defused = split
    for ui, u in enumerate(units):
        built.append(_build_unit(renderer, messages, u, defused[ui], memory, out))
        if max_tokens is not None and len(out.ids) > max_tokens:
            raise ContextLengthExceededError(
                f"prompt is too long: {len(out.ids)} tokens > {max_tokens} maximum (counted "
                "until the limit was passed; the context window must leave room for one "
                "completion token)",
                param="messages",
            )
    if cache is not None:
        if renderer.segmentable:
            cache.store(messages, tools, built, out.ids)
        else:
            cache.clear()
    return out


def _split(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    start: int,
) -> tuple[list[RenderUnit], list[str | None]] | None:
    """The units from message ``start`` on and their defused texts (None where a unit has no
    control-token text); None when the defused conversation splits differently."""
    units = renderer.segments(messages, tools, start=start)
    defused: list[str | None] = [None] * len(units)
    head = messages[:start]
    (safe_tail, safe_tools), changed = renderer.defuse(
        [messages[start:], tools if start == 0 else None]
    )
    if changed:
        safe_units = renderer.segments(
            head + safe_tail, safe_tools if start == 0 else tools, start=start
        )
        if [(u.first, u.last) for u in safe_units] != [(u.first, u.last) for u in units]:
            return None
        defused = [u.text for u in safe_units]
    return units, defused


def _defused_units(
    renderer: ChatRenderer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[RenderUnit], list[dict[str, Any]], list[str | None]]:
    (safe_messages, safe_tools), _ = renderer.defuse([messages, tools])
    units = renderer.segments(safe_messages, safe_tools)
    return units, safe_messages, [None] * len(units)


def _build_unit(
    renderer: ChatRenderer,
    messages: list[dict[str, Any]],
    u: RenderUnit,
    defused: str | None,
    memory: SpliceMemory | None,
    out: PromptBuild,
) -> _BuiltUnit:
    """Append the ids of unit ``u`` to ``out`` (splicing an echoed assistant turn's
    generated ids where ``memory`` has them) and describe it for :class:`PromptCache`."""
    role = messages[u.first].get("role", "") if 0 <= u.first < len(messages) else ""
    role = role if isinstance(role, str) else ""
    if memory is not None and u.first == u.last and role == "assistant":
        key = message_key(messages[u.first])
        done = _BuiltUnit(u.first, u.last, role, 0, key=key, version=memory.version(key))
        gp = renderer.generation_prompt
        end_text = renderer.turn_end_text
        gen = memory.lookup(key, out.ids, renderer.generation_prompt_ids)
        idx = u.text.rfind(end_text) if end_text else -1
        if gen is not None and u.text.startswith(gp) and idx >= 0:
            comp = list(gen.completion_ids)
            if not comp or comp[-1] not in renderer.stop_token_ids:
                comp.append(renderer.stop_token_ids[0])  # a length-truncated turn, closed
            trailer = u.text[idx + len(end_text) :]
            new = renderer.generation_prompt_ids + comp + renderer.encode_cached(trailer)
            plain = renderer.encode_unit(u.text, defused)
            done.info = {"message_index": u.first, "call_id": gen.call_id}
            out.matched.append(done.info)
            if new != plain:
                done.spliced = True
                out.spliced.append(done.info)
            out.ids.extend(new)
            done.end = len(out.ids)
            out.unit_ends.append((done.end, role))
            return done
    else:
        done = _BuiltUnit(u.first, u.last, role, 0)
    out.ids.extend(renderer.encode_unit(u.text, defused))
    done.end = len(out.ids)
    out.unit_ends.append((done.end, role))
    return done


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
