"""Several proxy worker processes behind one address (``proxy serve --workers N``).

Each worker is a whole proxy (``proxy serve --worker-index k``: its own backend client,
sessions, splice memory and capture files) listening on private unix sockets in a run
directory. Its session ids end in ``-w<k>``. In front of them, in the parent process:

- the **model front** listens where a single proxy would (``--socket`` / ``--port``) and
  relays each HTTP/1.1 request, as bytes, to the worker named by the session id in its path
  (``/s/<sid>/...``; other paths go to worker 0), on one upstream connection per client
  connection and worker, and relays the answer back, with backpressure both ways. So a
  session's calls always reach the worker that holds its state, and a client that disconnects
  disconnects its worker too (the generation is aborted and recorded as before). Requests are
  framed with ``httptools`` (uvicorn's parser); the bytes are not parsed further. What the
  front itself refuses (a head over 64 KiB: 431; malformed, pipelined, ``CONNECT`` or
  upgrade requests: 400; an unreachable worker: 502) gets a typed error body, as a worker's.
- the **admin front** (``--admin-socket`` / ``--admin-port``) is a Starlette app that sends
  ``POST /sessions`` to the worker with the fewest sessions created, a session's own routes to
  its worker, and merges what concerns every worker: ``GET /sessions`` lists all workers'
  sessions, ``/status`` sums them, ``/pause``, ``/resume`` and ``/sampling`` go to every
  worker, ``/weights`` to worker 0 and then, with ``"loaded": true``, to the others (the
  weights are loaded once into the shared SGLang server). Worker 0's answer is answered when
  every worker succeeded (or all failed alike); else 502 ``workers_split`` with every
  worker's answer (see :class:`AdminFront`).

The admin token (``--admin-token``) reaches the workers in their environment
(``CLAWRL_PROXY_ADMIN_TOKEN``), not on their command line.

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
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
from clawrl.proxy.errors import (
    ProxyError,
    ProxyRequestError,
    anthropic_error_body,
    openai_error_body,
)
from clawrl.proxy.limits import ConnectionGuard, raise_nofile_limit
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = [
    "ADMIN_TOKEN_ENV",
    "MAX_HEAD_BYTES",
    "AdminFront",
    "ModelFront",
    "WorkerSet",
    "serve_workers",
    "session_worker",
    "worker_argv",
]

log = logging.getLogger("clawrl.proxy")

#: options of ``proxy serve`` that the parent keeps for itself (a worker gets its own, or,
#: for the admin token, gets it in its environment: an argv is visible to every user in ``ps``)
_PARENT_OPTIONS = (
    "--socket",
    "--port",
    "--host",
    "--admin-socket",
    "--admin-port",
    "--admin-token",
    "--workers",
    "--public-base-url",
)
#: the environment variable a worker reads its admin token from (``proxy serve``'s default)
ADMIN_TOKEN_ENV = "CLAWRL_PROXY_ADMIN_TOKEN"


def session_worker(session_id: str | bytes, workers: int) -> int:
    """The worker index a session id names (its ``-w<k>`` suffix); 0 when it names none or
    a worker outside ``range(workers)`` (that worker then answers 404 for an unknown id)."""
    sid = session_id.decode("latin-1") if isinstance(session_id, bytes) else session_id
    _, sep, tag = sid.rpartition("-w")
    # ASCII digits only ('²'.isdigit() is true, int('²') fails) and short (int() of 10,000
    # digits is slow, then refused)
    if sep and tag.isascii() and tag.isdigit() and len(tag) <= 4 and int(tag) < workers:
        return int(tag)
    return 0


def worker_argv(argv: Sequence[str], index: int, rundir: Path, base_url: str) -> list[str]:
    """The ``proxy serve`` arguments of worker ``index``: the parent's, less where it listens
    (``--socket``, ``--port``, ``--host``, ``--admin-*``, ``--workers``,
    ``--public-base-url``) and ``--admin-token`` (given in the environment, see
    :class:`WorkerSet`), plus the worker's sockets in ``rundir``, its index and the
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
        admin_token: the admin API's bearer token (None: none); the workers get it in their
            environment (:data:`ADMIN_TOKEN_ENV`), never on their command line.
    """

    def __init__(
        self,
        argv: Sequence[str],
        workers: int,
        base_url: str,
        admin_token: str | None = None,
    ):
        if workers < 2:
            raise ValueError("a WorkerSet needs at least 2 workers")
        self.rundir = Path(tempfile.mkdtemp(prefix="clawrl-proxy-workers-"))
        os.chmod(self.rundir, 0o700)
        self.n = workers
        self._argv = [worker_argv(argv, k, self.rundir, base_url) for k in range(workers)]
        self._env = {k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_ENV}
        if admin_token is not None:
            self._env[ADMIN_TOKEN_ENV] = admin_token
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
            self.procs.append(subprocess.Popen(cmd, env=self._env, preexec_fn=_die_with_parent))
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
        self.url = bytearray()  # appended per callback: linear however the head is split
        self.heads_done = 0  # requests whose head (so URL) is complete
        self.begun = 0
        self.completed = 0

    def on_message_begin(self) -> None:
        self.begun += 1
        self.url = bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_headers_complete(self) -> None:
        self.heads_done += 1

    def on_message_complete(self) -> None:
        self.completed += 1


#: the largest request head (request line and headers) the model front buffers to find the
#: session id; a longer one gets 431
MAX_HEAD_BYTES = 64 << 10
#: after an error answer, how long (and how many bytes) the front keeps reading and
#: discarding what the client still sends, so that closing does not reset the connection
#: before the client has read the answer
_LINGER_S = 1.0
_LINGER_BYTES = 1 << 20


class _HeadTooLargeError(ProxyRequestError, status=431, code="request_header_fields_too_large"):
    """The request head exceeds :data:`MAX_HEAD_BYTES` (HTTP 431)."""


class _WorkerUnavailableError(
    ProxyError, status=502, error_type="server_error", code="worker_unavailable"
):
    """A proxy worker cannot be reached (HTTP 502)."""


class _WorkersSplitError(ProxyError, status=502, error_type="server_error", code="workers_split"):
    """The workers answered a call that concerns them all differently (HTTP 502)."""


def _error_answer(err: ProxyError, url: bytes | bytearray = b"") -> bytes:
    """A whole HTTP/1.1 answer (``connection: close``) with the typed error body of the API
    the request's path speaks (Anthropic under ``/messages``, else OpenAI), as the workers
    render theirs."""
    shape = anthropic_error_body if b"/messages" in url else openai_error_body
    body = orjson.dumps(shape(err))
    head = (
        f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


async def _reject(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes
) -> None:
    """Send ``answer`` and end the connection: half-close, then read and discard what the
    client still sends (at most ``_LINGER_S`` / ``_LINGER_BYTES``) so that the close does not
    reset the connection before the client read the answer. The caller closes ``writer``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _LINGER_S
    with contextlib.suppress(OSError, TimeoutError):
        writer.write(answer)
        await asyncio.wait_for(writer.drain(), _LINGER_S)
        if writer.can_write_eof():
            writer.write_eof()
        got = 0
        while got < _LINGER_BYTES:
            data = await asyncio.wait_for(reader.read(1 << 16), max(0.0, deadline - loop.time()))
            if not data:
                break
            got += len(data)


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


