"""Sandboxes on several podman hosts: placement by free capacity, health, and failover.

Each :class:`SandboxHost` is one podman endpoint: the local podman, a ``podman --url`` URL
(the ``CONTAINER_HOST`` forms ``unix:///run/podman/podman.sock``,
``ssh://user@host/run/podman/podman.sock``, ``tcp://host:port``) or a named
``podman system connection`` (``podman --connection NAME``). It has a capacity (sandboxes
alive on it at once). :class:`SandboxHosts` creates each sandbox on the host with the most
free capacity (capacity minus sandboxes in use or being created; ties go to the earlier host),
waits when every host is full, and watches each host's health:

* a probe (``podman info``) runs every ``probe_interval_s`` per host, and at once whenever an
  operation on a host fails the way an unreachable podman fails (exit 125 and "Cannot connect
  to Podman" and the like). Only the probe decides: a sandbox's program printing that text
  never marks a host down;
* a host whose probe fails is *down*: excluded from placement for the rest of the run, its
  podman clients in flight are killed, and every operation on its sandboxes raises
  :class:`~clawrl.sandbox.SandboxHostDownError` (a :class:`~clawrl.sandbox.SandboxGoneError`),
  which bench records as an ``infra-error`` rollout; the others go on;
* the containers a down host still holds are *stranded*: :meth:`SandboxHosts.reap_stranded`
  (called by the monitor while the host is down, and by :meth:`SandboxHosts.close`) removes
  them by id once the host answers again. A host that never comes back takes them with it;
  a sandbox with a wall clock removes itself anyway.

Host-side operations (:meth:`Sandbox.kill_all`, copy-out, :meth:`Sandbox.get_file`,
:meth:`Sandbox.wipe`) read the sandbox through ``/proc/<pid>`` of the orchestrator's machine,
so they work on endpoints of this machine (a second ``podman system service``, another
storage root); on a sandbox whose PID 1 is not on this machine they raise
:class:`~clawrl.sandbox.SandboxError` instead of reading a stranger's process (the pid's
cgroup must name the container).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Unpack

from .errors import (
    NoSandboxHostError,
    PodmanError,
    PoolTimeoutError,
    SandboxError,
    SandboxHostDownError,
    SandboxSpecError,
)
from .execute import ExecOptions
from .hostfs import SandboxInit
from .podman import Podman
from .reaper import RunIdentity, current_identity
from .sandbox import _LIVE, Sandbox
from .spec import ExecResult, SandboxSpec

__all__ = ["HostHealth", "SandboxHost", "SandboxHosts"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_URL_SCHEMES = ("unix://", "ssh://", "tcp://")
#: What podman's remote client prints when it cannot reach its service (a hint to probe).
_UNREACHABLE = (
    "cannot connect to podman",
    "unable to connect to podman",
    "connection refused",
    "connect: no such file or directory",
    "broken pipe",
    "connection reset by peer",
    "unexpected eof",
)


def looks_unreachable(text: str) -> bool:
    """True when podman output reads like an unreachable podman service (a reason to probe)."""
    low = text.lower()
    return any(m in low for m in _UNREACHABLE)


@dataclass(frozen=True)
class SandboxHost:
    """One podman endpoint that runs sandboxes.

    Attributes:
        name: unique label (letters, digits, ``_.-``; shown in health and errors).
        capacity: sandboxes alive on this host at once (>= 0; 0 = never placed on).
        url: ``podman --url`` target (``unix://``, ``ssh://`` or ``tcp://``), or None.
        connection: ``podman --connection`` name (``podman system connection add``), or None.
            Neither ``url`` nor ``connection``: the local podman (``CONTAINER_HOST`` applies).
        model_socket: the model relay's unix socket **on that host**, mounted into its
            sandboxes in place of the spec's own (the proxy's socket on the orchestrator's
            machine); None = keep the spec's. See the README's "Sandboxes on several hosts".
        runtime: OCI runtime (``--runtime``); default: auto for the local podman, the
            service's own for a remote one.
    """

    name: str
    capacity: int
    url: str | None = None
    connection: str | None = None
    model_socket: Path | None = None
    runtime: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SandboxSpecError(f"sandbox host name must match {_NAME.pattern}: {self.name!r}")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int):
            raise SandboxSpecError(
                f"host {self.name}: capacity must be an int, not {self.capacity!r}"
            )
        if self.capacity < 0:
            raise SandboxSpecError(f"host {self.name}: capacity must be >= 0, got {self.capacity}")
        if self.url is not None and self.connection is not None:
            raise SandboxSpecError(f"host {self.name}: give url or connection, not both")
        if self.url is not None and not self.url.startswith(_URL_SCHEMES):
            raise SandboxSpecError(
                f"host {self.name}: url must start with one of {_URL_SCHEMES}, got {self.url!r}"
            )
        if self.connection is not None and not _NAME.match(self.connection):
            raise SandboxSpecError(f"host {self.name}: bad connection name {self.connection!r}")
        if self.model_socket is not None:
            object.__setattr__(self, "model_socket", Path(self.model_socket))

    @property
    def remote(self) -> bool:
        """True for a ``--url`` / ``--connection`` endpoint."""
        return self.url is not None or self.connection is not None

    @property
    def target(self) -> str:
        """Where podman is reached: the URL, ``connection:NAME`` or ``local``."""
        if self.url is not None:
            return self.url
        return f"connection:{self.connection}" if self.connection else "local"

    def global_args(self) -> list[str]:
        """podman's global options selecting this endpoint."""
        if self.url is not None:
            return ["--url", self.url]
        return ["--connection", self.connection] if self.connection else []


