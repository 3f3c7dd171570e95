"""``proxy serve --workers 2``: sessions created through the one admin address are
spread over both workers and all listed, each session's calls land on its worker (its splice
memory holds: later calls extend the earlier ones), and each capture is one complete JSONL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from clawrl.proxy.workers import AdminFront, ModelFront, session_worker, worker_argv


def test_worker_argv_and_session_tags(tmp_path: Path) -> None:
    argv = [
        "--backend",
        "null",
        "--socket",
        "m",
        "--port=8",
        "--workers",
        "2",
        "--admin-socket",
        "a",
    ]
    out = worker_argv(argv, 1, tmp_path, "http://h")
    assert out[:2] == ["--backend", "null"] and "--workers" not in out and "--port=8" not in out
    assert out[out.index("--worker-index") + 1] == "1"
    assert session_worker("sabc-w1", 2) == 1 and session_worker("sabc-w7", 2) == 0
    assert session_worker(b"sabc", 2) == 0


@pytest.mark.slow
def test_two_workers_behind_one_address(tmp_path: Path) -> None:
    m, a, cap = tmp_path / "m.sock", tmp_path / "a.sock", tmp_path / "cap"
    cmd = [sys.executable, "-m", "clawrl.proxy.cli", "serve", "--backend", "null"]
    cmd += ["--socket", str(m), "--admin-socket", str(a), "--capture-dir", str(cap)]
    proc = subprocess.Popen([*cmd, "--workers", "2"], start_new_session=True)
    try:
        deadline = time.time() + 180
        while not (a.exists() and m.exists()):
            assert proc.poll() is None and time.time() < deadline, "the proxy did not start"
            time.sleep(0.1)
        admin = httpx.Client(transport=httpx.HTTPTransport(uds=str(a)), base_url="http://p")
        model = httpx.Client(transport=httpx.HTTPTransport(uds=str(m)), base_url="http://p")
        sessions = [admin.post("/sessions", json={"run_id": "w"}).json() for _ in range(4)]
        assert sorted(session_worker(s["session_id"], 2) for s in sessions) == [0, 0, 1, 1]
        listed = {s["session_id"] for s in admin.get("/sessions").json()["sessions"]}
        assert listed == {s["session_id"] for s in sessions}
        assert admin.get("/status").json()["sessions"] == 4
        for s in sessions:
            msgs = [{"role": "user", "content": "go"}]
            for _ in range(3):
                r = model.post(
                    f"/s/{s['session_id']}/v1/chat/completions",
                    headers={"authorization": "Bearer " + s["api_key"]},
                    json={"model": "m", "messages": msgs},
                )
                assert r.status_code == 200, r.text
                msgs += [r.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
        for s in sessions:
            recs = admin.get(f"/sessions/{s['session_id']}/records").json()["records"]
            # the calls reached the worker holding the session's history: nothing diverged
            kinds = [r["prompt_relation"]["kind"] for r in recs]
            assert kinds[0] == "first" and set(kinds[1:]) <= {"extends", "spliced"}, kinds
            assert admin.post(f"/sessions/{s['session_id']}/close").status_code == 200
            lines = (cap / "w" / f"{s['session_id']}.jsonl").read_text().splitlines()
            assert [json.loads(x)["seq"] for x in lines] == [0, 1, 2]
        assert admin.post("/pause").status_code == 200 and admin.post("/resume").status_code == 200
        admin.close()
        model.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    assert not m.exists() and not a.exists()


# -- red-team fixes (front hardening); fronts in this process over fake workers on real unix
# sockets, or a real ``proxy serve --workers 2`` -------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for unix sockets (a socket path has at most 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="clawrl-w-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextlib.asynccontextmanager
async def _serving(handlers: dict[str, Handler]) -> AsyncIterator[None]:
    """Unix servers in this loop (path -> connection handler); on exit every connection they
    accepted is closed and its handler ended (no transport is left to the garbage
    collector)."""
    conns: list[tuple[asyncio.StreamWriter, asyncio.Task[Any]]] = []

    def tracked(h: Handler) -> Handler:
        async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            conns.append((writer, task))
            await h(reader, writer)

        return run

    servers = [await asyncio.start_unix_server(tracked(h), path=p) for p, h in handlers.items()]
    try:
        yield
    finally:
        for s in servers:
            s.close()
        for w, t in conns:
            w.close()
            t.cancel()
        await asyncio.gather(*(t for _, t in conns), return_exceptions=True)
        for s in servers:
            await s.wait_closed()


@contextlib.asynccontextmanager
async def _model_front(d: Path, workers: Sequence[Handler | None]) -> AsyncIterator[str]:
    """A ModelFront in this loop on ``d/front.sock`` over fake workers (None: a worker whose
    socket does not exist)."""
    front = ModelFront([str(d / f"w{k}.sock") for k in range(len(workers))])
    handlers = {str(d / f"w{k}.sock"): h for k, h in enumerate(workers) if h is not None}
    async with _serving({**handlers, str(d / "front.sock"): front.handle}):
        yield str(d / "front.sock")


async def _answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A fake worker: answers each request (head, content-length body) with its own index."""
    name = Path(writer.get_extra_info("sockname")).stem.encode()
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"content-length: *(\d+)", head, re.I)
            await reader.readexactly(int(m.group(1)) if m else 0)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(name), name))
            await writer.drain()
    writer.close()


