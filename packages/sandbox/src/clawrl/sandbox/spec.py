"""What a sandbox is made of (:class:`SandboxSpec`, :class:`Limits`) and what ``exec`` returns."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

import orjson

from .errors import SandboxSpecError

__all__ = [
    "MODEL_SOCKET_PATH",
    "WORKSPACE",
    "ExecResult",
    "FileContent",
    "Limits",
    "OutputChunk",
    "SandboxSpec",
    "parse_size",
]

#: Where the caller's model socket appears inside every sandbox.
MODEL_SOCKET_PATH = "/run/clawrl/model.sock"
#: The sandbox's private writable workspace (a size-capped tmpfs) and default working directory.
WORKSPACE = "/workspace"

#: Content of a workspace file: bytes, text (UTF-8), or a host path (file or directory, copied).
FileContent = bytes | str | Path

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: int | str) -> int:
    """Parse a size into bytes.

    Args:
        value: an int (bytes) or a string such as ``"512m"``, ``"1.5GiB"``, ``"64k"``, ``"4096"``.
            Units are binary (k = 1024 bytes), case-insensitive, with optional ``i``/``b``.

    Returns:
        The size in bytes (> 0).

    Raises:
        SandboxSpecError: malformed, zero or negative size.
    """
    if isinstance(value, bool):
        raise SandboxSpecError(f"size must be an int or a string like '512m', got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m:
            raise SandboxSpecError(f"malformed size {value!r} (expected e.g. '512m', '2g', 4096)")
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise SandboxSpecError(f"size must be an int or a string like '512m', got {value!r}")
    if n <= 0:
        raise SandboxSpecError(f"size must be positive, got {value!r}")
    return n


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox (all enforced by the kernel through podman).

    Attributes:
        memory: memory cgroup limit (bytes or ``"512m"``) for processes **and** the tmpfs
            contents of ``/workspace``, ``/tmp`` and the home directory (tmpfs pages are charged
            to the sandbox's memory cgroup). Exceeding it OOM-kills a process (exit 137).
        cpus: CPU quota in cores (``--cpus``); ``None`` = unlimited.
        pids: maximum number of processes/threads alive in the sandbox (``--pids-limit``).
        workspace_size: size cap of ``/workspace`` (a tmpfs); a write past it fails with ENOSPC.
        tmp_size: size cap of ``/tmp`` and of the home directory (each a tmpfs).
        root_size: size cap of a writable root (``read_only_root=False``): what the sandbox
            writes outside its tmpfs places lands on a tmpfs of this size (charged to
            ``memory`` as well); a write past it fails with ENOSPC. Nothing reaches the host
            disk.
        wall_clock_s: seconds after creation at which the sandbox stops and removes itself, even
            when the orchestrator is gone (its main process is ``sleep wall_clock_s`` under
            ``--rm``); ``None`` = until destroyed.
        nofile: open-file limit inside (soft = hard). Cannot exceed the host's hard limit.
    """

    memory: int | str = "1g"
    cpus: float | None = 1.0
    pids: int = 512
    workspace_size: int | str = "256m"
    tmp_size: int | str = "256m"
    root_size: int | str = "256m"
    wall_clock_s: float | None = None
    nofile: int = 1024

    def __post_init__(self) -> None:
        parse_size(self.memory)
        parse_size(self.workspace_size)
        parse_size(self.tmp_size)
        parse_size(self.root_size)
        if self.cpus is not None and not self.cpus > 0:
            raise SandboxSpecError(f"cpus must be > 0 or None, got {self.cpus!r}")
        if not isinstance(self.pids, int) or self.pids < 8:
            raise SandboxSpecError(f"pids must be an int >= 8, got {self.pids!r}")
        if self.wall_clock_s is not None and not self.wall_clock_s > 0:
            raise SandboxSpecError(f"wall_clock_s must be > 0 or None, got {self.wall_clock_s!r}")
        if not isinstance(self.nofile, int) or self.nofile < 64:
            raise SandboxSpecError(f"nofile must be an int >= 64, got {self.nofile!r}")

    @property
    def memory_bytes(self) -> int:
        """:attr:`memory` in bytes."""
        return parse_size(self.memory)

    @property
    def workspace_bytes(self) -> int:
        """:attr:`workspace_size` in bytes."""
        return parse_size(self.workspace_size)

    @property
    def tmp_bytes(self) -> int:
        """:attr:`tmp_size` in bytes."""
        return parse_size(self.tmp_size)

    @property
    def root_bytes(self) -> int:
        """:attr:`root_size` in bytes."""
        return parse_size(self.root_size)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USER = re.compile(r"^\d+(:\d+)?$")
