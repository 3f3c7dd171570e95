"""Typed errors of clawrl-bench.

Catch :class:`BenchError` for anything this package raises on purpose; the subclasses say
what went wrong and carry what a user needs to act (the offending path, the reason).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BenchError", "ExecutorError", "TaskLoadError"]


class BenchError(Exception):
    """Base class of every error raised by clawrl-bench on purpose."""


class TaskLoadError(BenchError):
    """A task directory could not be read as a task.

    Attributes:
        path: the task directory (or file) that failed to load.
        reason: a one-line human explanation (missing file, bad TOML, wrong field type, ...).
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ExecutorError(BenchError):
    """An executor could not start a command at all (infrastructure failure).

    A command that starts and then fails or times out is *not* an ``ExecutorError``: its
    exit status and output are returned in an :class:`~clawrl.bench.ExecResult`.
    """