def _error_of(answer: bytes) -> tuple[int, dict[str, Any]]:
    """(status, error object) of a whole HTTP answer with a typed JSON error body."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, json.loads(body)["error"]


async def _exchange(path: str, request: bytes, timeout: float = 5.0) -> bytes:
    """Send ``request`` on a new connection; everything answered until the front closes."""
    r, w = await asyncio.open_unix_connection(path)
    w.write(request)
    with contextlib.suppress(ConnectionError):
        await w.drain()
    try:
        return await asyncio.wait_for(r.read(-1), timeout)
    finally:
        w.close()


async def test_front_relays_with_backpressure(sock_dir: Path) -> None:
    """A worker that does not read holds the client back: the front buffers a few chunks, not
    the client's whole body (it buffered all of it: 64 MiB taken in under a second)."""
    release = asyncio.Event()

    async def stalled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.close()

    async with _model_front(sock_dir, [stalled, stalled]) as path:
        _, w = await asyncio.open_unix_connection(path)
        size = 64 << 20
        w.write(b"POST /s/a-w1/v1/chat/completions HTTP/1.1\r\nhost: p\r\n")
        w.write(b"content-length: %d\r\n\r\n" % size)
        taken, block = 0, b"x" * (1 << 20)
        while taken < size:
            w.write(block)
            try:
                await asyncio.wait_for(w.drain(), 0.5)
            except TimeoutError:
                break
            taken += len(block)
        release.set()
        w.close()
    assert taken <= 8 << 20, f"the front took {taken >> 20} MiB a worker did not read"


