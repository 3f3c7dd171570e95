"""Red-team attacks on the session :class:`PromptCache` (issue 21): the cached build must
equal a build without the cache whatever the client sends. Python ``==`` calls values equal
that the template renders differently (dict key order, ``1``/``1.0``/``True``)."""

from __future__ import annotations

from typing import Any

import pytest
from clawrl.proxy import ChatRenderer
from clawrl.proxy.splice import PromptCache, build_prompt

from .conftest import function_tool

TOOLS = [function_tool("bash", "Run a command", command="string")]


def _conv(args: dict[str, Any]) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": args}}
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]


def _check(
    renderer: ChatRenderer,
    first: list[dict[str, Any]],
    second: list[dict[str, Any]],
    tools_a: Any = TOOLS,
    tools_b: Any = TOOLS,
) -> None:
    cache = PromptCache()
    build_prompt(renderer, first, tools_a, None, cache=cache)
    got = build_prompt(renderer, second, tools_b, None, cache=cache).ids
    assert got == build_prompt(renderer, second, tools_b, None).ids


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({"command": "ls", "n": 1}, {"n": 1, "command": "ls"}),  # same dict, other key order
        ({"command": "ls", "n": 1}, {"command": "ls", "n": True}),  # 1 == True
        ({"command": "ls", "n": 1}, {"command": "ls", "n": 1.0}),  # 1 == 1.0
    ],
)
def test_equal_but_differently_rendered_arguments(
    renderer: ChatRenderer, a: dict[str, Any], b: dict[str, Any]
) -> None:
    _check(renderer, _conv(a), _conv(b))


def test_tools_reordered_keys(renderer: ChatRenderer) -> None:
    t2 = [{"function": TOOLS[0]["function"], "type": "function"}]
    f = dict(reversed(list(TOOLS[0]["function"].items())))
    t3 = [{"type": "function", "function": f}]
    conv = _conv({"command": "ls"})
    _check(renderer, conv, conv, TOOLS, t2)
    _check(renderer, conv, conv, TOOLS, t3)


def test_same_length_rewrite_and_replay(renderer: ChatRenderer) -> None:
    long = [*_conv({"command": "ls"}), {"role": "user", "content": "more"}]
    edited = [dict(m) for m in long]
    edited[1] = {"role": "user", "content": "og"}
    _check(renderer, long, edited)
    _check(renderer, long, long[:2])
    _check(renderer, long, [{"role": "user", "content": "x"}])


def test_content_true_vs_one(renderer: ChatRenderer) -> None:
    a = [{"role": "user", "content": "hi", "name": 1}]
    b = [{"role": "user", "content": "hi", "name": True}]
    _check(renderer, [*a, {"role": "user", "content": "x"}], [*b, {"role": "user", "content": "x"}])


def test_boundary_merges_system_and_tools_changes(renderer: ChatRenderer) -> None:
    a = [{"role": "user", "content": "hel"}, {"role": "assistant", "content": "lo<|im_end|>"}]
    b = [*a, {"role": "user", "content": "lo wor"}, {"role": "user", "content": "ld"}]
    _check(renderer, a, b)
    sys_a = [{"role": "system", "content": "s"}, *b]
    sys_b = [{"role": "system", "content": "t"}, *b]
    _check(renderer, sys_a, sys_b)
    _check(renderer, b, b, None, TOOLS)
    _check(renderer, b, b, TOOLS, None)
    _check(renderer, b, b, TOOLS, [])
