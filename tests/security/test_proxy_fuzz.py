"""Fuzzing the proxy over HTTP: >= 10,000 requests with a fixed seed to a real proxy
server on its unix socket (nothing else is contacted), for the three wire APIs.

Bodies are valid requests mutated at random paths: wrong types, missing fields, huge and
negative numbers, deep nesting, odd unicode, control-token text, unknown fields, plus raw
non-JSON / invalid UTF-8 / truncated bodies. The backend is the NullBackend benchmark fixture
(no inference, so no genuine backend failure can happen): every answer must be < 500.

Counts per status are printed (``-s``) and, when ``CLAWRL_FUZZ_REPORT`` names a file, written
there as JSON; packages/proxy/docs/trust-boundary.md holds the table and the command.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from clawrl.proxy import (
    AdminClient,
    ChatRenderer,
    ProxyServer,
    ServerConfig,
    build_default_model,
    build_proxy_app,
    format_assistant_text,
)
from clawrl.proxy.testing import NullBackend

N_REQUESTS = 10_000
SEED = 18
DEEP = "__DEEP_PLACEHOLDER__"

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "sh",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "sh", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ],
    "tools": TOOLS_CHAT,
    "tool_choice": "auto",
    "max_tokens": 16,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "seed": 1,
    "logprobs": True,
    "top_logprobs": 2,
    "stream": False,
    "stream_options": {"include_usage": True},
}
MESSAGES = {
    "model": "m",
    "max_tokens": 16,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "sh", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "a"}],
                },
                {"type": "text", "text": "next"},
            ],
        },
    ],
    "tools": [{"name": "sh", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "temperature": 0.5,
    "top_k": 5,
    "stream": False,
}
RESPONSES = {
    "model": "m",
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r"}]},
        {"type": "function_call", "call_id": "f1", "name": "sh", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call_output", "call_id": "f1", "output": "a.txt"},
    ],
    "tools": [{"type": "function", "name": "sh", "parameters": {"type": "object"}}],
    "max_output_tokens": 16,
    "store": False,
    "stream": False,
}
BASES = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}

ODD_STRINGS = [
    "",
    " ",
    "\u0000",
    "\uffff",
    "\ue000",
    "\u202e\u0644\u0627",
    "\U0001f600" * 50,
    "e\u0301" * 100,
    "<|im_end|>\n<|im_start|>assistant\n",
    "<tool_call>\n{}</tool_call>",
    "</think>",
    "<|endoftext|>",
    "user",
    "assistant",
    "tool",
    "function",
    "text",
    "tool_use",
    "tool_result",
    "image",
    "none",
    "auto",
    "{",
    '{"a": 1}',
    "null",
    "x" * 5000,
]
ODD_NUMBERS = [
    0,
    -1,
    1,
    2,
    -(2**63),
    2**63 - 1,
    2**64 - 1,
    1e308,
    -1e308,
    0.5,
    1.5,
    -0.0,
    1e-300,
    3.0,
]


def _odd(rng: random.Random) -> Any:
    k = rng.random()
    if k < 0.3:
        return rng.choice(ODD_STRINGS)
    if k < 0.55:
        return rng.choice(ODD_NUMBERS)
    if k < 0.65:
        return rng.choice([None, True, False])
    if k < 0.75:
        return rng.choice([[], {}, [None], [[]], [{}], {"type": None}, {"role": []}])
    if k < 0.82:
        return DEEP
    if k < 0.88:
        return {"type": rng.choice(["text", "tool_use", "input_text", "function_call"]), "x": 1}
    if k < 0.94:
        return [rng.choice(ODD_STRINGS) for _ in range(rng.randint(1, 4))]
    return "y" * rng.choice([10_000, 100_000, 300_000])


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*prefix, i))
    return out


def _mutate(body: Any, rng: random.Random) -> Any:
    paths = _paths(body)
    path = rng.choice(paths)
    if not path:
        return _odd(rng) if rng.random() < 0.5 else body
    parent = body
    for p in path[:-1]:
        parent = parent[p]
    key = path[-1]
    op = rng.random()
    if op < 0.6:
        parent[key] = _odd(rng)
    elif op < 0.75:
        del parent[key]
    elif op < 0.85 and isinstance(parent, dict):
        parent[rng.choice(["role", "type", "content", "arguments", "input", "zz"])] = _odd(rng)
    elif isinstance(parent, list):
        parent.append(copy.deepcopy(parent[key]))
    else:
        parent[key] = copy.deepcopy(parent)
    return body


def _raw(rng: random.Random, api: str) -> bytes:
    k = rng.random()
    good = json.dumps(BASES[api]).encode()
    if k < 0.25:
        return good[: rng.randint(0, len(good) - 1)]  # truncated
    if k < 0.5:
        return b"\xff\xfe" + good  # invalid UTF-8
    if k < 0.7:
        return b"[" * rng.randint(1, 2000) + b"]" * rng.randint(0, 2000)
    if k < 0.85:
        return rng.choice([b"", b"null", b"1", b'"s"', b"NaN", b"{}", b"[]", b'{"messages": NaN}'])
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))


def _body(rng: random.Random, api: str) -> bytes:
    if rng.random() < 0.06:
        return _raw(rng, api)
    body = copy.deepcopy(BASES[api])
    if rng.random() < 0.05:
        return json.dumps(body).encode()  # a valid request
    for _ in range(rng.randint(1, 3)):
        body = _mutate(body, rng)
    if rng.random() < 0.1 and isinstance(body, dict):
        body["stream"] = True
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()
    depth = rng.choice([50, 127, 129, 300, 964, 1030])
    nested = b'{"a": ' * depth + b"1" + b"}" * depth
    return raw.replace(json.dumps(DEEP).encode(), nested)


@pytest.mark.slow
def test_fuzz_10000_requests_get_no_5xx(tmp_path: Path) -> None:
    model_dir = build_default_model("byte")
    renderer = ChatRenderer.from_model_dir(model_dir)
    text = format_assistant_text(reasoning="r", content="c", tool_calls=[("sh", {"cmd": 30.0})])
    backend = NullBackend(
        [*renderer.encode(text), renderer.stop_token_ids[0]], vocab_size=renderer.vocab_size
    )
    sockdir = tempfile.mkdtemp(prefix="clawrl-fuzz-", dir="/tmp")
    cfg = ServerConfig(
        socket=f"{sockdir}/model.sock",
        admin_socket=f"{sockdir}/admin.sock",
        capture_dir=str(tmp_path / "capture"),
        body_capture_limit=4096,
    )
    server = ProxyServer(build_proxy_app(renderer, backend, cfg), cfg)
    server.start_in_thread()
    rng = random.Random(SEED)
    counts: Counter[int] = Counter()
    fivexx: list[tuple[str, int, str, bytes]] = []
    t0 = time.monotonic()
    try:
        with AdminClient(socket=cfg.admin_socket) as admin:
            sessions = [admin.create_session(run_id="fuzz") for _ in range(4)]
        with httpx.Client(transport=httpx.HTTPTransport(uds=cfg.socket), timeout=60) as client:
            for i in range(N_REQUESTS):
                api = rng.choice(list(BASES))
                s = sessions[i % len(sessions)]
                body = _body(rng, api)
                headers = {"content-type": "application/json"}
                if rng.random() < 0.5:
                    headers["authorization"] = "Bearer " + s.api_key
                else:
                    headers["x-api-key"] = s.api_key
                r = client.post(
                    f"http://sandbox/s/{s.session_id}{PATHS[api]}", content=body, headers=headers
                )
                counts[r.status_code] += 1
                if r.status_code >= 500:
                    fivexx.append((api, r.status_code, r.text[:300], body[:300]))
    finally:
        server.stop_thread()
        shutil.rmtree(sockdir, ignore_errors=True)
    wall = time.monotonic() - t0
    report = {
        "requests": N_REQUESTS,
        "seed": SEED,
        "wall_s": round(wall, 1),
        "counts": {str(k): v for k, v in sorted(counts.items())},
    }
    print("fuzz:", json.dumps(report))
    if os.environ.get("CLAWRL_FUZZ_REPORT"):
        Path(os.environ["CLAWRL_FUZZ_REPORT"]).write_text(json.dumps(report, indent=1))
    assert sum(counts.values()) == N_REQUESTS
    assert not fivexx, fivexx[:5]
    assert counts[200] >= 100  # valid-but-odd bodies are served, not only refused
