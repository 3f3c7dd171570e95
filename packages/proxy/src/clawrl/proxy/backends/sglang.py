"""SGLangBackend: a client of a running SGLang server's native API.

The proxy renders prompts to token ids itself, so this backend speaks SGLang's *native*
``POST /generate`` with ``input_ids`` (never text, never the OpenAI-compatible routes):

request::

    {"rid": <request_id>, "input_ids": [...], "stream": true, "return_logprob": true,
     "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k",
                         "stop_token_ids", "sampling_seed"?, "skip_special_tokens": false,
                         "no_stop_trim": true}}

streamed response (server-sent events, one JSON object per ``data:`` line, ``[DONE]`` last):
each chunk is *cumulative* (``output_ids`` and ``meta_info.output_token_logprobs`` hold
everything generated so far, logprobs as ``[logprob, token_id, text|null]`` triples);
servers started with ``--incremental-streaming-output`` send only the new part — both are
handled. The last chunk has ``meta_info.finish_reason`` = ``{"type": "stop" | "length" |
"abort", ...}``, ``meta_info.weight_version`` (a string) and, when the weights changed
while the request ran, ``meta_info.weight_versions`` = ``[{version, start, end}, ...]``
(token spans generated under each version).

Logprobs: SGLang returns log softmax(logits / T) of the temperature-scaled distribution
before top-p/top-k filtering (``log(probs)`` in ``sglang.srt.layers.sampler``), and the
T = 1 distribution for greedy requests (T = 0) — the definition of
``clawrl.proxy.backends.base.SamplingParams``, provided the server was *not* started with
``SGLANG_RETURN_ORIGINAL_LOGPROB=1``.

Stopping: SGLang ends a generation on any of ``stop_token_ids`` *and* on the model's own
EOS ids (config / generation_config); the stop token is kept in ``output_ids``.

Weights: ``update_weights(path, version)`` posts ``/update_weights_from_disk
{model_path, weight_version: str(version)}``. Without a pause SGLang waits for in-flight
requests to finish and holds new ones until the load is done; while paused
(:meth:`SGLangBackend.pause`, mode ``"retract"`` by default) it loads at once and the
paused requests continue under the new weights afterwards — their results then carry
``policy_version_end != policy_version`` and the spans in ``extra["weight_versions"]``.

Safety: SGLang 0.5.23 on CPU *crashes* on an input id outside the vocabulary, so every id is
checked against :attr:`SGLangBackend.vocab_size` before anything is sent
(:class:`InvalidTokenIdError`). This client never calls ``/release_memory_occupation``
(it crashes the CPU server too).

Connection errors (refused, connect timeout) are retried by httpx's transport (``retries``,
exponential back-off in httpcore); other errors are not retried (a generation is not
idempotent). Every failure surfaces as :class:`~clawrl.proxy.backends.base.BackendError`
(or a subclass below).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
from clawrl.proxy.backends.base import (
    BackendError,
    BackendFinishReason,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    TokenDelta,
)
from clawrl.proxy.backends.sglang_wire import (
    InvalidTokenIdError,
    SGLangRequestError,
    SGLangUnavailableError,
    in_stream_error,
    new_tokens,
    read_model_config,
    sse_json,
    status_error,
)

__all__ = [
    "InvalidTokenIdError",
    "SGLangBackend",
    "SGLangRequestError",
    "SGLangUnavailableError",
]

log = logging.getLogger(__name__)

PauseMode = Literal["abort", "retract", "in_place"]


class SGLangBackend(InferenceBackend):
    """Inference backend backed by a SGLang server (see module docstring for the protocol).

    Args:
        base_url: the server's root URL, e.g. ``"http://127.0.0.1:30000"``.
        vocab_size: number of embedding rows of the served model (ids must be below it).
            None: read ``vocab_size`` from ``config.json`` in the served model directory
            (``/model_info``'s ``model_path``, which must be readable from here) in
            :meth:`start`.
        max_context: prompt + completion limit in tokens. None: the smaller of the model's
            ``context_length`` and the server's KV-cache size ``max_total_num_tokens``
            (``/server_info``), read in :meth:`start`.
        initial_policy_version: the policy version of weights whose SGLang
            ``weight_version`` is not an integer (SGLang's default is ``"default"``).
        connect_retries: how many times a refused / timed-out *connection* is retried.
        timeout: seconds to wait for the server on a read (a streamed chunk, a weight load).
        connect_timeout: seconds to wait for a TCP connection.
        pause_mode: the ``mode`` sent to ``/pause_generation`` by :meth:`pause`:
            ``"retract"`` (default: running requests go back to the queue and continue after
            :meth:`resume`; the KV cache may be flushed), ``"in_place"`` (the scheduler
            stops; requests keep their KV cache) or ``"abort"`` (running requests end with
            finish reason "aborted").
        api_key: SGLang's ``--api-key`` / ``--admin-api-key``, sent as a bearer token.
        session_header: an HTTP header that carries ``request.session_id`` on every
            ``/generate`` (e.g. ``"X-SMG-Routing-Key"`` for sglang-router's ``manual``
            policy, which keeps one key on one worker); None: no such header.
        extra_sampling_params: more SGLang ``sampling_params`` merged into every request
            (e.g. ``{"ignore_eos": True}`` for benchmarks; it also disables
            ``stop_token_ids``). They override the mapped values.

    Raises:
        ValueError: bad arguments.
    """

    name = "sglang"

    def __init__(
        self,
        base_url: str,
        *,
        vocab_size: int | None = None,
        max_context: int | None = None,
        initial_policy_version: int = 0,
        connect_retries: int = 3,
        timeout: float = 600.0,
        connect_timeout: float = 5.0,
        pause_mode: PauseMode = "retract",
        api_key: str | None = None,
        extra_sampling_params: Mapping[str, Any] | None = None,
        session_header: str | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if vocab_size is not None and vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if max_context is not None and max_context <= 1:
            raise ValueError(f"max_context must be > 1, got {max_context}")
        if pause_mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"pause_mode must be abort|retract|in_place, got {pause_mode!r}")
        if connect_retries < 0:
            raise ValueError("connect_retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self._vocab_size = vocab_size
        self._max_context = max_context
        self._initial_version = int(initial_policy_version)
        self._version = int(initial_policy_version)
        self._pause_mode: PauseMode = pause_mode
        self._connect_retries = connect_retries
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._extra_sampling = dict(extra_sampling_params or {})
        self._session_header = session_header
        self._client: httpx.AsyncClient | None = None
        self._aborted: set[str] = set()
        self._running: set[str] = set()
        #: what /model_info and /server_info said at start() (for logs and records)
        self.server_info: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = httpx.AsyncHTTPTransport(retries=self._connect_retries)
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                transport=transport,
                timeout=self._timeout,
                headers=self._headers,
            )
        return self._client

    async def start(self) -> None:
        """Connect: read the weight version, vocabulary size and context window.

        Raises:
            SGLangUnavailableError: the server does not answer.
            BackendError: the vocabulary size cannot be determined.
        """
        model_info = await self._get_json("/model_info")
        self.server_info["model_info"] = model_info
        self._version = self._parse_version(model_info.get("weight_version"), self._version)
        config = read_model_config(model_info.get("model_path"))
        if self._vocab_size is None:
            vocab = config.get("vocab_size")
            if not isinstance(vocab, int):
                vocab = (config.get("text_config") or {}).get("vocab_size")
            if not isinstance(vocab, int) or vocab <= 0:
                raise BackendError(
                    f"cannot tell the vocabulary size of {model_info.get('model_path')!r} "
                    "(no readable config.json with vocab_size); pass vocab_size"
                )
            self._vocab_size = vocab
        if self._max_context is None:
            server_info = await self._get_json("/server_info")
            limits = [
                v
                for v in (
                    server_info.get("context_length"),
                    server_info.get("max_total_num_tokens"),
                    config.get("max_position_embeddings"),
                )
                if isinstance(v, int) and not isinstance(v, bool) and v > 0
            ]
            if not limits:
                raise BackendError(
                    "cannot tell SGLang's context window from /server_info; pass max_context"
                )
            self._max_context = min(limits)
            self.server_info["max_context_sources"] = limits

    async def close(self) -> None:
        """Close the HTTP connection pool (the server keeps running)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def health(self) -> bool:
        """True when ``GET /health`` answers 200 (never raises)."""
        try:
            r = await self._http().get("/health", timeout=httpx.Timeout(10.0, connect=2.0))
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    # ------------------------------------------------------------------ validation
    def validate_ids(self, ids: Sequence[int], *, field: str = "prompt_ids") -> list[int]:
        """Return ``ids`` as a list of Python ints after checking each is in
        ``[0, vocab_size)``.

        Raises:
            InvalidTokenIdError: the first bad id (a non-integer, a negative id or one
                ``>= vocab_size``), with its position.
        """
        vocab = self.vocab_size
        out: list[int] = []
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not hasattr(t, "__index__"):
                raise InvalidTokenIdError(
                    f"{field}[{i}] = {t!r} is not an integer token id",
                    position=i,
                    token_id=t,
                    field=field,
                )
            v = t.__index__()
            if not 0 <= v < vocab:
                raise InvalidTokenIdError(
                    f"{field}[{i}] = {v} is outside the vocabulary [0, {vocab})",
                    position=i,
                    token_id=v,
                    field=field,
                )
            out.append(v)
        return out

    def build_generate_body(
        self, request: GenerationRequest, *, stream: bool = True
    ) -> dict[str, Any]:
        """The JSON body of SGLang's ``POST /generate`` for ``request``.

        Raises:
            InvalidTokenIdError: a prompt or stop id outside the vocabulary.
            SGLangRequestError: empty prompt, bad sampling values, or no room in the context
                window (``len(prompt_ids) + max_tokens > max_context``).
        """
        prompt = self.validate_ids(request.prompt_ids)
        if not prompt:
            raise SGLangRequestError("prompt_ids is empty")
        sp = request.sampling
        stops = self.validate_ids(sp.stop_token_ids, field="stop_token_ids")
        if sp.max_tokens < 1:
            raise SGLangRequestError(f"max_tokens must be >= 1, got {sp.max_tokens}")
        if len(prompt) + sp.max_tokens > self.max_context:
            raise SGLangRequestError(
                f"prompt ({len(prompt)} tokens) + max_tokens ({sp.max_tokens}) exceeds the "
                f"context window of {self.max_context} tokens"
            )
        if not (math.isfinite(sp.temperature) and sp.temperature >= 0):
            raise SGLangRequestError(f"temperature must be finite and >= 0, got {sp.temperature}")
        if not (0 < sp.top_p <= 1):
            raise SGLangRequestError(f"top_p must be in (0, 1], got {sp.top_p}")
        if sp.top_k == 0 or sp.top_k < -1:
            raise SGLangRequestError(f"top_k must be -1 (off) or >= 1, got {sp.top_k}")
        sampling: dict[str, Any] = {
            "max_new_tokens": sp.max_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "top_k": sp.top_k,
            "stop_token_ids": stops,
            # keep special tokens and the stop token: the proxy decodes ids itself
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if sp.seed is not None:
            sampling["sampling_seed"] = int(sp.seed)
        sampling.update(self._extra_sampling)
        return {
            "rid": request.request_id,
            "input_ids": prompt,
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": stream,
        }

    # ------------------------------------------------------------------ generation
    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        """Stream the generation of ``request``: ``TokenDelta`` items, then one
        ``GenerationResult``.

        ``GenerationResult.policy_version`` is the weight version the first token was
        generated with, ``policy_version_end`` the one of the last token (they differ when
        weights changed mid-generation; ``extra["weight_versions"]`` then has SGLang's
        token spans). A failure after tokens were streamed ends the stream with
        finish reason "error" (tokens so far kept, ``error`` set) instead of raising.

        Raises:
            InvalidTokenIdError, SGLangRequestError: invalid request (nothing was sent, or
                SGLang answered 4xx).
            SGLangUnavailableError: the server is unreachable or failed before any token.
        """
        body = self.build_generate_body(request, stream=True)
        rid = request.request_id
        version_at_send = self._version
        ids: list[int] = []
        lps: list[float] = []
        last: dict[str, Any] | None = None
        finished = False
        self._running.add(rid)
        try:
            try:
                headers = (
                    {self._session_header: request.session_id}
                    if self._session_header and request.session_id
                    else None
                )
                async with self._http().stream(
                    "POST", "/generate", json=body, headers=headers
                ) as resp:
                    if resp.status_code != 200:
                        text = (await resp.aread()).decode("utf-8", "replace")
                        raise status_error(resp.status_code, "/generate", text)
                    async for chunk in sse_json(resp):
                        if "error" in chunk:
                            raise in_stream_error(chunk["error"])
                        new_ids, new_lps = new_tokens(chunk, len(ids))
                        if new_ids:
                            ids.extend(new_ids)
                            lps.extend(new_lps)
                            yield TokenDelta(new_ids, new_lps)
                        last = chunk
            except httpx.HTTPError as e:
                raise SGLangUnavailableError(
                    f"SGLang at {self.base_url} failed during /generate: {type(e).__name__}: {e}"
                ) from e
            except BackendError as e:
                if not ids:
                    raise
                finished = True
                yield self._failed(ids, lps, last, version_at_send, e)
                return
            if last is None:
                raise SGLangUnavailableError("SGLang closed the /generate stream without a result")
            finished = True
            yield self._result(rid, ids, lps, last, version_at_send)
        except SGLangUnavailableError as e:
            if not ids or finished:
                raise
            finished = True
            yield self._failed(ids, lps, last, version_at_send, e)
        except (GeneratorExit, asyncio.CancelledError):
            # The consumer stopped early (client disconnect, cancellation). Closing the
            # stream already makes SGLang abort; say so explicitly as well.
            if not finished:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._abort_quietly(rid), timeout=5.0)
            raise
        finally:
            self._running.discard(rid)
            self._aborted.discard(rid)

    def _failed(
        self,
        ids: list[int],
        lps: list[float],
        last: Mapping[str, Any] | None,
        version_at_send: int,
        exc: BaseException,
    ) -> GenerationResult:
        """The "error" result of a generation that failed after ``ids`` were streamed
        (``last``: the last chunk received; its weight version is kept in ``extra``)."""
        meta = (last or {}).get("meta_info") or {}
        extra: dict[str, Any] = {}
        if "weight_version" in meta:
            extra["sglang_weight_version"] = meta["weight_version"]
        end = self._parse_version(meta.get("weight_version"), self._version)
        spans = meta.get("weight_versions")
        start = end if "weight_version" in meta else version_at_send
        if isinstance(spans, list) and spans and isinstance(spans[0], Mapping):
            start = self._parse_version(spans[0].get("version"), start)
        return GenerationResult(ids, lps, "error", start, end, error=str(exc), extra=extra)

    def _result(
        self,
        rid: str,
        ids: list[int],
        lps: list[float],
        chunk: Mapping[str, Any],
        version_at_send: int,
    ) -> GenerationResult:
        meta = chunk.get("meta_info") or {}
        finish_obj = meta.get("finish_reason")
        finish: BackendFinishReason
        ftype = finish_obj.get("type") if isinstance(finish_obj, Mapping) else finish_obj
        if rid in self._aborted or ftype == "abort":
            finish = "aborted"
        elif ftype == "length":
            finish = "length"
        elif ftype == "stop":
            finish = "stop"
        else:
            finish = "error"
        end_version = self._parse_version(meta.get("weight_version"), self._version)
        spans = meta.get("weight_versions")
        start_version = end_version
        if isinstance(spans, list) and spans and isinstance(spans[0], Mapping):
            start_version = self._parse_version(spans[0].get("version"), version_at_send)
        self._version = end_version
        extra: dict[str, Any] = {
            "sglang_finish_reason": finish_obj,
            "sglang_weight_version": meta.get("weight_version"),
        }
        for key in ("weight_versions", "prompt_tokens", "cached_tokens", "e2e_latency"):
            if key in meta:
                extra[key] = meta[key]
        error = None
        if finish == "error":
            error = f"SGLang finish_reason {finish_obj!r}"
        elif finish == "aborted" and isinstance(finish_obj, Mapping) and finish_obj.get("message"):
            extra["abort_message"] = finish_obj.get("message")
        return GenerationResult(
            ids, lps, finish, start_version, end_version, error=error, extra=extra
        )

    async def generate_once(self, request: GenerationRequest) -> GenerationResult:
        """Run ``request`` to completion and return only its ``GenerationResult``."""
        result: GenerationResult | None = None
        async for item in self.generate(request):
            if isinstance(item, GenerationResult):
                result = item
        assert result is not None  # generate() always ends with a result or raises
        return result

    # ------------------------------------------------------------------ control
    async def abort(self, request_id: str) -> None:
        """Abort a running generation (``POST /abort_request {"rid"}``); its result then
        has finish reason "aborted". Unknown or finished ids are ignored.

        Raises:
            SGLangUnavailableError: the server cannot be reached.
        """
        if request_id in self._running:
            self._aborted.add(request_id)
        await self._post("/abort_request", {"rid": request_id})

    def mark_aborted(self, request_id: str) -> None:
        """Report the running generation ``request_id`` as "aborted" when it ends (for a
        caller that aborted it by another route, e.g. on the worker behind a router).
        Unknown ids are ignored."""
        if request_id in self._running:
            self._aborted.add(request_id)

    async def _abort_quietly(self, request_id: str) -> None:
        with contextlib.suppress(BackendError):
            await self._post("/abort_request", {"rid": request_id})

    async def update_weights(
        self, path: str, version: int, *, weight_version: str | None = None
    ) -> None:
        """Load an HF checkpoint directory of the same architecture
        (``POST /update_weights_from_disk {model_path, weight_version}``); afterwards
        :attr:`policy_version` is ``version``. ``weight_version``: the string SGLang
        reports in results (default ``str(version)``; ``"<version>@<tag>"`` parses too).

        Raises:
            SGLangRequestError: SGLang refused (``success: false``: missing directory,
                shape mismatch, ...); the old weights stay loaded.
            SGLangUnavailableError: the server cannot be reached.
        """
        p = Path(path)
        if not p.is_dir():
            raise SGLangRequestError(f"weights directory not found: {path}")
        reply = await self._post(
            "/update_weights_from_disk",
            {
                "model_path": str(p.resolve()),
                "weight_version": weight_version or str(int(version)),
            },
        )
        if not isinstance(reply, Mapping) or not reply.get("success", False):
            raise SGLangRequestError(f"SGLang refused the weight update from {path}: {reply!r}")
        self._version = int(version)

    async def adopt_weights(self, path: str, version: int) -> None:
        """Another client of the same server (another proxy worker) loaded ``path`` as
        ``version``: only :attr:`policy_version` changes; nothing is sent to the server."""
        self._version = int(version)

    async def pause(self) -> None:
        """``POST /pause_generation {mode}`` (mode from the constructor, see there).

        Raises:
            SGLangUnavailableError: the server cannot be reached.
        """
        await self._post("/pause_generation", {"mode": self._pause_mode})

    async def resume(self) -> None:
        """``POST /continue_generation``: paused requests go on, new ones are admitted.

        Raises:
            SGLangUnavailableError: the server cannot be reached.
        """
        await self._post("/continue_generation", {})

    async def flush_cache(self) -> None:
        """``POST /flush_cache``: drop SGLang's prefix (radix) cache."""
        await self._post("/flush_cache", None)

    # ------------------------------------------------------------------ helpers
    def _parse_version(self, raw: object, fallback: int) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            # "<version>@<worker>": a worker behind a router tagged by SGLangRouterBackend
            head = raw.split("@", 1)[0]
            try:
                return int(head)
            except ValueError:
                return self._initial_version if head == "default" else fallback
        return fallback

    async def _send(
        self, route: str, payload: object = None, *, get: bool = False
    ) -> httpx.Response:
        """GET (``get``) or POST ``route`` (with JSON ``payload`` unless None); the response,
        once its status is 200.

        Raises:
            SGLangUnavailableError: SGLang is unreachable, or a typed error of the status.
        """
        try:
            if get:
                r = await self._http().get(route)
            elif payload is None:
                r = await self._http().post(route)
            else:
                r = await self._http().post(route, json=payload)
        except httpx.HTTPError as e:
            raise SGLangUnavailableError(
                f"SGLang at {self.base_url} unreachable ({route}): {type(e).__name__}: {e}"
            ) from e
        if r.status_code != 200:
            raise status_error(r.status_code, route, r.text)
        return r

    async def _get_json(self, route: str) -> dict[str, Any]:
        r = await self._send(route, get=True)
        try:
            data = r.json()
        except ValueError as e:
            raise SGLangUnavailableError(
                f"SGLang {route} answered non-JSON: {r.text[:200]!r}"
            ) from e
        if not isinstance(data, dict):
            raise SGLangUnavailableError(f"SGLang {route} answered {type(data).__name__}")
        return data

    async def _post(self, route: str, payload: object) -> object:
        r = await self._send(route, payload)
        if not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            return r.text
