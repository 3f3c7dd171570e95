"""Python client of the proxy's admin API (sync :class:`AdminClient`, async
:class:`AsyncAdminClient`), over a unix socket or TCP.

Example::

    with AdminClient(socket="/run/clawrl/admin.sock") as admin:
        s = admin.create_session(run_id="r1", task_id="t1", harness="reference", group_id="g0")
        # harness gets s.openai_base_url / s.anthropic_base_url and s.api_key
        records = admin.records(s.session_id)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import httpx
from clawrl.proxy.errors import ProxyAdminError
from clawrl.proxy.record import CallRecord

__all__ = ["AdminClient", "AsyncAdminClient", "SamplingRequest", "SessionInfo", "SessionRequest"]


@dataclass(frozen=True)
class SessionInfo:
    """What a harness needs to reach its session, plus the session's metadata."""

    session_id: str
    api_key: str
    openai_base_url: str
    anthropic_base_url: str
    run_id: str
    metadata: dict[str, Any]
    capture_path: str | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SessionInfo:
        return cls(
            session_id=d["session_id"],
            api_key=d["api_key"],
            openai_base_url=d["openai_base_url"],
            anthropic_base_url=d["anthropic_base_url"],
            run_id=d["run_id"],
            metadata=d.get("metadata", {}),
            capture_path=d.get("capture_path"),
        )


#: Environment variable holding the admin token (read by ``proxy serve`` and by the clients
#: when they are given no token).
ADMIN_TOKEN_ENV = "CLAWRL_PROXY_ADMIN_TOKEN"


def _transport_args(
    socket: str | None, base_url: str | None, token: str | None, timeout: float
) -> dict[str, Any]:
    if (socket is None) == (base_url is None):
        raise ValueError("give exactly one of socket or base_url")
    if token is None:
        token = os.environ.get(ADMIN_TOKEN_ENV) or None
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return {
        "base_url": base_url or "http://proxy-admin",
        "headers": headers,
        "timeout": timeout,
    }


def _unreachable(request: httpx.Request, exc: httpx.TransportError) -> ProxyAdminError:
    return ProxyAdminError(
        f"admin call {request.method} {request.url.path} failed: the proxy is unreachable "
        f"or dropped the connection ({type(exc).__name__}: {exc})",
        status=0,
        code="admin_unreachable",
    )


class _Transport(httpx.HTTPTransport):
    """httpx transport whose connection failures surface as :class:`ProxyAdminError`."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


class _AsyncTransport(httpx.AsyncHTTPTransport):
    """Async twin of :class:`_Transport`."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.TransportError as exc:
            raise _unreachable(request, exc) from exc


def _check(r: httpx.Response) -> Any:
    if r.status_code >= 400:
        try:
            err = r.json().get("error", {})
            msg, code = err.get("message", r.text), err.get("code")
        except ValueError:
            msg, code = r.text, None
        raise ProxyAdminError(
            f"admin call failed ({r.status_code}): {msg}", status=r.status_code, code=code
        )
    return r.json()


class SessionRequest(TypedDict, total=False):
    """The keyword arguments of ``create_session`` (all optional).

    ``run_id`` (default ``"default"``) names the capture folder; ``task_id``, ``harness``,
    ``group_id`` and ``metadata`` are recorded on the session and on each of its call
    records. ``public_base_url`` overrides the base of the returned URLs for this session
    (e.g. ``http://127.0.0.1:<port>`` for a harness on the host reaching the TCP listener;
    default: the proxy's ``--public-base-url``, the in-sandbox forwarder address).
    ``sampling_seed`` (an int in [-2**63, 2**63)) makes the session's calls that give no
    ``seed`` draw from their own stream, seeded by ``(sampling_seed, call seq)``.
    """

    run_id: str
    task_id: str | None
    harness: str | None
    group_id: str | None
    metadata: dict[str, Any] | None
    public_base_url: str | None
    sampling_seed: int | None


class SamplingRequest(TypedDict, total=False):
    """The keyword arguments of ``set_sampling``: the fields of
    :class:`~clawrl.proxy.TrainingSampling` (defaults T = 1, top_p = 1, top_k = -1, no
    ``max_tokens`` cap)."""

    temperature: float
    top_p: float
    top_k: int
    max_tokens: int | None


def _checked(kind: type, opts: dict[str, Any]) -> dict[str, Any]:
    """``opts`` if every key is a field of the TypedDict ``kind``; else TypeError, as for an
    unexpected keyword argument."""
    unknown = sorted(set(opts) - set(kind.__annotations__))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown} (see {kind.__name__})")
    return opts


def _session_body(opts: SessionRequest) -> dict[str, Any]:
    body = {"run_id": "default", **_checked(SessionRequest, dict(opts))}
    body["metadata"] = body.get("metadata") or {}
    return body


def _sampling_body(opts: SamplingRequest) -> dict[str, Any]:
    defaults = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": None}
    return {**defaults, **_checked(SamplingRequest, dict(opts))}


def _completions(items: Sequence[str | dict[str, Any]]) -> dict[str, Any]:
    return {"completions": [{"text": c} if isinstance(c, str) else c for c in items]}


_HTTP = TypeVar("_HTTP", httpx.Client, httpx.AsyncClient)


