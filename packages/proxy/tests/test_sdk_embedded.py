"""Official SDKs against a live proxy on the embedded backend (the kit's tiny byte model):
responses parse, records hold ids and logprobs, and the recorded ids decode to what was
returned."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from clawrl.proxy import parse_completion

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def embedded_live(
    renderer: Any, model_dir: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One live proxy on one EmbeddedBackend for the module (the backend binds to the
    server's event loop)."""
    import shutil
    import tempfile

    import torch
    from clawrl.proxy import EmbeddedBackend, ServerConfig, build_proxy_app

    from .conftest import LiveProxy

    torch.set_num_threads(1)
    backend = EmbeddedBackend(model_dir, seed=0)
    sockdir = tempfile.mkdtemp(prefix="clawrl-emb-", dir="/tmp")
    cfg = ServerConfig(
        socket=f"{sockdir}/m.sock",
        admin_socket=f"{sockdir}/a.sock",
        capture_dir=str(tmp_path_factory.mktemp("cap")),
    )
    live = LiveProxy(build_proxy_app(renderer, backend, cfg), cfg)
    yield live, backend
    live.stop()
    shutil.rmtree(sockdir, ignore_errors=True)


def _expected(renderer: Any, rec: dict[str, Any]) -> Any:
    text = renderer.decode(rec["completion_ids"])
    reason = "length" if rec["finish_reason"] == "length" else "stop"
    return parse_completion(text, finish_reason=reason)


def _check(rec: dict[str, Any], version: int) -> None:
    assert len(rec["completion_ids"]) == len(rec["completion_logprobs"]) > 0
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in rec["completion_logprobs"])
    assert rec["policy_version"] == version
    assert rec["sampling"]["backend"] == "embedded"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_sdk_on_embedded(embedded_live: Any, renderer: Any, stream: bool) -> None:
    live, embedded = embedded_live
    with live.admin() as admin:
        s = admin.create_session(run_id="emb", harness="openai-sdk")
    client = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
    )
    kw: dict[str, Any] = dict(
        model="tiny",
        messages=[{"role": "user", "content": "hello"}],
        tools=TOOLS,
        max_completion_tokens=24,
        temperature=1.0,
        seed=1,
    )
    if stream:
        content, reasoning, args = "", "", ""
        for chunk in client.chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                content += ch.delta.content or ""
                reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
                for tc in ch.delta.tool_calls or []:
                    args += (tc.function.arguments or "") if tc.function else ""
    else:
        m = client.chat.completions.create(**kw).choices[0].message
        content = m.content or ""
        reasoning = (m.model_extra or {}).get("reasoning_content") or ""
        args = "".join(tc.function.arguments for tc in m.tool_calls or [])
    with live.admin() as admin:
        (rec,) = admin.records(s.session_id)
    _check(rec, embedded.policy_version)
    exp = _expected(renderer, rec)
    assert content == exp.content
    assert reasoning == (exp.reasoning or "")
    assert args == "".join(json.dumps(c.arguments, ensure_ascii=False) for c in exp.tool_calls)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_sdk_on_embedded(embedded_live: Any, renderer: Any, stream: bool) -> None:
    live, embedded = embedded_live
    with live.admin() as admin:
        s = admin.create_session(run_id="emb", harness="anthropic-sdk")
    client = anthropic.Anthropic(
        base_url=s.anthropic_base_url, api_key=s.api_key, http_client=live.http_client("httpx2")
    )
    kw: dict[str, Any] = dict(
        model="tiny",
        max_tokens=24,
        messages=[{"role": "user", "content": "hello"}],
        tools=[{"name": "bash", "input_schema": TOOLS[0]["function"]["parameters"]}],
    )
    if stream:
        with client.messages.stream(**kw) as st:
            msg = st.get_final_message()
    else:
        msg = client.messages.create(**kw)
    with live.admin() as admin:
        (rec,) = admin.records(s.session_id)
    _check(rec, embedded.policy_version)
    exp = _expected(renderer, rec)
    texts = "".join(b.text for b in msg.content if b.type == "text")
    assert texts == exp.content
    assert [b.input for b in msg.content if b.type == "tool_use"] == [
        c.arguments for c in exp.tool_calls
    ]
    assert msg.usage.output_tokens == len(rec["completion_ids"])
