"""Shared fixtures and helpers of the proxy tests (``model_dir``: the kit's byte-level default
model; helpers by ``from .conftest import ...``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from clawrl.proxy.backends.base import GenerationRequest, GenerationResult, TokenDelta


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from clawrl.proxy.model_kit import build_default_model

    return Path(build_default_model("byte"))


@pytest.fixture(scope="session")
def other_model_dir(model_dir: Path) -> Path:
    """Same architecture and tokenizer as ``model_dir``, another initialisation seed."""
    from clawrl.proxy.model_kit import build_default_model

    other = Path(build_default_model("byte", seed=1))
    assert other != model_dir
    return other


@pytest.fixture(scope="session")
def renderer(model_dir: Path) -> Any:
    from clawrl.proxy import ChatRenderer

    return ChatRenderer.from_model_dir(model_dir)


@pytest.fixture
def scripted(model_dir: Path) -> Any:
    from clawrl.proxy.testing import ScriptedBackend

    return ScriptedBackend.from_model_dir(model_dir)


@pytest.fixture
def proxy(renderer: Any, scripted: Any, tmp_path: Path) -> Iterator[Any]:
    """A ProxyApp over the scripted backend with a capture dir (in-process)."""
    from clawrl.proxy import ServerConfig, build_proxy_app

    app = build_proxy_app(
        renderer,
        scripted,
        ServerConfig(socket="unused", admin_socket="unused", capture_dir=str(tmp_path / "cap")),
    )
    yield app


class LiveProxy:
    """A ProxyServer serving from a background thread on unix sockets."""

    def __init__(self, app: Any, config: Any):
        from clawrl.proxy import ProxyServer

        self.app = app
        self.config = config
        self._clients: list[Any] = []
        self.server = ProxyServer(app, config)
        self.server.start_in_thread()

    @property
    def socket(self) -> str:
        return str(self.config.socket)

    def admin(self) -> Any:
        from clawrl.proxy import AdminClient

        return AdminClient(socket=self.config.admin_socket)

    def http_client(self, lib: str = "httpx") -> Any:
        """An HTTP client over the model socket (``lib="httpx2"`` for the anthropic SDK);
        closed by :meth:`stop`."""
        import importlib

        mod = importlib.import_module(lib)
        client = mod.Client(transport=mod.HTTPTransport(uds=self.socket), timeout=60)
        self._clients.append(client)
        return client

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        self.server.stop_thread()


@contextlib.contextmanager
def serve_live(
    renderer: Any, backend: Any, capture_dir: Path, prefix: str = "clawrl-live-"
) -> Iterator[LiveProxy]:
    """A LiveProxy over ``backend`` on sockets in a fresh short /tmp dir (``prefix``),
    capturing to ``capture_dir``; stopped and its sockets removed on exit."""
    import shutil
    import tempfile

    from clawrl.proxy import ServerConfig, build_proxy_app

    sockdir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    cfg = ServerConfig(
        socket=f"{sockdir}/m.sock", admin_socket=f"{sockdir}/a.sock", capture_dir=str(capture_dir)
    )
    live = LiveProxy(build_proxy_app(renderer, backend, cfg), cfg)
    try:
        yield live
    finally:
        live.stop()
        shutil.rmtree(sockdir, ignore_errors=True)


@pytest.fixture
def live_factory(renderer: Any, tmp_path: Path) -> Iterator[Any]:
    """``live_factory(backend) -> LiveProxy`` (stopped at teardown)."""
    import shutil
    import tempfile

    from clawrl.proxy import ServerConfig, build_proxy_app

    started: list[LiveProxy] = []
    sockdir = tempfile.mkdtemp(prefix="clawrl-proxy-", dir="/tmp")

    def make(backend: Any, **kw: Any) -> LiveProxy:
        n = len(started)
        cfg = ServerConfig(
            socket=f"{sockdir}/model{n}.sock",
            admin_socket=f"{sockdir}/admin{n}.sock",
            capture_dir=str(tmp_path / "capture"),
            **kw,
        )
        live = LiveProxy(build_proxy_app(renderer, backend, cfg), cfg)
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()
    shutil.rmtree(sockdir, ignore_errors=True)


class InProcess:
    """The proxy's apps driven in-process with starlette's TestClient."""

    def __init__(self, app: Any):
        from starlette.testclient import TestClient

        self.app = app
        # entered: one event-loop portal for all requests (much faster than one per request)
        self.admin = TestClient(app.admin_app).__enter__()
        self.model = TestClient(app.model_app, raise_server_exceptions=False).__enter__()

    def close(self) -> None:
        self.model.__exit__(None, None, None)
        self.admin.__exit__(None, None, None)

    def session(self, script: list[Any] | None = None, **meta: Any) -> tuple[str, dict[str, str]]:
        r = self.admin.post("/sessions", json={"run_id": "test", **meta})
        assert r.status_code == 201, r.text
        s = r.json()
        if script is not None:
            self.app.core.backend.script(s["session_id"], script)
        return s["session_id"], {"authorization": "Bearer " + s["api_key"]}

    def chat(self, sid: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        return self.model.post(f"/s/{sid}/v1/chat/completions", json=body, headers=headers)

    def messages(self, sid: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        return self.model.post(f"/s/{sid}/v1/messages", json=body, headers=headers)

    def records(self, sid: str) -> list[dict[str, Any]]:
        r = self.admin.get(f"/sessions/{sid}/records")
        assert r.status_code == 200, r.text
        return list(r.json()["records"])


@pytest.fixture
def inproc(proxy: Any) -> Iterator[InProcess]:
    ip = InProcess(proxy)
    yield ip
    ip.close()


@pytest.fixture(scope="module")
def fuzz_app(
    renderer: Any, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[InProcess, str, dict[str, str]]]:
    """The fuzz tests' in-process proxy on a scripted backend (4096-token context), with one
    session: (app, session id, its auth headers), for the module."""
    from clawrl.proxy import ServerConfig, build_proxy_app
    from clawrl.proxy.testing import ScriptedBackend

    backend = ScriptedBackend.from_model_dir(model_dir, max_context=4096)
    cfg = ServerConfig(
        socket="s", admin_socket="a", capture_dir=str(tmp_path_factory.mktemp("cap"))
    )
    ip = InProcess(build_proxy_app(renderer, backend, cfg))
    sid, h = ip.session()
    yield ip, sid, h
    ip.close()


def function_tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    """An OpenAI chat-completions function tool whose parameters are an object of
    ``properties`` (name → JSON type)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t} for k, t in properties.items()},
            },
        },
    }


async def collect_generation(
    backend: Any, request: GenerationRequest
) -> tuple[list[TokenDelta], GenerationResult]:
    """A backend's ``generate(request)`` stream: (its TokenDeltas, the GenerationResult that
    ends it; nothing may follow that)."""
    from clawrl.proxy.backends.base import TokenDelta

    deltas: list[TokenDelta] = []
    result: GenerationResult | None = None
    async for item in backend.generate(request):
        assert result is None, "nothing may follow the GenerationResult"
        if isinstance(item, TokenDelta):
            deltas.append(item)
        else:
            result = item
    assert result is not None
    return deltas, result
