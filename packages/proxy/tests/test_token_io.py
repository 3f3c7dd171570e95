"""Token-in/token-out: splicing, prompt relations, and nine known failure classes (fc1-fc9)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from clawrl.proxy import format_assistant_text, parse_completion
from clawrl.proxy.testing import ScriptedCompletion
from hypothesis import given, settings
from hypothesis import strategies as st

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _model_style_tool_turn(i: int) -> str:
    """A completion in a spacing / key order the chat template would not reproduce."""
    return (
        f"<think>\nstep {i}: look around\n</think>\n\n  Running step {i}.  \n"
        f'<tool_call>\n{{"name":"bash","arguments":{{"command":"echo {i}","cwd" : "/w"}}}}\n</tool_call>'
    )


def _rewrite_id(tid: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", tid) + "x"


def _echo(msg: dict[str, Any], *, keep_reasoning: bool = True) -> dict[str, Any]:
    """Echo an assistant message as a re-serialising harness does (compact, sorted-key args,
    rewritten ids)."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if keep_reasoning and msg.get("reasoning_content"):
        out["reasoning_content"] = msg["reasoning_content"]
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": _rewrite_id(tc["id"]),
                "type": "function",
                "function": {
                    "name": tc["function"]["name"],
                    "arguments": json.dumps(
                        json.loads(tc["function"]["arguments"]),
                        separators=(",", ":"),
                        sort_keys=True,
                    ),
                },
            }
            for tc in msg["tool_calls"]
        ]
    return out


def _run_conversation(
    inproc: Any, turns: int, *, keep_reasoning: bool
) -> tuple[str, list[dict[str, Any]]]:
    script = [_model_style_tool_turn(i) for i in range(turns - 1)]
    script.append("<think>\nall done\n</think>\n\nFinished.")
    sid, h = inproc.session(script)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Do ten steps."},
    ]
    for _ in range(turns):
        r = inproc.chat(sid, h, {"model": "m", "messages": messages, "tools": TOOLS})
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        messages.append(_echo(msg, keep_reasoning=keep_reasoning))
        for tc in messages[-1].get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": tc["id"], "content": "ok"})
    return sid, inproc.records(sid)


def test_ten_turn_reserialised_conversation_never_diverges(inproc: Any) -> None:
    _sid, recs = _run_conversation(inproc, 10, keep_reasoning=True)
    assert len(recs) == 10
    assert recs[0]["prompt_relation"]["kind"] == "first"
    kinds = [r["prompt_relation"]["kind"] for r in recs[1:]]
    assert set(kinds) <= {"extends", "spliced"} and "spliced" in kinds
    for prev, rec in itertools.pairwise(recs):
        full = prev["prompt_ids"] + prev["completion_ids"]
        assert rec["prompt_ids"][: len(full)] == full  # the exact generated ids, in place
        assert rec["prompt_relation"]["parent_call_id"] == prev["call_id"]
    # every earlier generation appears verbatim in the last prompt
    last = recs[-1]["prompt_ids"]
    for rec in recs[:-1]:
        n = len(rec["prompt_ids"])
        assert last[n : n + len(rec["completion_ids"])] == rec["completion_ids"]


def test_dropped_reasoning_diverges_at_the_reasoning(inproc: Any, renderer: Any) -> None:
    _sid, recs = _run_conversation(inproc, 4, keep_reasoning=False)
    for prev, rec in itertools.pairwise(recs):
        rel = rec["prompt_relation"]
        assert rel["kind"] == "diverged"
        assert rel["parent_call_id"] == prev["call_id"]
        # the parent's completion starts with <think>; the echo skipped it
        assert rel["diverged_at"] == len(prev["prompt_ids"])
        assert prev["completion_ids"][0] == renderer.encode("<think>")[0]
        assert rec["prompt_ids"][: rel["diverged_at"]] == prev["prompt_ids"]


