"""Running the proxy: the model app and the admin app under uvicorn, in one event loop.

The model app listens on a unix socket (mounted into sandboxes) and optionally a TCP port;
the admin app on its own unix socket and/or TCP port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from clawrl.proxy.app import ProxyApp
from clawrl.proxy.backends.base import InferenceBackend
from clawrl.proxy.core import ProxyCore
from clawrl.proxy.limits import ConnectionGuard, raise_nofile_limit
from clawrl.proxy.render import ChatRenderer
from clawrl.proxy.session import SessionManager

__all__ = ["ProxyServer", "ServerConfig", "build_proxy_app"]

log = logging.getLogger("clawrl.proxy")


@dataclass
class ServerConfig:
    """Where the proxy listens and what it records.

    ``socket``/``port``: model API (at least one); ``admin_socket``/``admin_port``: admin API
    (at least one). The model socket is created mode 0666 (sandboxes run as other users), the
    admin socket mode 0600 (only the proxy's owner). ``admin_token``: when set, every admin
    request needs ``Authorization: Bearer <token>`` (401 otherwise); the CLI reads it from
    ``--admin-token`` or the environment variable ``CLAWRL_PROXY_ADMIN_TOKEN``, and
    :class:`~clawrl.proxy.AdminClient` sends the same variable when given no token.
    ``default_max_tokens``: completion cap of requests that give none (default: the room
    left in the context window only). ``max_context``: most tokens per call (prompt +
    completion) when below the backend's own limit (a trainer's one-forward budget); longer
    calls get the typed context-length error. ``worker_index``: set on a worker of ``proxy serve
    --workers N`` (its session ids end in ``-w<index>``, :mod:`clawrl.proxy.workers`). ``public_base_url`` defaults to the in-sandbox forwarder address
    ``http://127.0.0.1:8000`` when serving on a socket only, else ``http://<host>:<port>``.

    Limits of the model app (``docs/limits.md``; 0 turns one off):
    ``max_connections_per_peer``: open connections one sandbox may hold (its pid namespace,
    forwarder included; host processes and TCP clients are not capped);
    ``max_calls_per_session``: calls of one session in flight (more get a 429);
    ``head_timeout_s`` / ``body_timeout_s``: a request head must arrive within this many
    seconds of the connection opening or of its first byte, its body within this many seconds
    of the head (slower connections are closed). Every limit reached is logged.
    """

    socket: str | None = None
    port: int | None = None
    host: str = "127.0.0.1"
    admin_socket: str | None = None
    admin_port: int | None = None
    capture_dir: str | None = None
    public_base_url: str | None = None
    served_model: str = "clawrl"
    max_body_bytes: int = 32 << 20
    body_capture_limit: int = 1 << 20
    admin_token: str | None = None
    keepalive_s: float = 10.0
    log_level: str = "warning"
    default_max_tokens: int | None = None
    max_context: int | None = None
    worker_index: int | None = None
    max_connections_per_peer: int = 64
    max_calls_per_session: int = 32
    head_timeout_s: float = 10.0
    body_timeout_s: float = 60.0

    def base_url(self) -> str:
        if self.public_base_url:
            return self.public_base_url
        if self.socket is None and self.port is not None:
            return f"http://{self.host}:{self.port}"
        return "http://127.0.0.1:8000"


def build_proxy_app(
    renderer: ChatRenderer, backend: InferenceBackend, config: ServerConfig
) -> ProxyApp:
    """The model and admin apps for a renderer + backend."""
    core = ProxyCore(
        renderer,
        backend,
        SessionManager(config.capture_dir, worker=config.worker_index),
        served_model=config.served_model,
        body_capture_limit=config.body_capture_limit,
        default_max_tokens=config.default_max_tokens,
        max_context=config.max_context,
    )
    return ProxyApp(
        core,
        public_base_url=config.base_url(),
        max_body_bytes=config.max_body_bytes,
        admin_token=config.admin_token,
        keepalive_s=config.keepalive_s,
        max_calls_per_session=config.max_calls_per_session,
    )


def _unix_socket(path: str, mode: int) -> socket.socket:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        p.unlink()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(p))
    os.chmod(p, mode)
    s.listen(2048)
    s.setblocking(False)
    return s


def _tcp_socket(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(2048)
    s.setblocking(False)
    return s


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # signals are handled by ProxyServer.run
        yield


class ProxyServer:
    """The proxy process: both apps on their sockets.

    Use :meth:`serve` inside a running loop (returns when :meth:`stop` is called) or
    :meth:`run` to block until SIGINT/SIGTERM.
    """

    def __init__(self, app: ProxyApp, config: ServerConfig):
        if config.socket is None and config.port is None:
            raise ValueError("the model API needs a socket or a port")
        if config.admin_socket is None and config.admin_port is None:
            raise ValueError("the admin API needs a socket or a port")
        self.app = app
        self.config = config
        self._servers: list[_Server] = []
        self.started = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self.guard = ConnectionGuard(
            max_connections_per_peer=config.max_connections_per_peer,
            head_timeout_s=config.head_timeout_s,
            body_timeout_s=config.body_timeout_s,
        )

    async def serve(self) -> None:
        cfg = self.config
        old, new = raise_nofile_limit()
        if new != old:
            log.info("open-file limit raised from %d to %d", old, new)
        model_socks: list[socket.socket] = []
        admin_socks: list[socket.socket] = []
        if cfg.socket:
            model_socks.append(_unix_socket(cfg.socket, 0o666))  # sandboxes run as other users
        if cfg.port is not None:
            model_socks.append(_tcp_socket(cfg.host, cfg.port))
        if cfg.admin_socket:
            admin_socks.append(_unix_socket(cfg.admin_socket, 0o600))  # the proxy's owner only
        if cfg.admin_port is not None:
            admin_socks.append(_tcp_socket(cfg.host, cfg.admin_port))
        try:
            await self.app.start()
        except BaseException:
            for sock in model_socks + admin_socks:
                sock.close()
            self._unlink_sockets()
            raise
        common: dict[str, Any] = {
            "log_level": cfg.log_level,
            "access_log": False,
            "lifespan": "off",
        }
        self._servers = [
            _Server(
                uvicorn.Config(
                    self.app.model_app,
                    timeout_keep_alive=75,
                    http=self.guard.protocol_class(),
                    **common,
                )
            ),
            # keep-alive well above httpx's 5 s client expiry: with equal timeouts a pooled
            # connection is reused just as the server closes it (RemoteProtocolError)
            _Server(uvicorn.Config(self.app.admin_app, timeout_keep_alive=75, **common)),
        ]
        tasks = [
            asyncio.ensure_future(self._servers[0].serve(sockets=model_socks)),
            asyncio.ensure_future(self._servers[1].serve(sockets=admin_socks)),
        ]
        while not all(s.started for s in self._servers):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.01)
        if all(s.started for s in self._servers):
            self.started.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            await self.app.close()
            self._unlink_sockets()

    def _unlink_sockets(self) -> None:
        for path in (self.config.socket, self.config.admin_socket):
            if path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def stop(self) -> None:
        for s in self._servers:
            s.should_exit = True

    def start_in_thread(self, timeout: float = 120.0) -> None:
        """Serve from a daemon thread with its own event loop; returns once both apps listen.

        For tests and programs that drive the proxy from the same process (bench, the RL
        loop). Stop with :meth:`stop_thread`.

        Raises:
            RuntimeError: the server failed to start; TimeoutError: not listening in time.
        """
        import time

        loop = asyncio.new_event_loop()
        self._thread_loop = loop

        def target() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.serve())
            finally:
                loop.close()

        self._thread = threading.Thread(target=target, name="clawrl-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.started.is_set():
            if not self._thread.is_alive():
                raise RuntimeError("the proxy server failed to start")
            if time.monotonic() > deadline:
                raise TimeoutError("the proxy server did not start in time")
            time.sleep(0.02)

    def stop_thread(self, timeout: float = 30.0) -> None:
        """Stop a server started with :meth:`start_in_thread` and wait for its thread."""
        thread = getattr(self, "_thread", None)
        if thread is None:
            return
        loop = self._thread_loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.stop)
        thread.join(timeout)
        self._thread = None

    def run(self) -> None:
        """Serve until SIGINT / SIGTERM (on uvloop when installed)."""
        import signal

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
            await self.serve()

        try:
            import uvloop
        except ImportError:
            asyncio.run(main())
        else:
            uvloop.run(main())
