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
from typing import Any

import httpx
from clawrl.proxy.errors import ProxyAdminError
from clawrl.proxy.record import CallRecord

__all__ = ["AdminClient", "AsyncAdminClient", "SessionInfo"]


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


def _session_body(
    run_id: str,
    task_id: str | None,
    harness: str | None,
    group_id: str | None,
    metadata: dict[str, Any] | None,
    public_base_url: str | None = None,
    sampling_seed: int | None = None,
) -> dict[str, Any]:
    return {
        "public_base_url": public_base_url,
        "sampling_seed": sampling_seed,
        "run_id": run_id,
        "task_id": task_id,
        "harness": harness,
        "group_id": group_id,
        "metadata": metadata or {},
    }


def _sampling_body(
    temperature: float, top_p: float, top_k: int, max_tokens: int | None
) -> dict[str, Any]:
    return {
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "max_tokens": max_tokens,
    }


def _completions(items: Sequence[str | dict[str, Any]]) -> dict[str, Any]:
    return {"completions": [{"text": c} if isinstance(c, str) else c for c in items]}


class AdminClient:
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

    def __init__(
        self,
        *,
        socket: str | None = None,
        base_url: str | None = None,
        token: str | None = None,
        timeout: float = 600.0,
    ):
        kw = _transport_args(socket, base_url, token, timeout)
        self._http = httpx.Client(transport=_Transport(uds=socket), **kw)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def create_session(
        self,
        *,
        run_id: str = "default",
        task_id: str | None = None,
        harness: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        public_base_url: str | None = None,
        sampling_seed: int | None = None,
    ) -> SessionInfo:
        """A new session; its capture file is ``<capture_dir>/<run_id>/<session_id>.jsonl``.

        ``public_base_url`` overrides the base of the returned URLs for this session (e.g.
        ``http://127.0.0.1:<port>`` for a harness on the host reaching the TCP listener);
        default: the proxy's ``--public-base-url`` (the in-sandbox forwarder address).
        ``sampling_seed`` (an int in [-2**63, 2**63)) makes the session's calls that give no
        ``seed`` draw from their own stream, seeded by ``(sampling_seed, call seq)``.
        """
        body = _session_body(
            run_id, task_id, harness, group_id, metadata, public_base_url, sampling_seed
        )
        return SessionInfo.from_json(_check(self._http.post("/sessions", json=body)))

    def close_session(self, session_id: str) -> dict[str, Any]:
        """Close the session; returns once every call of it is committed, so
        :meth:`records` read afterwards are final. The result describes the session, with
        ``uncommitted``: call ids whose record could not be written (normally empty)."""
        return dict(_check(self._http.post(f"/sessions/{session_id}/close")))

    def session(self, session_id: str) -> dict[str, Any]:
        return dict(_check(self._http.get(f"/sessions/{session_id}")))

    def records(self, session_id: str) -> list[CallRecord]:
        """The session's call records (DESIGN.md "Call record"), in file order."""
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

    def set_sampling(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Impose training sampling parameters on every generation."""
        body = _sampling_body(temperature, top_p, top_k, max_tokens)
        return dict(_check(self._http.post("/sampling", json=body)))

    def clear_sampling(self) -> None:
        """Back to each request's own sampling parameters (evaluation)."""
        _check(self._http.delete("/sampling"))

    def status(self) -> dict[str, Any]:
        return dict(_check(self._http.get("/status")))


class AsyncAdminClient:
    """Asynchronous admin client; same methods as :class:`AdminClient`, awaitable."""

    def __init__(
        self,
        *,
        socket: str | None = None,
        base_url: str | None = None,
        token: str | None = None,
        timeout: float = 600.0,
    ):
        kw = _transport_args(socket, base_url, token, timeout)
        self._http = httpx.AsyncClient(transport=_AsyncTransport(uds=socket), **kw)

    async def __aenter__(self) -> AsyncAdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def create_session(
        self,
        *,
        run_id: str = "default",
        task_id: str | None = None,
        harness: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        public_base_url: str | None = None,
        sampling_seed: int | None = None,
    ) -> SessionInfo:
        body = _session_body(
            run_id, task_id, harness, group_id, metadata, public_base_url, sampling_seed
        )
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

    async def set_sampling(
        self,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = -1,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        body = _sampling_body(temperature, top_p, top_k, max_tokens)
        return dict(_check(await self._http.post("/sampling", json=body)))

    async def clear_sampling(self) -> None:
        _check(await self._http.delete("/sampling"))

    async def status(self) -> dict[str, Any]:
        return dict(_check(await self._http.get("/status")))