def test_fc1_no_empty_reasoning_block_inserted_or_removed(inproc: Any, renderer: Any) -> None:
    sid, h = inproc.session(["Plain answer.", "Second."])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    r1 = inproc.chat(sid, h, {"messages": msgs}).json()["choices"][0]["message"]
    assert "reasoning_content" not in r1
    # a client that sends reasoning_content "" must not create an empty think block
    msgs += [
        {"role": "assistant", "content": r1["content"], "reasoning_content": ""},
        {"role": "user", "content": "more"},
    ]
    assert inproc.chat(sid, h, {"messages": msgs}).status_code == 200
    recs = inproc.records(sid)
    assert recs[1]["prompt_relation"]["kind"] == "extends"
    assert "<think>" not in renderer.decode(recs[1]["prompt_ids"])


def test_fc2_separator_after_spliced_assistant_turn(inproc: Any, renderer: Any) -> None:
    sid, h = inproc.session([_model_style_tool_turn(0), "ok"])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    m = inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS}).json()["choices"][0]["message"]
    msgs += [_echo(m), {"role": "tool", "tool_call_id": "a", "content": "out"}]
    assert inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS}).status_code == 200
    r0, r1 = inproc.records(sid)
    assert r1["prompt_relation"]["kind"] == "spliced"
    end = len(r0["prompt_ids"]) + len(r0["completion_ids"])
    assert r0["completion_ids"][-1] == renderer.stop_token_ids[0]
    after = renderer.decode(r1["prompt_ids"][end:])
    assert after.startswith(
        "\n<|im_start|>user\n<tool_response>\nout\n</tool_response><|im_end|>\n"
    )


def test_fc3_consecutive_tool_results_are_one_user_turn(inproc: Any, renderer: Any) -> None:
    two = format_assistant_text(tool_calls=[("bash", {"command": "a"}), ("bash", {"command": "b"})])
    sid, h = inproc.session([two, "done"])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    m = inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS}).json()["choices"][0]["message"]
    assert len(m["tool_calls"]) == 2
    msgs.append(_echo(m))
    msgs += [
        {"role": "tool", "tool_call_id": tc["id"], "content": f"r{i}"}
        for i, tc in enumerate(msgs[-1]["tool_calls"])
    ]
    assert inproc.chat(sid, h, {"messages": msgs, "tools": TOOLS}).status_code == 200
    r0, r1 = inproc.records(sid)
    tail = renderer.decode(r1["prompt_ids"][len(r0["prompt_ids"]) + len(r0["completion_ids"]) :])
    assert tail == (
        "\n<|im_start|>user\n<tool_response>\nr0\n</tool_response>\n<tool_response>\nr1\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_fc4_rewritten_history_makes_no_false_fork(inproc: Any) -> None:
    _sid, recs = _run_conversation(inproc, 3, keep_reasoning=True)
    assert [r["prompt_relation"]["kind"] for r in recs] == ["first", "spliced", "spliced"]
    assert all(not r["flags"] for r in recs)


def test_fc5_reasoning_only_turn_is_kept(inproc: Any) -> None:
    sid, h = inproc.session(["<think>\nonly thinking\n</think>\n\n", "next"])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    m = inproc.chat(sid, h, {"messages": msgs}).json()["choices"][0]["message"]
    assert m["reasoning_content"] == "only thinking" and m["content"] == ""
    msgs += [m, {"role": "user", "content": "go on"}]
    assert inproc.chat(sid, h, {"messages": msgs}).status_code == 200
    r0, r1 = inproc.records(sid)
    assert r1["prompt_relation"]["kind"] in ("extends", "spliced")
    full = r0["prompt_ids"] + r0["completion_ids"]
    assert r1["prompt_ids"][: len(full)] == full


def test_fc6_streamed_and_plain_calls_record_the_same_ids(inproc: Any, renderer: Any) -> None:
    text = _model_style_tool_turn(3)
    sid, h = inproc.session([text, text])
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    plain = inproc.chat(sid, h, body).json()["choices"][0]["message"]
    streamed = inproc.chat(sid, h, dict(body, stream=True)).text
    r0, r1 = inproc.records(sid)
    assert (
        r0["completion_ids"]
        == r1["completion_ids"]
        == [*renderer.encode(text), renderer.stop_token_ids[0]]
    )
    args = "".join(
        tc["function"].get("arguments", "")
        for line in streamed.splitlines()
        if line.startswith("data: {")
        for ch in json.loads(line[6:])["choices"]
        for tc in ch["delta"].get("tool_calls", [])
    )
    assert json.loads(args) == json.loads(plain["tool_calls"][0]["function"]["arguments"])
    assert r1["prompt_relation"] == {
        "kind": "diverged",
        "parent_call_id": r0["call_id"],
        "diverged_at": len(r0["prompt_ids"]),
    }


def test_fc7_token_ids_and_logprobs_survive_serialisation(inproc: Any, renderer: Any) -> None:
    backend = inproc.app.core.backend
    backend.logprob = -0.123456789012345
    ids = [renderer.vocab_size - 1, 0, 255, renderer.stop_token_ids[0]]
    sid, h = inproc.session([ScriptedCompletion(ids=ids)])
    assert inproc.chat(sid, h, {"messages": [{"role": "user", "content": "x"}]}).status_code == 200
    (via_admin,) = inproc.records(sid)
    from clawrl.proxy import read_records

    session = inproc.app.core.sessions.get(sid)
    (via_file,) = read_records(session.capture_path)
    for rec in (via_admin, via_file):
        assert rec["completion_ids"] == ids
        assert rec["completion_logprobs"] == [-0.123456789012345] * 4
        assert rec["prompt_ids"] == renderer.encode(
            "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
        )


def test_fc8_length_truncated_tool_call_is_returned_as_text(inproc: Any, renderer: Any) -> None:
    text = format_assistant_text(content="Run:", tool_calls=[("bash", {"command": "ls -la /tmp"})])
    sid, h = inproc.session([text])
    r = inproc.chat(
        sid,
        h,
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": TOOLS,
            "max_tokens": len(renderer.encode(text)) - 8,
        },
    )
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert "tool_calls" not in choice["message"]
    assert choice["message"]["content"].startswith("Run:\n<tool_call>")
    (rec,) = inproc.records(sid)
    assert rec["flags"] == ["truncated_tool_call"] and rec["finish_reason"] == "length"