@dataclass(frozen=True)
class HostHealth:
    """A snapshot of one host (:meth:`SandboxHosts.health`).

    Attributes:
        name, target, capacity: from the :class:`SandboxHost`.
        up: False once a probe failed (the host is excluded from then on).
        in_use: sandboxes alive on it (created or being created) from this object.
        free: ``capacity - in_use`` while up, else 0.
        created: sandboxes created on it; failed: creations that failed on it.
        lost: sandboxes that were alive when it went down.
        stranded: ids of containers left on it while down, not yet removed.
        reason: why it is down ("" while up).
        last_ok: unix time of its last successful probe or creation (0 = never).
    """

    name: str
    target: str
    capacity: int
    up: bool
    in_use: int
    free: int
    created: int
    failed: int
    lost: int
    stranded: tuple[str, ...]
    reason: str
    last_ok: float


class _HostPodman(Podman):
    """A host's podman client that refuses to start once the host is down, and kills the
    clients it started when the host is cut off (a client of a dead service may hang). It
    carries its host's state, so that its sandboxes find their host from their podman."""

    def __init__(self, host: SandboxHost, hosts: SandboxHosts) -> None:
        runtime = host.runtime if host.runtime is not None else ("" if host.remote else None)
        super().__init__(runtime=runtime, global_args=host.global_args())
        self.hosts = hosts
        self.state = _HostState(host, self)
        self.down_reason: str | None = None
        self._procs: set[asyncio.subprocess.Process] = set()

    async def spawn(self, *args: str, stdin: bool = False) -> asyncio.subprocess.Process:
        if self.down_reason is not None:
            raise SandboxHostDownError(
                self.state.host.name,
                f"sandbox host {self.state.host.name} is down: {self.down_reason}",
            )
        proc = await super().spawn(*args, stdin=stdin)
        self._procs = {p for p in self._procs if p.returncode is None}
        self._procs.add(proc)
        return proc

    def cut_off(self, reason: str) -> None:
        self.down_reason = reason
        for p in self._procs:
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
        self._procs.clear()


@dataclass(eq=False)
class _HostState:
    host: SandboxHost
    podman: _HostPodman
    in_use: set[Sandbox] = field(default_factory=set)
    reserved: int = 0
    created: int = 0
    failed: int = 0
    lost: int = 0
    stranded: list[str] = field(default_factory=list)
    last_ok: float = 0.0

    @property
    def up(self) -> bool:
        return self.podman.down_reason is None

    @property
    def free(self) -> int:
        return self.host.capacity - len(self.in_use) - self.reserved if self.up else 0


