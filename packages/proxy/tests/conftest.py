"""Shared fixtures of the proxy tests (``model_dir``: the kit's byte-level default model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from clawrl.proxy.model_kit import build_default_model

    return Path(build_default_model("byte"))


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
