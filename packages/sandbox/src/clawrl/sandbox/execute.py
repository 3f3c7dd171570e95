"""Running one command in a sandbox: :meth:`Sandbox.exec`'s steps and :class:`ExecStream`.

Validate the arguments (:func:`check_exec`), build the ``podman exec`` argv (:func:`exec_args`),
run it with the deadline and output caps (:func:`run_exec`), turn the outcome into an
:class:`ExecResult` (:func:`exec_result`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

from .errors import SandboxError, SandboxGoneError, SandboxSpecError
from .podman import Podman
from .spec import EXEC_TAG_VAR, ExecResult, OutputChunk, check_env, check_user

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = [
    "DEFAULT_OUTPUT_CAP",
    "ExecOptions",
    "ExecStream",
    "OutputCallback",
    "check_exec",
    "exec_args",
    "exec_result",
    "kill_tagged_script",
    "run_exec",
]

#: Default cap on collected stdout and on collected stderr of one exec (bytes, each).
DEFAULT_OUTPUT_CAP = 1 << 20
#: Called with (stream name, chunk) for every piece of output as it arrives.
OutputCallback = Callable[[str, bytes], Awaitable[None] | None]

# After the timeout, how long the in-sandbox `timeout` gets to kill before the host steps in.
_KILL_GRACE_S = 5.0
_GONE_MARKERS = ("no such container", "container state improper", "is not running")


class ExecOptions(TypedDict, total=False):
    """The keyword options of :meth:`Sandbox.exec` other than ``on_output`` (see there);
    :meth:`Sandbox.exec_stream` and :meth:`SyncSandbox.exec` take the same."""

    timeout: float | None
    env: Mapping[str, str] | None
    workdir: str | None
    user: str | None
    stdin: bytes | None
    max_output_bytes: int


def check_exec(
    cmd: str | Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None,
    user: str | None,
    stdin: bytes | None,
    max_output_bytes: int,
) -> list[str]:
    """The command's argv, once the arguments of :meth:`Sandbox.exec` are checked.

    Raises:
        SandboxSpecError: see :meth:`Sandbox.exec`.
    """
    if timeout is not None and not timeout > 0:
        raise SandboxSpecError(f"timeout must be > 0 or None, got {timeout!r}")
    if max_output_bytes < 0:
        raise SandboxSpecError("max_output_bytes must be >= 0")
    if env:
        check_env(env, "exec env")
    if user is not None:
        check_user(user, "exec user")
    argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise SandboxSpecError("empty command")
    if any(not isinstance(a, str) or "\0" in a for a in argv):
        raise SandboxSpecError("command arguments must be strings without NUL bytes")
    if stdin is not None and not isinstance(stdin, bytes | bytearray | memoryview):
        raise SandboxSpecError(f"stdin must be bytes, got {type(stdin).__name__}")
    return argv


def exec_args(
    container: str,
    argv: Sequence[str],
    tag: str,
    *,
    timeout: float | None,
    env: Mapping[str, str] | None,
    workdir: str,
    user: str,
    interactive: bool,
) -> list[str]:
    """``podman exec`` arguments running ``argv`` tagged ``tag``, under ``timeout -s KILL``."""
    args = ["exec", "--env", f"{EXEC_TAG_VAR}={tag}"]
    if interactive:
        args.append("-i")
    for k, v in (env or {}).items():
        args += ["--env", f"{k}={v}"]
    args += ["--workdir", workdir, "--user", user, container]
    if timeout is not None:
        args += ["timeout", "-s", "KILL", f"{timeout:.3f}s"]
    return [*args, *argv]


def kill_tagged_script(tag: str) -> str:
    """A shell script SIGKILLing every process whose environment carries the exec tag ``tag``."""
    return (
        f"for d in /proc/[0-9]*; do "
        f"if grep -qsxz '{EXEC_TAG_VAR}={tag}' \"$d/environ\" 2>/dev/null; then "
        'kill -9 "${d#/proc/}" 2>/dev/null; fi; done; exit 0'
    )


class Collector:
    """Collects one output stream up to a cap, forwarding every chunk to a callback."""

    def __init__(self, name: Literal["stdout", "stderr"], cap: int, cb: OutputCallback | None):
        self.name: Literal["stdout", "stderr"] = name
        self.cap = cap
        self.cb = cb
        self.buf = bytearray()
        self.truncated = False

    async def drain(self, reader: asyncio.StreamReader | None) -> None:
        if reader is None:
            return
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            room = self.cap - len(self.buf)
            if room >= len(chunk):
                self.buf += chunk
            else:
                if room > 0:
                    self.buf += chunk[:room]
                self.truncated = True
            if self.cb is not None:
                r = self.cb(self.name, chunk)
                if inspect.isawaitable(r):
                    await r


async def run_exec(
    podman: Podman,
    args: Sequence[str],
    *,
    stdin: bytes | None,
    timeout: float | None,
    out: Collector,
    err: Collector,
    kill_tagged: Callable[[], Awaitable[None]],
) -> tuple[int, bool, float]:
    """Run ``podman <args>``, feeding ``stdin`` and draining into ``out`` / ``err``.

    At the deadline, waits a grace for the in-sandbox ``timeout``, then calls ``kill_tagged``
    (always: a descendant that left the group may still run) and kills podman. When cancelled
    or when an output callback raises, kills both and re-raises.

    Returns:
        (exit code, -1 if none; timed out; duration in seconds).
    """
    start = time.monotonic()
    proc = await podman.spawn(*args, stdin=stdin is not None)

    async def feed() -> None:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError, BrokenPipeError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    async def run_all() -> None:
        await asyncio.gather(feed(), out.drain(proc.stdout), err.drain(proc.stderr))
        await proc.wait()

    work = asyncio.ensure_future(run_all())
    timed_out = False
    try:
        if timeout is None:
            await asyncio.shield(work)
        else:
            done, _ = await asyncio.wait({work}, timeout=timeout)
            if not done:
                timed_out = True
                done, _ = await asyncio.wait({work}, timeout=_KILL_GRACE_S)
                # Always: a descendant that left the process group (setsid) and closed
                # its output escapes `timeout` but still carries the exec's tag.
                await kill_tagged()
                if not done:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await work
    except BaseException:  # cancelled, or an on_output callback raised
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(kill_tagged())
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        raise
    rc = proc.returncode if proc.returncode is not None else -1
    return rc, timed_out, time.monotonic() - start


def exec_result(
    name: str, rc: int, timed_out: bool, duration: float, out: Collector, err: Collector
) -> ExecResult:
    """The :class:`ExecResult` of a finished exec.

    Raises:
        SandboxGoneError: podman could not run the command because the container is gone.
    """
    if rc in (125, 126, 127) and not timed_out:
        msg = bytes(err.buf).decode("utf-8", "replace")
        if msg.startswith("Error:") and any(m in msg for m in _GONE_MARKERS):
            raise SandboxGoneError(f"sandbox {name} is gone: {msg.strip()}")
    if timed_out and rc == 0:
        rc = 137  # killed at the deadline; never report a timeout as success
    return ExecResult(
        exit_code=rc,
        stdout=bytes(out.buf),
        stderr=bytes(err.buf),
        timed_out=timed_out,
        duration_s=duration,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )


class ExecStream:
    """Async iterator over a running command's :class:`OutputChunk` s (:meth:`Sandbox.exec_stream`).

    After the iteration ends, :attr:`result` holds the :class:`ExecResult` (its collected
    output is capped like :meth:`Sandbox.exec`'s; the stream itself delivers everything).
    Leaving the iteration early (``break``, ``aclose()``) kills the command.
    """

    def __init__(self, sandbox: Sandbox, cmd: str | Sequence[str], kwargs: ExecOptions):
        self._queue: asyncio.Queue[OutputChunk | None] = asyncio.Queue()
        self._sandbox = sandbox
        self._cmd = cmd
        self._kwargs = kwargs
        self._task: asyncio.Task[ExecResult] | None = None
        self.result: ExecResult | None = None

    async def _put(self, name: str, data: bytes) -> None:
        await self._queue.put(OutputChunk("stdout" if name == "stdout" else "stderr", data))

    async def _run(self) -> ExecResult:
        try:
            return await self._sandbox.exec(self._cmd, on_output=self._put, **self._kwargs)
        finally:
            await self._queue.put(None)

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[OutputChunk]:
        self._task = asyncio.ensure_future(self._run())
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    break
                yield item
            self.result = await self._task
        finally:
            if not self._task.done():
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, SandboxError):
                    await self._task