class _AdminClientBase(Generic[_HTTP]):
    """The connection both clients open (see :class:`AdminClient` for the arguments)."""

    def __init__(
        self,
        *,
        socket: str | None = None,
        base_url: str | None = None,
        token: str | None = None,
        timeout: float = 600.0,
    ):
        self._http: _HTTP = self._connect(socket, _transport_args(socket, base_url, token, timeout))

    def _connect(self, socket: str | None, kw: dict[str, Any]) -> _HTTP:
        raise NotImplementedError


class AdminClient(_AdminClientBase[httpx.Client]):
    """Synchronous admin client.

    Args:
        socket: path of the admin unix socket, or
        base_url: ``http://host:port`` of the admin TCP listener.
        token: admin bearer token, if the proxy requires one (default: the environment
            variable ``CLAWRL_PROXY_ADMIN_TOKEN``, if set).
        timeout: seconds per call (loading weights may take long).

    Raises:
        ValueError: not exactly one of ``socket`` and ``base_url``.

    Every method raises :class:`ProxyAdminError` (with ``status``) when the proxy refuses,
    and with ``status`` 0 (code ``admin_unreachable``) when it cannot be reached or drops
    the connection.
    """

    def _connect(self, socket: str | None, kw: dict[str, Any]) -> httpx.Client:
        return httpx.Client(transport=_Transport(uds=socket), **kw)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def create_session(self, **opts: Unpack[SessionRequest]) -> SessionInfo:
        """A new session (options: :class:`SessionRequest`); its capture file is
        ``<capture_dir>/<run_id>/<session_id>.jsonl``. An unknown option is a TypeError."""
        body = _session_body(opts)
        return SessionInfo.from_json(_check(self._http.post("/sessions", json=body)))

    def close_session(self, session_id: str) -> dict[str, Any]:
        """Close the session; returns once every call of it is committed, so
        :meth:`records` read afterwards are final. The result describes the session, with
        ``uncommitted``: call ids whose record could not be written (normally empty)."""
        return dict(_check(self._http.post(f"/sessions/{session_id}/close")))

    def session(self, session_id: str) -> dict[str, Any]:
        return dict(_check(self._http.get(f"/sessions/{session_id}")))

    def records(self, session_id: str) -> list[CallRecord]:
        """The session's call records (docs/architecture.md, "Call record"), in file order."""
        return list(_check(self._http.get(f"/sessions/{session_id}/records"))["records"])

    def script(self, session_id: str, completions: Sequence[str | dict[str, Any]]) -> int:
        """Queue completions (text, or ``{"ids": [...]}``) for a session; scripted backend
        only. Returns the queue length."""
        r = self._http.post(f"/sessions/{session_id}/script", json=_completions(completions))
        return int(_check(r)["queued"])

    def pause(self) -> None:
        _check(self._http.post("/pause"))

    def resume(self) -> None:
        _check(self._http.post("/resume"))

    def load_weights(self, path: str, version: int) -> int:
        """Load an HF checkpoint directory; returns the new policy version."""
        r = self._http.post("/weights", json={"path": str(path), "version": int(version)})
        return int(_check(r)["policy_version"])

    def set_sampling(self, **sampling: Unpack[SamplingRequest]) -> dict[str, Any]:
        """Impose training sampling parameters (:class:`SamplingRequest`) on every
        generation."""
        body = _sampling_body(sampling)
        return dict(_check(self._http.post("/sampling", json=body)))

    def clear_sampling(self) -> None:
        """Back to each request's own sampling parameters (evaluation)."""
        _check(self._http.delete("/sampling"))

    def status(self) -> dict[str, Any]:
        return dict(_check(self._http.get("/status")))


class AsyncAdminClient(_AdminClientBase[httpx.AsyncClient]):
    """Asynchronous admin client; same methods as :class:`AdminClient`, awaitable."""

    def _connect(self, socket: str | None, kw: dict[str, Any]) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=_AsyncTransport(uds=socket), **kw)

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def create_session(self, **opts: Unpack[SessionRequest]) -> SessionInfo:
        """See :meth:`AdminClient.create_session`."""
        body = _session_body(opts)
        return SessionInfo.from_json(_check(await self._http.post("/sessions", json=body)))

    async def close_session(self, session_id: str) -> dict[str, Any]:
        """See :meth:`AdminClient.close_session`."""
        return dict(_check(await self._http.post(f"/sessions/{session_id}/close")))

    async def session(self, session_id: str) -> dict[str, Any]:
        return dict(_check(await self._http.get(f"/sessions/{session_id}")))

    async def records(self, session_id: str) -> list[CallRecord]:
        return list(_check(await self._http.get(f"/sessions/{session_id}/records"))["records"])

    async def script(self, session_id: str, completions: Sequence[str | dict[str, Any]]) -> int:
        r = await self._http.post(f"/sessions/{session_id}/script", json=_completions(completions))
        return int(_check(r)["queued"])

    async def pause(self) -> None:
        _check(await self._http.post("/pause"))

    async def resume(self) -> None:
        _check(await self._http.post("/resume"))

    async def load_weights(self, path: str, version: int) -> int:
        r = await self._http.post("/weights", json={"path": str(path), "version": int(version)})
        return int(_check(r)["policy_version"])

    async def set_sampling(self, **sampling: Unpack[SamplingRequest]) -> dict[str, Any]:
        body = _sampling_body(sampling)
        return dict(_check(await self._http.post("/sampling", json=body)))

    async def clear_sampling(self) -> None:
        _check(await self._http.delete("/sampling"))

    async def status(self) -> dict[str, Any]:
        return dict(_check(await self._http.get("/status")))