class _HostedSandbox(Sandbox):
    """A sandbox that knows its host (through its podman): operations on a down host raise
    :class:`SandboxHostDownError`; destroy on a down host strands the container."""

    @property
    def _hp(self) -> _HostPodman:
        assert isinstance(self._podman, _HostPodman)
        return self._podman

    @property
    def host(self) -> str:
        """The name of the host it runs on."""
        return self._hp.state.host.name

    def _down(self) -> SandboxHostDownError | None:
        reason = self._hp.down_reason
        if reason is None:
            return None
        return SandboxHostDownError(
            self.host, f"sandbox {self.name}: its host {self.host} is down: {reason}"
        )

    async def exec(  # type: ignore[override]  # the same options, passed through
        self, cmd: str | Sequence[str], **options: Unpack[ExecOptions]
    ) -> ExecResult:
        hp = self._hp
        try:
            r = await super().exec(cmd, **options)
        except PodmanError as e:
            await hp.hosts.check(hp.state, e.stderr)
            down = self._down()
            if down is not None:
                raise down from e
            raise
        if not r.ok and not r.timed_out and (r.exit_code == 125 or r.exit_code < 0):
            # podman's own failure (or a client killed when the host was cut off): ask the
            # host itself; the sandbox's output alone decides nothing
            await hp.hosts.check(hp.state, r.stderr.decode("utf-8", "replace"), force=True)
        down = self._down()
        if down is not None:
            raise down
        return r

    async def _find_init(self) -> SandboxInit:
        down = self._down()
        if down is not None:
            raise down
        first = self._init is None
        init = await super()._find_init()
        if first and self.id not in init.cgroup.decode("utf-8", "replace"):
            self._init = None
            raise SandboxError(
                f"sandbox {self.name} on host {self.host} is not on this machine: host-side "
                "operations (kill_all, copy-out, get_file, wipe) need it here"
            )
        return init

    async def destroy(self) -> None:
        if self._closed:
            return
        hp = self._hp
        try:
            if self._down() is not None:
                self._closed = True
                _LIVE.pop(self.id, None)
                if self.id not in hp.state.stranded:  # created as the host went down
                    hp.state.stranded.append(self.id)
            else:
                await super().destroy()
        finally:
            hp.hosts._release(hp.state, self)


