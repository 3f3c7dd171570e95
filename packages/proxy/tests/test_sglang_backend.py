"""Unit tests of SGLangBackend's request/response mapping against FakeSGLang.

FakeSGLang is a *fake* (a test double, not SGLang): a small starlette app served by a real
uvicorn on a loopback port, implementing the native routes the backend uses with the
reply shapes SGLang 0.5.23 sends (recorded from the real server, see
packages/proxy/docs/sglang.md). Like SGLang on CPU, it "crashes" (stops answering) when a
request carries an input id outside the vocabulary — the backend must never send one.
The real server is exercised by test_sglang_real.py (slow).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.sglang import (
    InvalidTokenIdError,
    SGLangBackend,
    SGLangRequestError,
    SGLangUnavailableError,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .conftest import collect_generation

VOCAB = 64


class FakeSGLang:
    """Fake SGLang server (test double). Generation is deterministic: the i-th output id
    is ``(sum(input_ids) + 7 * i) % vocab`` with logprob ``-0.25 * (i + 1)``; it stops on
    a stop id (kept) or after ``max_new_tokens``.

    Knobs: ``incremental`` (send only new tokens per chunk), ``chunk_delay`` (seconds
    between chunks), ``fail`` (route -> (status, body) answered instead),
    ``break_after`` (close the /generate stream abruptly after n chunks),
    ``error_after`` (send an in-stream error object after n chunks).
    """

    def __init__(self, vocab_size: int = VOCAB, model_path: str = "/nonexistent"):
        self.vocab_size = vocab_size
        self.model_path = model_path
        self.weight_version = "default"
        self.requests: list[tuple[str, Any]] = []
        self.crashed = False
        self.paused = False
        self.incremental = False
        self.chunk_delay = 0.0
        self.fail: dict[str, tuple[int, Any]] = {}
        self.break_after: int | None = None
        self.error_after: int | None = None
        self.weight_change_at: tuple[int, str] | None = None
        self.aborted: set[str] = set()
        self.app = Starlette(
            routes=[
                Route("/generate", self.generate, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/model_info", self.model_info, methods=["GET"]),
                Route("/server_info", self.server_info, methods=["GET"]),
                Route("/abort_request", self.abort_request, methods=["POST"]),
                Route("/update_weights_from_disk", self.update_weights, methods=["POST"]),
                Route("/pause_generation", self.pause, methods=["POST"]),
                Route("/continue_generation", self.resume, methods=["POST"]),
                Route("/flush_cache", self.flush_cache, methods=["POST"]),
            ]
        )

    def routes(self) -> list[str]:
        return [r for r, _ in self.requests]

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        body = orjson.loads(raw) if raw else None
        self.requests.append((request.url.path, body))
        return body

    def _failure(self, route: str) -> Response | None:
        if self.crashed:
            return PlainTextResponse("crashed", status_code=502)
        if route in self.fail:
            status, body = self.fail[route]
            return JSONResponse(body, status_code=status)
        return None

    async def health(self, request: Request) -> Response:
        self.requests.append(("/health", None))
        return self._failure("/health") or Response(status_code=200)

    async def model_info(self, request: Request) -> Response:
        self.requests.append(("/model_info", None))
        return self._failure("/model_info") or JSONResponse(
            {"model_path": self.model_path, "weight_version": self.weight_version}
        )

    async def server_info(self, request: Request) -> Response:
        self.requests.append(("/server_info", None))
        return self._failure("/server_info") or JSONResponse(
            {"context_length": None, "max_total_num_tokens": 8192}
        )

    async def abort_request(self, request: Request) -> Response:
        body = await self._record(request)
        self.aborted.add(body.get("rid", ""))
        return self._failure("/abort_request") or Response(status_code=200)

    async def update_weights(self, request: Request) -> Response:
        body = await self._record(request)
        failed = self._failure("/update_weights_from_disk")
        if failed:
            return failed
        if not Path(body["model_path"]).is_dir():
            return JSONResponse({"success": False, "message": "no such dir"}, status_code=400)
        if body.get("weight_version") is not None:
            self.weight_version = body["weight_version"]
        return JSONResponse({"success": True, "message": "ok", "num_paused_requests": 0})

    async def pause(self, request: Request) -> Response:
        await self._record(request)
        self.paused = True
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def resume(self, request: Request) -> Response:
        await self._record(request)
        self.paused = False
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def flush_cache(self, request: Request) -> Response:
        await self._record(request)
        return PlainTextResponse("Cache flushed.\n")

    async def generate(self, request: Request) -> Response:
        body = await self._record(request)
        failed = self._failure("/generate")
        if failed:
            return failed
        ids = body.get("input_ids") or []
        if any(not 0 <= t < self.vocab_size for t in ids):
            self.crashed = True  # what SGLang 0.5.23 on CPU does
            return PlainTextResponse("scheduler died", status_code=502)
        if not ids:
            return JSONResponse({"error": {"message": "input_ids cannot be empty."}}, 400)
        sp = body.get("sampling_params") or {}
        stops = set(sp.get("stop_token_ids") or [])
        rid = body.get("rid") or "rid"
        base = sum(ids)

        async def chunks() -> AsyncIterator[bytes]:
            out: list[int] = []
            lps: list[list[Any]] = []
            spans = [{"version": self.weight_version, "start": 0, "end": 0}]
            finish: dict[str, Any] | None = None
            i = 0
            while finish is None:
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if self.break_after is not None and i >= self.break_after:
                    raise RuntimeError("fake connection drop")
                if self.error_after is not None and i >= self.error_after:
                    err = {"message": "boom", "type": "invalid_request_error", "code": 500}
                    yield b"data: " + orjson.dumps({"error": err}) + b"\n\n"
                    yield b"data: [DONE]\n\n"
                    return
                if self.weight_change_at is not None and i == self.weight_change_at[0]:
                    self.weight_version = self.weight_change_at[1]
                    spans.append({"version": self.weight_version, "start": i, "end": i})
                if rid in self.aborted:
                    finish = {"type": "abort", "message": "Aborted"}
                    new: list[int] = []
                else:
                    tok = (base + 7 * i) % self.vocab_size
                    new = [tok]
                    out.append(tok)
                    lps.append([-0.25 * (i + 1), tok, None])
                    spans[-1]["end"] = len(out)
                    i += 1
                    if tok in stops:
                        finish = {"type": "stop", "matched": tok}
                    elif len(out) >= sp.get("max_new_tokens", 128):
                        finish = {"type": "length", "length": len(out)}
                meta: dict[str, Any] = {
                    "id": rid,
                    "finish_reason": finish,
                    "prompt_tokens": len(ids),
                    "weight_version": self.weight_version,
                    "completion_tokens": len(out),
                    "output_token_logprobs": lps[-len(new) :] if self.incremental else lps,
                }
                if self.incremental and not new:
                    meta["output_token_logprobs"] = []
                if finish is not None:
                    meta["weight_versions"] = spans
                chunk = {"output_ids": new if self.incremental else list(out), "meta_info": meta}
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            yield b"data: [DONE]\n\n"

        if body.get("stream"):
            return StreamingResponse(chunks(), media_type="text/event-stream")
        last = None
        async for c in chunks():
            if c.startswith(b"data: {"):
                last = orjson.loads(c[6:])
        return JSONResponse(last)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _ServerThread:
    """Runs an ASGI app with a real uvicorn server in a background thread."""

    def __init__(self, app: Any, port: int | None = None):
        self.port = port or _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="critical", lifespan="off", ws="none"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> _ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeSGLang, str]]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"vocab_size": VOCAB, "max_position_embeddings": 4096})
    )
    f = FakeSGLang(model_path=str(model))
    srv = _ServerThread(f.app).start()
    try:
        yield f, srv.url
    finally:
        srv.stop()


@pytest.fixture
async def backend(fake: tuple[FakeSGLang, str]) -> AsyncIterator[SGLangBackend]:
    b = SGLangBackend(fake[1], connect_retries=0)
    await b.start()
    try:
        yield b
    finally:
        await b.close()


def req(prompt: list[int], rid: str = "r1", **sampling: Any) -> GenerationRequest:
    sampling.setdefault("max_tokens", 5)
    return GenerationRequest(rid, prompt, SamplingParams(**sampling))


def expected(prompt: list[int], n: int) -> list[int]:
    return [(sum(prompt) + 7 * i) % VOCAB for i in range(n)]


# ---------------------------------------------------------------------------- start-up


async def test_start_reads_vocab_context_and_version(fake: tuple[FakeSGLang, str]) -> None:
    f, url = fake
    f.weight_version = "4"
    b = SGLangBackend(url)
    with pytest.raises(BackendError):
        _ = b.vocab_size  # unknown before start()
    await b.start()
    assert b.vocab_size == VOCAB
    assert b.max_context == 4096  # min(max_position_embeddings, KV-cache tokens 8192)
    assert b.policy_version == 4
    await b.close()


async def test_default_weight_version_is_initial_policy_version(
    fake: tuple[FakeSGLang, str],
) -> None:
    b = SGLangBackend(fake[1], initial_policy_version=7, vocab_size=10, max_context=100)
    await b.start()
    assert (b.policy_version, b.vocab_size, b.max_context) == (7, 10, 100)
    assert "/server_info" not in fake[0].routes()  # nothing left to ask
    await b.close()


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SGLangBackend("localhost:3000")
    with pytest.raises(ValueError):
        SGLangBackend("http://x", pause_mode="freeze")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SGLangBackend("http://x", vocab_size=0)


# ---------------------------------------------------------------------------- request mapping


def test_generate_body_maps_sampling_params() -> None:
    b = SGLangBackend("http://x", vocab_size=VOCAB, max_context=100)
    body = b.build_generate_body(
        req(
            [1, 2, 3],
            rid="abc",
            max_tokens=9,
            temperature=0.7,
            top_p=0.9,
            top_k=20,
            stop_token_ids=(5, 6),
            seed=11,
        )
    )
    assert body == {
        "rid": "abc",
        "input_ids": [1, 2, 3],
        "sampling_params": {
            "max_new_tokens": 9,
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 20,
            "stop_token_ids": [5, 6],
            "skip_special_tokens": False,
            "no_stop_trim": True,
            "sampling_seed": 11,
        },
        "return_logprob": True,
        "logprob_start_len": -1,
        "stream": True,
    }
    assert "sampling_seed" not in b.build_generate_body(req([1]))["sampling_params"]
    b2 = SGLangBackend(
        "http://x", vocab_size=VOCAB, max_context=100, extra_sampling_params={"ignore_eos": True}
    )
    assert b2.build_generate_body(req([1]))["sampling_params"]["ignore_eos"] is True


@pytest.mark.parametrize(
    ("sampling", "match"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 98}, "context window"),  # 3 + 98 > 100
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_generate_body_rejects_bad_sampling(sampling: dict[str, Any], match: str) -> None:
    b = SGLangBackend("http://x", vocab_size=VOCAB, max_context=100)
    with pytest.raises(SGLangRequestError, match=match):
        b.build_generate_body(req([1, 2, 3], **sampling))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=-3, max_value=VOCAB + 3), max_size=30))
def test_validate_ids_accepts_exactly_the_vocabulary(ids: list[int]) -> None:
    b = SGLangBackend("http://x", vocab_size=VOCAB, max_context=100)
    bad = [i for i, t in enumerate(ids) if not 0 <= t < VOCAB]
    if not bad:
        assert b.validate_ids(ids) == ids
    else:
        with pytest.raises(InvalidTokenIdError) as exc:
            b.validate_ids(ids)
        assert exc.value.position == bad[0]
        assert exc.value.token_id == ids[bad[0]]


def test_validate_ids_rejects_non_integers() -> None:
    b = SGLangBackend("http://x", vocab_size=VOCAB, max_context=100)
    for bad in (1.0, "3", None, True):
        with pytest.raises(InvalidTokenIdError):
            b.validate_ids([1, bad])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("prompt", "stops"),
    [([1, VOCAB], ()), ([-1, 2], ()), ([1, 2], (VOCAB + 5,)), ([], ())],
)
async def test_invalid_request_is_never_sent(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend, prompt: list[int], stops: tuple[int, ...]
) -> None:
    """The request that crashes a CPU SGLang server (an out-of-vocabulary id) never leaves
    the client; the server stays healthy."""
    f, _ = fake
    with pytest.raises(SGLangRequestError):
        await collect_generation(backend, req(prompt, stop_token_ids=stops))
    assert "/generate" not in f.routes()
    assert not f.crashed
    assert await backend.health()


# ---------------------------------------------------------------------------- response mapping


@pytest.mark.parametrize("incremental", [False, True])
async def test_stream_maps_tokens_logprobs_and_length(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend, incremental: bool
) -> None:
    f, _ = fake
    f.incremental = incremental
    deltas, result = await collect_generation(backend, req([1, 2], max_tokens=4))
    want = expected([1, 2], 4)
    assert [t for d in deltas for t in d.token_ids] == want
    assert all(len(d.token_ids) == len(d.logprobs) for d in deltas)
    assert result.completion_ids == want
    assert result.completion_logprobs == [-0.25, -0.5, -0.75, -1.0]
    assert result.finish_reason == "length"
    assert (result.policy_version, result.policy_version_end) == (0, 0)
    assert result.extra["sglang_finish_reason"] == {"type": "length", "length": 4}
    body = dict(f.requests)["/generate"]
    assert body["stream"] is True and body["return_logprob"] is True


async def test_stop_token_is_kept_and_maps_to_stop(backend: SGLangBackend) -> None:
    want = expected([3], 10)
    stop = want[2]
    _, result = await collect_generation(backend, req([3], max_tokens=10, stop_token_ids=(stop,)))
    assert result.completion_ids == want[:3]
    assert result.completion_ids[-1] == stop
    assert result.finish_reason == "stop"


async def test_weight_change_mid_generation_sets_both_versions(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    f, _ = fake
    f.weight_version = "2"
    f.weight_change_at = (3, "3")
    _, result = await collect_generation(backend, req([1], max_tokens=6))
    assert (result.policy_version, result.policy_version_end) == (2, 3)
    assert result.extra["weight_versions"] == [
        {"version": "2", "start": 0, "end": 3},
        {"version": "3", "start": 3, "end": 6},
    ]
    assert backend.policy_version == 3


async def test_abort_ends_generation_as_aborted(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    f, _ = fake
    f.chunk_delay = 0.01
    got: list[int] = []
    result = None
    async for item in backend.generate(req([1], rid="to-abort", max_tokens=1000)):
        if isinstance(item, TokenDelta):
            got.extend(item.token_ids)
            if len(got) == 3:
                await backend.abort("to-abort")
        else:
            result = item
    assert result is not None and result.finish_reason == "aborted"
    assert 3 <= len(result.completion_ids) < 1000
    assert ("/abort_request", {"rid": "to-abort"}) in f.requests


async def test_consumer_stopping_early_aborts_on_the_server(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    f, _ = fake
    f.chunk_delay = 0.01
    gen = backend.generate(req([1], rid="left", max_tokens=1000))
    async for item in gen:
        assert isinstance(item, TokenDelta)
        break
    await gen.aclose()  # what a client disconnect does to the server's consumer
    for _ in range(100):
        if ("/abort_request", {"rid": "left"}) in f.requests:
            break
        await asyncio.sleep(0.02)
    assert ("/abort_request", {"rid": "left"}) in f.requests


# ---------------------------------------------------------------------------- errors


async def test_http_4xx_is_a_request_error(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].fail["/generate"] = (400, {"error": {"message": "top_p must be in (0, 1]"}})
    with pytest.raises(SGLangRequestError, match="top_p") as exc:
        await collect_generation(backend, req([1]))
    assert exc.value.status == 400


async def test_http_5xx_is_unavailable(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].fail["/generate"] = (503, {"error": "overloaded"})
    with pytest.raises(SGLangUnavailableError, match="503"):
        await collect_generation(backend, req([1]))


async def test_connection_lost_mid_stream_ends_with_error_result(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].break_after = 2
    deltas, result = await collect_generation(backend, req([1], max_tokens=10))
    assert result.finish_reason == "error"
    assert result.completion_ids == expected([1], 2) == [t for d in deltas for t in d.token_ids]
    assert result.error


async def test_in_stream_error_before_any_token_raises(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].error_after = 0
    with pytest.raises(SGLangUnavailableError, match="boom"):
        await collect_generation(backend, req([1]))


async def test_in_stream_error_after_tokens_is_an_error_result(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].error_after = 2
    _, result = await collect_generation(backend, req([1], max_tokens=10))
    assert (result.finish_reason, len(result.completion_ids)) == ("error", 2)
    assert "boom" in (result.error or "")


async def test_server_down_is_unavailable_and_unhealthy() -> None:
    b = SGLangBackend(
        f"http://127.0.0.1:{_free_port()}", vocab_size=VOCAB, max_context=100, connect_retries=1
    )
    assert not await b.health()
    with pytest.raises(SGLangUnavailableError):
        await collect_generation(b, req([1]))
    with pytest.raises(SGLangUnavailableError):
        await b.start()
    with pytest.raises(SGLangUnavailableError):
        await b.update_weights("/", 1)
    await b.close()


async def test_connection_errors_are_retried(tmp_path: Path) -> None:
    """A server that starts listening shortly after the first attempt is reached through
    the transport's connect retries."""
    port = _free_port()
    f = FakeSGLang()
    b = SGLangBackend(
        f"http://127.0.0.1:{port}", vocab_size=VOCAB, max_context=100, connect_retries=5
    )
    srv = _ServerThread(f.app, port=port)
    timer = threading.Timer(0.3, srv.start)
    timer.start()
    try:
        _, result = await collect_generation(b, req([1], max_tokens=2))
        assert result.completion_ids == expected([1], 2)
    finally:
        timer.join()
        srv.stop()
        await b.close()


