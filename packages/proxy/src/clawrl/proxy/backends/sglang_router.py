"""SGLangRouterBackend: several SGLang workers behind one ``sglang-router``.

Generations go to the router's ``POST /generate`` (the same native protocol as
:class:`~clawrl.proxy.backends.sglang.SGLangBackend`; the router picks a worker by its
policy). Everything that must reach *every* worker goes to each worker directly, because
the router (``sglang-router`` 0.3.2) forwards ``/generate`` to one worker and broadcasts
only ``/flush_cache``:

- weight sync (:meth:`SGLangRouterBackend.update_weights`): pause every live worker
  (``/pause_generation``, unless :meth:`pause` already did), ``/update_weights_from_disk``
  on each, and only when all answered resume them and announce the new version. A worker
  that failed to load is marked dead and removed from the router *before* any worker
  resumes, so no call is served by old weights after the new version is announced; if
  no worker loaded, the error is raised and every worker keeps the old version.
- pause / resume / abort: each live worker.

Which worker served a call: each worker's SGLang ``weight_version`` is set to
``"<policy version>@<host:port>"`` (``/update_weight_version`` at :meth:`start`, the
weight load afterwards), and SGLang returns it in every result's ``meta_info``, so
``GenerationResult.policy_version`` is the version of the worker that generated the
tokens and ``extra["worker"]`` its URL (the proxy keeps ``extra`` in the call record's
``backend_extra``).

Dead workers: a background task checks every worker's ``/health`` each
``health_interval_s`` seconds, and at once after a failed call. A worker that fails is
logged, listed in :attr:`SGLangRouterBackend.workers` with the reason, and removed from
the router (``DELETE /workers/{id}``), which then routes around it. Its in-flight calls
end through the router's broken stream: as a ``GenerationResult`` with finish reason
"error" (tokens so far kept) or an :class:`SGLangUnavailableError` before any token —
the proxy records both as ``error`` calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    TokenDelta,
)
from clawrl.proxy.backends.sglang import PauseMode, SGLangBackend
from clawrl.proxy.backends.sglang_wire import SGLangRequestError, SGLangUnavailableError

__all__ = ["SGLangRouterBackend", "WorkerStatus"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerStatus:
    """One worker behind the router, as the backend sees it.

    Attributes:
        url: the worker's root URL.
        alive: it answered its last health check and holds the announced weights.
        policy_version: the version it was last seen serving (None: unknown).
        error: why it was marked dead (None while alive).
        dead_since: ``time.time()`` when it was marked dead.
        removed_from_router: the router confirmed its removal.
    """

    url: str
    alive: bool = True
    policy_version: int | None = None
    error: str | None = None
    dead_since: float | None = None
    removed_from_router: bool = False


def _tag(url: str) -> str:
    return urlsplit(url).netloc


class SGLangRouterBackend(InferenceBackend):
    """Inference through an ``sglang-router`` over several SGLang workers (see the module
    docstring).

    Args:
        router_url: the router's root URL.
        worker_urls: the workers' root URLs. None: the router's ``GET /workers`` list,
            read in :meth:`start`.
        health_interval_s: seconds between background health checks of every worker.
        remove_dead: remove a dead worker from the router (``DELETE /workers/{id}``).
        session_header: the header that carries each call's session id to the router
            (default ``X-SMG-Routing-Key``: the router's ``manual`` policy keeps one key on
            one worker; other policies ignore it). None: not sent.
        initial_policy_version, pause_mode, timeout, connect_timeout, api_key,
            extra_sampling_params, vocab_size, max_context: as for
            :class:`~clawrl.proxy.backends.sglang.SGLangBackend` (used for the router and
            every worker).

    Raises:
        ValueError: bad arguments.
    """

    name = "sglang-router"

    def __init__(
        self,
        router_url: str,
        worker_urls: Sequence[str] | None = None,
        *,
        health_interval_s: float = 2.0,
        remove_dead: bool = True,
        initial_policy_version: int = 0,
        pause_mode: PauseMode = "retract",
        timeout: float = 600.0,
        connect_timeout: float = 5.0,
        api_key: str | None = None,
        extra_sampling_params: Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
        max_context: int | None = None,
        session_header: str | None = "X-SMG-Routing-Key",
    ):
        if health_interval_s <= 0:
            raise ValueError(f"health_interval_s must be > 0, got {health_interval_s}")
        if worker_urls is not None and not worker_urls:
            raise ValueError("worker_urls is empty (None: ask the router)")
        self._opts: dict[str, Any] = {
            "initial_policy_version": initial_policy_version,
            "pause_mode": pause_mode,
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "api_key": api_key,
            "extra_sampling_params": extra_sampling_params,
        }
        # validates router_url and the options
        self._session_header = session_header
        self._router = SGLangBackend(
            router_url,
            vocab_size=vocab_size,
            max_context=max_context,
            session_header=session_header,
            **self._opts,
        )
        self.router_url = self._router.base_url
        self._given_urls = [u.rstrip("/") for u in worker_urls] if worker_urls else None
        self._vocab_size = vocab_size
        self._max_context = max_context
        self._version = int(initial_policy_version)
        self._health_interval_s = health_interval_s
        self._remove_dead = remove_dead
        self._workers: dict[str, SGLangBackend] = {}
        self._status: dict[str, WorkerStatus] = {}
        self._sync_lock = asyncio.Lock()
        self._paused = False
        self._monitor: asyncio.Task[None] | None = None
        self._check_now = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle
    @property
    def workers(self) -> list[WorkerStatus]:
        """Every worker's status, in order (dead ones included, with the reason)."""
        return list(self._status.values())

    @property
    def live_worker_urls(self) -> list[str]:
        """The URLs of the workers that serve calls."""
        return [u for u, s in self._status.items() if s.alive]

    async def start(self) -> None:
        """Connect to every worker, check they serve the same model and version, tag their
        weight versions, and start the health checks.

        Raises:
            SGLangUnavailableError: the router or a worker does not answer.
            BackendError: the router lists no worker, or the workers disagree on the
                vocabulary size or the weight version.
        """
        urls = self._given_urls or await self._discover()
        for url in urls:
            w = SGLangBackend(
                url, vocab_size=self._vocab_size, max_context=self._max_context, **self._opts
            )
            await w.start()
            self._workers[url] = w
        vocabs = {w.vocab_size for w in self._workers.values()}
        versions = {w.policy_version for w in self._workers.values()}
        if len(vocabs) != 1:
            raise BackendError(f"the router's workers serve different vocabularies: {vocabs}")
        if len(versions) != 1:
            raise BackendError(
                f"the router's workers serve different weight versions {sorted(versions)}: "
                "load the same weights into each first"
            )
        self._vocab_size = vocabs.pop()
        self._max_context = min(w.max_context for w in self._workers.values())
        self._version = versions.pop()
        await self._router.close()  # the discovery client: replaced by one that knows more
        self._router = SGLangBackend(
            self.router_url,
            vocab_size=self._vocab_size,
            max_context=self._max_context,
            session_header=self._session_header,
            **{**self._opts, "initial_policy_version": self._version},
        )
        for url, w in self._workers.items():
            await w._post(
                "/update_weight_version",
                {"new_version": f"{self._version}@{_tag(url)}", "abort_all_requests": False},
            )
            self._status[url] = WorkerStatus(url, policy_version=self._version)
        self._monitor = asyncio.ensure_future(self._monitor_loop())

    async def close(self) -> None:
        """Stop the health checks and close every connection pool (servers keep running)."""
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._monitor
            self._monitor = None
        await self._router.close()
        for w in self._workers.values():
            await w.close()

    async def health(self) -> bool:
        """True while some worker is alive and the router answers (never raises)."""
        return bool(self.live_worker_urls) and await self._router.health()

    async def _discover(self) -> list[str]:
        data = await self._router._get_json("/workers")
        items = data.get("workers")
        urls = [str(w["url"]).rstrip("/") for w in items or () if isinstance(w, Mapping)]
        if not urls:
            raise BackendError(f"the router at {self.router_url} lists no worker: {data!r}")
        return urls

    # ------------------------------------------------------------------ generation
    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        """Stream ``request`` through the router (see
        :meth:`SGLangBackend.generate <clawrl.proxy.backends.sglang.SGLangBackend.generate>`);
        the result's ``extra["worker"]`` names the worker that served it.

        Raises:
            SGLangUnavailableError: no live worker, or the router failed before any token.
            InvalidTokenIdError, SGLangRequestError: an invalid request.
        """
        if not self.live_worker_urls:
            raise SGLangUnavailableError(f"no live SGLang worker behind {self.router_url}")
        try:
            async for item in self._router.generate(request):
                if isinstance(item, GenerationResult):
                    if item.finish_reason == "error":
                        self._check_now.set()
                    item = self._annotate(item)
                yield item
        except SGLangUnavailableError:
            self._check_now.set()  # a worker may have died: check them now
            raise

    def _annotate(self, result: GenerationResult) -> GenerationResult:
        raw = result.extra.get("sglang_weight_version")
        if not isinstance(raw, str) or "@" not in raw:
            return result
        tag = raw.split("@", 1)[1]
        worker = next((u for u in self._status if _tag(u) == tag), tag)
        return replace(result, extra={**result.extra, "worker": worker})

    async def abort(self, request_id: str) -> None:
        """Abort ``request_id`` on every live worker (the router has no abort route); its
        result then has finish reason "aborted". Unknown ids are ignored."""
        self._router.mark_aborted(request_id)
        await asyncio.gather(
            *(self._workers[u]._abort_quietly(request_id) for u in self.live_worker_urls)
        )

    # ------------------------------------------------------------------ weights
    async def pause(self) -> None:
        """Pause generation on every live worker (``/pause_generation``).

        Raises:
            SGLangUnavailableError: a worker cannot be reached (it is marked dead).
        """
        async with self._sync_lock:
            self._paused = True
            await self._each("pause", self.live_worker_urls)

    async def resume(self) -> None:
        """Resume generation on every live worker (``/continue_generation``)."""
        async with self._sync_lock:
            self._paused = False
            await self._each("resume", self.live_worker_urls)

    async def update_weights(self, path: str, version: int) -> None:
        """Load the HF checkpoint ``path`` on every live worker at ``version`` with
        generation paused on all of them; afterwards :attr:`policy_version` is ``version``
        and every worker still routed to holds it.

        Raises:
            SGLangRequestError: no such directory, or every worker refused the load (the
                old weights stay loaded everywhere).
            SGLangUnavailableError: no live worker.
        """
        if not Path(path).is_dir():
            raise SGLangRequestError(f"weights directory not found: {path}")
        async with self._sync_lock:
            live = self.live_worker_urls
            if not live:
                raise SGLangUnavailableError(f"no live SGLang worker behind {self.router_url}")
            if not self._paused:
                live = await self._each("pause", live)
            try:
                loaded = await self._each("load", live, path=path, version=version)
                if not loaded:
                    raise SGLangRequestError(
                        f"no worker loaded {path}: "
                        + "; ".join(f"{u}: {self._status[u].error}" for u in live)
                    )
                self._version = int(version)
            finally:
                if not self._paused:
                    await self._each("resume", self.live_worker_urls)

    async def flush_cache(self) -> None:
        """``POST /flush_cache`` on the router, which broadcasts it to every worker."""
        await self._router._post("/flush_cache", None)

    async def _each(
        self, op: str, urls: Sequence[str], *, path: str = "", version: int = 0
    ) -> list[str]:
        """Run ``op`` (pause | resume | load) on each of ``urls`` at once; the URLs where it
        succeeded. A worker where it failed is marked dead (and removed from the router)."""

        async def one(url: str) -> None:
            w = self._workers[url]
            if op == "pause":
                await w.pause()
            elif op == "resume":
                await w.resume()
            else:
                await w.update_weights(path, version, weight_version=f"{version}@{_tag(url)}")
                self._status[url] = replace(self._status[url], policy_version=int(version))

        results = await asyncio.gather(*(one(u) for u in urls), return_exceptions=True)
        ok: list[str] = []
        for url, res in zip(urls, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, BackendError | httpx.HTTPError | OSError):
                    raise res
                await self._mark_dead(url, f"{op} failed: {type(res).__name__}: {res}")
            else:
                ok.append(url)
        return ok

    # ------------------------------------------------------------------ health
    async def _monitor_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), self._health_interval_s)
            self._check_now.clear()
            urls = self.live_worker_urls
            oks = await asyncio.gather(*(self._workers[u].health() for u in urls))
            for url, ok in zip(urls, oks, strict=True):
                if not ok:
                    await self._mark_dead(url, "health check failed (GET /health)")

    async def _mark_dead(self, url: str, reason: str) -> None:
        st = self._status[url]
        if not st.alive:
            return
        log.warning("SGLang worker %s is dead (%s): routing around it", url, reason)
        self._status[url] = replace(st, alive=False, error=reason, dead_since=time.time())
        if self._remove_dead:
            removed = await self._remove_from_router(url)
            self._status[url] = replace(self._status[url], removed_from_router=removed)

    async def _remove_from_router(self, url: str) -> bool:
        """``DELETE /workers/{id}`` for ``url`` on the router; True once the router no
        longer lists it (never raises)."""
        try:
            data = await self._router._get_json("/workers")
            entries = [w for w in data.get("workers") or () if isinstance(w, Mapping)]
            match = [w for w in entries if str(w.get("url", "")).rstrip("/") == url]
            if not match:
                return True
            worker_id = str(match[0].get("id") or url)
            r = await self._router._http().delete(f"/workers/{quote(worker_id, safe='')}")
        except (BackendError, httpx.HTTPError) as e:
            log.warning("could not remove %s from the router: %s", url, e)
            return False
        if r.status_code >= 300:
            log.warning("the router refused to remove %s: %s %s", url, r.status_code, r.text)
            return False
        return True
