"""Tool-call styles of scripted assistant turns: the chat template's ``<tool_call>`` tags and
fenced JSON blocks (how Qwen2.5-Coder writes calls). Whatever the style, the parser reads
back the same reasoning, content and calls."""

from __future__ import annotations

from typing import Any

import pytest
from clawrl.proxy import format_assistant_text, parse_completion, restyle_assistant_text
from hypothesis import given, settings
from hypothesis import strategies as st

NAMES = ["bash", "write_file", "read_file"]
scalars = st.one_of(st.text(max_size=30), st.integers(), st.booleans(), st.none())
args = st.dictionaries(st.text(min_size=1, max_size=10), scalars, max_size=4)
calls = st.lists(st.tuples(st.sampled_from(NAMES), args), max_size=3)
# content that is not itself call-shaped JSON, a fence or a tag (prose, as models write it)
prose = st.text(st.characters(blacklist_characters="`{}<>[]\r"), max_size=40).map(str.strip)


def _read(text: str) -> tuple[str | None, str, list[tuple[str, dict[str, Any]]]]:
    p = parse_completion(text, finish_reason="stop", json_calls=True, tool_names=NAMES)
    assert not p.flags
    return p.reasoning, p.content, [(c.name, c.arguments) for c in p.tool_calls]


@settings(max_examples=150, deadline=None)
@given(content=prose, tool_calls=calls, reasoning=st.none() | prose.filter(bool))
def test_every_style_reads_back_the_same_turn(
    content: str, tool_calls: list[tuple[str, dict[str, Any]]], reasoning: str | None
) -> None:
    tags = format_assistant_text(content=content, reasoning=reasoning, tool_calls=tool_calls)
    fenced = restyle_assistant_text(tags, "fenced")
    assert fenced == format_assistant_text(
        content=content, reasoning=reasoning, tool_calls=tool_calls, call_style="fenced"
    )
    assert _read(fenced) == _read(tags) == (reasoning, content, tool_calls)
    assert ("<tool_call>" in fenced) is False
    assert restyle_assistant_text(tags, "tags") == tags


def test_fenced_is_the_indented_block_qwen_coder_writes() -> None:
    text = format_assistant_text(tool_calls=[("bash", {"command": "ls"})], call_style="fenced")
    assert (
        text == '```json\n{\n  "name": "bash",\n  "arguments": {\n    "command": "ls"\n  }\n}\n```'
    )


def test_an_unknown_style_or_an_ill_formed_turn_is_refused() -> None:
    with pytest.raises(ValueError, match="call_style must be one of tags, fenced"):
        format_assistant_text(content="x", call_style="xml")
    with pytest.raises(ValueError, match="ill_formed_tool_call"):
        restyle_assistant_text("<tool_call>\nnot json\n</tool_call>", "fenced")