async def test_front_answers_431_past_64_kib_of_head(sock_dir: Path) -> None:
    """A request head that never ends gets a typed 431 once it passes 64 KiB (the front
    buffered it without limit, re-copying it on every read, and never answered)."""
    seen: list[bytes] = []

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            seen.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
        writer.close()

    async with _model_front(sock_dir, [worker, worker]) as path:
        lines = [b"x-pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(200)]
        pad = b"".join(lines)
        t0 = time.monotonic()
        answer = await _exchange(path, b"GET /s/a-w1/v1/models HTTP/1.1\r\nhost: p\r\n" + pad)
        status, err = _error_of(answer)
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
        assert status == 431 and err["code"] == "request_header_fields_too_large", err
        assert err["type"] == "invalid_request_error"
        assert time.monotonic() - t0 < 3 and not seen  # nothing reached a worker
        # a head under the cap still passes
        small = b"GET /s/a-w1/x HTTP/1.1\r\nhost: p\r\n" + b"".join(lines[:62]) + b"\r\n"
        assert 60 << 10 < len(small) < 64 << 10 and small.endswith(b"a\r\n\r\n")
        assert (await _exchange(path, small)).startswith(b"HTTP/1.1 204 ")
    assert seen == [small]


def test_session_worker_tags_are_ascii_and_short() -> None:
    for sid in ("s-w²", "s-w١", "s-w" + "1" * 10_000, "s-w" + "0" * 5 + "1", "s-w", "s-w-1"):
        assert session_worker(sid, 2) == 0, sid  # int() raised on the first three
    assert session_worker("s-w0001", 2) == 1 and session_worker(b"s-w1", 2) == 1


async def test_front_refuses_connect_and_upgrades_with_typed_400(sock_dir: Path) -> None:
    """``CONNECT`` and ``Upgrade`` requests raised HttpParserUpgrade out of the handler: the
    connection was dropped without an answer. Malformed requests and unreachable workers get
    typed errors too (they got empty bodies)."""
    async with _model_front(sock_dir, [_answer_each, None]) as path:
        requests = [
            b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
            b"GET /s/a-w0/v1/models HTTP/1.1\r\nhost: p\r\nconnection: upgrade\r\n"
            b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n\r\n",
            b"POST /s/a-w0/v1/messages HTTP/1.1\r\nhost: p\r\nconnection: Upgrade\r\n"
            b"upgrade: websocket\r\ncontent-length: 2\r\n\r\n{}",
        ]
        for req in requests:
            status, err = _error_of(await _exchange(path, req))
            assert status == 400 and err["type"] == "invalid_request_error", (req, err)
        answer = await _exchange(path, b"GET /s/a-w0/v1/messages HTTP/1.1\r\nhost p\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ") and json.loads(body)["type"] == "error"
        status, err = _error_of(await _exchange(path, b"GET /s/a-w1/x HTTP/1.1\r\nhost: p\r\n\r\n"))
        assert status == 502 and err["code"] == "worker_unavailable", err


async def test_idle_worker_closing_does_not_cut_another_workers_answer(sock_dir: Path) -> None:
    """One client connection, requests for worker 0 then worker 1: worker 0 closing its idle
    upstream (keep-alive timeout) closed the client in the middle of worker 1's streamed
    answer. Now only the current request's worker closing closes the client; the next request
    for worker 0 opens a new upstream."""
    close_w0, finish_w1 = asyncio.Event(), asyncio.Event()

    async def w0(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await close_w0.wait()
        writer.close()

    async def w1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await finish_w1.wait()
        writer.write(b"5\r\nworld\r\n0\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await reader.read(-1)
        writer.close()

    async with _model_front(sock_dir, [w0, w1]) as path:
        r, w = await asyncio.open_unix_connection(path)
        w.write(b"GET /s/a-w0/v1/models HTTP/1.1\r\nhost: p\r\n\r\n")
        assert (await asyncio.wait_for(r.readuntil(b"ok"), 5)).startswith(b"HTTP/1.1 200")
        w.write(b"GET /s/b-w1/v1/models HTTP/1.1\r\nhost: p\r\n\r\n")
        await asyncio.wait_for(r.readuntil(b"hello\r\n"), 5)
        close_w0.set()  # worker 0's upstream is idle: its answer was complete
        await asyncio.sleep(0.3)
        finish_w1.set()
        assert b"world" in await asyncio.wait_for(r.readuntil(b"0\r\n\r\n"), 5)
        # worker 0 again (a new upstream), which then closes: that cuts the client
        w.write(b"GET /s/a-w0/v1/models HTTP/1.1\r\nhost: p\r\n\r\n")
        assert (await asyncio.wait_for(r.readuntil(b"ok"), 5)).startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(r.read(-1), 5) == b""
        w.close()


async def test_front_refuses_a_chunk_owed_to_two_workers(sock_dir: Path) -> None:
    """The end of a request for worker 0 and the start of the next, for worker 1, in one
    chunk: the whole chunk went to worker 1 (worker 0 waited for its body, worker 1 parsed
    garbage). The front cannot split the chunk: 400. For one worker the chunk is relayed."""
    got: dict[int, bytearray] = {0: bytearray(), 1: bytearray()}

    def recorder(k: int) -> Handler:
        async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1 << 16):
                got[k] += data
            writer.close()

        return worker

    head = b"POST /s/a-w0/v1/chat/completions HTTP/1.1\r\nhost: p\r\ncontent-length: 10\r\n\r\n"
    async with _model_front(sock_dir, [recorder(0), recorder(1)]) as path:
        r, w = await asyncio.open_unix_connection(path)
        w.write(head + b"12345")
        await asyncio.sleep(0.3)  # the front relays the first part to worker 0
        w.write(b"67890GET /s/b-w1/v1/models HTTP/1.1\r\nhost: p\r\n\r\n")
        status, err = _error_of(await asyncio.wait_for(r.read(-1), 5))
        w.close()
        assert status == 400 and "pipelined" in err["message"] and not got[1], (err, got)
    async with _model_front(sock_dir, [_answer_each, _answer_each]) as path:
        r, w = await asyncio.open_unix_connection(path)
        w.write(head + b"12345")
        await asyncio.sleep(0.3)
        w.write(b"67890GET /s/b-w0/v1/models HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n")
        answers = await asyncio.wait_for(r.readuntil(b"w0HTTP/1.1 200 OK"), 5)
        w.close()
    assert answers.count(b"HTTP/1.1 200 OK") == 2


def _fake_admin(answers: dict[str, tuple[int, Any]], got: list[tuple[str, Any]]) -> Handler:
    """A fake worker admin API: ``answers`` by path (status, JSON body); records each
    request's (path, JSON body)."""

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"content-length: *(\d+)", head, re.I)
                body = await reader.readexactly(int(m.group(1)) if m else 0)
                path = head.split(b" ")[1].decode()
                try:
                    got.append((path, json.loads(body) if body else None))
                except ValueError:
                    got.append((path, body))
                status, obj = answers[path]
                data = json.dumps(obj).encode()
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (status, len(data), data)
                )
                await writer.drain()
        writer.close()

    return worker


