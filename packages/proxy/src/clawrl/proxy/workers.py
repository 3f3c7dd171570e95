"""Several proxy worker processes behind one address (``proxy serve --workers N``).

Each worker is a whole proxy (``proxy serve --worker-index k``: its own backend client,
sessions, splice memory and capture files) listening on private unix sockets in a run
directory. Its session ids end in ``-w<k>``. In front of them, in the parent process:

- the **model front** listens where a single proxy would (``--socket`` / ``--port``) and
  relays each HTTP/1.1 request, as bytes, to the worker named by the session id in its path
  (``/s/<sid>/...``; other paths go to worker 0), on one upstream connection per client
  connection and worker, and relays the answer back. So a session's calls always reach the
  worker that holds its state, and a client that disconnects disconnects its worker too (the
  generation is aborted and recorded as before). Requests are framed with ``httptools``
  (uvicorn's parser); the bytes are not parsed further.
- the **admin front** (``--admin-socket`` / ``--admin-port``) is a Starlette app that sends
  ``POST /sessions`` to the worker with the fewest sessions created, a session's own routes to
  its worker, and merges what concerns every worker: ``GET /sessions`` lists all workers'
  sessions, ``/status`` sums them, ``/pause``, ``/resume``, ``/weights`` and ``/sampling`` go
  to every worker (the first failure is answered, else worker 0's answer).

Why not uvicorn's (or hypercorn's) own ``workers``: they share one listening socket and the
kernel spreads *connections* over processes, so a session's calls would land on workers that
do not hold its splice memory, history or capture file. The route has to be chosen per
request from the session id; see the proxy README ("Several workers").

A worker that exits stops the proxy (exit status 1): its sessions' capture files stay
complete on disk. Workers get SIGTERM when the parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = [
    "AdminFront",
    "ModelFront",
    "WorkerSet",
    "serve_workers",
    "session_worker",
    "worker_argv",
]

log = logging.getLogger("clawrl.proxy")

#: options of ``proxy serve`` that the parent keeps for itself (a worker gets its own)
_PARENT_OPTIONS = (
    "--socket",
    "--port",
    "--host",
    "--admin-socket",
    "--admin-port",
    "--workers",
    "--public-base-url",
)


def session_worker(session_id: str | bytes, workers: int) -> int:
    """The worker index a session id names (its ``-w<k>`` suffix); 0 when it names none or
    a worker outside ``range(workers)`` (that worker then answers 404 for an unknown id)."""
    sid = session_id.decode("latin-1") if isinstance(session_id, bytes) else session_id
    _, sep, tag = sid.rpartition("-w")
    if sep and tag.isdigit() and int(tag) < workers:
        return int(tag)
    return 0


def worker_argv(argv: Sequence[str], index: int, rundir: Path, base_url: str) -> list[str]:
    """The ``proxy serve`` arguments of worker ``index``: the parent's, less where it listens
    (``--socket``, ``--port``, ``--host``, ``--admin-*``, ``--workers``,
    ``--public-base-url``), plus the worker's sockets in ``rundir``, its index and the
    parent's public base URL (the session URLs it hands out)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in _PARENT_OPTIONS:
            skip = "=" not in a
            continue
        out.append(a)
    return [
        *out,
        "--socket",
        str(rundir / f"w{index}.sock"),
        "--admin-socket",
        str(rundir / f"w{index}-admin.sock"),
        "--worker-index",
        str(index),
        "--public-base-url",
        base_url,
    ]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class WorkerSet:
    """The worker processes: started, waited for, stopped.

    Args:
        argv: the parent's ``proxy serve`` arguments (after ``serve``).
        workers: how many (>= 2).
        base_url: the public base URL the workers put in session URLs.
    """

    def __init__(self, argv: Sequence[str], workers: int, base_url: str):
        if workers < 2:
            raise ValueError("a WorkerSet needs at least 2 workers")
        self.rundir = Path(tempfile.mkdtemp(prefix="clawrl-proxy-workers-"))
        os.chmod(self.rundir, 0o700)
        self.n = workers
        self._argv = [worker_argv(argv, k, self.rundir, base_url) for k in range(workers)]
        self.procs: list[subprocess.Popen[bytes]] = []

    def model_socket(self, k: int) -> str:
        return str(self.rundir / f"w{k}.sock")

    def admin_socket(self, k: int) -> str:
        return str(self.rundir / f"w{k}-admin.sock")

    def start(self, timeout_s: float = 600.0) -> None:
        """Start every worker and wait until each listens.

        Raises:
            RuntimeError: a worker exited or did not listen within ``timeout_s``.
        """
        for args in self._argv:
            cmd = [sys.executable, "-m", "clawrl.proxy.cli", "serve", *args]
            self.procs.append(subprocess.Popen(cmd, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + timeout_s
        for k, p in enumerate(self.procs):
            while not (
                os.path.exists(self.admin_socket(k)) and os.path.exists(self.model_socket(k))
            ):
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"proxy worker {k} exited with status {p.returncode}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"proxy worker {k} did not listen in {timeout_s:.0f} s")
                time.sleep(0.05)

    def dead(self) -> list[int]:
        """Indices of workers that have exited."""
        return [k for k, p in enumerate(self.procs) if p.poll() is not None]

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM every worker (they close their sessions and capture files), SIGKILL after
        ``grace_s``; removes the run directory."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.rundir, ignore_errors=True)


class _RequestRouter:
    """httptools callbacks of one client connection: the URL of the request being read."""

    def __init__(self) -> None:
        self.url = b""
        self.heads_done = 0  # requests whose head (so URL) is complete
        self.begun = 0

    def on_message_begin(self) -> None:
        self.begun += 1
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_headers_complete(self) -> None:
        self.heads_done += 1


_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _Upstream:
    """A connection to one worker for one client connection, and when it last carried bytes."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.last = time.monotonic()
        self.pump: asyncio.Task[None] | None = None

    def fresh(self, idle_s: float) -> bool:
        return not self.writer.is_closing() and time.monotonic() - self.last < idle_s

    def close(self) -> None:
        self.writer.close()
        if self.pump is not None:
            self.pump.cancel()


class ModelFront:
    """The model API front: relays each request of a client connection to its session's
    worker (see the module docstring).

    Clients must not pipeline (send a request before the previous answer): a chunk holding
    the start of two requests gets 400 and the connection is closed. An upstream connection
    idle for ``reuse_s`` is replaced before its next request (below the workers' 75 s
    keep-alive, so a worker never closes a connection a request is about to use).
    """

    def __init__(self, worker_sockets: Sequence[str], reuse_s: float = 30.0):
        self.sockets = list(worker_sockets)
        self.reuse_s = reuse_s

    def worker_of(self, url: bytes) -> int:
        if url.startswith(b"/s/"):
            return session_worker(url[3:].split(b"/", 1)[0], len(self.sockets))
        return 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection."""
        router = _RequestRouter()
        parser = httptools.HttpRequestParser(router)
        upstreams: dict[int, _Upstream] = {}
        pending = b""  # bytes of a request whose head is not complete yet
        current: int | None = None
        try:
            while True:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return
                begun, heads = router.begun, router.heads_done
                try:
                    parser.feed_data(chunk)
                except httptools.HttpParserError:
                    writer.write(_BAD_REQUEST)
                    return
                if router.begun - begun > 1:  # pipelined requests in one chunk
                    writer.write(_BAD_REQUEST)
                    return
                if router.begun > begun:
                    current, pending = None, b""
                if current is None:
                    pending += chunk
                    if router.heads_done == heads:
                        continue  # the head is not complete: the URL may be partial
                    current = self.worker_of(router.url)
                    chunk, pending = pending, b""
                    up = upstreams.get(current)
                    if up is None or not up.fresh(self.reuse_s):
                        if up is not None:
                            up.close()
                        up = await self._connect(current, writer)
                        if up is None:
                            return
                        upstreams[current] = up
                up = upstreams[current]
                up.last = time.monotonic()
                up.writer.write(chunk)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            for up in upstreams.values():
                up.close()
            writer.close()

    async def _connect(self, k: int, client: asyncio.StreamWriter) -> _Upstream | None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.sockets[k])
        except OSError:
            log.error("proxy worker %d cannot be reached", k)
            client.write(_BAD_GATEWAY)
            return None
        up = _Upstream(up_writer)
        up.pump = asyncio.ensure_future(_pump(up_reader, client, up))
        return up


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: _Upstream) -> None:
    """Copy a worker's answers to the client; when the worker closes, close the client (an
    answer may have been cut: the client must not wait for it)."""
    try:
        while True:
            data = await src.read(1 << 16)
            if not data:
                break
            up.last = time.monotonic()
            dst.write(data)
            if dst.transport.get_write_buffer_size() > 1 << 20:
                await dst.drain()
    except ConnectionError:
        pass
    except asyncio.CancelledError:
        return  # replaced or closed by the front: the client stays open
    dst.close()