class _Connection:
    """One client connection: its upstreams (one per worker it has used) and the worker of
    the request being relayed (``current``; None while a request head is being read)."""

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.upstreams: dict[int, _Upstream] = {}
        self.current: int | None = None


class ModelFront:
    """The model API front: relays each request of a client connection to its session's
    worker (see the module docstring).

    One client connection may carry requests for several workers, one after the other (a
    client's connection pool does not know about sessions); it gets one upstream connection
    per worker. Clients must not pipeline (send a request before the previous answer): a chunk
    holding the start of two requests, or the end of one request and the start of the next
    for another worker, gets 400 and the connection is closed. Hence the worker of the
    request last sent (``current``) is the only one that may owe the client an answer: when
    it closes its upstream connection the client connection is closed (an answer may have
    been cut: the client must not wait for it); when another worker closes its (idle)
    upstream only that upstream is dropped, and the client's next request for that worker
    opens a new one. An upstream connection idle for ``reuse_s`` is replaced before its next
    request (below the workers' 75 s keep-alive, so a worker never closes a connection a
    request is about to use).

    Bytes are relayed with backpressure both ways: the front reads no more from the client
    than the worker takes (and the reverse), so a client sending faster than its worker reads
    holds no more than a few buffers in the front. A request head is buffered until the
    session id is known, at most :data:`MAX_HEAD_BYTES` (431 past it). ``CONNECT`` and
    protocol upgrades (``Upgrade: h2c``, websockets) get 400.
    """

    def __init__(
        self,
        worker_sockets: Sequence[str],
        reuse_s: float = 30.0,
        guard: ConnectionGuard | None = None,
    ):
        self.sockets = list(worker_sockets)
        self.reuse_s = reuse_s
        self.guard = guard

    def worker_of(self, url: bytes | bytearray) -> int:
        if url.startswith(b"/s/"):
            return session_worker(bytes(url[3:].split(b"/", 1)[0]), len(self.sockets))
        return 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection; with a ``guard``, a sandbox over its cap of open
        connections (:attr:`ConnectionGuard.max_connections_per_peer`) has the new one
        closed at once (the workers see only the front's connections, never the
        sandbox's)."""
        if self.guard is None:
            await self._serve(reader, writer)
            return
        ok, peer = self.guard.admit(writer.transport)
        if not ok:
            writer.close()
            return
        try:
            await self._serve(reader, writer)
        finally:
            self.guard.release(peer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        router = _RequestRouter()
        parser = httptools.HttpRequestParser(router)
        conn = _Connection(writer)
        pending: list[bytes] = []  # chunks of a request whose head is not complete yet
        pending_len = 0
        straddled: int | None = None  # worker owed the first bytes of ``pending``, if any

        async def reject(err: ProxyError) -> None:
            conn.current = None  # the answer is the front's, whichever worker had the last
            for up in conn.upstreams.values():
                up.close()
            await _reject(reader, writer, _error_answer(err, router.url))

        try:
            while True:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return
                begun, heads, completed = router.begun, router.heads_done, router.completed
                try:
                    parser.feed_data(chunk)
                except httptools.HttpParserUpgrade:
                    await reject(
                        ProxyRequestError("CONNECT and protocol upgrades are not supported")
                    )
                    return
                except httptools.HttpParserError as e:
                    await reject(ProxyRequestError(f"malformed HTTP request: {e}"))
                    return
                if router.begun - begun > 1:  # pipelined requests in one chunk
                    await reject(ProxyRequestError("pipelined requests are not supported"))
                    return
                if router.begun > begun:
                    # a new request starts in this chunk. When the previous one ends in it
                    # too, the chunk's first bytes are owed to the previous request's worker:
                    # the chunk may go to it only (the offset is unknown)
                    straddled = None
                    if begun > completed:
                        if begun > heads:  # ... a worker not even known yet
                            await reject(ProxyRequestError("pipelined requests are not supported"))
                            return
                        straddled = conn.current
                    conn.current, pending, pending_len = None, [], 0
                if conn.current is None:
                    pending.append(chunk)
                    pending_len += len(chunk)
                    if router.heads_done == heads:
                        # the head is not complete: the URL may be partial (every byte pending
                        # belongs to the head: the chunk that completes it is not counted)
                        if pending_len > MAX_HEAD_BYTES:
                            await reject(
                                _HeadTooLargeError(
                                    f"request head larger than {MAX_HEAD_BYTES} bytes"
                                )
                            )
                            return
                        continue
                    k = self.worker_of(router.url)
                    if straddled is not None and straddled != k:
                        await reject(ProxyRequestError("pipelined requests are not supported"))
                        return
                    conn.current, straddled = k, None
                    chunk, pending, pending_len = b"".join(pending), [], 0
                    up = conn.upstreams.get(k)
                    if up is None or not up.fresh(self.reuse_s):
                        if up is not None:
                            up.close()
                        up = await self._connect(k, conn)
                        if up is None:
                            await reject(
                                _WorkerUnavailableError(f"proxy worker {k} cannot be reached")
                            )
                            return
                        conn.upstreams[k] = up
                up = conn.upstreams[conn.current]
                up.last = time.monotonic()
                up.writer.write(chunk)
                await up.writer.drain()  # backpressure: read no more than the worker takes
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            for up in conn.upstreams.values():
                up.close()
            writer.close()

    async def _connect(self, k: int, conn: _Connection) -> _Upstream | None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.sockets[k])
        except OSError:
            log.error("proxy worker %d cannot be reached", k)
            return None
        up = _Upstream(up_writer)
        up.pump = asyncio.ensure_future(_pump(up_reader, conn, k, up))
        return up


async def _pump(src: asyncio.StreamReader, conn: _Connection, k: int, up: _Upstream) -> None:
    """Copy worker ``k``'s answers to the client. When the worker closes the connection: if
    it serves the client's current request, close the client (an answer may have been cut:
    the client must not wait for it); else only this upstream (it was idle: its answers were
    complete, see :class:`ModelFront`)."""
    dst = conn.writer
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
    up.writer.close()
    if conn.current == k and conn.upstreams.get(k) is up:
        dst.close()


def _admin_error(err: ProxyError, **extra: Any) -> Response:
    return Response(
        orjson.dumps({**openai_error_body(err), **extra}),
        status_code=err.status,
        media_type="application/json",
    )


def _report(answers: Sequence[httpx.Response]) -> list[dict[str, Any]]:
    """Each worker's answer: ``{"worker", "status", "body"}`` (the body as JSON when it is)."""
    out = []
    for k, r in enumerate(answers):
        try:
            body: Any = r.json()
        except ValueError:
            body = r.text
        out.append({"worker": k, "status": r.status_code, "body": body})
    return out


class AdminFront:
    """The admin API over every worker (see the module docstring).

    ``POST /weights`` goes to worker 0 first (the weights are loaded once into a shared
    SGLang server), then, if it succeeded, to the other workers with ``"loaded": true`` (a
    worker whose backend shares worker 0's server only takes the new policy version; one
    whose weights live in its own process loads them). A worker that fails leaves the
    versions split: the answer is then 502 (``workers_split``) with every worker's answer in
    ``workers``, never worker 0's success alone. Likewise for the other calls sent to every
    worker (``/pause``, ``/resume``, ``/sampling``): when the workers do not all succeed (or
    all fail alike), 502 with every worker's answer. A worker that cannot be reached answers
    502 (``worker_unavailable``).
    """

    def __init__(self, admin_sockets: Sequence[str]):
        self.clients = [
            httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=s), base_url="http://worker", timeout=None
            )
            for s in admin_sockets
        ]
        self._created = [0] * len(self.clients)

        async def http_error(request: Request, exc: Exception) -> Response:
            status = getattr(exc, "status_code", 400)
            err = ProxyRequestError(str(getattr(exc, "detail", "bad request")))
            err.status = status if 400 <= status < 500 else 400
            return _admin_error(err)

        self.app = Starlette(
            routes=[
                Route("/sessions", self._sessions, methods=["GET", "POST"]),
                Route("/sessions/{sid}", self._one, methods=["GET", "POST", "DELETE"]),
                Route("/sessions/{sid}/{rest:path}", self._one, methods=["GET", "POST", "DELETE"]),
                Route("/status", self._status, methods=["GET"]),
                Route("/weights", self._weights, methods=["POST"]),
                Route("/{path:path}", self._all, methods=["GET", "POST", "PUT", "DELETE"]),
            ],
            exception_handlers={HTTPException: http_error},
        )

    async def aclose(self) -> None:
        for c in self.clients:
            await c.aclose()

    async def _send(self, k: int, request: Request, body: bytes) -> httpx.Response:
        """Worker ``k``'s answer to ``request``; 502 (typed) when it cannot be reached."""
        headers = {
            name: value
            for name, value in request.headers.items()
            if name in ("authorization", "content-type")
        }
        try:
            return await self.clients[k].request(
                request.method,
                request.url.path,
                params=request.query_params,
                content=body,
                headers=headers,
            )
        except httpx.TransportError as e:
            log.error("proxy worker %d cannot be reached: %s", k, e)
            err = _WorkerUnavailableError(f"proxy worker {k} cannot be reached: {e}")
            return httpx.Response(502, json=openai_error_body(err))

    async def _send_all(
        self, request: Request, body: bytes, workers: Sequence[int] | None = None
    ) -> list[httpx.Response]:
        ks = range(len(self.clients)) if workers is None else workers
        return list(await asyncio.gather(*(self._send(k, request, body) for k in ks)))

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
        answers = await self._send_all(request, body)
        bad = [r for r in answers if r.status_code != 200]
        if bad:
            return self._answer(bad[0])
        sessions = [s for r in answers for s in r.json()["sessions"]]
        return Response(orjson.dumps({"sessions": sessions}), media_type="application/json")

    async def _one(self, request: Request) -> Response:
        k = session_worker(request.path_params["sid"], len(self.clients))
        return self._answer(await self._send(k, request, await request.body()))

    async def _status(self, request: Request) -> Response:
        answers = await self._send_all(request, b"")
        bad = [r for r in answers if r.status_code != 200]
        if bad:
            return self._answer(bad[0])
        each: list[dict[str, Any]] = [r.json() for r in answers]
        out = {**each[0], "sessions": sum(int(s.get("sessions", 0)) for s in each)}
        out["workers"] = each
        return Response(orjson.dumps(out), media_type="application/json")

    async def _weights(self, request: Request) -> Response:
        body = await request.body()
        first = await self._send(0, request, body)
        if not first.is_success:
            return self._answer(first)  # nothing was loaded: no worker changed
        with contextlib.suppress(orjson.JSONDecodeError):
            obj = orjson.loads(body)  # worker 0 took it: an object with path and version
            if isinstance(obj, dict):
                body = orjson.dumps({**obj, "loaded": True})
        answers = [first, *await self._send_all(request, body, range(1, len(self.clients)))]
        failed = [k for k, r in enumerate(answers) if not r.is_success]
        if not failed:
            return self._answer(first)
        return _admin_error(
            _WorkersSplitError(
                f"the policy versions are split: worker 0 loaded the weights, worker(s) "
                f"{failed} failed (see workers); retry the call"
            ),
            workers=_report(answers),
        )

    async def _all(self, request: Request) -> Response:
        answers = await self._send_all(request, await request.body())
        if all(r.is_success for r in answers) or len({r.status_code for r in answers}) == 1:
            return self._answer(answers[0])  # all took it, or all refused it alike
        failed = [k for k, r in enumerate(answers) if not r.is_success]
        return _admin_error(
            _WorkersSplitError(
                f"{request.method} {request.url.path} failed on worker(s) {failed} "
                "(see workers); retry the call"
            ),
            workers=_report(answers),
        )


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

    old, new = raise_nofile_limit()
    if new != old:
        log.info("open-file limit of the front raised from %d to %d", old, new)
    guard = ConnectionGuard(max_connections_per_peer=args.max_connections_per_sandbox)
    model = ModelFront([workers.model_socket(k) for k in range(workers.n)], guard=guard)
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
    workers = WorkerSet(argv, args.workers, base_url, admin_token=args.admin_token)
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