async def test_admin_front_loads_weights_once_and_never_hides_a_split(sock_dir: Path) -> None:
    """``/weights`` went to every worker at once (each reloaded the one SGLang server) and a
    partial failure was answered as that worker's error alone, or as a 500 when a worker was
    unreachable. Now worker 0 loads, the others get ``"loaded": true``, and any failure after
    worker 0 succeeded is a 502 ``workers_split`` with every worker's answer."""
    ok = (200, {"policy_version": 3})
    err = {"message": "cannot load", "type": "invalid_request_error", "param": None, "code": "x"}
    bad = (400, {"error": err})
    got: list[list[tuple[str, Any]]] = [[], [], []]
    answers: list[dict[str, tuple[int, Any]]] = [
        {"/weights": ok, "/pause": ok},
        {"/weights": ok, "/pause": bad},
        {"/weights": bad, "/pause": bad},
    ]
    fakes = {
        str(sock_dir / f"a{k}.sock"): _fake_admin(a, g)
        for k, (a, g) in enumerate(zip(answers, got, strict=True))
    }
    s0, s1, s2, missing = (str(sock_dir / f"a{k}.sock") for k in range(4))
    body = {"path": "/ckpt", "version": 3}

    async def call(
        sockets: list[str], path: str, method: str = "POST", **kw: Any
    ) -> httpx.Response:
        for g in got:
            g.clear()
        front = AdminFront(sockets)
        transport = httpx.ASGITransport(app=front.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://a") as c:
            r = await c.request(method, path, **kw)
        await front.aclose()
        return r

    async with _serving(fakes):
        r = await call([s0, s1], "/weights", json=body)
        assert r.status_code == 200 and r.json() == {"policy_version": 3}
        assert got[0] == [("/weights", body)] and got[1] == [("/weights", {**body, "loaded": True})]

        r = await call([s0, s1, s2], "/weights", json=body)
        assert r.status_code == 502 and r.json()["error"]["code"] == "workers_split", r.text
        assert [w["status"] for w in r.json()["workers"]] == [200, 200, 400]
        assert r.json()["workers"][2]["body"] == {"error": err}

        r = await call([s2, s0], "/weights", json=body)  # worker 0 refuses: nobody changed
        assert r.status_code == 400 and r.json() == {"error": err} and got[0] == []

        r = await call([s0, missing], "/weights", json=body)
        assert r.status_code == 502 and r.json()["error"]["code"] == "workers_split", r.text
        w1 = r.json()["workers"][1]
        assert w1["status"] == 502 and w1["body"]["error"]["code"] == "worker_unavailable"

        r = await call([s0, s1], "/pause")  # the other broadcasts: a split is reported too
        assert r.status_code == 502 and [w["status"] for w in r.json()["workers"]] == [200, 400]
        r = await call([s1, s2], "/pause")  # all refused alike: that answer
        assert r.status_code == 400 and r.json() == {"error": err}
        r = await call([s0, s1], "/weights", content=b"x", headers={"content-type": "a/b"})
        assert r.status_code == 200  # a body that is not JSON is worker 0's to judge
        assert got == [[("/weights", b"x")], [("/weights", b"x")], []]
        r = await call([s0, s1], "/pause", "PATCH")  # the front's own refusals are typed too
        assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"


async def test_sglang_backend_adopts_weights_without_calling_the_server() -> None:
    from clawrl.proxy.backends.sglang import SGLangBackend

    b = SGLangBackend("http://127.0.0.1:9", vocab_size=10, max_context=8, connect_retries=0)
    await b.adopt_weights("/nowhere", 5)  # the server (none here) is not called
    assert b.policy_version == 5
    await b.close()


@pytest.fixture(scope="module")
def token_proxy() -> Iterator[tuple[subprocess.Popen[bytes], str, str, str]]:
    """A real ``proxy serve --workers 2 --admin-token T``: (process, model socket, admin
    socket, T)."""
    d = Path(tempfile.mkdtemp(prefix="clawrl-wp-", dir="/tmp"))
    m, a, token = d / "m.sock", d / "a.sock", "tok-" + os.urandom(8).hex()
    cmd = [sys.executable, "-m", "clawrl.proxy.cli", "serve", "--backend", "null", "--workers"]
    cmd += ["2", "--socket", str(m), "--admin-socket", str(a), "--admin-token", token]
    env = {k: v for k, v in os.environ.items() if k != "CLAWRL_PROXY_ADMIN_TOKEN"}
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    try:
        deadline = time.time() + 180
        while not (a.exists() and m.exists()):
            assert proc.poll() is None and time.time() < deadline, "the proxy did not start"
            time.sleep(0.1)
        yield proc, str(m), str(a), token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_admin_token_reaches_workers_in_their_environment(
    token_proxy: tuple[subprocess.Popen[bytes], str, str, str],
) -> None:
    """The workers' command lines (``ps``) held ``--admin-token``."""
    proc, _, a, token = token_proxy
    workers = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            if re.search(rf"^PPid:\s+{proc.pid}$", status, re.M):
                workers.append(pid)
    assert len(workers) == 2, workers
    for pid in workers:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--worker-index" in argv and not any(token.encode() in x for x in argv), argv
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"CLAWRL_PROXY_ADMIN_TOKEN=" + token.encode() in environ
    with httpx.Client(transport=httpx.HTTPTransport(uds=a), base_url="http://p") as admin:
        assert admin.get("/status").status_code == 401
        r = admin.get("/status", headers={"authorization": "Bearer " + token})
        assert r.status_code == 200 and len(r.json()["workers"]) == 2


@pytest.mark.slow
def test_admin_front_answers_typed_4xx_on_odd_worker_tags(
    token_proxy: tuple[subprocess.Popen[bytes], str, str, str],
) -> None:
    """``-w²`` (a digit to str.isdigit, not to int) and a 5,000-digit tag made the admin
    front answer 500; they name no worker: worker 0 answers 404."""
    _, _, a, token = token_proxy
    auth = {"authorization": "Bearer " + token}
    with httpx.Client(transport=httpx.HTTPTransport(uds=a), base_url="http://p") as admin:
        for sid in ("abc-w²", "abc-w١", "abc-w" + "1" * 5000):
            for method, path in (("GET", ""), ("POST", "/close"), ("GET", "/records")):
                r = admin.request(method, f"/sessions/{sid}{path}", headers=auth)
                assert r.status_code == 404, (sid[:10], path, r.status_code, r.text[:200])
                assert r.json()["error"]["code"] == "session_not_found"


@pytest.mark.slow
def test_weights_reach_every_real_worker(
    token_proxy: tuple[subprocess.Popen[bytes], str, str, str],
) -> None:
    """Worker 0 loads, worker 1 takes the version (``loaded``): every worker reports it."""
    _, _, a, token = token_proxy
    auth = {"authorization": "Bearer " + token}
    with httpx.Client(transport=httpx.HTTPTransport(uds=a), base_url="http://p") as admin:
        r = admin.post("/weights", json={"path": "/ckpt", "version": 7}, headers=auth)
        assert r.status_code == 200 and r.json() == {"policy_version": 7}, r.text
        each = admin.get("/status", headers=auth).json()["workers"]
        assert [w["policy_version"] for w in each] == [7, 7]
        body = {"path": "/ckpt", "version": 8, "loaded": "yes"}
        r = admin.post("/weights", json=body, headers=auth)
        assert r.status_code == 400 and r.json()["error"]["param"] == "loaded"
        each = admin.get("/status", headers=auth).json()["workers"]
        assert [w["policy_version"] for w in each] == [7, 7]
