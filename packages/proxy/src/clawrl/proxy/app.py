"""The two ASGI applications of the proxy (starlette).

*Model app* (mounted into sandboxes; every route but ``/``, ``/health`` and ``/v1/models``
needs the session's key, as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``)::

    GET|HEAD /                                   200 (liveness for clients that probe)
    GET      /health                             backend health and policy version
    GET      /v1/models, /s/{sid}/v1/models      the served model
    POST     /s/{sid}/v1/chat/completions        OpenAI Chat Completions
    POST     /s/{sid}/v1/messages                Anthropic Messages (?beta=true tolerated)
    POST     /s/{sid}/v1/messages/count_tokens   Anthropic token count

*Admin app* (its own socket/port, never mounted into sandboxes; optional bearer token)::

    POST   /sessions                  {run_id, task_id, harness, group_id, metadata}
                                      -> {session_id, api_key, openai_base_url, anthropic_base_url}
    GET    /sessions                  all sessions
    GET    /sessions/{sid}            one session
    POST   /sessions/{sid}/close      close it (its key stops working)
    GET    /sessions/{sid}/records    its call records ({"records": [...]})
    POST   /sessions/{sid}/script     queue completions ({"completions": [{"text"}|{"ids"}]});
                                      scripted backend only
    POST   /pause, /resume            hold / release new generations
    POST   /weights                   {path, version} -> load weights into the backend
    GET|POST|DELETE /sampling         training sampling parameters (DELETE: harness's own)
    GET    /status, /health

Errors are typed (:mod:`clawrl.proxy.errors`) and rendered in the shape of the API the
client spoke; nothing a client sends produces a 500.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from clawrl.proxy import anthropic_messages, openai_chat
from clawrl.proxy.core import ClientDisconnected, ProxyCore, TrainingSampling
from clawrl.proxy.errors import (
    AuthenticationError,
    NotFoundError,
    PayloadTooLargeError,
    ProxyError,
    ProxyRequestError,
    UnsupportedParameterError,
    anthropic_error_body,
    openai_error_body,
)
from clawrl.proxy.session import Session
from clawrl.proxy.validation import opt_int, opt_number, opt_str, req_list, req_obj
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["ProxyApp"]

log = logging.getLogger("clawrl.proxy")

Endpoint = Callable[[Request], Awaitable[Response]]


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error(err: ProxyError, shape: str) -> Response:
    body = anthropic_error_body(err) if shape == "anthropic" else openai_error_body(err)
    return JSONResponse(body, status_code=err.status)


def _shape_of(path: str) -> str:
    return "anthropic" if "/messages" in path else "openai"


def _guard(shape: str | None, fn: Endpoint) -> Endpoint:
    async def wrapped(request: Request) -> Response:
        s = shape or _shape_of(request.url.path)
        try:
            return await fn(request)
        except ProxyError as e:
            return _error(e, s)
        except ClientDisconnected:
            return Response(status_code=499)
        except Exception:
            log.exception("unhandled error on %s", request.url.path)
            return _error(ProxyError("internal error"), s)

    return wrapped


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body of ``request``.

    Raises:
        PayloadTooLargeError: more than ``limit`` bytes.
        ProxyRequestError: not valid JSON.
    """
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > limit:
        raise PayloadTooLargeError(f"request body of {cl} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProxyRequestError(f"the request body is not valid JSON: {e}") from e


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
    """

    def __init__(
        self,
        core: ProxyCore,
        *,
        public_base_url: str = "http://127.0.0.1:8000",
        max_body_bytes: int = 32 << 20,
        admin_token: str | None = None,
    ):
        self.core = core
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
            Route("/s/{sid}/v1/chat/completions", _guard("openai", self._chat), methods=["POST"]),
            Route("/s/{sid}/v1/messages", _guard("anthropic", self._messages), methods=["POST"]),
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
                    "max_model_len": self.core.backend.max_context,
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

    async def _chat(self, request: Request) -> Response:
        received = time.time()
        session = self._session(request)
        body = await read_json(request, self.max_body_bytes)
        call, include_usage = openai_chat.parse_request(body)
        outcome = await self.core.run_call(
            session, call, received=received, disconnected=_disconnect_waiter(request)
        )
        response = openai_chat.build_response(outcome, call)
        self.core.commit(session, outcome, response)
        if call.stream:
            return _sse(openai_chat.stream_events(outcome, call, include_usage))
        return JSONResponse(response)

    async def _messages(self, request: Request) -> Response:
        received = time.time()
        session = self._session(request)
        body = await read_json(request, self.max_body_bytes)
        call = anthropic_messages.parse_request(body)
        outcome = await self.core.run_call(
            session, call, received=received, disconnected=_disconnect_waiter(request)
        )
        response = anthropic_messages.build_response(outcome, call)
        self.core.commit(session, outcome, response)
        if call.stream:
            return _sse(anthropic_messages.stream_events(outcome, call))
        return JSONResponse(response)

    async def _count_tokens(self, request: Request) -> Response:
        session = self._session(request)
        body = await read_json(request, self.max_body_bytes)
        call = anthropic_messages.parse_count_tokens(body)
        build = self.core.build_prompt(session, call)
        return JSONResponse({"input_tokens": len(build.ids)})

    # -- admin app ---------------------------------------------------------------------------

    def _build_admin_app(self) -> Starlette:
        def g(fn: Endpoint) -> Endpoint:
            async def checked(request: Request) -> Response:
                if self.admin_token is not None:
                    key = _api_key(request)
                    if key is None or key != self.admin_token:
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

    def session_info(self, session: Session) -> dict[str, Any]:
        base = self.public_base_url
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
                "max_context": self.core.backend.max_context,
                "paused": self.core.paused,
                "training_sampling": None if ts is None else ts.__dict__,
                "sessions": len(self.core.sessions.all()),
                "served_model": self.core.served_model,
            }
        )

    async def _create_session(self, request: Request) -> Response:
        body = req_obj(await read_json(request, self.max_body_bytes), "body")
        meta = body.get("metadata")
        try:
            session = self.core.sessions.create(
                run_id=opt_str(body.get("run_id"), "run_id") or "default",
                task_id=opt_str(body.get("task_id"), "task_id"),
                harness=opt_str(body.get("harness"), "harness"),
                group_id=opt_str(body.get("group_id"), "group_id"),
                metadata=req_obj(meta, "metadata") if meta is not None else None,
            )
        except ValueError as e:
            raise ProxyRequestError(str(e), param="run_id") from e
        return JSONResponse(self.session_info(session), status_code=201)

    async def _list_sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": [s.describe() for s in self.core.sessions.all()]})

    async def _get_session(self, request: Request) -> Response:
        return JSONResponse(self.core.sessions.get(request.path_params["sid"]).describe())

    async def _close_session(self, request: Request) -> Response:
        return JSONResponse(self.core.sessions.close(request.path_params["sid"]).describe())

    async def _records(self, request: Request) -> Response:
        session = self.core.sessions.get(request.path_params["sid"])
        return JSONResponse({"records": session.read_records()})

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
        if path is None or version is None:
            raise ProxyRequestError("path and version are required")
        try:
            await self.core.backend.update_weights(path, version)
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


def _disconnect_waiter(request: Request) -> Callable[[], Awaitable[None]]:
    async def wait() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    return wait


def _sse(events: list[bytes]) -> Response:
    async def gen() -> AsyncIterator[bytes]:
        for e in events:
            yield e

    return StreamingResponse(
        gen(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
