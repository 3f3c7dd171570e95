"""Rendering chat requests to prompt token ids with the model's own chat template.

The template is the Jinja chat template of the HF model directory (``tokenizer_config.json``
``chat_template`` or ``chat_template.jinja``), compiled once in a sandboxed Jinja environment
equivalent to transformers' ``apply_chat_template`` (same ``tojson`` filter and
``raise_exception``). Text is turned into ids with the model's fast tokenizer
(``tokenizers``).

**Text is text.** Control tokens (every added token of the tokenizer: ``<|im_start|>``,
``<|im_end|>``, ``<tool_call>``, ``<think>``, ``<tool_response>``, …) come only from the
template itself. A string the client sent (message content, reasoning, tool-call arguments,
tool names, descriptions and schemas) that contains the text of a control token is encoded as
ordinary text (its characters' byte tokens / BPE pieces), never as the control token's id:
:meth:`ChatRenderer.encode_unit` aligns the render with a render in which each such
occurrence in the client's strings is defused, and only control strings present in both
(those the template wrote) become control ids. See the proxy README ("What the chat template
allows").

Messages given to the renderer are OpenAI-style dicts (the server converts Anthropic requests
first): ``role`` in system/user/assistant/tool, ``content`` (str), optional
``reasoning_content`` (str), ``tool_calls`` (``[{"id", "type": "function", "function":
{"name", "arguments"}}]``, arguments a dict or a JSON string) and ``tool_call_id``.

:meth:`ChatRenderer.segments` splits a conversation into *units* — one message, or one run of
consecutive ``tool`` messages (they render as one user turn) — with each unit's text, so that
the server can substitute exact generated ids for an echoed assistant turn. The split is
checked against a render of the whole conversation; when a template is not prefix-stable the
split falls back to one unit (no splicing, still correct).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import jinja2
import orjson
from clawrl.proxy.errors import ProxyRequestError
from clawrl.proxy.tool_prompt import JSON_CALL_FAMILIES, adapt_messages, template_ignores_tools
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatRenderer", "RenderUnit"]

#: Replaces the first character of a control-token string found in a client's string, in the
#: defused render only (a private-use character: no token text contains it).
_DEFUSE = "\ue000"

K = TypeVar("K")
V = TypeVar("V")


class _BoundedCache(Generic[K, V]):
    """A dict bounded in entries and in (approximate) bytes, emptied when either bound would
    be passed: a client sending huge or ever-new texts costs a re-render, never unbounded
    memory. An entry larger than ``max_entry_bytes`` is not kept at all."""

    def __init__(self, max_entries: int, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._items: dict[K, V] = {}
        self.nbytes = 0

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: K, value: V, size: int) -> None:
        if size > self.max_entry_bytes:
            return
        if len(self._items) >= self.max_entries or self.nbytes + size > self.max_bytes:
            self._items.clear()
            self.nbytes = 0
        self._items[key] = value
        self.nbytes += size


@dataclass(frozen=True)
class RenderUnit:
    """A span of a rendered conversation.

    ``first``/``last`` are message indices (inclusive); ``first == -1`` marks the prefix
    produced before any message (none with this template) and ``first == len(messages)`` the
    generation prompt. ``text`` is the unit's rendered text.
    """

    first: int
    last: int
    text: str


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


class ChatRenderer:
    """Chat template + tokenizer of one model.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (the model's ``tokenizer.json``).
        chat_template: the Jinja chat template.
        stop_token_ids: ids that end a generated turn (from ``generation_config.json``
            ``eos_token_id``); the first is the turn terminator the template writes.
        family: the model family (``config.json`` ``model_type``: ``qwen3``, ``qwen2``,
            ``llama``, ...). Families other than ``qwen3`` get their messages adapted to
            their template and read JSON tool calls (:mod:`clawrl.proxy.tool_prompt`); such
            a family's template that ignores tools gets the injected tool prompt.

    Raises:
        ValueError: no chat template, no stop ids, or a template whose generation prompt is
            not a suffix of its render.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str,
        stop_token_ids: Sequence[int],
        family: str = "qwen3",
    ):
        if not isinstance(chat_template, str) or not chat_template:
            raise ValueError("no chat template")
        if not stop_token_ids:
            raise ValueError("stop_token_ids must not be empty")
        self._backend = tokenizer
        self.chat_template = chat_template
        self._template = _compile(chat_template)
        self.stop_token_ids: tuple[int, ...] = tuple(int(t) for t in stop_token_ids)
        self.vocab_size: int = int(self._backend.get_vocab_size(with_added_tokens=True))
        #: Text of the turn terminator token (e.g. "<|im_end|>").
        self.turn_end_text: str = self.decode([self.stop_token_ids[0]])
        self.family = str(family)
        #: The template itself puts tools in the prompt (else the tool prompt is injected).
        self.template_has_tools: bool = not template_ignores_tools(
            lambda m, t: self._render_raw(m, t, add_generation_prompt=True)
        )
        self._inject = self.family != "qwen3" and not self.template_has_tools
        self._adapt = self._inject or self.family != "qwen3"
        #: The parser also reads fenced / bare JSON tool calls (``parse_completion``'s
        #: ``json_calls``): families in ``JSON_CALL_FAMILIES`` and injected tool prompts.
        self.json_tool_calls: bool = self._inject or self.family in JSON_CALL_FAMILIES
        probe = [{"role": "user", "content": "x"}]
        with_gp = self.render_text(probe, None, add_generation_prompt=True)
        without = self.render_text(probe, None, add_generation_prompt=False)
        if not with_gp.startswith(without):
            raise ValueError("chat template: the generation prompt is not a suffix of the render")
        #: Text the template appends as the generation prompt, e.g. "<|im_start|>assistant\n".
        self.generation_prompt: str = with_gp[len(without) :]
        self.generation_prompt_ids: list[int] = self.encode(self.generation_prompt)
        # Per-renderer bounds (shared by every session of the process): <= 32 MiB of units,
        # <= 64 MiB of encoded texts.
        self._unit_cache: _BoundedCache[bytes, str] = _BoundedCache(2048, 32 << 20, 256 << 10)
        self._encode_cache: _BoundedCache[str, list[int]] = _BoundedCache(2048, 64 << 20, 4 << 20)
        added = {
            str(t.content): int(i) for i, t in self._backend.get_added_tokens_decoder().items()
        }
        #: Texts of the control tokens (the tokenizer's added tokens) -> their ids.
        self.control_tokens: dict[str, int] = {k: v for k, v in added.items() if k}
        self._control_re: re.Pattern[str] | None = (
            re.compile(
                "|".join(re.escape(k) for k in sorted(self.control_tokens, key=len, reverse=True))
            )
            if self.control_tokens
            else None
        )
        self._text_backend = _text_only_tokenizer(self._backend)
        vocab = self._backend.get_vocab(with_added_tokens=False)
        longest = max((len(k) for k in vocab), default=1)
        #: Upper bound of the characters of client text one token covers (the longest vocabulary
        #: entry, times 4 for normalisation that composes characters): a prompt whose client
        #: strings hold more than ``max_context * max_chars_per_token`` characters cannot fit,
        #: which the proxy checks before tokenizing anything.
        self.max_chars_per_token: int = 4 * max(1, longest)
        #: True when units may be rendered alone (see :meth:`segments`).
        self.segmentable: bool = self._probe_segmentable()

    @classmethod
    def from_hf_tokenizer(cls, tokenizer: Any, stop_token_ids: Sequence[int]) -> ChatRenderer:
        """From a transformers fast tokenizer whose ``chat_template`` is set."""
        return cls(tokenizer.backend_tokenizer, tokenizer.chat_template, stop_token_ids)

    @classmethod
    def from_model_dir(cls, path: str | Path) -> ChatRenderer:
        """Load ``tokenizer.json``, the chat template (``chat_template.jinja`` or
        ``tokenizer_config.json``'s ``chat_template``) and the stop ids
        (``generation_config.json``'s ``eos_token_id``, else the tokenizer's eos token) of an
        HF model directory. Uses ``tokenizers`` only (no transformers import).

        Raises:
            ValueError: the directory has no tokenizer.json, chat template or eos token.
        """
        from tokenizers import Tokenizer

        path = Path(path)
        if not (path / "tokenizer.json").exists():
            raise ValueError(f"{path} has no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        cfg: dict[str, Any] = {}
        if (path / "tokenizer_config.json").exists():
            cfg = json.loads((path / "tokenizer_config.json").read_text())
        template = None
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()
        elif isinstance(cfg.get("chat_template"), str):
            template = cfg["chat_template"]
        if template is None:
            raise ValueError(f"{path} has no chat template")
        stop: list[int] = []
        gen_cfg = path / "generation_config.json"
        if gen_cfg.exists():
            eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
            if isinstance(eos, int):
                stop = [eos]
            elif isinstance(eos, list):
                stop = [int(e) for e in eos]
        if not stop:
            eos_tok = cfg.get("eos_token")
            if isinstance(eos_tok, dict):
                eos_tok = eos_tok.get("content")
            tid = tokenizer.token_to_id(eos_tok) if isinstance(eos_tok, str) else None
            if tid is None:
                raise ValueError(f"{path}: no eos token id")
            stop = [int(tid)]
        family = "qwen3"
        if (path / "config.json").exists():
            model_cfg = json.loads((path / "config.json").read_text())
            family = str(model_cfg.get("text_config", model_cfg).get("model_type") or family)
        return cls(tokenizer, template, stop, family=family)

    # -- text <-> ids -------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special tokens in the text are recognised, none added)."""
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def encode_cached(self, text: str) -> list[int]:
        """:meth:`encode` with a bounded cache (unit texts recur across a session's calls;
        texts over 256 KiB are not cached)."""
        hit = self._encode_cache.get(text)
        if hit is None:
            hit = self.encode(text)
            # ~8 bytes per id kept (list slot; small ints are shared)
            self._encode_cache.put(text, hit, len(text) + 8 * len(hit))
        return list(hit)

    def defuse(self, value: Any) -> tuple[Any, bool]:
        """A copy of ``value`` (JSON-like) whose strings (and object keys) have every
        control-token text defused, and whether anything changed (else ``value`` itself).

        Defusing replaces the first character of each occurrence by a private-use character,
        so a defused string has the same length as the original.
        """
        pattern = self._control_re
        if pattern is None:
            return value, False
        changed = False

        def walk(v: Any) -> Any:
            nonlocal changed
            if isinstance(v, str):
                if pattern.search(v) is None:
                    return v
                changed = True
                while True:
                    new = pattern.sub(lambda m: _DEFUSE + m.group(0)[1:], v)
                    if new == v:
                        return new
                    v = new
            if isinstance(v, list):
                return [walk(x) for x in v]
            if isinstance(v, dict):
                return {walk(k): walk(x) for k, x in v.items()}
            return v

        out = walk(value)
        return (out, True) if changed else (value, False)

    def encode_unit(self, text: str, defused: str | None = None) -> list[int]:
        """Ids of a rendered unit whose client strings may hold control-token texts.

        ``defused`` is the same unit rendered from defused strings (:meth:`defuse`); control
        tokens are emitted only where ``defused`` has them (the template wrote them); the
        client's text between them is encoded with no control token recognised. Without
        ``defused`` (or when it equals ``text``), the cached plain encoding.

        When the two renders do not align (a template that transforms content), the defused
        render is encoded: the client's control-token texts then keep their characters but
        the first, which stays a private-use character — still text, never a control token.
        """
        if defused is None or defused == text:
            return self.encode_cached(text)
        if len(defused) != len(text) or self._control_re is None:
            return self.encode(defused)
        ids: list[int] = []
        pos = 0
        for m in self._control_re.finditer(defused):
            if m.start() > pos:
                ids.extend(self._encode_piece(text[pos : m.start()], defused[pos : m.start()]))
            ids.append(self.control_tokens[m.group(0)])
            pos = m.end()
        if pos < len(text):
            ids.extend(self._encode_piece(text[pos:], defused[pos:]))
        return ids

    def _encode_piece(self, text: str, defused: str) -> list[int]:
        if text == defused:  # no control-token text inside: the plain encoding is the same
            return self.encode_cached(text)
        return list(self._text_backend.encode(text, add_special_tokens=False).ids)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (byte-level vocabularies map back exactly; others through
        their decoded text)."""
        piece = self._backend.id_to_token(int(token_id))
        if piece is not None and int(token_id) not in self.control_tokens.values():
            table = _unicode_to_byte()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        return self.decode([int(token_id)]).encode("utf-8")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens kept."""
        return str(self._backend.decode(list(ids), skip_special_tokens=False))

    # -- rendering ---------------------------------------------------------------------------

    def render_text(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        """Render ``messages`` with the chat template (adapted to the family first, with the
        tool prompt injected where the template ignores tools: :mod:`clawrl.proxy.tool_prompt`).

        Raises:
            ProxyRequestError: the template rejects the conversation.
        """
        if self._adapt:
            messages, tools = adapt_messages(messages, tools, inject=self._inject)
        return self._render_raw(messages, tools, add_generation_prompt=add_generation_prompt)

    def _render_raw(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        add_generation_prompt: bool,
    ) -> str:
        try:
            return str(
                self._template.render(
                    messages=messages,
                    tools=tools or None,
                    add_generation_prompt=add_generation_prompt,
                    bos_token="",
                    eos_token=self.turn_end_text,
                )
            )
        except (
            jinja2.exceptions.TemplateError,
            TypeError,
            ValueError,
            KeyError,
            AttributeError,
            IndexError,
            RecursionError,
        ) as e:
            # the template is trusted; what it fails on is the client's conversation
            raise ProxyRequestError(
                f"the conversation cannot be rendered: {type(e).__name__}: {e}"
            ) from e

    def segments(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        start: int = 0,
    ) -> list[RenderUnit]:
        """Split the rendered prompt (with generation prompt) into units.

        Returns units whose texts concatenate to the full render; each unit is one message or
        one run of consecutive tool messages, the leading system message carries the tools
        block, and the last unit is the generation prompt (``first == len(messages)``).

        When the template passed the segmentation probe at construction (its render of a
        conversation equals the concatenation of its units rendered alone, for every kind of
        turn), units are rendered alone and cached; otherwise the split is computed from
        prefix renders and checked, falling back to a single unit (no splicing).

        Args:
            start: return only the units from message ``start`` on (it must begin a unit:
                the units before it are those of ``segments(messages, tools)``). Needs a
                segmentable template.

        Raises:
            ProxyRequestError: the template cannot render the conversation.
            ValueError: ``start > 0`` with a template that is not segmentable.
        """
        if self.segmentable:
            units = self._unit_pieces(messages, tools, cache=True, start=start)
            return [u for u in units if u.text]
        if start:
            raise ValueError("segments from a start message need a segmentable template")
        full = self.render_text(messages, tools, add_generation_prompt=True)
        try:
            units = self._unit_pieces(messages, tools, cache=False)
        except ProxyRequestError:  # a unit alone is not renderable (e.g. Qwen2.5's messages[0])
            units = []
        if units and "".join(u.text for u in units) == full:
            return [u for u in units if u.text]
        # Slow path: differences of prefix renders.
        units = []
        prev = ""
        for a, b in _unit_groups(messages):
            text = self.render_text(messages[: b + 1], tools, add_generation_prompt=False)
            if not text.startswith(prev):
                return [RenderUnit(0, len(messages), full)]
            units.append(RenderUnit(a, b, text[len(prev) :]))
            prev = text
        if not full.startswith(prev):
            return [RenderUnit(0, len(messages), full)]
        units.append(RenderUnit(len(messages), len(messages), full[len(prev) :]))
        return [u for u in units if u.text]

    def _unit_pieces(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        *,
        cache: bool,
        start: int = 0,
    ) -> list[RenderUnit]:
        units: list[RenderUnit] = []
        for gi, (a, b) in enumerate(_unit_groups(messages)):
            if a < start:
                continue
            with_tools = tools if (gi == 0 and a == 0) else None
            if gi == 0 and tools and messages[0].get("role") != "system":
                # the tools-only system block precedes the first message
                units.append(RenderUnit(-1, -1, self._render_unit([], tools, "head", cache)))
                with_tools = None
            kind = "mid-system" if a > 0 and messages[a].get("role") == "system" else "unit"
            units.append(
                RenderUnit(a, b, self._render_unit(messages[a : b + 1], with_tools, kind, cache))
            )
        units.append(RenderUnit(len(messages), len(messages), self.generation_prompt))
        return units

    def _render_unit(
        self, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None, kind: str, cache: bool
    ) -> str:
        key = b""
        if cache:
            try:
                key = orjson.dumps([kind, msgs, tools])
            except (TypeError, orjson.JSONEncodeError):
                key = b""
            hit = self._unit_cache.get(key) if key else None
            if hit is not None:
                return hit
        if kind == "mid-system":
            text = self._render_mid_system(msgs, 0)
        else:
            text = self.render_text(msgs, tools, add_generation_prompt=False)
        if key:
            self._unit_cache.put(key, text, len(key) + len(text))
        return text

    def _probe_segmentable(self) -> bool:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
        convs: list[list[dict[str, Any]]] = [
            [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "U"},
                {
                    "role": "assistant",
                    "content": "A",
                    "reasoning_content": "R",
                    "tool_calls": [call],
                },
                {"role": "tool", "content": "T1"},
                {"role": "tool", "content": "T2"},
                {"role": "assistant", "content": "", "tool_calls": [call, call]},
                {"role": "tool", "content": "T3"},
                {"role": "system", "content": "S2"},
                {"role": "user", "content": "U2"},
                {"role": "assistant", "content": "B"},
                {"role": "assistant", "content": "", "reasoning_content": "R2"},
                {"role": "user", "content": "U3"},
            ],
            [
                {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A"},
                {"role": "user", "content": "U2"},
            ],
        ]
        try:
            for conv in convs:
                for t in (tools, None):
                    for end in range(1, len(conv) + 1):
                        msgs = conv[:end]
                        full = self.render_text(msgs, t, add_generation_prompt=True)
                        pieces = self._unit_pieces(msgs, t, cache=False)
                        if "".join(u.text for u in pieces) != full:
                            return False
        except ProxyRequestError:
            return False
        return True

    def _render_mid_system(self, messages: list[dict[str, Any]], index: int) -> str:
        # Render [dummy user, system] and drop the dummy's text.
        dummy = {"role": "user", "content": ""}
        one = self.render_text([dummy], None, add_generation_prompt=False)
        two = self.render_text([dummy, messages[index]], None, add_generation_prompt=False)
        return two[len(one) :] if two.startswith(one) else two


def _unit_groups(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    groups: list[tuple[int, int]] = []
    i = 0
    n = len(messages)
    while i < n:
        j = i
        if messages[i].get("role") == "tool":
            while j + 1 < n and messages[j + 1].get("role") == "tool":
                j += 1
        groups.append((i, j))
        i = j + 1
    return groups


def _text_only_tokenizer(backend: Any) -> Any:
    """A copy of ``backend`` that encodes every added token's text as ordinary text (all
    added tokens marked special, ``encode_special_tokens`` on)."""
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    for t in spec.get("added_tokens") or []:
        t["special"] = True
    text = Tokenizer.from_str(json.dumps(spec))
    text.encode_special_tokens = True
    return text


_U2B: dict[str, int] = {}


def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table (byte-level BPE vocabularies)."""
    if not _U2B:
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
        bs += list(range(ord("\xae"), ord("\xff") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        _U2B.update({chr(c): b for b, c in zip(bs, cs, strict=True)})
    return _U2B
