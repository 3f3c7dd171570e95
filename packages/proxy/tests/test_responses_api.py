"""The OpenAI Responses API: the official ``openai`` SDK (``client.responses.create``,
streamed and not, with tools) against a live proxy on the scripted backend, the Codex-style
request fields, reasoning round trips that splice, typed errors, fuzzed bodies."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from clawrl.proxy import format_assistant_text
from clawrl.proxy.openai_responses import decode_reasoning_token, encode_reasoning_token
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .strategies import json_value, request_bodies

TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a shell command",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    },
    {"type": "web_search", "external_web_access": False},
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "agents",
        "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}}],
    },
]
TURN1 = format_assistant_text(
    reasoning="I should list files.", content="", tool_calls=[("exec_command", {"cmd": "ls -la"})]
)
TURN2 = format_assistant_text(reasoning="Done now.", content="There is one file: a.txt")


@pytest.fixture
def live(live_factory: Any, scripted: Any) -> Any:
    return live_factory(scripted)


def _client(live: Any, script: list[str]) -> tuple[openai.OpenAI, str]:
    with live.admin() as admin:
        s = admin.create_session(run_id="r", task_id="t", harness="codex", group_id="g")
        admin.script(s.session_id, script)
    return (
        openai.OpenAI(
            base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
        ),
        s.session_id,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_sdk_responses_tool_round_trip(live: Any, renderer: Any, stream: bool) -> None:
    client, sid = _client(live, [TURN1, TURN2])
    items: list[Any] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are a coding agent."}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "What files are here?"}],
        },
    ]
    extra = {
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "sess-1",
        "reasoning": {"summary": "auto"},
        "parallel_tool_calls": True,
    }

    def ask() -> Any:
        if not stream:
            return client.responses.create(model="tiny", input=items, tools=TOOLS, **extra)
        kinds: list[str] = []
        final = None
        deltas = {"text": "", "args": "", "reasoning": ""}
        with client.responses.create(
            model="tiny", input=items, tools=TOOLS, stream=True, **extra
        ) as events:
            for ev in events:
                kinds.append(ev.type)
                assert ev.sequence_number == len(kinds) - 1
                if ev.type == "response.output_text.delta":
                    deltas["text"] += ev.delta
                elif ev.type == "response.function_call_arguments.delta":
                    deltas["args"] += ev.delta
                elif ev.type == "response.reasoning_summary_text.delta":
                    deltas["reasoning"] += ev.delta
                elif ev.type == "response.completed":
                    final = ev.response
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert kinds[-1] == "response.completed"
        assert (
            kinds.count("response.output_item.added")
            == kinds.count("response.output_item.done")
            == len(final.output)
        )
        assert deltas["reasoning"] == final.output[0].summary[0].text
        for item in final.output:
            if item.type == "function_call":
                assert deltas["args"] == item.arguments
            if item.type == "message":
                assert deltas["text"] == item.content[0].text
        return final

    r1 = ask()
    assert r1.status == "completed" and r1.usage.output_tokens > 0
    kinds = [o.type for o in r1.output]
    assert kinds == ["reasoning", "function_call"]
    rs, fc = r1.output
    assert rs.summary[0].text == "I should list files."
    assert decode_reasoning_token(rs.encrypted_content)[1] == "I should list files."
    assert fc.name == "exec_command" and json.loads(fc.arguments) == {"cmd": "ls -la"}
    # echo as Codex does (items verbatim + output), with the reasoning summary dropped:
    # the encrypted_content alone carries the exact reasoning back
    echoed = rs.model_dump(exclude_none=True)
    echoed["summary"] = []
    echoed.pop("content", None)
    items += [echoed, fc.model_dump(exclude_none=True)]
    items.append({"type": "function_call_output", "call_id": fc.call_id, "output": "a.txt\n"})
    r2 = ask()
    assert r2.output_text == "There is one file: a.txt"
    assert [o.type for o in r2.output] == ["reasoning", "message"]
    with live.admin() as admin:
        recs = admin.records(sid)
    assert [r["api"] for r in recs] == ["openai.responses"] * 2
    assert recs[1]["prompt_relation"]["kind"] in ("extends", "spliced")
    first = recs[0]["prompt_ids"] + recs[0]["completion_ids"]
    assert recs[1]["prompt_ids"][: len(first)] == first
    assert renderer.decode(recs[0]["completion_ids"]) == TURN1 + "<|im_end|>"
    # web_search and the namespace were not offered to the model
    prompt = renderer.decode(recs[0]["prompt_ids"])
    assert "exec_command" in prompt and "web_search" not in prompt and "spawn" not in prompt
    assert "You are a coding agent." in prompt


def test_string_input_instructions_and_max_output_tokens(live: Any, renderer: Any) -> None:
    client, sid = _client(live, ["x" * 50])
    r = client.responses.create(
        model="tiny", input="hi", instructions="Be brief.", max_output_tokens=8
    )
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    with live.admin() as admin:
        (rec,) = admin.records(sid)
    assert rec["sampling"]["max_tokens"] == 8 and rec["finish_reason"] == "length"
    prompt = renderer.decode(rec["prompt_ids"])
    assert prompt.index("Be brief.") < prompt.index("hi")


def test_streamed_length_cut_ends_with_completed(live: Any) -> None:
    """A generation cut by the token limit ends with ``response.completed`` (status
    ``incomplete``) so that clients like Codex consume it instead of retrying."""
    client, _ = _client(live, ["y" * 50])
    with client.responses.create(model="tiny", input="hi", max_output_tokens=8, stream=True) as s:
        events = list(s)
    assert events[-1].type == "response.completed"
    final = events[-1].response
    assert final.status == "incomplete" and final.output_text


def test_typed_errors_in_responses_shape(live: Any) -> None:
    client, _ = _client(live, [])
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="tiny", input=[{"type": "nope"}])
    assert e.value.body["param"] == "input[0].type"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(
            model="tiny",
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
        )
    assert e.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="tiny", input=[])
    bad = openai.OpenAI(base_url=client.base_url, api_key="wrong", http_client=live.http_client())
    with pytest.raises(openai.AuthenticationError):
        bad.responses.create(model="tiny", input="hi")


def test_reasoning_token_round_trip() -> None:
    t = encode_reasoning_token("call-abc", "ünïcode\nthoughts")
    assert decode_reasoning_token(t) == ("call-abc", "ünïcode\nthoughts")
    assert decode_reasoning_token("gAAAA-opaque") is None
    assert decode_reasoning_token("clawrl:x:%%%") is None


# -- fuzz -----------------------------------------------------------------------------------

ITEM_TYPES = st.sampled_from(
    [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "item_reference",
        "web_search_call",
        "zz",
        None,
    ]
)
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "input_image", "refusal", "zz"])},
    optional={"text": json_value, "refusal": json_value},
)
item = st.fixed_dictionaries(
    {"type": ITEM_TYPES},
    optional={
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "x"]),
        "content": st.one_of(json_value, st.lists(PART, max_size=3)),
        "summary": st.one_of(json_value, st.lists(PART, max_size=2)),
        "encrypted_content": st.one_of(json_value, st.just("clawrl:c:aGk=")),
        "name": json_value,
        "arguments": json_value,
        "call_id": json_value,
        "output": json_value,
        "id": json_value,
    },
)
body_strategy = request_bodies(
    "input",
    item,
    instructions=json_value,
    max_output_tokens=st.one_of(st.integers(-5, 100), json_value),
    tools=st.one_of(
        json_value,
        st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["function", "web_search", "namespace", 3])},
                optional={"name": json_value, "parameters": json_value},
            ),
            max_size=2,
        ),
    ),
    tool_choice=json_value,
    store=json_value,
    include=json_value,
    prompt_cache_key=json_value,
    temperature=json_value,
    top_p=json_value,
    reasoning=json_value,
    background=json_value,
)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=body_strategy)
def test_fuzzed_responses_bodies_get_typed_4xx(fuzz_app: Any, body: Any) -> None:
    ip, sid, h = fuzz_app
    r: httpx.Response = ip.model.post(f"/s/{sid}/v1/responses", json=body, headers=h)
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        err = r.json()
        assert set(err) == {"error"} and isinstance(err["error"]["message"], str)
        assert isinstance(err["error"]["type"], str)
