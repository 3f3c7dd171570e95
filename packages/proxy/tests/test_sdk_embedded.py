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

from .conftest import function_tool, serve_live

TOOLS = [function_tool("bash", "Run a shell command", command="string")]


@pytest.fixture(scope="module")
def embedded_live(
    renderer: Any, model_dir: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One live proxy on one EmbeddedBackend for the module (the backend binds to the
    server's event loop)."""
    import torch
    from clawrl.proxy import EmbeddedBackend

    torch.set_num_threads(1)
    backend = EmbeddedBackend(model_dir, seed=0)
    with serve_live(renderer, backend, tmp_path_factory.mktemp("cap"), "clawrl-emb-") as live:
        yield live, backend


def _session(live: Any, harness: str) -> Any:
    with live.admin() as admin:
        return admin.create_session(run_id="emb", harness=harness)


def _recorded(embedded_live: Any, renderer: Any, session_id: str) -> tuple[dict[str, Any], Any]:
    """The session's one record, checked (ids with finite logprobs ≤ 0, the backend's policy
    version, embedded sampling), and what its decoded ids parse to."""
    live, embedded = embedded_live
    with live.admin() as admin:
        (rec,) = admin.records(session_id)
    assert len(rec["completion_ids"]) == len(rec["completion_logprobs"]) > 0
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in rec["completion_logprobs"])
    assert rec["policy_version"] == embedded.policy_version
    assert rec["sampling"]["backend"] == "embedded"
    text = renderer.decode(rec["completion_ids"])
    reason = "length" if rec["finish_reason"] == "length" else "stop"
    return rec, parse_completion(text, finish_reason=reason)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_openai_sdk_on_embedded(embedded_live: Any, renderer: Any, stream: bool) -> None:
    live = embedded_live[0]
    s = _session(live, "openai-sdk")
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
    _, exp = _recorded(embedded_live, renderer, s.session_id)
    assert content == exp.content
    assert reasoning == (exp.reasoning or "")
    assert args == "".join(json.dumps(c.arguments, ensure_ascii=False) for c in exp.tool_calls)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_sdk_on_embedded(embedded_live: Any, renderer: Any, stream: bool) -> None:
    live = embedded_live[0]
    s = _session(live, "anthropic-sdk")
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
    rec, exp = _recorded(embedded_live, renderer, s.session_id)
    texts = "".join(b.text for b in msg.content if b.type == "text")
    assert texts == exp.content
    assert [b.input for b in msg.content if b.type == "tool_use"] == [
        c.arguments for c in exp.tool_calls
    ]
    assert msg.usage.output_tokens == len(rec["completion_ids"])
