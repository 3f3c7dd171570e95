"""Typed exceptions of clawrl-sandbox.

Everything this package raises on purpose derives from :class:`SandboxError`, so callers can
catch the whole family at once or one case precisely.
"""

from __future__ import annotations

__all__ = [
    "ImageBuildError",
    "NoSandboxHostError",
    "PodmanError",
    "PodmanNotFoundError",
    "PoolClosedError",
    "PoolTimeoutError",
    "SandboxClosedError",
    "SandboxCopyLimitError",
    "SandboxCreateError",
    "SandboxError",
    "SandboxFileNotFoundError",
    "SandboxGoneError",
    "SandboxHostDownError",
    "SandboxSpecError",
]


class SandboxError(Exception):
    """Base class of every error raised by clawrl-sandbox."""


class SandboxSpecError(SandboxError, ValueError):
    """A :class:`~clawrl.sandbox.SandboxSpec` (or a size / limit string) is invalid."""


class PodmanNotFoundError(SandboxError):
    """The ``podman`` executable is not on ``PATH``; install it (``bash tools/setup.sh``)."""


class PodmanError(SandboxError):
    """A podman command failed.

    Attributes:
        argv: the full command line that was run.
        returncode: podman's exit status.
        stderr: podman's error output (decoded, stripped).
    """

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        shown = " ".join(argv[:6]) + (" …" if len(argv) > 6 else "")
        super().__init__(f"`{shown}` failed with exit {returncode}: {stderr or '(no stderr)'}")


class SandboxCreateError(SandboxError):
    """A sandbox could not be created or started (the podman error is chained as ``__cause__``)."""


class SandboxGoneError(SandboxError):
    """The sandbox's container no longer exists or stopped (destroyed, wall clock expired, reaped)."""


class SandboxHostDownError(SandboxGoneError):
    """The podman host of a sandbox stopped answering (confirmed by a probe of that host, never
    by what the sandbox printed): the sandbox is lost to this run, the host excluded.

    Attributes:
        host: the :class:`~clawrl.sandbox.SandboxHost` name.
    """

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        super().__init__(message)


class NoSandboxHostError(SandboxCreateError):
    """No sandbox host of a :class:`~clawrl.sandbox.SandboxHosts` is up: nothing can be created."""


class SandboxClosedError(SandboxError):
    """An operation was attempted on a sandbox after :meth:`Sandbox.destroy`."""


class PoolClosedError(SandboxError):
    """The :class:`~clawrl.sandbox.SandboxPool` is closed (or was never started)."""


class PoolTimeoutError(SandboxError, TimeoutError):
    """:meth:`SandboxPool.acquire` waited longer than its ``timeout``."""


class ImageBuildError(SandboxError):
    """``sandbox build-image`` (debootstrap + ``podman import``) failed."""


class SandboxFileNotFoundError(SandboxError, FileNotFoundError):
    """A path asked for by :meth:`Sandbox.get_file` / :meth:`Sandbox.get_dir` does not exist."""


class SandboxCopyLimitError(SandboxError):
    """A copy out of a sandbox hit one of its bounds (:class:`~clawrl.sandbox.CopyLimits`):
    what the sandbox holds is too large, too many, too deep, or too slow to read. The sandbox's
    content caused it, so a rollout reports it as the agent's failure, not as infrastructure.

    Attributes:
        limit: the bound that was hit (``max_bytes``, ``max_files``, ``max_path_length``,
            ``max_depth`` or ``timeout_s``).
    """

    def __init__(self, limit: str, message: str) -> None:
        self.limit = limit
        super().__init__(message)
