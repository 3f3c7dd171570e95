"""Robustness: fuzzed bodies, typed errors in each API's shape, 413/404/401/410/503, client
disconnects, and a proxy killed with SIGKILL during a streamed call."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from clawrl.proxy import AdminClient, ServerConfig, build_proxy_app, read_records
from clawrl.proxy.testing import ScriptedBackend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import InProcess
from .strategies import json_value, request_bodies

ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x", None])
BLOCK_TYPES = st.sampled_from(
    ["text", "tool_use", "tool_result", "thinking", "image", "redacted_thinking", "zz"]
)


def _maybe(d: dict[str, Any], key: str, strat: Any) -> Any:
    return st.one_of(st.just(d), strat.map(lambda v: {**d, key: v}))


block = st.fixed_dictionaries(
    {"type": BLOCK_TYPES},
    optional={
        "text": json_value,
        "input": json_value,
        "name": json_value,
        "id": json_value,
        "tool_use_id": json_value,
        "content": json_value,
        "thinking": json_value,
        "cache_control": json_value,
    },
)
message = st.fixed_dictionaries(
    {"role": ROLES},
    optional={
        "content": st.one_of(json_value, st.lists(block, max_size=3)),
        "tool_calls": st.one_of(
            json_value,
            st.lists(
                st.fixed_dictionaries(
                    {
                        "id": json_value,
                        "type": st.just("function"),
                        "function": st.fixed_dictionaries(
                            {}, optional={"name": json_value, "arguments": json_value}
                        ),
                    }
                ),
                max_size=2,
            ),
        ),
        "reasoning_content": json_value,
        "tool_call_id": json_value,
    },
)
request_body = request_bodies(
    "messages",
    message,
    max_tokens=st.one_of(st.integers(-5, 100), json_value),
    max_completion_tokens=st.one_of(st.integers(-5, 100), json_value),
    temperature=st.one_of(st.floats(-1, 3), json_value),
    top_p=json_value,
    n=st.one_of(st.integers(-1, 3), json_value),
    tools=json_value,
    tool_choice=json_value,
    system=json_value,
    stream_options=json_value,
    thinking=json_value,
    metadata=json_value,
    seed=json_value,
    top_k=json_value,
)


def _assert_shape(r: httpx.Response, api: str) -> None:
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        return
    assert 400 <= r.status_code < 500
    body = r.json()
    if api == "anthropic":
        assert body["type"] == "error" and isinstance(body["error"]["message"], str)
        assert isinstance(body["error"]["type"], str)
    else:
        assert set(body) == {"error"} and isinstance(body["error"]["message"], str)
        assert isinstance(body["error"]["type"], str)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=request_body)
def test_fuzzed_openai_bodies_get_typed_4xx(fuzz_app: Any, body: Any) -> None:
    ip, sid, h = fuzz_app
    _assert_shape(ip.chat(sid, h, body), "openai")


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=request_body)
def test_fuzzed_anthropic_bodies_get_typed_4xx(fuzz_app: Any, body: Any) -> None:
    ip, sid, h = fuzz_app
    _assert_shape(ip.messages(sid, h, body), "anthropic")


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=st.binary(max_size=64))
def test_fuzzed_raw_bytes_get_typed_4xx(fuzz_app: Any, raw: bytes) -> None:
    ip, sid, h = fuzz_app
    for path, api in (
        ("chat/completions", "openai"),
        ("messages", "anthropic"),
        ("messages/count_tokens", "anthropic"),
    ):
        r = ip.model.post(f"/s/{sid}/v1/{path}", content=raw, headers=h)
        _assert_shape(r, api)


def test_status_codes(inproc: InProcess) -> None:
    sid, h = inproc.session()
    ok = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    # 404 unknown session, in each API's shape
    r = inproc.chat("nope", h, ok)
    assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found"
    r = inproc.messages("nope", h, ok)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert inproc.model.get("/no/such/route").status_code == 404
    # 401 wrong or missing key
    r = inproc.chat(sid, {"authorization": "Bearer wrong"}, ok)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = inproc.messages(sid, {}, ok)
    assert r.status_code == 401 and r.json()["type"] == "error"
    key = h["authorization"].split()[1]
    assert inproc.messages(sid, {"x-api-key": key}, ok).status_code == 200
    # a session key is no admin credential, and admin routes are not on the model app
    assert inproc.model.post("/sessions", json={}, headers=h).status_code == 404
    # 413 oversized body
    big = {"messages": [{"role": "user", "content": "x" * (33 << 20)}]}
    r = inproc.chat(sid, h, big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = inproc.messages(sid, h, big)
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    # n > 1, images: typed 400
    r = inproc.chat(sid, h, dict(ok, n=2))
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"
    img = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        ]
    }
    assert inproc.chat(sid, h, img).json()["error"]["code"] == "unsupported_parameter"
    # context window exceeded: 400 with its code
    long = {"messages": [{"role": "user", "content": "y" * 50_000}]}
    r = inproc.chat(sid, h, long)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    # 410 after close
    inproc.admin.post(f"/sessions/{sid}/close")
    r = inproc.chat(sid, h, ok)
    assert r.status_code == 410 and r.json()["error"]["code"] == "session_closed"


def test_backend_down_is_503_and_recorded(renderer: Any, tmp_path: Path) -> None:
    from clawrl.proxy.backends.sglang import SGLangBackend

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = SGLangBackend(
        f"http://127.0.0.1:{port}",
        vocab_size=renderer.vocab_size,
        max_context=4096,
        connect_retries=0,
        connect_timeout=1.0,
    )
    app = build_proxy_app(
        renderer, backend, ServerConfig(socket="s", admin_socket="a", capture_dir=str(tmp_path))
    )
    app.start = _no_start  # type: ignore[method-assign]  # the backend is down on purpose
    ip = InProcess(app)
    sid, h = ip.session()
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    r = ip.chat(sid, h, body)
    assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"
    r = ip.messages(sid, h, body)
    assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
    recs = ip.records(sid)
    ip.close()
    assert [x["finish_reason"] for x in recs] == ["error", "error"] and recs[0]["error"]


async def _no_start() -> None:
    return None


def _raw_request(sock_path: str, path: str, body: dict[str, Any], key: str) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return s


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_client_disconnect_aborts_generation(
    live_factory: Any, model_dir: Any, stream: bool
) -> None:
    backend = ScriptedBackend.from_model_dir(model_dir, token_delay_s=0.02)
    live = live_factory(backend)
    with live.admin() as admin:
        s = admin.create_session(run_id="dc")
        admin.script(s.session_id, ["z" * 400])
    sock = _raw_request(
        live.socket,
        f"/s/{s.session_id}/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "stream": stream},
        s.api_key,
    )
    time.sleep(1.0)
    sock.close()
    deadline = time.time() + 10
    recs: list[dict[str, Any]] = []
    while time.time() < deadline and not recs:
        time.sleep(0.1)
        with live.admin() as admin:
            recs = admin.records(s.session_id)
    (rec,) = recs
    assert rec["finish_reason"] == "aborted"
    assert "client_left" in rec["flags"]  # the client left, not the backend
    assert 0 < len(rec["completion_ids"]) < 400  # the backend stopped early
    assert len(rec["completion_logprobs"]) == len(rec["completion_ids"])


def test_kill_9_during_streamed_call_leaves_readable_capture(tmp_path: Path) -> None:
    sockdir = tempfile.mkdtemp(prefix="clawrl-k9-", dir="/tmp")
    model_sock, admin_sock = f"{sockdir}/m.sock", f"{sockdir}/a.sock"
    cap = tmp_path / "cap"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clawrl.proxy.cli",
            "serve",
            "--model",
            "default",
            "--backend",
            "scripted",
            "--token-delay",
            "0.01",
            "--socket",
            model_sock,
            "--admin-socket",
            admin_sock,
            "--capture-dir",
            str(cap),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while not os.path.exists(admin_sock):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.time() < deadline, "proxy did not start"
            time.sleep(0.2)
        with AdminClient(socket=admin_sock) as admin:
            s = admin.create_session(run_id="k9")
            admin.script(s.session_id, ["first", "second", "w" * 3000])
        http = httpx.Client(transport=httpx.HTTPTransport(uds=model_sock), timeout=30)
        url = f"http://x/s/{s.session_id}/v1/chat/completions"
        hdr = {"authorization": f"Bearer {s.api_key}"}
        msgs = [{"role": "user", "content": "x"}]
        for _ in range(2):
            assert (
                http.post(url, json={"messages": msgs, "stream": True}, headers=hdr).status_code
                == 200
            )
        errors: list[BaseException] = []

        def slow_call() -> None:
            try:
                http.post(url, json={"messages": msgs, "stream": True}, headers=hdr)
            except httpx.HTTPError as e:
                errors.append(e)

        t = threading.Thread(target=slow_call)
        t.start()
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        t.join(timeout=10)
        http.close()
        assert errors, "the in-flight call should have failed"
        path = cap / "k9" / f"{s.session_id}.jsonl"
        recs = read_records(path)
        assert [r["seq"] for r in recs] == [0, 1]
        assert all(r["finish_reason"] == "stop" for r in recs)
        # a torn last line (a crash mid-write) is skipped, and a writer reopening the file
        # terminates it so that later records stay readable
        with open(path, "ab") as f:
            f.write(b'{"call_id": "torn", "prompt_ids": [1, 2')
        assert [r["seq"] for r in read_records(path)] == [0, 1]
        from clawrl.proxy import CaptureWriter

        w = CaptureWriter(path)
        w.write({"call_id": "after", "seq": 2})
        w.close()
        assert [r["seq"] for r in read_records(path)] == [0, 1, 2]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(sockdir, ignore_errors=True)  # /tmp: unix socket paths are short


def test_renderer_caches_stay_bounded(renderer: Any) -> None:
    """Ever-new and huge messages (a client trying to grow the proxy's memory) keep the
    renderer's unit and encode caches within their byte bounds, and renders stay exact."""
    from clawrl.proxy.splice import PromptCache, build_prompt

    units, encoded = renderer._unit_cache, renderer._encode_cache
    cache = PromptCache()
    conv: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(48):
        # 300 KiB units are never kept; 40 KiB ones are, until the byte bound empties the cache
        size = 300_000 if i % 3 == 0 else 40_000
        conv = [
            *conv,
            {"role": "assistant", "content": f"ok {i}"},
            {"role": "user", "content": f"{i}:" + "x" * size},
        ]
        got = build_prompt(renderer, conv, None, None, cache=cache).ids
        if i % 8 == 0:
            assert got == build_prompt(renderer, conv, None, None).ids
        assert units.nbytes <= units.max_bytes and encoded.nbytes <= encoded.max_bytes
        assert all(len(k) + len(v) <= units.max_entry_bytes for k, v in units._items.items())
    assert len(units) > 0  # the cache still works for ordinary units
