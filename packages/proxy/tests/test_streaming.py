"""Pseudo-streaming: long generations keep the stream alive with SSE comments, the SDKs
still parse the stream, and an error after the 200 was sent arrives as the API's SSE error
event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from clawrl.proxy import GenerationRequest, GenerationResult, TokenDelta
from clawrl.proxy.testing import ScriptedBackend


@pytest.fixture
def slow(live_factory: Any, model_dir: Any) -> Any:
    backend = ScriptedBackend.from_model_dir(model_dir, token_delay_s=0.01)
    return live_factory(backend, keepalive_s=0.2)


def test_keepalive_comments_and_sdks_parse(slow: Any) -> None:
    with slow.admin() as admin:
        s = admin.create_session()
        admin.script(s.session_id, ["y" * 80, "z" * 80, "w" * 80])
    http = slow.http_client()
    r = http.post(
        f"http://x/s/{s.session_id}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "stream": True},
        headers={"authorization": f"Bearer {s.api_key}"},
    )
    assert r.status_code == 200 and ": keep-alive\n\n" in r.text
    assert r.text.rstrip().endswith("data: [DONE]")
    client = openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key, http_client=http)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        if c.choices
    )
    assert text == "z" * 80
    ac = anthropic.Anthropic(
        base_url=s.anthropic_base_url, api_key=s.api_key, http_client=slow.http_client("httpx2")
    )
    with ac.messages.stream(
        model="m", max_tokens=200, messages=[{"role": "user", "content": "x"}]
    ) as st:
        msg = st.get_final_message()
    assert msg.content[0].text == "w" * 80


class FailingLate(ScriptedBackend):
    """Scripted test backend that fails after streaming a few tokens."""

    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        n = 0
        async for item in super().generate(request):
            n += 1
            if n > 30:
                yield GenerationResult([], [], "error", 0, 0, error="engine crashed")
                return
            yield item


def test_error_after_keepalive_is_an_sse_error_event(live_factory: Any, model_dir: Any) -> None:
    backend = FailingLate.from_model_dir(model_dir, token_delay_s=0.02)
    live = live_factory(backend, keepalive_s=0.2)
    with live.admin() as admin:
        s = admin.create_session()
        admin.script(s.session_id, ["q" * 100, "q" * 100])
    http = live.http_client()
    hdr = {"authorization": f"Bearer {s.api_key}", "x-api-key": s.api_key}
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 200}
    r = http.post(f"http://x/s/{s.session_id}/v1/chat/completions", json=body, headers=hdr)
    assert r.status_code == 200
    assert '"code":"generation_error"' in r.text and ": keep-alive" in r.text
    r = http.post(f"http://x/s/{s.session_id}/v1/messages", json=body, headers=hdr)
    assert "event: error\ndata: " in r.text and "overloaded_error" in r.text
    with live.admin() as admin:
        assert [x["finish_reason"] for x in admin.records(s.session_id)] == ["error", "error"]


def test_fast_failure_keeps_its_status(live_factory: Any, model_dir: Any) -> None:
    backend = ScriptedBackend.from_model_dir(model_dir, max_context=64)
    live = live_factory(backend, keepalive_s=5.0)
    with live.admin() as admin:
        s = admin.create_session()
    r = live.http_client().post(
        f"http://x/s/{s.session_id}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x" * 100}], "stream": True},
        headers={"authorization": f"Bearer {s.api_key}"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
