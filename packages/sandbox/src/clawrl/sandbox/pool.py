"""A pool of sandboxes: bounded concurrency, warm sandboxes per spec, fair FIFO acquisition."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import (
    PoolClosedError,
    PoolTimeoutError,
    SandboxCreateError,
    SandboxError,
    SandboxSpecError,
)
from .hosts import HostHealth, SandboxHosts
from .podman import Podman, shared_podman
from .reaper import ContainerInfo, RunIdentity, current_identity, gc
from .sandbox import Sandbox
from .spec import WORKSPACE, SandboxSpec

__all__ = ["PoolMetrics", "SandboxPool"]

#: Seconds a failed warm creation waits before the pool tries that spec again.
WARM_RETRY_S = 1.0


# Kills every process started through exec (all carry the CLAWRL_EXEC_ID tag; the forwarder's
# tag is "forwarder" and survives), then empties the writable places.
@dataclass(frozen=True)
class PoolMetrics:
    """A snapshot of a pool's counters.

    Attributes:
        in_use: sandboxes handed out and not yet released.
        idle: warm sandboxes ready to be acquired.
        creating: sandboxes being created.
        waiting: acquirers queued (FIFO) for a sandbox.
        created: sandboxes created since start (successfully).
        destroyed: sandboxes destroyed since start.
        failed: creations (or resets) that failed.
        acquired: successful acquisitions.
        reused: acquisitions served by a sandbox that had been used and reset.
        acquire_wait_s: total seconds acquirers spent waiting (mean = / ``acquired``).
    """

    in_use: int
    idle: int
    creating: int
    waiting: int
    created: int
    destroyed: int
    failed: int
    acquired: int
    reused: int
    acquire_wait_s: float


@dataclass(eq=False)
class _Waiter:
    key: str
    spec: SandboxSpec
    fut: asyncio.Future[Sandbox]
    since: float = field(default_factory=time.monotonic)


class SandboxPool:
    """Hands out sandboxes under a global cap, keeping warm ones ready per spec.

    * **Global cap**: at most ``max_sandboxes`` containers exist at once (in use, idle and
      being created together).
    * **Warm**: for each spec registered with :meth:`warm` (or ``warm=`` at construction) the
      pool keeps that many idle sandboxes created in advance, so :meth:`acquire` is a queue pop.
    * **Fair**: acquirers are served strictly first come, first served; when the cap is reached
      and the head of the queue needs another spec, an idle sandbox of another spec is
      destroyed to make room.
    * **Reuse**: on :meth:`release` a sandbox is destroyed and replaced (default: every rollout
      starts from a fresh container), or with ``reuse=True`` reset in place — from the host,
      every process but PID 1 killed, ``/workspace``, ``/tmp``, the home directory,
      ``/var/tmp``, ``/dev/shm`` and ``/run`` emptied (its mount points stay), the forwarder
      restarted, the spec's files written again — and returned to the idle set. Only
      sandboxes with a read-only root are reused (a writable one is destroyed: it may hold a
      planted program). Reset sandboxes share their kernel objects with earlier rollouts; use
      reuse only among rollouts of one trust domain.
    * **Cleanup**: :meth:`start` first removes containers of dead runs (:func:`~.reaper.gc`),
      so a SIGKILLed orchestrator's leftovers vanish at the next pool start; :meth:`close`
      destroys everything the pool created.

    Use as ``async with SandboxPool(...) as pool:`` and ``async with pool.sandbox(spec) as sb:``.

    Args:
        max_sandboxes: global cap (>= 1; default 8, or the hosts' total capacity).
        warm: ``[(spec, n), …]`` warm targets.
        reuse: reset released sandboxes instead of destroying them.
        podman: backend (default: the shared one).
        run_id: run id the pool's sandboxes are labelled with (default: the process's).
        gc_on_start: reap dead runs' containers in :meth:`start`.
        create_timeout: seconds allowed for one sandbox creation.
        factory: how the pool creates a sandbox (default: :meth:`Sandbox.create` with the
            pool's podman, run identity and ``create_timeout``); e.g. to spread sandboxes over
            several podman hosts. It must raise :class:`SandboxError` on failure.
        hosts: spread the sandboxes over several podman hosts by free capacity
            (:class:`~clawrl.sandbox.SandboxHosts`; instead of ``podman`` and ``factory``);
            the pool reaps dead runs on each host at start, closes them at close, and
            :meth:`health` reports them.
    """

    def __init__(
        self,
        *,
        max_sandboxes: int | None = None,
        warm: Iterable[tuple[SandboxSpec, int]] = (),
        reuse: bool = False,
        podman: Podman | None = None,
        run_id: str | None = None,
        gc_on_start: bool = True,
        create_timeout: float = 60.0,
        factory: Callable[[SandboxSpec], Awaitable[Sandbox]] | None = None,
        hosts: SandboxHosts | None = None,
    ) -> None:
        if hosts is not None and factory is not None:
            raise SandboxSpecError("give hosts or factory, not both")
        if max_sandboxes is None:
            max_sandboxes = hosts.capacity if hosts is not None else 8
        if not isinstance(max_sandboxes, int) or max_sandboxes < 1:
            raise SandboxSpecError(f"max_sandboxes must be an int >= 1, got {max_sandboxes!r}")
        self.max_sandboxes = max_sandboxes
        self.reuse = reuse
        self.create_timeout = create_timeout
        self.gc_on_start = gc_on_start
        self._factory = factory
        self.hosts = hosts
        self._podman = podman or shared_podman()
        ident = current_identity()
        self._identity: RunIdentity = ident.with_run_id(run_id) if run_id else ident
        self._specs: dict[str, SandboxSpec] = {}
        self._warm: dict[str, int] = {}
        self._idle: dict[str, deque[Sandbox]] = {}
        self._creating_warm: dict[str, int] = {}
        self._in_use: set[Sandbox] = set()
        self._was_used: set[str] = set()
        self._waiters: deque[_Waiter] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._live = 0  # containers existing or being created (counted against the cap)
        self._creating = 0
        self._evicting = 0
        self._started = False
        self._closed = False
        self._n = {"created": 0, "destroyed": 0, "failed": 0, "acquired": 0, "reused": 0}
        self._wait_s = 0.0
        self.reaped: list[ContainerInfo] = []
        for spec, n in warm:
            self.warm(spec, n)

    @property
    def run_id(self) -> str:
        """The run id every sandbox of this pool carries."""
        return self._identity.run_id

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> SandboxPool:
        """Reap dead runs' containers (unless ``gc_on_start=False``) and start warming.

        Returns the pool itself. The reaped containers are listed in :attr:`reaped`.
        """
        if self._closed:
            raise PoolClosedError("pool was closed")
        if self._started:
            return self
        if self.gc_on_start:
            podmans = [self._podman]
            if self.hosts is not None:
                podmans = [self.hosts.podman(h.name) for h in self.hosts.hosts]
            for pm in podmans:
                try:
                    self.reaped += await gc(pm)
                except SandboxError:  # a host that does not answer is excluded at first use
                    if self.hosts is None:
                        raise
        self._started = True
        self._dispatch()
        return self

    async def close(self) -> None:
        """Fail queued acquirers with :class:`PoolClosedError` and destroy every sandbox
        (idle and in use); waits for creations in flight. Idempotent."""
        if self._closed:
            return
        self._closed = True
        while self._waiters:
            w = self._waiters.popleft()
            if not w.fut.done():
                w.fut.set_exception(PoolClosedError("pool closed while waiting"))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        doomed = [sb for q in self._idle.values() for sb in q] + list(self._in_use)
        self._idle.clear()
        self._in_use.clear()
        await asyncio.gather(*(self._destroy(sb) for sb in doomed), return_exceptions=True)
        if self.hosts is not None:
            await self.hosts.close()

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.close())

    # ------------------------------------------------------------------ public ops
    def warm(self, spec: SandboxSpec, n: int) -> None:
        """Keep ``n`` idle sandboxes of ``spec`` ready (0 stops warming that spec)."""
        if n < 0:
            raise SandboxSpecError("warm count must be >= 0")
        key = spec.key()
        self._specs[key] = spec
        self._warm[key] = n
        if self._started:
            self._dispatch()

    async def acquire(
        self, spec: SandboxSpec | None = None, timeout: float | None = None
    ) -> Sandbox:
        """Get a sandbox of ``spec`` (default ``SandboxSpec()``): an idle one, a new one, or
        wait in FIFO order for capacity.

        Raises:
            PoolTimeoutError: none became available within ``timeout`` seconds.
            PoolClosedError: the pool is closed (or closes while waiting) or was not started.
            SandboxCreateError: creating the sandbox for this acquirer failed (a factory's
                non-:class:`SandboxError` exception is wrapped in one; the slot is freed).
            SandboxSpecError: the spec cannot be realised (e.g. an unreadable host file).
        """
        if not self._started or self._closed:
            raise PoolClosedError("pool is not running (use `async with SandboxPool(...)`)")
        spec = spec or SandboxSpec()
        key = spec.key()
        self._specs.setdefault(key, spec)
        fut: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()
        w = _Waiter(key, spec, fut)
        q = self._idle.get(key)
        if q and not self._waiters:  # fast path: a warm sandbox and nobody ahead in the queue
            self._hand(w, q.popleft())
            self._dispatch()  # top the warm set up again
            return fut.result()
        self._waiters.append(w)
        self._dispatch()
        try:
            await asyncio.wait({fut}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(w)
            raise
        if not fut.done():
            self._abandon(w)
            raise PoolTimeoutError(f"no sandbox available within {timeout} s")
        return fut.result()

    async def release(
        self, sandbox: Sandbox, *, reuse: bool | None = None, broken: bool = False
    ) -> None:
        """Give a sandbox back. Returns at once; destruction or reset runs in the background.

        Args:
            sandbox: a sandbox obtained from :meth:`acquire`.
            reuse: override the pool's ``reuse`` setting for this sandbox.
            broken: destroy it whatever ``reuse`` says (e.g. after an infrastructure error).

        Raises:
            SandboxError: the sandbox is not in use from this pool.
        """
        if sandbox not in self._in_use:
            raise SandboxError(f"{sandbox!r} is not in use from this pool")
        self._in_use.discard(sandbox)
        do_reuse = self.reuse if reuse is None else reuse
        if self._closed or broken or not do_reuse or sandbox.closed:
            self._spawn(self._destroy(sandbox))
        else:
            self._spawn(self._reset(sandbox))

    @contextlib.asynccontextmanager
    async def sandbox(
        self, spec: SandboxSpec | None = None, timeout: float | None = None
    ) -> AsyncIterator[Sandbox]:
        """``async with pool.sandbox(spec) as sb:`` — acquire, then always release (an
        exception escaping the block releases it as ``broken``: destroyed, never reused)."""
        sb = await self.acquire(spec, timeout)
        try:
            yield sb
        except BaseException:
            if sb in self._in_use:  # never reuse a sandbox whose rollout blew up
                await self.release(sb, broken=True)
            raise
        if sb in self._in_use:
            await self.release(sb)

    def metrics(self) -> PoolMetrics:
        """Current counters (:class:`PoolMetrics`)."""
        return PoolMetrics(
            in_use=len(self._in_use),
            idle=sum(len(q) for q in self._idle.values()),
            creating=self._creating,
            waiting=sum(1 for w in self._waiters if not w.fut.done()),
            created=self._n["created"],
            destroyed=self._n["destroyed"],
            failed=self._n["failed"],
            acquired=self._n["acquired"],
            reused=self._n["reused"],
            acquire_wait_s=self._wait_s,
        )

    def health(self) -> list[HostHealth]:
        """Each podman host's :class:`HostHealth` (``hosts=``); ``[]`` for a one-host pool."""
        return self.hosts.health() if self.hosts is not None else []

    # ------------------------------------------------------------------ internals
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _abandon(self, w: _Waiter) -> None:
        """An acquirer gave up: take it off the queue; a sandbox already handed goes back."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(w)
        if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
            sb = w.fut.result()
            self._in_use.discard(sb)
            self._n["acquired"] -= 1
            self._idle.setdefault(sb.spec.key(), deque()).appendleft(sb)
        else:
            w.fut.cancel()
        self._dispatch()

    def _hand(self, w: _Waiter, sb: Sandbox) -> None:
        self._in_use.add(sb)
        self._n["acquired"] += 1
        if sb.id in self._was_used:
            self._n["reused"] += 1
        self._was_used.add(sb.id)
        self._wait_s += time.monotonic() - w.since
        w.fut.set_result(sb)

    def _dispatch(self) -> None:
        """Serve queued acquirers in order, then top up warm sandboxes within the cap."""
        if self._closed or not self._started:
            return
        while self._waiters:
            w = self._waiters[0]
            if w.fut.done():
                self._waiters.popleft()
                continue
            q = self._idle.get(w.key)
            if q:
                self._waiters.popleft()
                self._hand(w, q.popleft())
                continue
            if self._live < self.max_sandboxes:
                self._waiters.popleft()
                self._live += 1
                self._spawn(self._create_for(w))
                continue
            if self._live - self._evicting >= self.max_sandboxes:
                victim = self._pop_idle_other_than(w.key)
                if victim is not None:
                    self._evicting += 1
                    self._spawn(self._destroy(victim, evicting=True))
            break
        if self._waiters:
            return
        for key, target in self._warm.items():
            q = self._idle.setdefault(key, deque())
            while (
                len(q) + self._creating_warm.get(key, 0) < target
                and self._live < self.max_sandboxes
            ):
                self._live += 1
                self._creating_warm[key] = self._creating_warm.get(key, 0) + 1
                self._spawn(self._create_warm(key))

    def _pop_idle_other_than(self, key: str) -> Sandbox | None:
        for k, q in self._idle.items():
            if k != key and q:
                return q.pop()
        return None

    async def _new(self, spec: SandboxSpec) -> Sandbox | None:
        self._creating += 1
        try:
            if self.hosts is not None:
                sb = await self.hosts.create(
                    spec, identity=self._identity, timeout=self.create_timeout
                )
            elif self._factory is not None:
                sb = await self._factory(spec)
            else:
                sb = await Sandbox.create(
                    spec, podman=self._podman, identity=self._identity, timeout=self.create_timeout
                )
        except BaseException as e:
            # Whatever failed (a factory's own exception, an OSError, cancellation), the slot
            # is given back; otherwise it stays counted against the cap forever.
            self._n["failed"] += 1
            self._live -= 1
            if isinstance(e, SandboxError) or not isinstance(e, Exception):
                raise
            raise SandboxCreateError(f"cannot create sandbox: {e!r}") from e
        finally:
            self._creating -= 1
        self._n["created"] += 1
        return sb

    async def _create_for(self, w: _Waiter) -> None:
        try:
            sb = await self._new(w.spec)
        except SandboxError as e:
            if not w.fut.done():
                w.fut.set_exception(e)
            self._dispatch()
            return
        assert sb is not None
        if self._closed:
            await self._destroy(sb)
        elif w.fut.done():
            self._idle.setdefault(w.key, deque()).append(sb)
        else:
            self._hand(w, sb)
        self._dispatch()

    async def _create_warm(self, key: str) -> None:
        try:
            sb = await self._new(self._specs[key])
        except SandboxError:
            self._creating_warm[key] -= 1
            await asyncio.sleep(WARM_RETRY_S)  # don't spin on a spec that cannot be created
            self._dispatch()
            return
        self._creating_warm[key] -= 1
        assert sb is not None
        if self._closed:
            await self._destroy(sb)
            return
        self._idle.setdefault(key, deque()).append(sb)
        self._dispatch()

    async def _destroy(self, sb: Sandbox, evicting: bool = False) -> None:
        try:
            await sb.destroy()
        finally:
            self._n["destroyed"] += 1
            self._live -= 1
            self._was_used.discard(sb.id)
            if evicting:
                self._evicting -= 1
            self._dispatch()

    async def _reset(self, sb: Sandbox) -> None:
        uid = sb.spec.user.partition(":")[0]
        home = "/root" if uid == "0" else "/home/sandbox"
        try:
            if not sb.spec.read_only_root:
                # a writable root may hold what the last user planted (a replaced /bin/sh, an
                # /etc/ld.so.preload): only read-only-root sandboxes are reset and reused
                raise SandboxError("a sandbox with a writable root is never reused")
            # from the host: every process but PID 1 killed, then every writable place emptied
            await sb.kill_all()
            for d in (WORKSPACE, "/tmp", home, "/var/tmp", "/dev/shm", "/run"):
                if not await sb.wipe(d):
                    raise SandboxError(f"reset failed: {d} could not be emptied")
            if sb.spec.model_socket is not None and sb.spec.forwarder:
                await sb.start_forwarder()
            if sb.spec.files:
                await sb.put_files(sb.spec.files)
        except Exception:  # SandboxError, or e.g. an OSError from a host file
            self._n["failed"] += 1
            await self._destroy(sb)
            return
        if self._closed:
            await self._destroy(sb)
            return
        self._idle.setdefault(sb.spec.key(), deque()).append(sb)
        self._dispatch()
