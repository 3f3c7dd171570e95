"""The two ASGI applications of the proxy (starlette).

*Model app* (mounted into sandboxes; every route but ``/``, ``/health`` and ``/v1/models``
needs the session's key, as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``)::

    GET|HEAD /                                   200 (liveness for clients that probe)
    GET      /health                             backend health and policy version
    GET      /v1/models, /s/{sid}/v1/models      the served model
    POST     /s/{sid}/v1/chat/completions        OpenAI Chat Completions
    POST     /s/{sid}/v1/messages                Anthropic Messages (?beta=true tolerated)
    POST     /s/{sid}/v1/messages/count_tokens   Anthropic token count
    POST     /s/{sid}/v1/responses               OpenAI Responses

*Admin app* (its own socket/port, never mounted into sandboxes; optional bearer token)::

    POST   /sessions                  {run_id, task_id, harness, group_id, metadata}
                                      -> {session_id, api_key, openai_base_url, anthropic_base_url}
    GET    /sessions                  all sessions
    GET    /sessions/{sid}            one session
    POST   /sessions/{sid}/close      close it (its key stops working)
    GET    /sessions/{sid}/records    its call records ({"records": [...], "skipped_lines":
                                      {"torn": n, "not_object": n}})
    POST   /sessions/{sid}/script     queue completions ({"completions": [{"text"}|{"ids"}]});
                                      scripted backend only
    POST   /pause, /resume            hold / release new generations
    POST   /weights                   {path, version, loaded?} -> load weights into the backend
                                      (loaded: true: another client of a shared server loaded
                                      them: only the policy version changes, see
                                      InferenceBackend.adopt_weights)
    GET|POST|DELETE /sampling         training sampling parameters (DELETE: harness's own)
    GET    /status, /health

Errors are typed (:mod:`clawrl.proxy.errors`) and rendered in the shape of the API the
client spoke; nothing a client sends produces a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from clawrl.proxy import anthropic_messages, openai_chat, openai_responses
from clawrl.proxy.capture import SkippedLines
from clawrl.proxy.core import CallOutcome, ClientDisconnected, ProxyCore, TrainingSampling
from clawrl.proxy.errors import (
    AuthenticationError,
    NotFoundError,
    ProxyError,
    ProxyRequestError,
    TooManyRequestsError,
    UnsupportedParameterError,
)
from clawrl.proxy.limits import LimitLog
from clawrl.proxy.session import Session
from clawrl.proxy.validation import (
    opt_bool,
    opt_int,
    opt_number,
    opt_seed,
    opt_str,
    req_list,
    req_obj,
)
from clawrl.proxy.wire import WireAPI, parse_body, read_json
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["ProxyApp"]

log = logging.getLogger("clawrl.proxy")

Endpoint = Callable[[Request], Awaitable[Response]]


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


#: the wire APIs by error shape (see :mod:`clawrl.proxy.wire`)
_WIRE: dict[str, WireAPI] = {
    api.error_shape: api
    for api in (openai_chat.WIRE, anthropic_messages.WIRE, openai_responses.WIRE)
}


def _error(err: ProxyError, shape: str) -> Response:
    return JSONResponse(_WIRE[shape].error_body(err), status_code=err.status)


def _shape_of(path: str) -> str:
    return "anthropic" if "/messages" in path else "openai"


def _guard(shape: str | None, fn: Endpoint) -> Endpoint:
    async def wrapped(request: Request) -> Response:
        s = shape or _shape_of(request.url.path)
        try:
            return await fn(request)
        except ProxyError as e:
            return _error(e, s)
        except (ClientDisconnected, ClientDisconnect):
            # the client left (mid-body, or before its answer): nobody to answer, no traceback
            return Response(status_code=499)
        except Exception:
            log.exception("unhandled error on %s", request.url.path)
            return _error(ProxyError("internal error"), s)

    return wrapped


def _api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return request.headers.get("x-api-key")


class ProxyApp:
    """Builds the model and admin ASGI apps around a :class:`ProxyCore`.

    Args:
        core: the call pipeline.
        public_base_url: base URL harnesses use to reach the model app (inside a sandbox:
            the forwarder's ``http://127.0.0.1:8000``); session URLs are built from it.
        max_body_bytes: larger request bodies get 413.
        admin_token: if set, admin calls need ``Authorization: Bearer <admin_token>``.
        keepalive_s: a streamed call still generating after this many seconds gets its 200
            SSE headers and then an SSE comment every ``keepalive_s`` (see
            :class:`_PseudoStream`).
        max_calls_per_session: calls of one session in flight at once (from the start of
            its body to its answer); one more gets a typed 429, and is logged (0: no cap).
    """

    def __init__(
        self,
        core: ProxyCore,
        *,
        public_base_url: str = "http://127.0.0.1:8000",
        max_body_bytes: int = 32 << 20,
        admin_token: str | None = None,
        keepalive_s: float = 10.0,
        max_calls_per_session: int = 32,
    ):
        self.core = core
        self.max_calls_per_session = max_calls_per_session
        self._in_flight: dict[str, int] = {}
        self.limit_log = LimitLog()
        self.keepalive_s = keepalive_s
        self.public_base_url = public_base_url.rstrip("/")
        self.max_body_bytes = max_body_bytes
        self.admin_token = admin_token
        self._started = False
        self.model_app = self._build_model_app()
        self.admin_app = self._build_admin_app()

    async def start(self) -> None:
        if not self._started:
            await self.core.backend.start()
            self._started = True

    async def close(self) -> None:
        if self._started:
            await self.core.backend.close()
            self._started = False
        self.core.sessions.close_all()

    # -- model app ---------------------------------------------------------------------------

    def _build_model_app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            await self.start()
            yield

        routes = [
            Route("/", _guard("openai", self._root), methods=["GET", "HEAD"]),
            Route("/health", _guard("openai", self._health), methods=["GET"]),
            Route("/v1/models", _guard("openai", self._models), methods=["GET"]),
            Route("/s/{sid}/v1/models", _guard("openai", self._session_models), methods=["GET"]),
            Route("/s/{sid}/v1/chat/completions", self._wire(openai_chat.WIRE), methods=["POST"]),
            Route("/s/{sid}/v1/messages", self._wire(anthropic_messages.WIRE), methods=["POST"]),
            Route("/s/{sid}/v1/responses", self._wire(openai_responses.WIRE), methods=["POST"]),
            Route(
                "/s/{sid}/v1/messages/count_tokens",
                _guard("anthropic", self._count_tokens),
                methods=["POST"],
            ),
        ]

        async def http_error(request: Request, exc: Exception) -> Response:
            status = getattr(exc, "status_code", 500)
            err: ProxyError
            if status == 404:
                err = NotFoundError(f"no route {request.method} {request.url.path}")
            elif status == 405:
                err = ProxyRequestError(
                    f"method {request.method} not allowed on {request.url.path}"
                )
                err.status = 405
            else:
                err = ProxyRequestError(str(getattr(exc, "detail", "bad request")))
                err.status = status if 400 <= status < 500 else 400
            return _error(err, _shape_of(request.url.path))

        return Starlette(
            routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
        )

    async def _root(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "service": "clawrl-proxy"})

    async def _health(self, request: Request) -> Response:
        ok = await self.core.backend.health()
        body = {
            "status": "ok" if ok else "backend_unavailable",
            "backend": self.core.backend.name,
            "policy_version": self.core.backend.policy_version,
            "paused": self.core.paused,
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    def _models_body(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.core.served_model,
                    "object": "model",
                    "created": 0,
                    "owned_by": "clawrl",
                    "max_model_len": self.core.max_context,
                }
            ],
        }

    async def _models(self, request: Request) -> Response:
        return JSONResponse(self._models_body())

    def _session(self, request: Request) -> Session:
        sid = request.path_params["sid"]
        session = self.core.sessions.get(sid)
        session.check_key(_api_key(request))
        session = self.core.sessions.get(sid, open_only=True)
        return session

    async def _session_models(self, request: Request) -> Response:
        self._session(request)
        return JSONResponse(self._models_body())

    def _wire(self, api: WireAPI) -> Endpoint:
        async def handle(request: Request) -> Response:
            return await self._call(api, request)

        return _guard(api.error_shape, handle)

    async def _call(self, api: WireAPI, request: Request) -> Response:
        """The one call handler: session key, body, ``api.parse_request``, the call, then
        ``api.build_response`` (committed with the call's record) or its SSE events."""
        received = time.time()
        session = self._session(request)
        release = self._enter(session.session_id)
        try:
            req = parse_body(api.parse_request, await read_json(request, self.max_body_bytes))
            decode = self.core.renderer.token_bytes
            run = self.core.run_call(
                session, req.call, received=received, disconnected=_disconnect_waiter(request)
            )
            if req.call.stream:

                def events(outcome: CallOutcome) -> list[bytes]:
                    self.core.commit(session, outcome, api.build_response(outcome, req, decode))
                    return api.stream_events(outcome, req, decode)

                task = asyncio.ensure_future(run)
                task.add_done_callback(lambda _, r=release: r())  # type: ignore[misc]
                release = _noop  # the stream's task releases it when the call ends
                return _PseudoStream(task, events, api, self.keepalive_s)
            outcome = await run
            response = api.build_response(outcome, req, decode)
            self.core.commit(session, outcome, response)
            return JSONResponse(response)
        finally:
            release()

    def _enter(self, sid: str) -> Callable[[], None]:
        """Count a call of session ``sid`` in flight; returns its release (call once).

        Raises:
            TooManyRequestsError: the session already has ``max_calls_per_session``.
        """
        n = self._in_flight.get(sid, 0)
        cap = self.max_calls_per_session
        if cap > 0 and n >= cap:
            self.limit_log.hit(
                "calls_per_session",
                sid,
                f"session {sid} has {n} calls in flight (max_calls_per_session={cap}); "
                "another is refused with 429",
            )
            raise TooManyRequestsError(
                f"this session already has {n} calls in flight (the limit is {cap})"
            )
        self._in_flight[sid] = n + 1
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            left = self._in_flight.get(sid, 1) - 1
            if left > 0:
                self._in_flight[sid] = left
            else:
                self._in_flight.pop(sid, None)

        return release

    async def _count_tokens(self, request: Request) -> Response:
        session = self._session(request)
        body = await read_json(request, self.max_body_bytes)
        call = parse_body(anthropic_messages.parse_count_tokens, body)
        build = self.core.build_prompt(session, call)
        return JSONResponse({"input_tokens": len(build.ids)})

    # -- admin app ---------------------------------------------------------------------------

    def _build_admin_app(self) -> Starlette:
        def g(fn: Endpoint) -> Endpoint:
            async def checked(request: Request) -> Response:
                if self.admin_token is not None:
                    key = _api_key(request)
                    if key is None or not hmac.compare_digest(
                        key.encode(), self.admin_token.encode()
                    ):
                        raise AuthenticationError("invalid admin token")
                return await fn(request)

            return _guard("openai", checked)

        routes = [
            Route("/health", g(self._health), methods=["GET"]),
            Route("/status", g(self._status), methods=["GET"]),
            Route("/sessions", g(self._create_session), methods=["POST"]),
            Route("/sessions", g(self._list_sessions), methods=["GET"]),
            Route("/sessions/{sid}", g(self._get_session), methods=["GET"]),
            Route("/sessions/{sid}/close", g(self._close_session), methods=["POST"]),
            Route("/sessions/{sid}/records", g(self._records), methods=["GET"]),
            Route("/sessions/{sid}/script", g(self._script), methods=["POST"]),
            Route("/pause", g(self._pause), methods=["POST"]),
            Route("/resume", g(self._resume), methods=["POST"]),
            Route("/weights", g(self._weights), methods=["POST"]),
            Route("/sampling", g(self._sampling), methods=["GET", "POST", "PUT", "DELETE"]),
        ]

        async def http_error(request: Request, exc: Exception) -> Response:
            status = getattr(exc, "status_code", 500)
            err: ProxyError = NotFoundError(f"no route {request.method} {request.url.path}")
            if status != 404:
                err = ProxyRequestError(str(getattr(exc, "detail", "bad request")))
                err.status = status if 400 <= status < 500 else 400
            return _error(err, "openai")

        return Starlette(routes=routes, exception_handlers={HTTPException: http_error})

    def session_info(self, session: Session, base_url: str | None = None) -> dict[str, Any]:
        base = (base_url or self.public_base_url).rstrip("/")
        return {
            **session.describe(),
            "api_key": session.api_key,
            "openai_base_url": f"{base}/s/{session.session_id}/v1",
            "anthropic_base_url": f"{base}/s/{session.session_id}",
        }

    async def _status(self, request: Request) -> Response:
        ts = self.core.training_sampling
        return JSONResponse(
            {
                "backend": self.core.backend.name,
                "policy_version": self.core.backend.policy_version,
                "max_context": self.core.max_context,
                "paused": self.core.paused,
                "training_sampling": None if ts is None else ts.__dict__,
                "sessions": len(self.core.sessions.all()),
                "served_model": self.core.served_model,
                # the backend's counters (embedded: prefill / prefix-cache tokens, hits)
                "backend_stats": dict(getattr(self.core.backend, "stats", None) or {}),
            }
        )

    async def _create_session(self, request: Request) -> Response:
        body = req_obj(await read_json(request, self.max_body_bytes), "body")
        meta = body.get("metadata")
        base_url = opt_str(body.get("public_base_url"), "public_base_url")
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            raise ProxyRequestError(
                "public_base_url must be an http(s) URL", param="public_base_url"
            )
        try:
            session = self.core.sessions.create(
                run_id=opt_str(body.get("run_id"), "run_id") or "default",
                task_id=opt_str(body.get("task_id"), "task_id"),
                harness=opt_str(body.get("harness"), "harness"),
                group_id=opt_str(body.get("group_id"), "group_id"),
                metadata=req_obj(meta, "metadata") if meta is not None else None,
                sampling_seed=opt_seed(body.get("sampling_seed"), "sampling_seed"),
            )
        except ValueError as e:
            raise ProxyRequestError(str(e), param="run_id") from e
        return JSONResponse(self.session_info(session, base_url), status_code=201)

    async def _list_sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": [s.describe() for s in self.core.sessions.all()]})

    async def _get_session(self, request: Request) -> Response:
        return JSONResponse(self.core.sessions.get(request.path_params["sid"]).describe())

    async def _close_session(self, request: Request) -> Response:
        # returns once every call of the session is committed (ProxyCore.close_session)
        return JSONResponse(await self.core.close_session(request.path_params["sid"]))

    async def _records(self, request: Request) -> Response:
        session = self.core.sessions.get(request.path_params["sid"])
        skipped = SkippedLines()
        records = session.read_records(skipped)
        return JSONResponse(
            {
                "records": records,
                "skipped_lines": {"torn": skipped.torn, "not_object": skipped.not_object},
            }
        )

    async def _script(self, request: Request) -> Response:
        from clawrl.proxy.backends.scripted import ScriptedBackend, ScriptedCompletion

        session = self.core.sessions.get(request.path_params["sid"])
        backend = self.core.backend
        if not isinstance(backend, ScriptedBackend):
            raise UnsupportedParameterError("scripting needs the scripted backend")
        body = req_obj(await read_json(request, self.max_body_bytes), "body")
        items: list[ScriptedCompletion] = []
        for i, c in enumerate(req_list(body.get("completions"), "completions")):
            c = req_obj(c, f"completions[{i}]")
            ids = c.get("ids")
            try:
                if ids is not None:
                    ids = [
                        opt_int(t, f"completions[{i}].ids", minimum=0)
                        for t in req_list(ids, f"completions[{i}].ids")
                    ]
                items.append(
                    ScriptedCompletion(
                        text=opt_str(c.get("text"), f"completions[{i}].text"),
                        ids=ids,
                        end_turn=c.get("end_turn", True) is not False,
                    )
                )
            except ValueError as e:
                raise ProxyRequestError(f"completions[{i}]: {e}") from e
        backend.script(session.session_id, items)
        return JSONResponse({"queued": backend.remaining(session.session_id)})

    async def _pause(self, request: Request) -> Response:
        await self.core.pause()
        return JSONResponse({"paused": True})

    async def _resume(self, request: Request) -> Response:
        await self.core.resume()
        return JSONResponse({"paused": False})

    async def _weights(self, request: Request) -> Response:
        body = req_obj(await read_json(request, self.max_body_bytes), "body")
        path = opt_str(body.get("path"), "path")
        version = opt_int(body.get("version"), "version", minimum=0)
        loaded = opt_bool(body.get("loaded"), "loaded")
        if path is None or version is None:
            raise ProxyRequestError("path and version are required")
        backend = self.core.backend
        try:
            await (backend.adopt_weights if loaded else backend.update_weights)(path, version)
        except (FileNotFoundError, ValueError) as e:
            raise ProxyRequestError(f"cannot load weights from {path}: {e}", param="path") from e
        return JSONResponse({"policy_version": self.core.backend.policy_version})

    async def _sampling(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.core.training_sampling = None
        elif request.method in ("POST", "PUT"):
            body = req_obj(await read_json(request, self.max_body_bytes), "body")
            try:
                self.core.training_sampling = TrainingSampling(
                    temperature=opt_number(body.get("temperature", 1.0), "temperature", minimum=0)
                    or 0.0,
                    top_p=opt_number(body.get("top_p", 1.0), "top_p") or 0.0,
                    top_k=opt_int(body.get("top_k", -1), "top_k", minimum=-1) or -1,
                    max_tokens=opt_int(body.get("max_tokens"), "max_tokens", minimum=1),
                )
            except ValueError as e:
                raise ProxyRequestError(str(e)) from e
        ts = self.core.training_sampling
        return JSONResponse({"training_sampling": None if ts is None else ts.__dict__})


def _noop() -> None:
    pass


def _disconnect_waiter(request: Request) -> Callable[[], Awaitable[None]]:
    async def wait() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    return wait


_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


class _PseudoStream(Response):
    """A streamed answer whose generation is buffered whole before anything is parsed
    (pseudo-streaming).

    If the generation ends within ``keepalive_s``, the client gets an ordinary response: the
    SSE events, or the typed error with its HTTP status. A longer generation first commits a
    200 SSE response and sends an SSE comment (``: keep-alive``) every ``keepalive_s`` so that
    clients with idle timeouts wait; an error after that is sent as the API's SSE error event.
    A client disconnect is handled by the call itself (the generation is aborted and
    recorded).
    """

    def __init__(
        self,
        task: asyncio.Future[CallOutcome],
        events: Callable[[CallOutcome], list[bytes]],
        api: WireAPI,
        keepalive_s: float,
    ):
        self.task = task
        self.events = events
        self.api = api
        self.keepalive_s = keepalive_s
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def start() -> None:
            nonlocal started
            if not started:
                started = True
                await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})

        try:
            while True:
                done, _ = await asyncio.wait({self.task}, timeout=self.keepalive_s)
                if done:
                    break
                await start()
                await send(
                    {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
                )
            try:
                chunks = self.events(self.task.result())
            except ClientDisconnected:
                if not started:
                    await Response(status_code=499)(scope, receive, send)
                return
            except Exception as exc:
                e = exc if isinstance(exc, ProxyError) else ProxyError("internal error")
                if not isinstance(exc, ProxyError):
                    log.error("unhandled error in a streamed call", exc_info=exc)
                if not started:
                    await _error(e, self.api.error_shape)(scope, receive, send)
                    return
                chunks = [self.api.sse_error(e)]
            await start()
            for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return  # the client went away while we were sending; the call is recorded
        finally:
            if not self.task.done():
                self.task.cancel()