async def test_generation_requests_are_not_retried_after_a_reply(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend
) -> None:
    fake[0].fail["/generate"] = (500, {"error": "x"})
    with pytest.raises(SGLangUnavailableError):
        await collect_generation(backend, req([1]))
    assert fake[0].routes().count("/generate") == 1


# ---------------------------------------------------------------------------- control routes


async def test_update_weights_sends_path_and_version(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend, tmp_path: Path
) -> None:
    f, _ = fake
    await backend.update_weights(str(tmp_path), 5)
    assert (
        "/update_weights_from_disk",
        {"model_path": str(tmp_path.resolve()), "weight_version": "5"},
    ) in f.requests
    assert backend.policy_version == 5
    _, result = await collect_generation(backend, req([1], max_tokens=1))
    assert (result.policy_version, result.policy_version_end) == (5, 5)


async def test_update_weights_refused_keeps_version(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend, tmp_path: Path
) -> None:
    with pytest.raises(SGLangRequestError):
        await backend.update_weights(str(tmp_path / "missing"), 3)
    assert "/update_weights_from_disk" not in fake[0].routes()
    fake[0].fail["/update_weights_from_disk"] = (400, {"success": False, "message": "shape"})
    with pytest.raises(SGLangRequestError, match="shape"):
        await backend.update_weights(str(tmp_path), 3)
    assert backend.policy_version == 0