class SandboxHosts:
    """Creates sandboxes on several podman hosts, by free capacity, and tracks their health.

    Use as ``async with SandboxHosts([...]) as hosts:`` (or call :meth:`close`), then
    ``sb = await hosts.create(spec)``; ``sb.destroy()`` frees the slot. Pass it to
    :class:`~clawrl.sandbox.SandboxPool` (``hosts=``) for a pool over all hosts.

    Args:
        hosts: the hosts (names unique, total capacity >= 1).
        probe_interval_s: seconds between health probes of each up host (> 0).
        probe_timeout_s: seconds a probe may take before the host counts as down.

    Raises:
        SandboxSpecError: no host, duplicate names, or no capacity at all.
    """

    def __init__(
        self,
        hosts: Sequence[SandboxHost],
        *,
        probe_interval_s: float = 5.0,
        probe_timeout_s: float = 10.0,
    ) -> None:
        if not hosts:
            raise SandboxSpecError("SandboxHosts needs at least one host")
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise SandboxSpecError(f"sandbox host names must be unique: {names}")
        if sum(h.capacity for h in hosts) < 1:
            raise SandboxSpecError("the sandbox hosts have no capacity (all 0)")
        if not probe_interval_s > 0 or not probe_timeout_s > 0:
            raise SandboxSpecError("probe_interval_s and probe_timeout_s must be > 0")
        self.probe_interval_s = probe_interval_s
        self.probe_timeout_s = probe_timeout_s
        self._states = [_HostPodman(h, self).state for h in hosts]
        self._wakeups: list[asyncio.Future[None]] = []
        self._monitors: dict[asyncio.AbstractEventLoop, asyncio.Task[None]] = {}

    @property
    def capacity(self) -> int:
        """Total capacity of the hosts that are up."""
        return sum(s.host.capacity for s in self._states if s.up)

    @property
    def hosts(self) -> list[SandboxHost]:
        """The configured hosts, in order."""
        return [s.host for s in self._states]

    def podman(self, name: str) -> Podman:
        """The podman client of host ``name`` (e.g. for :func:`~clawrl.sandbox.gc`).

        Raises:
            KeyError: no such host.
        """
        return self._state(name).podman

    def _state(self, name: str) -> _HostState:
        for s in self._states:
            if s.host.name == name:
                return s
        raise KeyError(f"no sandbox host named {name!r}")

    def health(self) -> list[HostHealth]:
        """One :class:`HostHealth` per host, in configuration order."""
        return [
            HostHealth(
                name=s.host.name,
                target=s.host.target,
                capacity=s.host.capacity,
                up=s.up,
                in_use=len(s.in_use) + s.reserved,
                free=max(0, s.free),
                created=s.created,
                failed=s.failed,
                lost=s.lost,
                stranded=tuple(s.stranded),
                reason=s.podman.down_reason or "",
                last_ok=s.last_ok,
            )
            for s in self._states
        ]

    # ------------------------------------------------------------------ creation
    async def create(
        self,
        spec: SandboxSpec | None = None,
        *,
        run_id: str | None = None,
        identity: RunIdentity | None = None,
        timeout: float = 60.0,
        wait_timeout: float | None = None,
    ) -> Sandbox:
        """Create a sandbox on the up host with the most free capacity (waiting while all
        are full); its ``model_socket`` is the host's relay socket when the host has one.

        Args:
            spec, run_id, identity, timeout: as :meth:`Sandbox.create`.
            wait_timeout: seconds to wait for free capacity (None = no limit).

        Returns:
            The sandbox (its ``host`` attribute names the host).

        Raises:
            NoSandboxHostError: no host is up (or none has capacity).
            PoolTimeoutError: no capacity within ``wait_timeout``.
            SandboxHostDownError: the chosen host went down during the creation.
            SandboxCreateError, SandboxSpecError: as :meth:`Sandbox.create`.
        """
        spec = spec or SandboxSpec()
        self._ensure_monitor()
        st = await self._reserve(wait_timeout)
        ident = identity or current_identity()
        if run_id is not None:
            ident = ident.with_run_id(run_id)
        if spec.model_socket is not None and st.host.model_socket is not None:
            spec = dataclasses.replace(spec, model_socket=st.host.model_socket)
        try:
            sb = await _HostedSandbox.create(
                spec, podman=st.podman, identity=ident, timeout=timeout
            )
        except SandboxError as e:
            st.failed += 1
            await self._probe(st)  # a bad spec leaves it up; an unreachable host goes down
            if not st.up:
                raise SandboxHostDownError(
                    st.host.name, f"sandbox host {st.host.name} went down: {st.podman.down_reason}"
                ) from e
            raise
        finally:
            st.reserved -= 1
            self._wake()
        st.in_use.add(sb)
        st.created += 1
        st.last_ok = time.time()
        return sb

    async def _reserve(self, wait_timeout: float | None) -> _HostState:
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        while True:
            up = [s for s in self._states if s.up and s.host.capacity > 0]
            if not up:
                reasons = "; ".join(
                    f"{s.host.name}: {s.podman.down_reason or 'capacity 0'}" for s in self._states
                )
                raise NoSandboxHostError(f"no sandbox host is up ({reasons})")
            best = max(up, key=lambda s: s.free)  # max keeps the first of equals
            if best.free > 0:
                best.reserved += 1
                return best
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._wakeups.append(fut)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise PoolTimeoutError(f"no sandbox host had capacity within {wait_timeout} s")
            await asyncio.wait({fut}, timeout=left)

    def _wake(self) -> None:
        for fut in self._wakeups:
            if not fut.done() and not fut.get_loop().is_closed():
                fut.get_loop().call_soon_threadsafe(_set_done, fut)
        self._wakeups = []

    def _release(self, st: _HostState, sb: Sandbox) -> None:
        st.in_use.discard(sb)
        self._wake()

    # ------------------------------------------------------------------ health
    async def probe(self, name: str) -> bool:
        """Ask host ``name`` whether it answers (``podman info``); a failure marks it down.

        Returns:
            Whether it is up after the probe (a down host stays down).

        Raises:
            KeyError: no such host.
        """
        return await self._probe(self._state(name))

    async def _ping(self, st: _HostState) -> str | None:
        """None when the host answers, else why not."""
        pm = Podman(runtime=st.podman.runtime or "", global_args=st.podman.global_args)
        try:
            r = await pm.run(
                "info", "--format", "{{.Host.Hostname}}", check=False, timeout=self.probe_timeout_s
            )
        except PodmanError as e:
            return e.stderr
        if r.returncode != 0:
            return r.stderr.decode("utf-8", "replace").strip() or f"exit {r.returncode}"
        return None

    async def _probe(self, st: _HostState) -> bool:
        if not st.up:
            return False
        why = await self._ping(st)
        if why is None:
            st.last_ok = time.time()
            return True
        self.mark_down(st.host.name, f"probe failed: {why.splitlines()[0][:300] if why else why}")
        return False

    async def check(self, st: _HostState, text: str, force: bool = False) -> None:
        """Probe ``st``'s host when ``text`` (podman's output) reads like it is unreachable,
        or always with ``force``."""
        if st.up and (force or looks_unreachable(text)):
            await self._probe(st)

    def mark_down(self, name: str, reason: str) -> None:
        """Exclude host ``name`` from now on: its podman clients in flight are killed and every
        operation on its sandboxes raises :class:`SandboxHostDownError`.

        Raises:
            KeyError: no such host.
        """
        st = self._state(name)
        if not st.up:
            return
        st.lost += len(st.in_use)
        st.stranded += [sb.id for sb in st.in_use if sb.id not in st.stranded]
        st.podman.cut_off(reason or "marked down")
        self._wake()

    async def reap_stranded(self) -> list[str]:
        """Remove the stranded containers of every down host that answers again.

        Only the containers recorded as stranded (alive on the host when it went down) are
        removed, by id; one whose creation was cut off by the host's fall is not known by id
        and ends with its wall clock (``Limits.wall_clock_s``).

        Returns:
            The ids removed.
        """
        removed: list[str] = []
        for st in self._states:
            if st.up or not st.stranded or await self._ping(st) is not None:
                continue
            pm = Podman(runtime=st.podman.runtime or "", global_args=st.podman.global_args)
            ids = list(st.stranded)
            with contextlib.suppress(SandboxError):
                await pm.run(
                    "rm", "-f", "--ignore", "-t", "0", *ids, timeout=self.probe_timeout_s * 6
                )
                st.stranded = [i for i in st.stranded if i not in ids]
                removed += ids
        return removed

    def _ensure_monitor(self) -> None:
        loop = asyncio.get_running_loop()
        self._monitors = {lp: t for lp, t in self._monitors.items() if not t.done()}
        if loop not in self._monitors:
            self._monitors[loop] = loop.create_task(self._monitor())

    async def _monitor(self) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            await asyncio.gather(
                *(self._probe(s) for s in self._states if s.up and (s.in_use or s.reserved)),
                return_exceptions=True,
            )
            if any(not s.up and s.stranded for s in self._states):
                with contextlib.suppress(SandboxError):
                    await self.reap_stranded()

    async def close(self) -> None:
        """Stop the health monitor (of the running loop) and reap stranded containers on
        hosts that answer again. The object stays usable."""
        with contextlib.suppress(RuntimeError):
            task = self._monitors.pop(asyncio.get_running_loop(), None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.reap_stranded()

    async def __aenter__(self) -> SandboxHosts:
        """Probe every host once (one that does not answer starts down), start the monitor."""
        await asyncio.gather(*(self._probe(s) for s in self._states))
        self._ensure_monitor()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.close())


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
