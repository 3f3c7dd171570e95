"""Incremental prompts: a session's :class:`PromptCache` re-renders and re-tokenizes
only the messages a request adds, and the ids are exactly those of a build without the cache
(Hypothesis: random appending conversations, with edits that drop turns, client text that
spells control tokens, runs of tool results and spliced assistant turns, through each wire
API's request normaliser, on the Qwen3 ChatML template and SmolLM2's injected tool prompt)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from clawrl.proxy import ChatRenderer, anthropic_messages, openai_chat, openai_responses
from clawrl.proxy.splice import (
    Generation,
    PromptCache,
    SpliceMemory,
    build_prompt,
    canonical_key,
    message_key,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import function_tool

TOOLS = [function_tool("bash", "Run a command", command="string")]
WIRES = {"chat": openai_chat.WIRE, "anthropic": anthropic_messages.WIRE}
WIRES["responses"] = openai_responses.WIRE

#: client text, sometimes spelling a control token (encoded as text, never as the token)
text = st.text(alphabet='ab xy.:{}"\n-é', max_size=12) | st.sampled_from(
    ["<|im_end|>", "x<tool_call>y", "<think>", "</tool_response>"]
)
step = st.tuples(
    text,  # assistant content
    st.lists(st.tuples(st.sampled_from(["ls", "cat a"]), text), max_size=2),  # tool calls
    st.lists(text, min_size=1, max_size=3),  # tool results (or the user's reply when no call)
    st.integers(0, 5),  # 0: the harness drops the last turn (an edit); 1: a call mid-results
)


@pytest.fixture(scope="module")
def renderers(renderer: ChatRenderer) -> dict[str, ChatRenderer]:
    from clawrl.proxy.model_kit import default_cache_dir

    out = {"qwen3-chatml": renderer}
    smol = Path(default_cache_dir()) / "smollm2-135m-instruct"
    if (smol / "tokenizer.json").exists():  # fetched by test_model_families (CI fetches it)
        out["smollm2"] = ChatRenderer.from_model_dir(smol)
    return out


def _body(wire: str, conv: list[dict[str, Any]]) -> dict[str, Any]:
    """The request of ``conv`` (neutral turns) in ``wire``'s own shape."""
    if wire == "chat":
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
        for t in conv:
            if t["role"] == "assistant":
                m: dict[str, Any] = {"role": "assistant", "content": t["content"]}
                if t["calls"]:
                    m["tool_calls"] = [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": "bash", "arguments": a},
                        }
                        for cid, a in t["calls"]
                    ]
                msgs.append(m)
            elif t["role"] == "tool":
                msgs.append({"role": "tool", "tool_call_id": t["id"], "content": t["content"]})
            else:
                msgs.append({"role": "user", "content": t["content"]})
        return {"model": "m", "messages": msgs, "tools": TOOLS}
    if wire == "anthropic":
        out: list[dict[str, Any]] = []
        for t in conv:
            if t["role"] == "assistant":
                blocks: list[dict[str, Any]] = []
                if t["content"]:
                    blocks.append({"type": "text", "text": t["content"]})
                blocks += [
                    {"type": "tool_use", "id": cid, "name": "bash", "input": json.loads(a)}
                    for cid, a in t["calls"]
                ]
                out.append(
                    {"role": "assistant", "content": blocks or [{"type": "text", "text": "."}]}
                )
            elif t["role"] == "tool":
                block = {"type": "tool_result", "tool_use_id": t["id"], "content": t["content"]}
                if out and out[-1]["role"] == "user" and out[-1].get("_results"):
                    out[-1]["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block], "_results": True})
            else:
                out.append({"role": "user", "content": t["content"] or "."})
        for m in out:
            m.pop("_results", None)
        anthropic_tools = [
            {
                "name": "bash",
                "description": "Run",
                "input_schema": TOOLS[0]["function"]["parameters"],
            }
        ]
        return {
            "model": "m",
            "system": "sys",
            "messages": out,
            "tools": anthropic_tools,
            "max_tokens": 8,
        }
    items: list[dict[str, Any]] = []
    for t in conv:
        if t["role"] == "assistant":
            if t["content"]:
                items.append({"type": "message", "role": "assistant", "content": t["content"]})
            items += [
                {"type": "function_call", "call_id": cid, "name": "bash", "arguments": a}
                for cid, a in t["calls"]
            ]
        elif t["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": t["id"], "output": t["content"]}
            )
        else:
            items.append({"type": "message", "role": "user", "content": t["content"] or "."})
    tools = [
        {
            "type": "function",
            "name": "bash",
            **{k: v for k, v in TOOLS[0]["function"].items() if k != "name"},
        }
    ]
    return {"model": "m", "instructions": "sys", "input": items, "tools": tools}