async def test_pause_resume_and_flush(fake: tuple[FakeSGLang, str], tmp_path: Path) -> None:
    f, url = fake
    b = SGLangBackend(url, vocab_size=VOCAB, max_context=100, pause_mode="in_place")
    await b.pause()
    assert f.paused
    await b.resume()
    assert not f.paused
    await b.flush_cache()
    assert f.requests == [
        ("/pause_generation", {"mode": "in_place"}),
        ("/continue_generation", {}),
        ("/flush_cache", None),
    ]
    await b.close()


async def test_health_reflects_status(fake: tuple[FakeSGLang, str], backend: SGLangBackend) -> None:
    assert await backend.health()
    fake[0].fail["/health"] = (503, None)
    assert not await backend.health()


async def test_never_calls_release_memory_occupation(
    fake: tuple[FakeSGLang, str], backend: SGLangBackend, tmp_path: Path
) -> None:
    """Every public operation; none may touch the route that crashes the CPU server."""
    await collect_generation(backend, req([1]))
    await backend.pause()
    await backend.update_weights(str(tmp_path), 1)
    await backend.resume()
    await backend.abort("none")
    await backend.health()
    assert not any("memory" in r for r in fake[0].routes())


async def test_http_client_is_reusable_after_close(fake: tuple[FakeSGLang, str]) -> None:
    b = SGLangBackend(fake[1], vocab_size=VOCAB, max_context=100)
    await b.close()
    assert await b.health()
    await b.close()


def test_fake_server_is_a_real_http_server(fake: tuple[FakeSGLang, str]) -> None:
    """Sanity check of the fake itself: it crashes on an out-of-vocab id like SGLang."""
    f, url = fake
    r = httpx.post(f"{url}/generate", json={"input_ids": [VOCAB], "sampling_params": {}})
    assert r.status_code == 502 and f.crashed
    assert httpx.get(f"{url}/health").status_code == 502
