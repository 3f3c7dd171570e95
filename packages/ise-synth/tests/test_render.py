import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from clawrl.ise_synth import (
    IntentSampler,
    LLMRenderer,
    RenderError,
    TemplateRenderer,
    llm_messages,
    load_taxonomy,
)

TAX = load_taxonomy()


def test_template_rendering_is_deterministic_and_mentions_every_task() -> None:
    sampler, renderer = IntentSampler(TAX, seed=3), TemplateRenderer()
    texts = set()
    for i in range(300):
        spec = sampler.draw(i)
        text = renderer.render(spec)
        assert text == renderer.render(sampler.draw(i))
        for sel in spec.domains:
            for task in sel.tasks:
                assert task.task.lower() in text.lower()
        assert "  " not in text and text == text.strip()
        assert " a expert" not in text and " a architect" not in text
        texts.add(text)
    assert len(texts) == 300


class _FakeChatServer:
    """A fake OpenAI-compatible Chat Completions endpoint (stdlib http.server), named as such:
    no LLM runs in unit tests. Answers with ``reply`` and records request bodies."""

    def __init__(self, reply: str, status: int = 200) -> None:
        self.reply, self.status, self.bodies = reply, status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.bodies.append(body)
                payload: dict[str, Any] = {
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": outer.reply}}],
                }  # fmt: skip
                if outer.status != 200:
                    payload = {"error": {"message": "boom", "type": "server_error"}}
                data = json.dumps(payload).encode()
                self.send_response(outer.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_FakeChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_llm() -> Iterator[_FakeChatServer]:
    with _FakeChatServer('<think>plan it</think>\n"Hey, can you merge my CSV exports?"') as s:
        yield s


def test_llm_renderer_sends_our_prompt_and_cleans_the_answer(fake_llm: _FakeChatServer) -> None:
    spec = IntentSampler(TAX, seed=0).draw(5)
    renderer = LLMRenderer("tiny", base_url=fake_llm.url, api_key="k", temperature=0.7,
                           styles=TAX.communication_styles)  # fmt: skip

    async def go() -> str:
        try:
            return await renderer.render(spec)
        finally:
            await renderer.aclose()

    assert asyncio.run(go()) == "Hey, can you merge my CSV exports?"
    body = fake_llm.bodies[0]
    assert body["model"] == "tiny" and body["temperature"] == 0.7
    assert body["messages"] == llm_messages(
        spec, TAX.communication_styles[spec.persona.communication_style]
    )
    user = body["messages"][1]["content"]
    assert spec.persona.role in user and spec.complexity in user
    assert all(t.task in user for sel in spec.domains for t in sel.tasks)


@pytest.mark.parametrize(
    ("reply", "status"), [("   ", 200), ("<think>only</think>", 200), ("x", 400)]
)
def test_llm_renderer_failures_raise_render_error(reply: str, status: int) -> None:
    spec = IntentSampler(TAX, seed=0).draw(0)
    with _FakeChatServer(reply, status) as server:
        renderer = LLMRenderer("tiny", base_url=server.url, max_retries=0)

        async def go() -> str:
            try:
                return await renderer.render(spec)
            finally:
                await renderer.aclose()

        with pytest.raises(RenderError):
            asyncio.run(go())