@pytest.mark.parametrize(
    "body",
    [
        '{"arguments": {"a": 1}}',
        '{"name": "bash", "arguments": {"a": 1}',
        "not json",
        '["bash"]',
        '{"name": 3, "arguments": {}}',
        '{"name": "bash", "arguments": [1]}',
    ],
    ids=[
        "missing-name",
        "invalid-json",
        "not-json",
        "not-object",
        "name-not-string",
        "args-not-object",
    ],
)
def test_fc9_malformed_tool_call_is_flagged_text(inproc: Any, body: str) -> None:
    text = f"Try:\n<tool_call>\n{body}\n</tool_call>"
    sid, h = inproc.session([text])
    for api in ("openai", "anthropic"):
        if api == "anthropic":
            sid, h = inproc.session([text])
            m = inproc.messages(
                sid, h, {"max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}
            ).json()
            assert m["stop_reason"] == "end_turn" and [b["type"] for b in m["content"]] == ["text"]
            assert m["content"][0]["text"] == text
        else:
            ch = inproc.chat(
                sid, h, {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
            ).json()
            assert ch["choices"][0]["finish_reason"] == "stop"
            assert ch["choices"][0]["message"]["content"] == text
        (rec,) = inproc.records(sid)
        assert rec["flags"] == ["ill_formed_tool_call"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "<think>",
                    "</think>",
                    "<tool_call>",
                    "</tool_call>",
                    "{",
                    "}",
                    '"name"',
                    ":",
                    '"arguments"',
                    "\n",
                    "<|im_end|>",
                ]
            ),
            st.text(max_size=8),
        ),
        max_size=30,
    ),
    st.sampled_from(["stop", "length"]),
)
def test_fc9_parser_never_crashes_or_guesses(pieces: list[str], finish: str) -> None:
    text = "".join(pieces)
    p = parse_completion(text, finish_reason=finish)
    for c in p.tool_calls:
        assert isinstance(c.name, str) and isinstance(c.arguments, dict)
    if p.flags:
        assert not p.tool_calls
    if finish == "stop" and "truncated_tool_call" in p.flags:
        pytest.fail("truncated flag without a length finish")
