"""Shared fixtures: a tiny HTTP/1.1 server on a unix socket (stands in for the model proxy)."""

from __future__ import annotations

import http.server
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class UnixHTTP:
    """A running unix-socket HTTP server and what it observed."""

    path: Path
    requests: list[tuple[int, str]] = field(default_factory=list)  # (connection no., path)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 4  # small on purpose: the forwarder must retry a full accept queue
    state: UnixHTTP


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.state.lock:
            self.server.state.connections += 1
            self.conn_no = self.server.state.connections

    def log_message(self, format: str, *args: object) -> None:  # unix peers have no address
        pass

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with self.server.state.lock:
            self.server.state.requests.append((self.conn_no, self.path))
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(4):
                data = f"data: {i}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                time.sleep(0.3)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif self.path.startswith("/slow"):
            time.sleep(0.5)
            self._send(b"slow")
        else:
            self._send(f"hello {self.path} conn={self.conn_no}".encode())

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        with self.server.state.lock:
            self.server.state.requests.append((self.conn_no, self.path))
        self._send(body[::-1])


@pytest.fixture(scope="module")
def unix_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnixHTTP]:
    """An HTTP/1.1 server (keep-alive, chunked streaming, slow endpoint) on a unix socket."""
    path = tmp_path_factory.mktemp("sock") / "model.sock"
    srv = _Server(str(path), _Handler)
    srv.state = UnixHTTP(path)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.state
    srv.shutdown()
    srv.server_close()


def containers_of_run(run_id: str) -> list[str]:
    """Names of all containers (any state) labelled with ``run_id``, straight from podman."""
    out = subprocess.run(
        [
            "podman",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=clawrl.run_id={run_id}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [n for n in out.split() if n]