class AdminFront:
    """The admin API over every worker (see the module docstring)."""

    def __init__(self, admin_sockets: Sequence[str]):
        self.clients = [
            httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=s), base_url="http://worker", timeout=None
            )
            for s in admin_sockets
        ]
        self._created = [0] * len(self.clients)
        self.app = Starlette(
            routes=[
                Route("/sessions", self._sessions, methods=["GET", "POST"]),
                Route("/sessions/{sid}", self._one, methods=["GET", "POST", "DELETE"]),
                Route("/sessions/{sid}/{rest:path}", self._one, methods=["GET", "POST", "DELETE"]),
                Route("/status", self._status, methods=["GET"]),
                Route("/{path:path}", self._all, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()

    async def _send(self, k: int, request: Request, body: bytes) -> httpx.Response:
        headers = {
            name: value
            for name, value in request.headers.items()
            if name in ("authorization", "content-type")
        }
        return await self.clients[k].request(
            request.method,
            request.url.path,
            params=request.query_params,
            content=body,
            headers=headers,
        )

    @staticmethod
    def _answer(r: httpx.Response) -> Response:
        return Response(
            r.content, status_code=r.status_code, media_type=r.headers.get("content-type")
        )

    async def _sessions(self, request: Request) -> Response:
        body = await request.body()
        if request.method == "POST":
            k = min(range(len(self.clients)), key=lambda i: (self._created[i], i))
            self._created[k] += 1
            return self._answer(await self._send(k, request, body))
        answers = await asyncio.gather(
            *(self._send(k, request, body) for k in range(len(self.clients)))
        )
        bad = [r for r in answers if r.status_code != 200]
        if bad:
            return self._answer(bad[0])
        sessions = [s for r in answers for s in r.json()["sessions"]]
        return Response(orjson.dumps({"sessions": sessions}), media_type="application/json")

    async def _one(self, request: Request) -> Response:
        k = session_worker(request.path_params["sid"], len(self.clients))
        return self._answer(await self._send(k, request, await request.body()))

    async def _status(self, request: Request) -> Response:
        answers = await asyncio.gather(
            *(self._send(k, request, b"") for k in range(len(self.clients)))
        )
        bad = [r for r in answers if r.status_code != 200]
        if bad:
            return self._answer(bad[0])
        each: list[dict[str, Any]] = [r.json() for r in answers]
        out = {**each[0], "sessions": sum(int(s.get("sessions", 0)) for s in each)}
        out["workers"] = each
        return Response(orjson.dumps(out), media_type="application/json")

    async def _all(self, request: Request) -> Response:
        body = await request.body()
        answers = await asyncio.gather(
            *(self._send(k, request, body) for k in range(len(self.clients)))
        )
        for r in answers:
            if r.status_code >= 400:
                return self._answer(r)
        return self._answer(answers[0])


def _listeners(socket_path: str | None, port: int | None, host: str, mode: int) -> list[Any]:
    from clawrl.proxy.server import _tcp_socket, _unix_socket

    out = []
    if socket_path:
        out.append(_unix_socket(socket_path, mode))
    if port is not None:
        out.append(_tcp_socket(host, port))
    return out


async def _serve_fronts(workers: WorkerSet, args: Any, log_level: str) -> int:
    """Serve both fronts until SIGINT/SIGTERM (0) or until a worker exits (1)."""
    import uvicorn

    model = ModelFront([workers.model_socket(k) for k in range(workers.n)])
    admin = AdminFront([workers.admin_socket(k) for k in range(workers.n)])
    servers = []
    for sock in _listeners(args.socket, args.port, args.host, 0o666):
        if sock.family == socket.AF_UNIX:
            servers.append(await asyncio.start_unix_server(model.handle, sock=sock))
        else:
            servers.append(await asyncio.start_server(model.handle, sock=sock))
    config = uvicorn.Config(admin.app, log_level=log_level, access_log=False, lifespan="off")
    admin_server = uvicorn.Server(config)
    admin_socks = _listeners(args.admin_socket, args.admin_port, args.host, 0o600)
    admin_task = asyncio.ensure_future(admin_server.serve(sockets=admin_socks))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    status = 0
    try:
        while not stop.is_set():
            dead = workers.dead()
            if dead:
                log.error("proxy worker(s) %s exited: stopping the proxy", dead)
                status = 1
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
    finally:
        admin_server.should_exit = True
        await admin_task
        for srv in servers:
            srv.close()
        await admin.aclose()
        for path in (args.socket, args.admin_socket):
            if path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    return status


def serve_workers(args: Any, argv: Sequence[str]) -> int:
    """``proxy serve --workers N``: start the workers, serve the fronts, stop the workers.

    Returns the exit status (0 after SIGINT/SIGTERM, 1 when a worker failed).
    """
    from clawrl.proxy.server import ServerConfig

    base_url = ServerConfig(
        socket=args.socket, port=args.port, host=args.host, public_base_url=args.public_base_url
    ).base_url()
    workers = WorkerSet(argv, args.workers, base_url)
    try:
        workers.start()
        print(
            f"proxy: {args.workers} workers behind {args.socket or ''} {args.port or ''} "
            f"(admin {args.admin_socket or args.admin_port})",
            file=sys.stderr,
            flush=True,
        )
        try:
            import uvloop
        except ImportError:
            return asyncio.run(_serve_fronts(workers, args, args.log_level))
        return int(uvloop.run(_serve_fronts(workers, args, args.log_level)))
    except RuntimeError as e:
        print(f"proxy serve: {e}", file=sys.stderr)
        return 1
    finally:
        workers.stop()
