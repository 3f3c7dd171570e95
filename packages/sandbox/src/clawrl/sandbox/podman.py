"""The podman backend: the podman CLI driven through asyncio subprocesses.

Why the CLI and not the REST API: the CLI needs no service process to start, supervise and
clean up (``podman system service``), it is the interface podman keeps stable across versions
(4.3 here), remote hosts are the same code through ``CONTAINER_HOST`` / ``--connection``, and
asyncio subprocesses give non-blocking calls without a thread pool around a synchronous
client (the registry's ``podman`` bindings are requests-based, synchronous). The cost is a
podman process start (~0.1-0.2 s) per operation, which the pool hides by pre-creating
sandboxes.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from .errors import PodmanError, PodmanNotFoundError

__all__ = ["Podman", "cgroup_mode", "default_runtime"]

_PR_SET_PDEATHSIG = 1


_STARTS_CONMON = frozenset({"run", "start", "exec", "restart"})


def conmon_dir() -> str:
    """The working directory of the podman commands that start a container monitor
    (``run``, ``start``, ``exec``, ``restart``; the sandbox passes them absolute host paths
    only). conmon inherits
    it, and older versions create an empty ``oom`` file there whenever a process in the
    container is OOM-killed: a private directory keeps that out of the caller's current
    directory. Other commands keep the caller's directory (their relative host paths)."""
    from .rootfs import cache_dir

    path = cache_dir() / "conmon"  # not a temporary directory: it is never removed
    path.mkdir(mode=0o700, parents=True, exist_ok=True)  # again each time: a cache may be wiped
    return str(path)


@functools.cache
def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return cast("Callable[..., int]", libc.prctl)
    except (OSError, AttributeError):
        return None


def die_with_parent() -> None:
    """``preexec_fn`` for podman clients: SIGKILL the child when its parent dies (Linux).

    An orchestrator SIGKILLed during ``podman run`` otherwise leaves the orphaned client
    creating and labelling the container *after* the next ``gc`` listed the containers, so
    that gc misses it. Killing the client with its parent means whatever it had created is
    already recorded when gc lists (and is removed, its owner being dead).
    """
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def cgroup_mode() -> str:
    """``"unified"`` (cgroup v2 only), ``"hybrid"`` (v1 controllers + v2) or ``"legacy"`` (v1)."""
    root = Path("/sys/fs/cgroup")
    if (root / "cgroup.controllers").exists():
        return "unified"
    if (root / "unified").is_dir() and (root / "unified" / "cgroup.controllers").exists():
        return "hybrid"
    return "legacy"


def default_runtime() -> str | None:
    """Pick the OCI runtime: explicit setting, else runc on non-unified cgroups, else podman's.

    Order: the ``CLAWRL_SANDBOX_RUNTIME`` environment variable (any runtime name or path);
    else, with a local podman on a host whose cgroups are hybrid or v1-only, ``runc`` when
    installed (crun refuses hybrid cgroups: "cgroups in hybrid mode not supported"); else
    ``None`` = podman's configured default (``runtime`` in containers.conf; crun on most
    distributions), which is right on cgroup v2 hosts and for remote podman connections.
    """
    explicit = os.environ.get("CLAWRL_SANDBOX_RUNTIME")
    if explicit:
        return explicit
    if os.environ.get("CONTAINER_HOST") or os.environ.get("CONTAINER_CONNECTION"):
        return None
    if cgroup_mode() != "unified" and shutil.which("runc"):
        return "runc"
    return None


@dataclass
class CommandResult:
    """Exit status and output of one podman invocation."""

    returncode: int
    stdout: bytes
    stderr: bytes


class Podman:
    """A thin async wrapper over the ``podman`` executable.

    Args:
        executable: podman binary (default: ``podman`` on ``PATH``).
        runtime: OCI runtime passed as ``--runtime``; default :func:`default_runtime`.
        global_args: extra global options, e.g. ``["--connection", "host2"]`` for a remote host.
    """

    def __init__(
        self,
        executable: str = "podman",
        runtime: str | None = None,
        global_args: Sequence[str] = (),
    ) -> None:
        path = shutil.which(executable)
        if path is None:
            raise PodmanNotFoundError(
                f"{executable!r} not found on PATH; install podman and runc "
                "(`apt-get install -y podman runc` or `bash tools/setup.sh`)"
            )
        self.executable = path
        self.runtime = runtime if runtime is not None else default_runtime()
        self.global_args = list(global_args)

    def argv(self, *args: str) -> list[str]:
        """The full command line for ``podman <global options> <args>``."""
        rt = ["--runtime", self.runtime] if self.runtime else []
        return [self.executable, *rt, *self.global_args, *args]

    async def spawn(self, *args: str, stdin: bool = False) -> asyncio.subprocess.Process:
        """Start ``podman <args>`` with piped output (and a piped stdin when ``stdin``, else
        ``/dev/null``), in its own session, killed when this process dies."""
        return await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
            cwd=conmon_dir() if args and args[0] in _STARTS_CONMON else None,
        )

    async def run(
        self,
        *args: str,
        stdin: bytes | None = None,
        check: bool = True,
        timeout: float | None = 120.0,
    ) -> CommandResult:
        """Run ``podman <args>`` to completion and collect its output.

        Raises:
            PodmanError: non-zero exit with ``check=True``, or the call exceeded ``timeout``
                seconds (returncode -1; the podman process is killed).
        """
        argv = self.argv(*args)
        proc = await self.spawn(*args, stdin=stdin is not None)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise PodmanError(argv, -1, f"timed out after {timeout} s") from None
        except BaseException:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        if check and rc != 0:
            raise PodmanError(argv, rc, err.decode("utf-8", "replace").strip())
        return CommandResult(rc, out, err)


@functools.cache
def shared_podman() -> Podman:
    """A process-wide :class:`Podman` with the default executable and runtime."""
    return Podman()
