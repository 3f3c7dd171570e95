"""Official openai / anthropic SDKs against a live proxy (unix socket) on the scripted
backend: deterministic tool-call round trips, streamed and not."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from clawrl.proxy import format_assistant_text

TOOLS_OAI = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]
TOOLS_ANT = [
    {
        "name": "bash",
        "description": "Run a shell command",
        "input_schema": TOOLS_OAI[0]["function"]["parameters"],
    }
]
TURN1 = format_assistant_text(
    reasoning="I should list files.",
    content="Listing.",
    tool_calls=[("bash", {"command": "ls -la"})],
)
TURN2 = format_assistant_text(reasoning="Done now.", content="There is one file: a.txt")


@pytest.fixture
def live(live_factory: Any, scripted: Any) -> Any:
    return live_factory(scripted)


def _check_records(live: Any, sid: str, renderer: Any, texts: list[str]) -> list[dict[str, Any]]:
    with live.admin() as admin:
        recs = admin.records(sid)
    assert [r["seq"] for r in recs] == list(range(len(texts)))
    for rec, text in zip(recs, texts, strict=True):
        assert len(rec["completion_logprobs"]) == len(rec["completion_ids"]) > 0
        assert all(lp == 0.0 for lp in rec["completion_logprobs"])
        assert renderer.decode(rec["completion_ids"]) == text + "<|im_end|>"
        assert rec["prompt_ids"] and all(isinstance(t, int) for t in rec["prompt_ids"])
    return recs


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_sdk_tool_round_trip(live: Any, scripted: Any, renderer: Any, stream: bool) -> None:
    with live.admin() as admin:
        s = admin.create_session(run_id="sdk", task_id="t", harness="openai-sdk", group_id="g")
        admin.script(s.session_id, [TURN1, TURN2])
    client = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
    )
    messages: list[Any] = [
        {"role": "developer", "content": "You are a helpful agent."},
        {"role": "user", "content": "What files are here?"},
    ]

    def ask() -> tuple[str | None, str | None, list[Any], str]:
        if not stream:
            r = client.chat.completions.create(
                model="tiny", messages=messages, tools=TOOLS_OAI, max_completion_tokens=512
            )
            m = r.choices[0].message
            assert r.usage is not None and r.usage.completion_tokens > 0
            reasoning = getattr(m, "reasoning_content", None) or (m.model_extra or {}).get(
                "reasoning_content"
            )
            return m.content, reasoning, list(m.tool_calls or []), str(r.choices[0].finish_reason)
        content, reasoning, finish = "", "", ""
        calls: dict[int, dict[str, Any]] = {}
        usage = None
        for chunk in client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=TOOLS_OAI,
            max_completion_tokens=512,
            stream=True,
            stream_options={"include_usage": True},
        ):
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                d = ch.delta
                content += d.content or ""
                reasoning += (d.model_extra or {}).get("reasoning_content") or ""
                for tc in d.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function:
                        c["name"] += tc.function.name or ""
                        c["arguments"] += tc.function.arguments or ""
                finish = ch.finish_reason or finish
        assert usage is not None and usage.completion_tokens > 0
        tcs = [
            openai.types.chat.ChatCompletionMessageToolCall(
                id=c["id"],
                type="function",
                function={"name": c["name"], "arguments": c["arguments"]},
            )
            for _, c in sorted(calls.items())
        ]
        return content or None, reasoning or None, tcs, finish

    content, reasoning, tool_calls, finish = ask()
    assert finish == "tool_calls"
    assert content == "Listing." and reasoning == "I should list files."
    assert len(tool_calls) == 1 and tool_calls[0].function.name == "bash"
    assert json.loads(tool_calls[0].function.arguments) == {"command": "ls -la"}
    messages.append(
        {
            "role": "assistant",
            "content": content,
            "reasoning_content": reasoning,
            "tool_calls": [tc.model_dump() for tc in tool_calls],
        }
    )
    messages.append({"role": "tool", "tool_call_id": tool_calls[0].id, "content": "a.txt"})
    content, reasoning, tool_calls, finish = ask()
    assert finish == "stop" and content == "There is one file: a.txt" and not tool_calls
    recs = _check_records(live, s.session_id, renderer, [TURN1, TURN2])
    assert recs[0]["finish_reason"] == "tool_calls" and recs[1]["finish_reason"] == "stop"
    assert recs[1]["prompt_relation"]["kind"] in ("extends", "spliced")
    assert recs[1]["prompt_relation"]["parent_call_id"] == recs[0]["call_id"]
    assert recs[0]["metadata"]["harness"] == "openai-sdk"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_sdk_tool_round_trip(live: Any, renderer: Any, stream: bool) -> None:
    with live.admin() as admin:
        s = admin.create_session(run_id="sdk", task_id="t", harness="anthropic-sdk")
        admin.script(s.session_id, [TURN1, TURN2])
    client = anthropic.Anthropic(
        base_url=s.anthropic_base_url, api_key=s.api_key, http_client=live.http_client("httpx2")
    )
    messages: list[Any] = [{"role": "user", "content": "What files are here?"}]

    def ask() -> Any:
        kw: dict[str, Any] = dict(
            model="tiny",
            max_tokens=512,
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=messages,
            tools=TOOLS_ANT,
        )
        if not stream:
            return client.messages.create(**kw)
        with client.messages.stream(**kw) as st:
            kinds = [ev.type for ev in st]
            msg = st.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        return msg

    m = ask()
    assert m.stop_reason == "tool_use"
    kinds = [b.type for b in m.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert m.content[0].thinking == "I should list files."
    assert m.content[1].text == "Listing."
    tu = m.content[2]
    assert tu.name == "bash" and tu.input == {"command": "ls -la"}
    assert m.usage.output_tokens > 0 and m.usage.input_tokens > 0
    messages.append({"role": "assistant", "content": [b.model_dump() for b in m.content]})
    messages.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "a.txt"}],
        }
    )
    m = ask()
    assert m.stop_reason == "end_turn"
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[1].text == "There is one file: a.txt"
    recs = _check_records(live, s.session_id, renderer, [TURN1, TURN2])
    assert recs[1]["prompt_relation"]["kind"] in ("extends", "spliced")
    # count_tokens gives the prompt length the proxy would render
    n = client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert n.input_tokens == len(
        renderer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    )


def test_unix_socket_models_and_health(live: Any) -> None:
    with live.admin() as admin:
        s = admin.create_session()
    client = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
    )
    assert [m.id for m in client.models.list()] == ["clawrl"]
    http = live.http_client()
    assert http.head("http://x/").status_code == 200
    assert http.get("http://x/health").json()["status"] == "ok"


def test_sdks_see_a_context_overflow_as_a_typed_400_and_the_proxy_records_it(
    live_factory: Any, model_dir: Any
) -> None:
    """A prompt longer than the context window: both official SDKs raise their typed
    BadRequestError (OpenAI: type invalid_request_error, code context_length_exceeded;
    Anthropic: type invalid_request_error, "prompt is too long"), and the proxy writes a
    record of each refused call (error_code, flags; no_model_turns only while the prompt
    holds nothing the model wrote), which is how a rollout is classified afterwards."""
    from clawrl.proxy.testing import ScriptedBackend

    live = live_factory(ScriptedBackend.from_model_dir(model_dir, max_context=96))
    with live.admin() as admin:
        s = admin.create_session(run_id="sdk", task_id="t", harness="sdk")
    oai = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client(), max_retries=0
    )
    long_text = "word " * 200
    with pytest.raises(openai.BadRequestError) as e1:
        oai.chat.completions.create(model="tiny", messages=[{"role": "user", "content": long_text}])
    assert e1.value.status_code == 400
    assert e1.value.code == "context_length_exceeded" and e1.value.type == "invalid_request_error"
    assert "prompt is too long" in e1.value.message
    ant = anthropic.Anthropic(
        base_url=s.anthropic_base_url,
        api_key=s.api_key,
        http_client=live.http_client("httpx2"),
        max_retries=0,
    )
    with pytest.raises(anthropic.BadRequestError) as e2:
        ant.messages.create(
            model="tiny",
            max_tokens=16,
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": long_text},
            ],
        )
    assert e2.value.status_code == 400
    body: Any = e2.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long")
    with live.admin() as admin:
        recs = admin.records(s.session_id)
    assert [r["seq"] for r in recs] == [0, 1]
    for rec in recs:
        assert rec["error_code"] == "context_length_exceeded"
        assert rec["finish_reason"] == "error" and rec["completion_ids"] == []
        assert "context_overflow" in rec["flags"]
    assert "no_model_turns" in recs[0]["flags"]
    assert "no_model_turns" not in recs[1]["flags"]


def test_a_context_cap_below_the_backends_refuses_longer_calls_the_same_typed_way(
    live_factory: Any, model_dir: Any
) -> None:
    """``max_context`` (a trainer's one-forward budget) below the backend's own limit: a
    call that fits the backend but not the cap gets the same typed 400 and record as a real
    overflow, a call within the cap is served, and ``/v1/models`` reports the cap."""
    from clawrl.proxy.testing import ScriptedBackend

    live = live_factory(ScriptedBackend.from_model_dir(model_dir, max_context=4096), max_context=96)
    with live.admin() as admin:
        s = admin.create_session(run_id="sdk", task_id="t", harness="sdk")
        admin.script(s.session_id, ["short answer"])
    oai = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client(), max_retries=0
    )
    assert oai.models.list().data[0].model_extra["max_model_len"] == 96
    ok = oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=8
    )
    assert ok.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as e1:
        oai.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "w " * 150}]
        )  # within the characters 96 tokens may hold, so it is tokenized and counted
    assert e1.value.code == "context_length_exceeded"
    assert "> 95 maximum" in e1.value.message
    with live.admin() as admin:
        recs = admin.records(s.session_id)
    assert recs[-1]["error_code"] == "context_length_exceeded"
    assert "context_overflow" in recs[-1]["flags"]
