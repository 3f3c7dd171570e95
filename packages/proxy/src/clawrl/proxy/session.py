"""Proxy sessions: one per rollout, with its own API key, capture file and splice memory."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawrl.proxy.capture import (
    CaptureWriter,
    SkippedLines,
    read_records,
    session_capture_path,
)
from clawrl.proxy.errors import AuthenticationError, SessionClosedError, SessionNotFoundError
from clawrl.proxy.record import CallRecord
from clawrl.proxy.splice import CallHistory, PromptCache, SpliceMemory

__all__ = ["Session", "SessionManager", "call_seed"]


def call_seed(sampling_seed: int, seq: int) -> int:
    """The sampling seed of call ``seq`` (0-based, in the session's order) of a session
    seeded with ``sampling_seed``: the first 63 bits of SHA-256 of ``"<seed>:<seq>"``.

    Returns an int in ``[0, 2**63)``, a valid seed for every backend.
    """
    digest = hashlib.sha256(f"{sampling_seed}:{seq}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class Session:
    """State of one session.

    ``metadata`` holds ``run_id``, ``task_id``, ``harness``, ``group_id`` and any extra keys
    given at creation. ``records`` is kept in memory only when no capture directory is set.
    ``sampling_seed``: when set, a call that gives no ``seed`` of its own is sampled with
    :func:`call_seed` ``(sampling_seed, seq)``, so what a session draws depends only on its
    seed and the order of its own calls, not on when other sessions' requests arrive.
    """

    session_id: str
    api_key: str
    run_id: str
    metadata: dict[str, Any]
    created: float
    capture_path: Path | None = None
    closed: bool = False
    writer: CaptureWriter | None = None
    records: list[CallRecord] = field(default_factory=list)
    memory: SpliceMemory = field(default_factory=SpliceMemory)
    history: CallHistory = field(default_factory=CallHistory)
    #: the last prompt built, so the next one tokenizes only new messages
    prompt_cache: PromptCache = field(default_factory=PromptCache)
    _seq: itertools.count = field(default_factory=itertools.count)
    calls: int = 0
    sampling_seed: int | None = None
    #: call ids of calls begun (prompt built, seq assigned) whose record is not written yet
    pending: set[str] = field(default_factory=set)
    #: closing: no new call is accepted (set by ``ProxyCore.close_session`` before it waits)
    closing: bool = False
    _committed: asyncio.Event = field(default_factory=asyncio.Event)

    def next_seq(self) -> int:
        return next(self._seq)

    def begin(self, call_id: str) -> None:
        """Count call ``call_id`` as in flight until :meth:`write` writes its record."""
        self.pending.add(call_id)
        self._committed.clear()

    async def wait_committed(self, timeout: float) -> bool:
        """Wait until every begun call's record is written; False after ``timeout`` s."""
        if not self.pending:
            return True
        try:
            await asyncio.wait_for(self._committed.wait(), timeout)
        except TimeoutError:
            return not self.pending
        return True

    def check_key(self, key: str | None) -> None:
        """Raises AuthenticationError unless ``key`` is this session's key."""
        if not key or not hmac.compare_digest(key.encode(), self.api_key.encode()):
            raise AuthenticationError("invalid API key for this session")

    def write(self, record: CallRecord) -> None:
        self.calls += 1
        if self.writer is not None:
            self.writer.write(record)
        elif self.capture_path is not None:  # a call that finished after the session closed
            late = CaptureWriter(self.capture_path)
            try:
                late.write(record)
            finally:
                late.close()
        else:
            self.records.append(record)
        self.pending.discard(record.get("call_id", ""))
        if not self.pending:
            self._committed.set()

    def read_records(self, skipped: SkippedLines | None = None) -> list[CallRecord]:
        """The session's records (skipped capture lines counted in ``skipped``)."""
        if self.capture_path is not None:
            if not self.capture_path.exists():
                return []
            return read_records(self.capture_path, skipped)
        return list(self.records)

    def describe(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "metadata": self.metadata,
            "created": self.created,
            "closed": self.closed,
            "calls": self.calls,
            "sampling_seed": self.sampling_seed,
            "capture_path": str(self.capture_path) if self.capture_path else None,
        }


class SessionManager:
    """Creates, finds and closes sessions.

    Args:
        capture_dir: root of the capture files (None: records kept in memory).
        worker: the index of this proxy worker (``proxy serve --workers N``): session ids
            end in ``-w<worker>``, which the front routes on.
    """

    def __init__(self, capture_dir: str | Path | None = None, *, worker: int | None = None):
        if worker is not None and worker < 0:
            raise ValueError("worker must be >= 0")
        self._suffix = "" if worker is None else f"-w{worker}"
        self.capture_dir = Path(capture_dir) if capture_dir is not None else None
        self._sessions: dict[str, Session] = {}

    def create(
        self,
        *,
        run_id: str = "default",
        task_id: str | None = None,
        harness: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        sampling_seed: int | None = None,
    ) -> Session:
        """A new session with an unguessable id (128 random bits) and API key (256 bits);
        ``sampling_seed``: see :class:`Session`."""
        if not run_id or "/" in run_id or run_id in (".", ".."):
            raise ValueError(f"invalid run_id {run_id!r}")
        sid = "s" + secrets.token_hex(16) + self._suffix
        key = "sk-clawrl-" + secrets.token_urlsafe(32)
        meta: dict[str, Any] = dict(metadata or {})
        meta.update(
            {"run_id": run_id, "task_id": task_id, "harness": harness, "group_id": group_id}
        )
        session = Session(
            session_id=sid,
            api_key=key,
            run_id=run_id,
            metadata=meta,
            created=time.time(),
            sampling_seed=sampling_seed,
        )
        if self.capture_dir is not None:
            session.capture_path = session_capture_path(self.capture_dir, run_id, sid)
            session.writer = CaptureWriter(session.capture_path)
        self._sessions[sid] = session
        return session

    def get(self, session_id: str, *, open_only: bool = False) -> Session:
        """Raises SessionNotFoundError / SessionClosedError (when ``open_only``)."""
        s = self._sessions.get(session_id)
        if s is None:
            raise SessionNotFoundError(f"no session {session_id[:64]!r}")
        if open_only and (s.closed or s.closing):
            raise SessionClosedError(f"session {session_id} is closed")
        return s

    def close(self, session_id: str) -> Session:
        s = self.get(session_id)
        if not s.closed:
            s.closed = True
            if s.writer is not None:
                s.writer.close()
                s.writer = None
            s.memory.clear()
            s.prompt_cache.clear()
        return s

    def all(self) -> list[Session]:
        return list(self._sessions.values())

    def close_all(self) -> None:
        for sid in list(self._sessions):
            self.close(sid)
