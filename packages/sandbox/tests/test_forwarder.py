"""The forwarder program on its own (host python), and socket-spec errors."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clawrl.sandbox import Sandbox, SandboxSpec, SandboxSpecError
from clawrl.sandbox.sandbox import FORWARDER_SOURCE

from .conftest import UnixHTTP


def test_forwarder_on_host_relays_concurrently(unix_http: UnixHTTP, tmp_path: Path) -> None:
    """The forwarder program alone (host python), many parallel streaming connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FORWARDER_SOURCE),
            "--port",
            str(port),
            "--socket",
            str(unix_http.path),
            "--ready-file",
            str(ready),
        ]
    )
    try:
        for _ in range(200):
            if ready.exists():
                break
            time.sleep(0.02)
        assert ready.exists()

        def stream(i: int, res: dict[int, str]) -> None:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            c.request("GET", "/stream")
            res[i] = c.getresponse().read().decode()
            c.close()

        res: dict[int, str] = {}
        t0 = time.monotonic()
        ts = [threading.Thread(target=stream, args=(i, res)) for i in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(res) == 20 and all(v.count("data:") == 4 for v in res.values())
        assert time.monotonic() - t0 < 4  # 20 x 1.2 s streams, concurrently
    finally:
        proc.terminate()
        proc.wait(10)


async def test_model_socket_missing_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxSpecError):
        await Sandbox.create(SandboxSpec(model_socket=tmp_path / "nope.sock"))