#: Environment variable carrying each exec's tag inside the sandbox (reserved).
EXEC_TAG_VAR = "CLAWRL_EXEC_ID"


def check_user(user: str, what: str = "user") -> str:
    """Return ``user`` if it is a numeric ``uid`` or ``uid:gid``, else raise
    :class:`SandboxSpecError`."""
    if not isinstance(user, str) or not _USER.match(user):
        raise SandboxSpecError(f"{what} must be 'uid' or 'uid:gid' (numeric), got {user!r}")
    return user


def check_env(env: Mapping[str, str], what: str = "env") -> None:
    """Raise :class:`SandboxSpecError` unless ``env`` maps valid names to NUL-free strings."""
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise SandboxSpecError(f"{what}: invalid variable name {k!r}")
        if k == EXEC_TAG_VAR:
            raise SandboxSpecError(
                f"{what}: {k} is reserved (the per-exec tag used to kill a command's processes)"
            )
        if not isinstance(v, str) or "\0" in v:
            raise SandboxSpecError(f"{what}: value of {k} must be a str without NUL bytes")


def check_sandbox_path(path: str, what: str = "path") -> str:
    """Return ``path`` normalised as an absolute POSIX path inside the sandbox, or raise."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise SandboxSpecError(f"{what}: {path!r} is not a path")
    p = PurePosixPath(path)
    if not p.is_absolute():
        p = PurePosixPath(WORKSPACE) / p
    parts: list[str] = []
    for part in p.parts[1:]:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise SandboxSpecError(f"{what}: {path!r} escapes the root")
            parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to create a sandbox; immutable and usable as a pool key (:meth:`key`).

    Root filesystem (choose at most one of ``image`` / ``rootfs``; neither = the default):

    * default — an empty root with the host's ``/usr`` mounted read-only, the merged-usr links
      (``/bin``, ``/lib``, ``/lib64``, ``/sbin`` → ``usr/…``) and a minimal ``/etc`` of our own
      (:mod:`clawrl.sandbox.rootfs`); nothing else of the host is visible.
    * ``image`` — a podman image name, e.g. the Debian image of ``sandbox build-image``.
    * ``rootfs`` — an unpacked root directory on the host, mounted as an overlay (``:O``) so
      writes never reach it.

    Attributes:
        image: podman image to run (local; no registry is contacted: ``--pull never``).
        rootfs: host directory holding a root filesystem.
        files: workspace files placed at creation: path (relative to ``/workspace`` or absolute)
            → bytes, text, or a host :class:`~pathlib.Path` (file or directory, copied).
        env: environment of every process in the sandbox (on top of ``PATH``, ``HOME``,
            ``LANG``); no host variable is ever passed through.
        limits: resource limits (:class:`Limits`).
        model_socket: host unix socket mounted at ``/run/clawrl/model.sock``.
        forwarder: when ``model_socket`` is set, start the in-sandbox forwarder (needs
            ``python3`` in the sandbox) listening on ``127.0.0.1:forwarder_port``.
        forwarder_port: TCP port of the forwarder inside the sandbox's own network namespace.
        user: ``uid[:gid]`` processes run as (default ``0:0``, root inside the sandbox; the
            default ``/etc/passwd`` also has ``sandbox`` = 1000:1000).
        workdir: working directory of :meth:`Sandbox.exec` (default ``/workspace``).
        read_only_mounts: extra read-only bind mounts, host path → sandbox path (e.g. a
            virtual environment built on ``/usr/bin/python3``, mounted at the same path).
        read_only_root: make the root filesystem read-only (writable places are then only
            ``/workspace``, ``/tmp``, the home directory, ``/run``, ``/var/tmp``, ``/dev/shm``).
        network: ``"none"`` (default: loopback only) — the only supported value for rollouts;
            anything else is passed to ``podman --network`` as is.
        labels: extra container labels (keys must not start with ``clawrl.``).
    """

    image: str | None = None
    rootfs: Path | None = None
    files: Mapping[str, FileContent] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    model_socket: Path | None = None
    forwarder: bool = True
    forwarder_port: int = 8000
    user: str = "0:0"
    workdir: str = WORKSPACE
    read_only_mounts: Mapping[str, str] = field(default_factory=dict)
    read_only_root: bool = True
    network: str = "none"
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.image is not None and self.rootfs is not None:
            raise SandboxSpecError("give either image or rootfs, not both")
        if self.image is not None and (not isinstance(self.image, str) or not self.image):
            raise SandboxSpecError(f"image must be a non-empty string, got {self.image!r}")
        if self.rootfs is not None:
            object.__setattr__(self, "rootfs", Path(self.rootfs))
        if self.model_socket is not None:
            object.__setattr__(self, "model_socket", Path(self.model_socket))
        if not isinstance(self.limits, Limits):
            raise SandboxSpecError(f"limits must be a Limits, got {type(self.limits).__name__}")
        check_env(self.env)
        for p, content in self.files.items():
            check_sandbox_path(p, "files")
            if not isinstance(content, bytes | str | Path):
                raise SandboxSpecError(f"files[{p!r}] must be bytes, str or Path")
        for host, inside in self.read_only_mounts.items():
            if not Path(host).is_absolute() or not inside.startswith("/"):
                raise SandboxSpecError(f"read_only_mounts: {host!r} -> {inside!r} must be absolute")
        check_user(self.user)
        if not (0 < self.forwarder_port < 65536):
            raise SandboxSpecError(f"forwarder_port out of range: {self.forwarder_port}")
        object.__setattr__(self, "workdir", check_sandbox_path(self.workdir, "workdir"))
        for k in self.labels:
            if k.startswith("clawrl."):
                raise SandboxSpecError(f"label {k!r}: the clawrl. prefix is reserved")

    def key(self) -> str:
        """A stable digest of the spec (file contents included); equal specs share pool slots."""

        def enc(obj: object) -> object:
            if isinstance(obj, Path):
                return f"path:{obj}"
            if isinstance(obj, bytes):
                return "bytes:" + hashlib.sha256(obj).hexdigest()
            raise TypeError

        d = {
            "image": self.image,
            "rootfs": self.rootfs,
            "files": sorted(self.files.items()),
            "env": sorted(self.env.items()),
            "limits": [repr(self.limits)],
            "sock": self.model_socket,
            "fwd": [self.forwarder, self.forwarder_port],
            "user": self.user,
            "workdir": self.workdir,
            "ro": sorted(self.read_only_mounts.items()),
            "ro_root": self.read_only_root,
            "net": self.network,
            "labels": sorted(self.labels.items()),
        }
        return hashlib.sha256(orjson.dumps(d, default=enc)).hexdigest()[:16]


@dataclass(frozen=True)
class OutputChunk:
    """A piece of a running command's output (:meth:`Sandbox.exec_stream`)."""

    stream: Literal["stdout", "stderr"]
    data: bytes


@dataclass(frozen=True)
class ExecResult:
    """Outcome of :meth:`Sandbox.exec`.

    Attributes:
        exit_code: the command's exit status (128 + N when killed by signal N, e.g. 137 for
            SIGKILL / out-of-memory). After a timeout it is whatever the killed process
            reported; check :attr:`timed_out`.
        stdout: captured standard output, at most the output cap (bytes).
        stderr: captured standard error, at most the output cap (bytes).
        timed_out: the command was still running at its timeout and was killed.
        duration_s: wall-clock seconds from starting the command to its end (host clock).
        stdout_truncated: output beyond the cap was discarded.
        stderr_truncated: same for standard error.
    """

    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """True iff the command exited 0 within its timeout (a timeout is never a success)."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """:attr:`stdout` decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")
