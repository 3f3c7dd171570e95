"""Serve the proxy in the loop's own event loop (so the embedded backend's in-process
weight sync and the harnesses' calls share one loop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from clawrl.bench import ModelEndpoint
from clawrl.proxy import AsyncAdminClient, ChatRenderer, ProxyServer, ServerConfig, build_proxy_app
from clawrl.rl_core.errors import RLCoreError
from clawrl.sandbox import owned_tempdir

__all__ = ["serve_proxy"]


@contextlib.asynccontextmanager
async def serve_proxy(
    backend: Any,
    model_dir: Path | str,
    *,
    capture_dir: Path | str,
    start_timeout_s: float = 300.0,
) -> AsyncIterator[ModelEndpoint]:
    """Serve ``backend`` behind a clawrl proxy on unix sockets in a fresh temporary
    directory (model API ``model.sock``, admin API ``admin.sock``); call records go to
    ``capture_dir``. The backend is started and closed with the server.

    Raises:
        RLCoreError: the proxy stopped or did not listen within ``start_timeout_s``.
    """
    with owned_tempdir("clawrl-train-px-") as sock_root:
        config = ServerConfig(
            socket=str(Path(sock_root) / "model.sock"),
            admin_socket=str(Path(sock_root) / "admin.sock"),
            capture_dir=str(capture_dir),
        )
        renderer = await asyncio.to_thread(ChatRenderer.from_model_dir, Path(model_dir))
        server = ProxyServer(build_proxy_app(renderer, backend, config), config)
        serving = asyncio.ensure_future(server.serve())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + start_timeout_s
        while not server.started.is_set():
            if serving.done():
                serving.result()  # raises the start-up error
                raise RLCoreError("the proxy stopped during start-up")
            if loop.time() > deadline:
                serving.cancel()
                raise RLCoreError(f"the proxy did not listen within {start_timeout_s:g} s")
            await asyncio.sleep(0.02)
        admin = AsyncAdminClient(socket=config.admin_socket)
        try:
            yield ModelEndpoint(admin=admin, model_socket=Path(config.socket or ""))
        finally:
            await admin.close()
            server.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
