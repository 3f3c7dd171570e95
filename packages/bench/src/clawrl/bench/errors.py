"""Typed errors of clawrl-bench.

Catch :class:`BenchError` for anything this package raises on purpose; the subclasses say
what went wrong and carry what a user needs to act (the offending path, the reason).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BenchError", "ExecutorError", "HostVerificationError", "TaskLoadError"]


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


class HostVerificationError(BenchError):
    """Host verification was asked for tasks whose verifier executes workspace code.

    A :class:`~clawrl.bench.LocalExecutor` runs the verifier as a host process with the
    caller's rights, so agent-written code that the verifier executes would run on the host.
    Such tasks (:attr:`~clawrl.bench.Task.verifier_executes_workspace_code`) must be
    verified in a sandbox (:class:`~clawrl.bench.SandboxExecutor`).

    Attributes:
        task_ids: the offending tasks.
    """

    def __init__(self, task_ids: list[str]) -> None:
        self.task_ids = list(task_ids)
        shown = ", ".join(self.task_ids[:5]) + (" ..." if len(self.task_ids) > 5 else "")
        super().__init__(
            f"host verification refused: the verifier of {len(self.task_ids)} task(s) executes "
            f"workspace code ({shown}); verify them in a sandbox (SandboxExecutor)"
        )
