"""Replays of the requests real harnesses sent (fixtures captured by running the harness
programs against a recording endpoint; packages/proxy/tests/fixtures/harness_requests):
every field is accepted (2xx), streamed answers are well-formed, and when the scripted
backend answers what the recording endpoint answered, the echoed history splices."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clawrl.proxy import format_assistant_text

FIXTURES = Path(__file__).parent / "fixtures" / "harness_requests"
SKIP_HEADERS = {
    "authorization",
    "x-api-key",
    "api-key",
    "host",
    "content-length",
    "cookie",
    "accept-encoding",
    "connection",
    "transfer-encoding",
}


def _fixtures() -> list[Path]:
    files = sorted(FIXTURES.glob("*/*.json"))
    return [
        f
        for f in files
        if json.loads(f.read_text())["path"]
        in ("/v1/chat/completions", "/v1/messages", "/v1/responses")
    ]


def _folders() -> list[str]:
    return sorted({f.parent.name for f in _fixtures()})


def _send(inproc: Any, sid: str, key: str, doc: dict[str, Any]) -> Any:
    headers = {k: v for k, v in doc["headers"].items() if k.lower() not in SKIP_HEADERS}
    if doc["path"] == "/v1/messages":
        headers["x-api-key"] = key
    else:
        headers["authorization"] = f"Bearer {key}"
    return inproc.model.post(
        f"/s/{sid}{doc['path']}",
        params=doc.get("query") or {},
        headers=headers,
        content=json.dumps(doc["body"]).encode(),
    )


@pytest.fixture
def inproc(renderer: Any, model_dir: Path, tmp_path: Path) -> Iterator[Any]:
    """Scripted backend with a window wide enough for byte-tokenized harness prompts
    (Claude Code's ~11k-token prompt is ~52k bytes)."""
    from clawrl.proxy import ServerConfig, build_proxy_app
    from clawrl.proxy.testing import ScriptedBackend

    from .conftest import InProcess

    backend = ScriptedBackend.from_model_dir(model_dir, max_context=1 << 18)
    cfg = ServerConfig(socket="s", admin_socket="a", capture_dir=str(tmp_path))
    ip = InProcess(build_proxy_app(renderer, backend, cfg))
    yield ip
    ip.close()


def test_fixtures_present() -> None:
    assert len(_fixtures()) >= 15, "harness request fixtures are missing"


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_harness_request_is_accepted(inproc: Any, path: Path) -> None:
    doc = json.loads(path.read_text())
    sid, h = inproc.session(harness=doc["harness"])
    r = _send(inproc, sid, h["authorization"].split()[1], doc)
    assert r.status_code == 200, r.text[:2000]
    if doc["body"].get("stream"):
        assert r.headers["content-type"].startswith("text/event-stream")
        if doc["path"] == "/v1/messages":
            assert "event: message_stop" in r.text
        elif doc["path"] == "/v1/responses":
            assert r.text.rstrip().split("\n")[0] == "event: response.created"
            assert "event: response.completed" in r.text
        else:
            assert r.text.rstrip().endswith("data: [DONE]")
    else:
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
    (rec,) = inproc.records(sid)
    assert rec["request"] == doc["body"] and rec["prompt_ids"]


def _generated_text(resp_path: Path) -> str:
    """The completion the recording endpoint sent, in the model's own output format."""
    raw = resp_path.read_text()
    reasoning, content, calls = "", "", []
    if resp_path.suffix == ".json":
        m = json.loads(raw)["choices"][0]["message"]
        reasoning = m.get("reasoning_content") or ""
        content = m.get("content") or ""
        calls = [
            (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
            for tc in m.get("tool_calls") or []
        ]
        return format_assistant_text(content=content, reasoning=reasoning or None, tool_calls=calls)
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    tool_parts: dict[int, dict[str, str]] = {}
    for ev in events:
        if "choices" in ev:  # chat.completion.chunk
            for ch in ev["choices"]:
                d = ch.get("delta") or {}
                reasoning += d.get("reasoning_content") or ""
                content += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    part = tool_parts.setdefault(tc["index"], {"name": "", "args": ""})
                    fn = tc.get("function") or {}
                    part["name"] += fn.get("name") or ""
                    part["args"] += fn.get("arguments") or ""
        elif ev.get("type") == "response.output_item.done":  # Responses API
            item = ev["item"]
            if item["type"] == "reasoning":
                reasoning += "".join(s["text"] for s in item.get("summary") or [])
            elif item["type"] == "message":
                content += "".join(c.get("text", "") for c in item["content"])
            elif item["type"] == "function_call":
                tool_parts[len(tool_parts)] = {"name": item["name"], "args": item["arguments"]}
        elif ev.get("type") == "content_block_start" and ev["content_block"]["type"] == "tool_use":
            tool_parts[ev["index"]] = {"name": ev["content_block"]["name"], "args": ""}
        elif ev.get("type") == "content_block_delta":
            d = ev["delta"]
            if d["type"] == "thinking_delta":
                reasoning += d["thinking"]
            elif d["type"] == "text_delta":
                content += d["text"]
            elif d["type"] == "input_json_delta":
                tool_parts[ev["index"]]["args"] += d["partial_json"]
    calls = [(p["name"], json.loads(p["args"] or "{}")) for _, p in sorted(tool_parts.items())]
    return format_assistant_text(content=content, reasoning=reasoning or None, tool_calls=calls)


@pytest.mark.parametrize("folder", _folders())
def test_harness_echo_relations(inproc: Any, renderer: Any, folder: str) -> None:
    """Replay a harness's three requests in order, the scripted backend answering what the
    recording endpoint answered: record how each later prompt relates to the earlier call.
    Harnesses that echo history verbatim (up to re-serialisation) never diverge."""
    docs = sorted((FIXTURES / folder).glob("*.json"))
    responses = sorted((FIXTURES / folder / "responses").iterdir())
    script = [_generated_text(p) for p in responses]
    sid, h = inproc.session(script, harness=folder)
    key = h["authorization"].split()[1]
    for p in docs:
        assert _send(inproc, sid, key, json.loads(p.read_text())).status_code == 200
    recs = inproc.records(sid)
    kinds = [r["prompt_relation"]["kind"] for r in recs]
    assert kinds[0] == "first"
    print(folder, kinds, [r["prompt_relation"]["diverged_at"] for r in recs])
    if folder.startswith("openclaw") and folder != "openclaw-openai-responses":
        # OpenClaw moves its internal-context user message to the end every turn (not in its
        # Responses mode, where it drops item ids and rewrites call ids instead): a real
        # history change, so the prompt diverges exactly where that message used to be.
        for prev, rec in itertools.pairwise(recs):
            at = rec["prompt_relation"]["diverged_at"]
            assert rec["prompt_relation"]["kind"] == "diverged"
            moved = renderer.decode((prev["prompt_ids"] + prev["completion_ids"])[at:])
            assert moved.startswith("user\n<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>")
    else:
        assert set(kinds[1:]) <= {"extends", "spliced"}, kinds