def _same(a: Any, b: Any) -> None:
    assert a.ids == b.ids
    assert a.spliced == b.spliced and a.matched == b.matched
    assert a.unit_ends == b.unit_ends


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(step, min_size=1, max_size=6),
    wire=st.sampled_from(sorted(WIRES)),
    template=st.sampled_from(["qwen3-chatml", "smollm2"]),
    seed=st.integers(0, 10**6),
)
def test_incremental_ids_equal_a_full_build(
    renderers: dict[str, ChatRenderer], steps: list[Any], wire: str, template: str, seed: int
) -> None:
    r = renderers.get(template)
    if r is None:
        pytest.skip(f"{template} not fetched")
    rng = random.Random(seed)
    memory, cache = SpliceMemory(), PromptCache()
    conv: list[dict[str, Any]] = [{"role": "user", "content": "task"}]

    def check() -> Any:
        call = WIRES[wire].parse_request(_body(wire, conv)).call
        got = build_prompt(r, call.messages, call.tools, memory, cache=cache)
        _same(got, build_prompt(r, call.messages, call.tools, memory))
        return got

    for n, (content, calls, results, edit) in enumerate(steps):
        got = check()
        # the model's answer: remembered with exact ids that differ from the template's render
        cids = [(f"c{n}-{i}", json.dumps({"command": c + a})) for i, (c, a) in enumerate(calls)]
        key = canonical_key(None, content, [("bash", json.loads(a)) for _, a in cids])
        comp = [rng.randrange(3, 200) for _ in range(rng.randint(0, 4))] + [r.stop_token_ids[0]]
        memory.remember(key, Generation(f"call{n}", tuple(got.ids), tuple(comp)))
        conv.append({"role": "assistant", "content": content, "calls": cids})
        for i, (cid, _) in enumerate(cids):
            conv.append({"role": "tool", "id": cid, "content": results[i % len(results)]})
            if edit == 1 and i == 0 and len(cids) > 1:
                check()  # a request between two tool results (the run grows afterwards)
        if not cids:
            conv.append({"role": "user", "content": results[0]})
        if edit == 0 and len(conv) > 2:
            del conv[-2:]  # a harness that rewrites its history


def test_the_cache_reuses_earlier_units(renderer: ChatRenderer) -> None:
    """The cache is used: the shared messages are not rendered or encoded again, and a new
    generation for a reused assistant turn's key invalidates that turn."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "do it"},
    ]
    memory, cache = SpliceMemory(), PromptCache()
    first = build_prompt(renderer, msgs, TOOLS, memory, cache=cache)
    answer = {"role": "assistant", "content": "done"}
    memory.remember(message_key(answer), Generation("c0", tuple(first.ids), (5, 6, 7)))
    msgs += [answer, {"role": "user", "content": "again"}]
    calls: list[str] = []
    encode = renderer.encode_unit

    def spy(t: str, d: str | None = None) -> list[int]:
        calls.append(t)
        return encode(t, d)

    renderer.encode_unit = spy  # type: ignore[method-assign]
    try:
        second = build_prompt(renderer, msgs, TOOLS, memory, cache=cache)
        assert not any("do it" in t for t in calls)  # the shared user turn was not encoded
        assert second.spliced and second.ids[: len(first.ids) - 3] == first.ids[:-3]
        # a second generation with the same key: the assistant turn is built again
        memory.remember(message_key(answer), Generation("c1", tuple(first.ids), (8, 9)))
        calls.clear()
        msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        third = build_prompt(renderer, msgs, TOOLS, memory, cache=cache)
    finally:
        del renderer.encode_unit
    assert third.ids == build_prompt(renderer, msgs, TOOLS, memory).ids
    assert not any("do it" in t for t in calls)
