"""Connection limits of the model app: no client can starve the others.

* :func:`raise_nofile_limit` lifts the process's soft open-file limit to its hard limit (a
  default soft limit of 1,024 is reached by a few hundred half-open connections).
* :class:`ConnectionGuard` counts open connections per *peer* and closes those beyond
  ``max_connections_per_peer``. A peer is a sandbox: the pid namespace of the process at the
  other end of the unix socket (``SO_PEERCRED``), so every process of a sandbox, its
  forwarder included, shares one budget. Processes in the proxy's own pid namespace (the
  host) and TCP clients are not capped per peer.
* A request head must arrive in ``head_timeout_s`` and its body ``body_timeout_s`` after the
  head; a connection that stalls longer (slowloris) is closed.
* Every limit reached is logged as a warning on the ``clawrl.proxy`` logger, at most once per
  peer and limit every :data:`LOG_EVERY_S` seconds (with the count of events in between).

The per-session cap on calls in flight lives in :class:`clawrl.proxy.app.ProxyApp`
(``max_calls_per_session``: a typed 429).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ConnectionGuard", "LimitLog", "raise_nofile_limit"]

log = logging.getLogger("clawrl.proxy")

#: a limit reached by the same peer is logged at most once per this many seconds
LOG_EVERY_S = 10.0

_HOST = "host"


def raise_nofile_limit() -> tuple[int, int]:
    """Set the soft ``RLIMIT_NOFILE`` to the hard limit; returns ``(old_soft, new_soft)``.

    A failure (a platform without the limit) leaves it as it is.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    else:
        target = hard
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


class LimitLog:
    """Rate-limited warnings: one line per (limit, peer) every ``every_s`` seconds."""

    def __init__(self, every_s: float = LOG_EVERY_S):
        self.every_s = every_s
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        #: events per limit name since start (for tests and /status)
        self.counts: dict[str, int] = {}

    def hit(self, limit: str, peer: str, message: str) -> None:
        self.counts[limit] = self.counts.get(limit, 0) + 1
        key = (limit, peer)
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        more = self._suppressed.pop(key, 0)
        self._last[key] = now
        if len(self._last) > 4096:  # forget old peers
            cutoff = now - self.every_s
            self._last = {k: t for k, t in self._last.items() if t >= cutoff}
        tail = f" ({more} more since the last report)" if more else ""
        log.warning("limit reached: %s: %s%s", limit, message, tail)


def _own_pid_ns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def peer_key(transport: asyncio.BaseTransport, own_ns: str | None) -> str:
    """The peer a connection is counted against: ``"host"`` (not capped), or a sandbox's
    pid namespace (``pidns:pid:[...]``), or when that cannot be read its cgroup, its uid."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return _HOST
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return _HOST
    pid, uid, _gid = struct.unpack("3i", raw)
    if pid <= 0:
        return _HOST
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        ns = None
    if ns is not None:
        return _HOST if ns == own_ns else f"pidns:{ns}"
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return "cgroup:" + f.read().strip()
    except OSError:
        return f"uid:{uid}"


@dataclass
class ConnectionGuard:
    """The limits of one listening app, shared by all its connections (one event loop).

    Args:
        max_connections_per_peer: open connections one sandbox may hold (0: no cap).
        head_timeout_s: seconds a connection has to send a complete request head once it is
            opened or has started sending one (0: none).
        body_timeout_s: seconds from a complete head to a complete body (0: none).
    """

    max_connections_per_peer: int = 64
    head_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    events: LimitLog = field(default_factory=LimitLog)
    open_by_peer: dict[str, int] = field(default_factory=dict)
    _own_ns: str | None = field(default_factory=_own_pid_ns)

    def protocol_class(self) -> type[H11Protocol]:
        """uvicorn's h11 protocol with these limits (``uvicorn.Config(http=...)``)."""
        guard = self

        class GuardedH11(H11Protocol):
            _peer: str | None = None
            _timer: asyncio.TimerHandle | None = None
            _timer_state: Any = None

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                peer = peer_key(transport, guard._own_ns)
                if peer != _HOST and guard.max_connections_per_peer > 0:
                    n = guard.open_by_peer.get(peer, 0)
                    if n >= guard.max_connections_per_peer:
                        guard.events.hit(
                            "connections_per_peer",
                            peer,
                            f"{peer} holds {n} connections (max_connections_per_peer="
                            f"{guard.max_connections_per_peer}); a new one is closed",
                        )
                        transport.abort()
                        return
                    guard.open_by_peer[peer] = n + 1
                    self._peer = peer
                self._arm(initial=True)

            def connection_lost(self, exc: Exception | None) -> None:
                self._disarm()
                peer, self._peer = self._peer, None
                if peer is not None:
                    n = guard.open_by_peer.get(peer, 1) - 1
                    if n > 0:
                        guard.open_by_peer[peer] = n
                    else:
                        guard.open_by_peer.pop(peer, None)
                super().connection_lost(exc)

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                self._arm()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                self._arm()

            # -- timers: a head or body in progress must complete in time ----------------

            def _arm(self, initial: bool = False) -> None:
                """(Re)arm the timer for the phase the client is in: sending a head (a fresh
                connection, or part of a head buffered) or a body (SEND_BODY). An idle
                keep-alive connection is left to uvicorn's own keep-alive timeout."""
                if self.transport.is_closing():
                    self._disarm()
                    return
                state = self.conn.their_state
                if state is h11.IDLE:
                    if not (initial or self.conn.trailing_data[0]):
                        self._disarm()
                        return
                    phase, limit = "head", guard.head_timeout_s
                elif state is h11.SEND_BODY:
                    phase, limit = "body", guard.body_timeout_s
                else:
                    self._disarm()
                    return
                if limit <= 0:
                    return
                if self._timer is not None and self._timer_state == (phase, id(self.cycle)):
                    return  # this phase's deadline is already set
                self._disarm()
                self._timer_state = (phase, id(self.cycle))
                self._timer = self.loop.call_later(limit, self._expire, phase, limit)

            def _disarm(self) -> None:
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None

            def _expire(self, phase: str, limit: float) -> None:
                self._timer = None
                if self.transport.is_closing():
                    return
                peer = self._peer or _HOST
                guard.events.hit(
                    f"{phase}_timeout",
                    peer,
                    f"a request {phase} from {peer} was not complete after {limit:g} s "
                    f"({phase}_timeout_s); its connection is closed",
                )
                self.transport.abort()

        return GuardedH11
