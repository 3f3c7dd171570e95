"""Red-team tests of the proxy (issue 18): each performs an attack against a real proxy server
(uvicorn on unix sockets, driven over HTTP with the official SDKs or httpx) and asserts
containment: a typed 4xx, never a 5xx; no stall of another session; text stays text.

Each test names the fix whose revert makes it fail (the closing note of issue 18 lists the
reverts tried).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from clawrl.proxy import (
    AdminClient,
    ChatRenderer,
    ProxyServer,
    ScriptedBackend,
    ServerConfig,
    build_default_model,
    build_proxy_app,
)


class Live:
    """A ProxyServer over unix sockets in a background thread."""

    def __init__(self, backend: Any, renderer: ChatRenderer, tmp: Path, **kw: Any):
        self.dir = tempfile.mkdtemp(prefix="clawrl-sec-", dir="/tmp")
        self.config = ServerConfig(
            socket=f"{self.dir}/model.sock",
            admin_socket=f"{self.dir}/admin.sock",
            capture_dir=str(tmp / "capture"),
            **kw,
        )
        self.app = build_proxy_app(renderer, backend, self.config)
        self.server = ProxyServer(self.app, self.config)
        self.server.start_in_thread()
        self._clients: list[Any] = []

    @property
    def socket(self) -> str:
        return str(self.config.socket)

    def admin(self, token: str | None = None) -> AdminClient:
        return AdminClient(socket=self.config.admin_socket, token=token)

    def http(self, lib: Any = httpx) -> Any:
        c = lib.Client(transport=lib.HTTPTransport(uds=self.socket), timeout=120)
        self._clients.append(c)
        return c

    def session(self) -> Any:
        with self.admin() as a:
            return a.create_session(run_id="sec", task_id="t", harness="attacker")

    def openai(self, s: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=s.openai_base_url, api_key=s.api_key, http_client=self.http(), max_retries=0
        )

    def anthropic(self, s: Any) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=s.anthropic_base_url,
            api_key=s.api_key,
            http_client=self.http(httpx2),
            max_retries=0,
        )

    def post(self, s: Any, api: str, body: Any, client: Any = None) -> httpx.Response:
        path = {
            "chat": "/v1/chat/completions",
            "responses": "/v1/responses",
            "messages": "/v1/messages",
        }[api]
        url = "http://sandbox/s/" + s.session_id + path
        c = client or self.http()
        headers = {"authorization": "Bearer " + s.api_key}
        if isinstance(body, bytes):
            headers["content-type"] = "application/json"
            return c.post(url, content=body, headers=headers)  # type: ignore[no-any-return]
        return c.post(url, json=body, headers=headers)  # type: ignore[no-any-return]

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        self.server.stop_thread()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return Path(build_default_model("byte"))


@pytest.fixture(scope="module")
def renderer(model_dir: Path) -> ChatRenderer:
    return ChatRenderer.from_model_dir(model_dir)


@pytest.fixture
def live(model_dir: Path, renderer: ChatRenderer, tmp_path: Path) -> Iterator[Live]:
    lv = Live(ScriptedBackend.from_model_dir(model_dir), renderer, tmp_path)
    yield lv
    lv.stop()


def _assert_4xx(r: httpx.Response) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:500])
    body = r.json()
    assert "error" in body, body
    return body  # type: ignore[no-any-return]


# -- 1. malformed types, deep nesting, out-of-range sampling ----------------------------------

UNHASHABLE = [["user"], {"r": "user"}]


@pytest.mark.parametrize("bad", UNHASHABLE, ids=["list", "dict"])
def test_unhashable_role_and_type_get_a_typed_400_in_all_three_apis(live: Live, bad: Any) -> None:
    """Revert: ``opt_kind`` for role/type (and the ``_parsed`` net) -> TypeError: unhashable
    -> 500."""
    s = live.session()
    cases: list[tuple[str, Any]] = [
        ("chat", {"messages": [{"role": bad, "content": "hi"}]}),
        ("chat", {"messages": [{"role": "user", "content": [{"type": bad, "text": "x"}]}]}),
        ("responses", {"input": [{"role": bad, "content": "hi"}]}),
        ("responses", {"input": [{"type": bad, "role": "user", "content": "hi"}]}),
        ("responses", {"input": [{"role": "user", "content": [{"type": bad, "text": "x"}]}]}),
        ("messages", {"max_tokens": 8, "messages": [{"role": bad, "content": "hi"}]}),
        (
            "messages",
            {"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": bad}]}]},
        ),
        (
            "messages",
            {
                "max_tokens": 8,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": bad, "text": "x"}]},
                ],
            },
        ),
        (
            "messages",
            {
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "content": [{"type": bad}]}],
                    }
                ],
            },
        ),
    ]
    for api, body in cases:
        err = _assert_4xx(live.post(s, api, body))
        assert "must be a string" in str(err), err


def test_unhashable_role_through_the_sdks(live: Live) -> None:
    """The same attack through the official SDKs: a typed BadRequestError, not a 5xx."""
    s = live.session()
    with pytest.raises(openai.BadRequestError):
        live.openai(s).chat.completions.create(
            model="m", messages=[{"role": ["user"], "content": "hi"}]  # type: ignore[list-item]
        )
    with pytest.raises(openai.BadRequestError):
        live.openai(s).responses.create(
            model="m", input=[{"role": {"x": 1}, "content": "hi"}]  # type: ignore[list-item]
        )
    with pytest.raises(anthropic.BadRequestError):
        live.anthropic(s).messages.create(
            model="m", max_tokens=8, messages=[{"role": ["user"], "content": "hi"}]  # type: ignore[list-item,typeddict-item]
        )


def _nest(depth: int) -> Any:
    x: Any = 1
    for _ in range(depth):
        x = {"a": x}
    return x


@pytest.mark.parametrize("depth", [129, 500, 964, 1000, 1100])
def test_deep_json_is_rejected_at_parse_time(live: Live, depth: int) -> None:
    """Revert: the depth check in ``read_json`` -> RecursionError in the template's tojson
    (500) for ~964 levels in a tool schema or tool-call arguments."""
    s = live.session()
    deep = "__DEEP__"  # substituted in the serialised body (json.dumps cannot nest this deep)
    deep_bytes = b'{"a": ' * depth + b"1" + b"}" * depth
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    bodies = [
        ("chat", {"messages": [{"role": "user", "content": "hi"}], "tools": tools}),
        (
            "chat",
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": deep}}],
                    },
                    {"role": "tool", "content": "r", "tool_call_id": "1"},
                ]
            },
        ),
        (
            "messages",
            {
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "f", "input_schema": deep}],
            },
        ),
        (
            "responses",
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f", "parameters": deep}],
            },
        ),
    ]
    for api, body in bodies:
        raw = json.dumps(body).encode().replace(b'"__DEEP__"', deep_bytes)
        err = _assert_4xx(live.post(s, api, raw))
        assert err["error"].get("code") in ("json_too_deep", None), err
        assert "deeper than 128" in str(err), err


def test_nesting_at_the_limit_is_served(live: Live) -> None:
    """128 levels in tool-call arguments render and are served (not a 5xx, not a 400)."""
    s = live.session()
    # the tool-call arguments object sits at depth 5 of the body
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": _nest(120)}}],
            },
            {"role": "tool", "content": "r", "tool_call_id": "1"},
        ]
    }
    r = live.post(s, "chat", body)
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize(
    ("api", "field", "value"),
    [
        ("chat", "top_k", 0),
        ("chat", "top_k", -2),
        ("chat", "top_k", 2**40),
        ("chat", "top_p", 0),
        ("chat", "top_p", 1.5),
        ("chat", "temperature", -1),
        ("chat", "temperature", 3),
        ("chat", "seed", 2**64 - 1),
        ("chat", "seed", -(2**63) - 1),
        ("chat", "max_tokens", 0),
        ("chat", "max_tokens", -5),
        ("chat", "max_tokens", 1.5),
        ("chat", "n", 2),
        ("messages", "top_k", 0),
        ("messages", "top_k", -7),
        ("messages", "temperature", 1.5),
        ("messages", "max_tokens", 0),
        ("responses", "top_k", 0),
        ("responses", "seed", 2**64 - 1),
        ("responses", "max_output_tokens", 0),
    ],
)
def test_out_of_range_sampling_gets_a_typed_400(
    live: Live, api: str, field: str, value: Any
) -> None:
    """Revert: ``opt_top_k`` / ``opt_seed`` -> ``top_k: 0`` reaches the backend, which
    refuses it, and the proxy answers 503 backend_unavailable (SDKs retry any 5xx)."""
    s = live.session()
    base: dict[str, Any] = {
        "chat": {"messages": [{"role": "user", "content": "hi"}]},
        "messages": {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        "responses": {"input": "hi"},
    }[api]
    err = _assert_4xx(live.post(s, api, {**base, field: value}))
    assert err["error"].get("param", field) in (field, None) or "type" in err


def test_top_k_zero_through_the_anthropic_sdk(live: Live) -> None:
    s = live.session()
    with pytest.raises(anthropic.BadRequestError):
        live.anthropic(s).messages.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"top_k": 0},
        )


@pytest.mark.parametrize(
    "body",
    [
        {"messages": "hi"},
        {"messages": [1]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ["x"]}]}]},
        {"messages": [{"role": "assistant", "tool_calls": {"a": 1}}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"function": "f"}]},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": [1]}]},
        {"messages": [{"role": "user", "content": "x"}], "stream": "yes"},
        {"messages": [{"role": "user", "content": "x"}], "stream_options": []},
        {"messages": [{"role": "user", "content": "x"}], "tool_choice": 7},
        [1, 2, 3],
        "just a string",
        None,
    ],
)
def test_malformed_field_types_get_a_typed_400(live: Live, body: Any) -> None:
    s = live.session()
    _assert_4xx(live.post(s, "chat", body))
