"""Call-record capture: append-only orjson JSONL, one line per model call.

Layout: ``<capture_dir>/<run_id>/<session_id>.jsonl``. Each record is written with a single
``write(2)`` on a file opened with ``O_APPEND`` (so a record reaches the kernel whole before
the call is answered, and survives the proxy process being killed); lines are never
rewritten. A crash in the middle of a write can leave a *torn* last line (no trailing
newline, or not valid JSON): :func:`read_records` skips it, and a writer reopening such a file
first terminates the torn line so that later records stay intact. A line that is valid JSON
but not an object (nothing this module writes) is skipped the same way; the skips are counted
in a :class:`SkippedLines` passed by the caller, and each non-object line is logged as a
warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import orjson
from clawrl.proxy.errors import CaptureError
from clawrl.proxy.record import CallRecord

__all__ = [
    "CaptureWriter",
    "SkippedLines",
    "iter_records",
    "read_records",
    "session_capture_path",
]

log = logging.getLogger("clawrl.proxy")


@dataclass
class SkippedLines:
    """Lines of a capture file that :func:`iter_records` skipped.

    ``torn``: not valid JSON (a torn write, terminated or not); ``not_object``: valid JSON
    that is not an object.
    """

    torn: int = 0
    not_object: int = 0

    @property
    def total(self) -> int:
        return self.torn + self.not_object


def session_capture_path(capture_dir: str | Path, run_id: str, session_id: str) -> Path:
    """``<capture_dir>/<run_id>/<session_id>.jsonl``."""
    return Path(capture_dir) / run_id / f"{session_id}.jsonl"


class CaptureWriter:
    """Appends call records to one session's JSONL file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")  # terminate a torn line left by a crash

    def write(self, record: Mapping[str, object]) -> None:
        """Append one record (one line, one system call).

        Raises:
            CaptureError: the writer is closed.
        """
        if self._fd is None:
            raise CaptureError(f"capture file {self.path} is closed")
        data = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY)
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def iter_records(path: str | Path, skipped: SkippedLines | None = None) -> Iterator[CallRecord]:
    """Yield the records of a capture file in file order.

    A last line without its newline, or one that is not valid JSON, is a torn write and is
    skipped; so is an invalid line terminated by a later writer (it was torn before), and a
    line that is valid JSON but not an object (logged as a warning). Skips are counted in
    ``skipped`` when given.

    Raises:
        FileNotFoundError: no such file.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    if skipped is not None and lines[-1].strip():
        skipped.torn += 1  # the piece after the last newline is a torn write (or empty)
    for i, line in enumerate(lines[:-1]):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if skipped is not None:
                skipped.torn += 1  # torn by a crash, then terminated by a restarted writer
            continue
        if not isinstance(obj, dict):
            log.warning("%s: line %d is valid JSON but not an object; skipped", path, i + 1)
            if skipped is not None:
                skipped.not_object += 1
            continue
        yield cast(CallRecord, obj)  # the proxy wrote it; its shape is not re-checked


def read_records(path: str | Path, skipped: SkippedLines | None = None) -> list[CallRecord]:
    """All complete records of a capture file (see :func:`iter_records`; skipped lines are
    counted in ``skipped`` when given).

    Raises:
        FileNotFoundError: no such file.
    """
    return list(iter_records(path, skipped))
