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

#: bytes a connection may send while its request head is incomplete (httptools has no limit
#: of its own; h11's is uvicorn's 16 KiB)
MAX_HEAD_BYTES = 1 << 20

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

    def protocol_class(self) -> type[asyncio.Protocol]:
        """uvicorn's HTTP protocol with these limits (``uvicorn.Config(http=...)``): the
        httptools one where httptools is installed (as uvicorn's ``auto``), else h11's."""
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        except ImportError:
            return self._h11_class()
        return self._httptools_class(HttpToolsProtocol)

    def admit(self, transport: asyncio.BaseTransport) -> tuple[bool, str | None]:
        """For a server of its own (the ``--workers`` front): count a new connection.
        ``(False, None)``: its sandbox is over :attr:`max_connections_per_peer` (the
        connection is aborted, the event logged); else ``(True, peer)``, to hand to
        :meth:`release` when the connection ends."""
        return self._connect(transport)

    def release(self, peer: str | None) -> None:
        """A connection counted by :meth:`admit` ended."""
        self._lost(peer)

    # -- shared by both protocols ------------------------------------------------------------

    def _connect(self, transport: asyncio.BaseTransport) -> tuple[bool, str | None]:
        """Count a new connection; ``(False, _)`` when its peer is over the cap (closed)."""
        peer = peer_key(transport, self._own_ns)
        if peer == _HOST or self.max_connections_per_peer <= 0:
            return True, None
        n = self.open_by_peer.get(peer, 0)
        if n >= self.max_connections_per_peer:
            self.events.hit(
                "connections_per_peer",
                peer,
                f"{peer} holds {n} connections (max_connections_per_peer="
                f"{self.max_connections_per_peer}); a new one is closed",
            )
            transport.abort()  # type: ignore[attr-defined]
            return False, None
        self.open_by_peer[peer] = n + 1
        return True, peer

    def _lost(self, peer: str | None) -> None:
        if peer is not None:
            n = self.open_by_peer.get(peer, 1) - 1
            if n > 0:
                self.open_by_peer[peer] = n
            else:
                self.open_by_peer.pop(peer, None)

    def _timer(self, proto: Any, phase: str | None) -> None:
        """Set ``proto``'s deadline for ``phase`` (``"head"``, ``"body"``; None: none). A
        phase already running keeps its deadline: trickling bytes do not extend it."""
        if phase is not None and proto._phase == phase and proto._deadline is not None:
            return
        if proto._deadline is not None:
            proto._deadline.cancel()
            proto._deadline = None
        proto._phase = phase
        limit = {"head": self.head_timeout_s, "body": self.body_timeout_s}.get(phase or "", 0)
        if phase is None or limit <= 0 or proto.transport.is_closing():
            return
        proto._deadline = proto.loop.call_later(limit, self._expire, proto, phase, limit)

    def _expire(self, proto: Any, phase: str, limit: float) -> None:
        proto._deadline = None
        if proto.transport.is_closing():
            return
        peer = proto._peer or _HOST
        self.events.hit(
            f"{phase}_timeout",
            peer,
            f"a request {phase} from {peer} was not complete after {limit:g} s "
            f"({phase}_timeout_s); its connection is closed",
        )
        proto.transport.abort()

    def _httptools_class(self, base: type[Any]) -> type[asyncio.Protocol]:
        guard = self

        class GuardedHttpTools(base):
            _peer: str | None = None
            _phase: str | None = None
            _deadline: asyncio.TimerHandle | None = None

            def connection_made(self, transport: asyncio.Transport) -> None:
                super().connection_made(transport)
                ok, self._peer = guard._connect(transport)
                if ok:
                    guard._timer(self, "head")

            def connection_lost(self, exc: Exception | None) -> None:
                guard._timer(self, None)
                guard._lost(self._peer)
                self._peer = None
                super().connection_lost(exc)

            _head_bytes = 0

            def data_received(self, data: bytes) -> None:
                # httptools itself bounds no head size: count what arrives while in a head
                if self._phase == "head":
                    self._head_bytes += len(data)
                    if self._head_bytes > MAX_HEAD_BYTES:
                        peer = self._peer or _HOST
                        guard.events.hit(
                            "head_size",
                            peer,
                            f"a request head from {peer} exceeds {MAX_HEAD_BYTES} bytes; "
                            "its connection is closed",
                        )
                        self.transport.abort()
                        return
                super().data_received(data)

            def on_message_begin(self) -> None:
                super().on_message_begin()
                guard._timer(self, "head")

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                self._head_bytes = 0
                guard._timer(self, "body")

            def on_message_complete(self) -> None:
                super().on_message_complete()
                guard._timer(self, None)

        return GuardedHttpTools

    def _h11_class(self) -> type[asyncio.Protocol]:
        guard = self

        class GuardedH11(H11Protocol):
            _peer: str | None = None
            _phase: str | None = None
            _deadline: asyncio.TimerHandle | None = None

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                ok, self._peer = guard._connect(transport)
                if ok:
                    guard._timer(self, "head")

            def connection_lost(self, exc: Exception | None) -> None:
                guard._timer(self, None)
                guard._lost(self._peer)
                self._peer = None
                super().connection_lost(exc)

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                self._track()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                self._track()

            def _track(self) -> None:
                """The phase from h11's state: a head while part of one is buffered, a body
                in SEND_BODY; an idle keep-alive connection is left to uvicorn's own
                keep-alive timeout."""
                state = self.conn.their_state
                if state is h11.IDLE:
                    if self.conn.trailing_data[0]:
                        guard._timer(self, "head")
                    elif self._phase != "head" or self.cycle is not None:
                        guard._timer(self, None)
                elif state is h11.SEND_BODY:
                    guard._timer(self, "body")
                else:
                    guard._timer(self, None)

        return GuardedH11
