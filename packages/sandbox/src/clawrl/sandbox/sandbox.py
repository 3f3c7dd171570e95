"""One sandbox: a podman container with limits, a private workspace and no network."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import inspect
import io
import os
import resource
import shlex
import subprocess
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from .errors import (
    PodmanError,
    SandboxClosedError,
    SandboxCreateError,
    SandboxError,
    SandboxGoneError,
    SandboxSpecError,
)
from .hostfs import (
    CopyLimits,
    CopyStats,
    SandboxInit,
    copy_tree,
    kill_sandbox_processes,
    read_file,
    wipe_tree,
)
from .podman import Podman, die_with_parent, shared_podman
from .reaper import RunIdentity, current_identity
from .rootfs import default_rootfs
from .seccomp import sandbox_seccomp_profile
from .spec import (
    EXEC_TAG_VAR,
    MODEL_SOCKET_PATH,
    WORKSPACE,
    ExecResult,
    FileContent,
    OutputChunk,
    SandboxSpec,
    check_env,
    check_sandbox_path,
    check_user,
)

__all__ = ["DEFAULT_OUTPUT_CAP", "ExecStream", "OutputCallback", "Sandbox"]

#: Default cap on collected stdout and on collected stderr of one exec (bytes, each).
DEFAULT_OUTPUT_CAP = 1 << 20
#: Called with (stream name, chunk) for every piece of output as it arrives.
OutputCallback = Callable[[str, bytes], Awaitable[None] | None]

FORWARDER_SOURCE = Path(__file__).with_name("forwarder.py")
FORWARDER_PATH = "/run/clawrl/forwarder.py"
FORWARDER_READY = "/run/clawrl/forwarder.ready"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_EXEC_TAG = EXEC_TAG_VAR
# After the timeout, how long the in-sandbox `timeout` gets to kill before the host steps in.
_KILL_GRACE_S = 5.0
_NPROC = 4096
_GONE_MARKERS = ("no such container", "container state improper", "is not running")
# The container's PID 1 and main process: ``sleep`` (the wall clock) with SIGCHLD ignored, so
# that orphans reparented to it are reaped by the kernel. A PID 1 without signal handlers
# ignores every signal sent from inside its PID namespace, SIGKILL included: the agent can
# neither end the sandbox early nor make it vanish mid-rollout.
_MAIN = ("env", "--ignore-signal=CHLD", "sleep")
# Size of /run and /dev/shm.
_SMALL_TMPFS = 16 << 20


# Containers this process created and has not destroyed: removed at interpreter exit, so a
# normal exit (even without closing pools) leaves nothing; SIGKILL is the reaper's job.
_LIVE: dict[str, Podman] = {}
_EXIT_HOOK: list[bool] = []


def _register_exit_cleanup(pm: Podman) -> None:
    if _EXIT_HOOK:
        return
    _EXIT_HOOK.append(True)

    def cleanup() -> None:
        if _LIVE:
            ids = list(_LIVE)
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    _LIVE[ids[0]].argv("rm", "-f", "--ignore", "-t", "0", *ids),
                    capture_output=True,
                    timeout=120,
                    check=False,
                )

    atexit.register(cleanup)


def _host_hard_limit(which: int, fallback: int) -> int:
    _, hard = resource.getrlimit(which)
    return fallback if hard == resource.RLIM_INFINITY else int(hard)


def _under_tmpfs(path: str, home: str) -> bool:
    """True if ``path`` lies in a place that is a fresh tmpfs in every sandbox."""
    p = check_sandbox_path(path)
    return any(p == t or p.startswith(t + "/") for t in (WORKSPACE, "/tmp", home, "/run", "/dev"))


def _uid_gid(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, uid: int, gid: int, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, uid: int, gid: int) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.uid, info.gid = uid, gid
    info.mtime = int(time.time())
    tar.addfile(info)


def _read_host(src: Path, dest: str) -> bytes:
    """Read a host file for the sandbox; an unreadable one is a :class:`SandboxSpecError`."""
    try:
        return src.read_bytes()
    except OSError as e:
        raise SandboxSpecError(f"cannot read host path {src} (for {dest}): {e}") from e


def _build_tar(files: Mapping[str, FileContent], uid: int, gid: int) -> bytes:
    """A tar archive placing ``files`` (absolute sandbox paths) relative to ``/``.

    Raises:
        SandboxSpecError: a bad path, or a host source that is missing, unreadable, or neither a
            regular file nor a directory (FIFOs, devices, sockets). Inside a host directory,
            symlinks and such special files are skipped.
    """
    buf = io.BytesIO()
    dirs_done: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for raw_path, content in files.items():
            path = check_sandbox_path(raw_path, "path")
            parts = path.strip("/").split("/")
            # Parent directories below a top-level directory get the sandbox user as owner.
            for i in range(2, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs_done:
                    dirs_done.add(d)
                    _add_dir(tar, d, uid, gid)
            name = "/".join(parts)
            if isinstance(content, Path):
                if not content.exists():
                    raise SandboxSpecError(f"host path {content} (for {path}) does not exist")
                if not (content.is_dir() or content.is_file()):
                    # a FIFO would block the event loop forever, a device would stream forever
                    raise SandboxSpecError(
                        f"host path {content} (for {path}) is not a regular file or a directory"
                    )
                if content.is_dir():
                    for sub in sorted(content.rglob("*")):
                        rel = sub.relative_to(content).as_posix()
                        if sub.is_symlink() or not (sub.is_dir() or sub.is_file()):
                            continue  # never follow host symlinks out of the tree
                        if sub.is_dir():
                            _add_dir(tar, f"{name}/{rel}", uid, gid)
                        else:
                            mode = 0o755 if os.access(sub, os.X_OK) else 0o644
                            _add_bytes(tar, f"{name}/{rel}", _read_host(sub, path), uid, gid, mode)
                    if name not in dirs_done:
                        _add_dir(tar, name, uid, gid)
                else:
                    mode = 0o755 if os.access(content, os.X_OK) else 0o644
                    _add_bytes(tar, name, _read_host(content, path), uid, gid, mode)
            else:
                data = content.encode() if isinstance(content, str) else content
                _add_bytes(tar, name, data, uid, gid, 0o644)
    return buf.getvalue()


class _Collector:
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


class ExecStream:
    """Async iterator over a running command's :class:`OutputChunk` s (:meth:`Sandbox.exec_stream`).

    After the iteration ends, :attr:`result` holds the :class:`ExecResult` (its collected
    output is capped like :meth:`Sandbox.exec`'s; the stream itself delivers everything).
    Leaving the iteration early (``break``, ``aclose()``) kills the command.
    """

    def __init__(self, sandbox: Sandbox, cmd: str | Sequence[str], kwargs: dict[str, object]):
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
            return await self._sandbox.exec(self._cmd, on_output=self._put, **self._kwargs)  # type: ignore[arg-type]
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


class Sandbox:
    """A running sandbox. Create with ``await Sandbox.create(spec)`` (or ``async with``).

    Every method is a coroutine safe to run concurrently with others on the same sandbox
    (e.g. many ``exec`` at once). Use as an async context manager so that :meth:`destroy`
    always runs::

        async with await Sandbox.create(SandboxSpec()) as sb:
            r = await sb.exec("echo hi", timeout=10)

    Attributes:
        id: podman container id.
        name: container name (``clawrl-<run id>-<random>``).
        spec: the :class:`SandboxSpec` it was created from.
        run_id: the run it is labelled with.
    """

    def __init__(
        self, *, container_id: str, name: str, spec: SandboxSpec, podman: Podman, run_id: str
    ) -> None:
        self.id = container_id
        self.name = name
        self.spec = spec
        self.run_id = run_id
        self._podman = podman
        self._closed = False
        self.created_at = time.time()
        self._init: SandboxInit | None = None

    # ------------------------------------------------------------------ creation
    @classmethod
    async def create(
        cls,
        spec: SandboxSpec | None = None,
        *,
        podman: Podman | None = None,
        run_id: str | None = None,
        identity: RunIdentity | None = None,
        timeout: float = 60.0,
    ) -> Sandbox:
        """Create and start a sandbox; returns once it accepts :meth:`exec`.

        Starts the container (``podman run -d``), then the forwarder (when the spec has a
        model socket) and writes ``spec.files`` into the workspace.

        Args:
            spec: what to create (default: ``SandboxSpec()``, the host-``/usr`` rootfs).
            podman: backend (default: the process-wide one, runtime auto-detected).
            run_id: label the sandbox with this run id (default: the process's run id).
            identity: full owner identity (overrides ``run_id``), see :mod:`.reaper`.
            timeout: seconds allowed for ``podman run``.

        Raises:
            SandboxCreateError: podman failed (missing image, bad runtime, limits…); the
                podman error is the ``__cause__``. Nothing is left behind.
            SandboxSpecError: invalid spec.
        """
        spec = spec or SandboxSpec()
        pm = podman or shared_podman()
        ident = identity or current_identity()
        if run_id is not None:
            ident = ident.with_run_id(run_id)
        name = f"clawrl-{ident.run_id}-{uuid.uuid4().hex[:8]}"
        argv = cls._run_args(spec, ident, name)
        uid, gid = _uid_gid(spec.user)
        # Read the workspace files before any container exists: a bad host source is a spec error.
        files_tar = _build_tar(spec.files, uid, gid) if spec.files else None
        try:
            res = await pm.run(*argv, timeout=timeout)
        except PodmanError as e:
            # A half-created container (e.g. a timeout) must not outlive the failure.
            await pm.run("rm", "-f", "--ignore", "-t", "0", name, check=False)
            raise SandboxCreateError(f"cannot create sandbox: {e.stderr}") from e
        except BaseException:  # cancelled mid-creation
            await asyncio.shield(pm.run("rm", "-f", "--ignore", "-t", "0", name, check=False))
            raise
        sb = cls(
            container_id=res.stdout.decode().strip(),
            name=name,
            spec=spec,
            podman=pm,
            run_id=ident.run_id,
        )
        _register_exit_cleanup(pm)
        _LIVE[sb.id] = pm
        try:
            await sb._find_init()
            if spec.model_socket is not None and spec.forwarder:
                await sb.start_forwarder()
            if files_tar is not None:
                await sb._put_tar(files_tar)
        except BaseException as e:
            await asyncio.shield(sb.destroy())
            if isinstance(e, SandboxError) and not isinstance(e, SandboxCreateError):
                raise SandboxCreateError(f"cannot set up sandbox: {e}") from e
            raise
        return sb

    @staticmethod
    def _run_args(spec: SandboxSpec, ident: RunIdentity, name: str) -> list[str]:
        lim = spec.limits
        uid, _gid = _uid_gid(spec.user)
        home = "/root" if uid == 0 else "/home/sandbox"
        nofile = min(lim.nofile, _host_hard_limit(resource.RLIMIT_NOFILE, lim.nofile))
        # RLIMIT_NPROC counts a uid's processes host-wide (root is exempt); the pids cgroup
        # is the real per-sandbox cap. Values near the host's hard limit fail in runc.
        nproc = min(_NPROC, _host_hard_limit(resource.RLIMIT_NPROC, _NPROC))
        # No --init: PID 1 is the main process itself (see _MAIN), which nothing inside can kill.
        a = ["run", "-d", "--rm", "--name", name, "--network", spec.network]
        a += ["--hostname", "sandbox", "--no-hosts"]
        a += ["--memory", str(lim.memory_bytes), "--pids-limit", str(lim.pids)]
        if lim.cpus is not None:
            a += ["--cpus", f"{lim.cpus:g}"]
        a += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
        a += ["--security-opt", "no-new-privileges", "--user", spec.user, "--workdir", spec.workdir]
        if spec.read_only_root:
            a += ["--read-only"]
        own = ",U" if uid != 0 else ""  # U: chown the tmpfs to the container user
        a += ["--tmpfs", f"{WORKSPACE}:rw,exec,size={lim.workspace_bytes},mode=0755{own}"]
        a += ["--tmpfs", f"/tmp:rw,exec,size={lim.tmp_bytes},mode=1777"]
        a += ["--tmpfs", f"{home}:rw,exec,size={lim.tmp_bytes},mode=0700{own}"]
        # every writable tmpfs has a size (an unsized one is half the host's RAM)
        a += ["--read-only-tmpfs=false", "--shm-size", str(_SMALL_TMPFS)]
        a += ["--tmpfs", f"/run:rw,nosuid,nodev,size={_SMALL_TMPFS},mode=0755"]
        a += ["--tmpfs", f"/var/tmp:rw,nosuid,nodev,size={lim.tmp_bytes},mode=1777"]
        # podman's /sys/fs/cgroup is an unsized tmpfs writable by root: masked read-only
        a += ["--security-opt", "mask=/sys/fs/cgroup"]
        # no inotify instances: they would be charged to host root's per-user limit
        profile = sandbox_seccomp_profile()
        if profile is not None:
            a += ["--security-opt", f"seccomp={profile}"]
        env = {"PATH": PATH_ENV, "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", **spec.env}
        for k, v in env.items():
            a += ["--env", f"{k}={v}"]
        for k, v in {**ident.labels(), **spec.labels}.items():
            a += ["--label", f"{k}={v}"]
        if spec.model_socket is not None:
            if not spec.model_socket.exists():
                raise SandboxSpecError(f"model_socket {spec.model_socket} does not exist")
            # read-only: connecting still works, chmod / unlink / replacing it do not
            a += ["-v", f"{spec.model_socket}:{MODEL_SOCKET_PATH}:ro"]
            a += ["-v", f"{FORWARDER_SOURCE}:{FORWARDER_PATH}:ro"]
        for host, inside in spec.read_only_mounts.items():
            a += ["-v", f"{host}:{inside}:ro"]
        main = [*_MAIN, "infinity" if lim.wall_clock_s is None else f"{lim.wall_clock_s:g}"]
        if spec.image is not None:
            return [*a, "--pull", "never", "--entrypoint", "[]", spec.image, *main]
        if spec.rootfs is not None:
            if not spec.rootfs.is_dir():
                raise SandboxSpecError(f"rootfs {spec.rootfs} is not a directory")
            # The rootfs is the first positional argument: every option comes before it.
            return [*a, "--rootfs", f"{spec.rootfs.resolve()}:O", *main]
        a += ["-v", "/usr:/usr:ro"]
        root = default_rootfs()
        # The skeleton is shared by every sandbox: when the runtime would have to create a
        # mount point in it (an extra mount outside the tmpfs places), or the root is writable,
        # give this sandbox a private overlay of it instead.
        private = not spec.read_only_root or any(
            not _under_tmpfs(inside, home) and not (root / inside.lstrip("/")).exists()
            for inside in spec.read_only_mounts.values()
        )
        return [*a, "--rootfs", f"{root}:O" if private else str(root), *main]

    async def start_forwarder(self, timeout: float = 15.0) -> None:
        """Start the in-sandbox forwarder (``127.0.0.1:port`` → ``/run/clawrl/model.sock``).

        Called by :meth:`create` when the spec has a model socket; returns once it listens.

        Raises:
            SandboxError: the forwarder did not come up within ``timeout`` seconds (e.g. the
                sandbox has no ``python3``); its log is in the message.
        """
        port = self.spec.forwarder_port
        script = (
            f"rm -f {FORWARDER_READY}; "
            f"{_EXEC_TAG}=forwarder setsid python3 {FORWARDER_PATH} --port {port} --socket {MODEL_SOCKET_PATH} "
            f"--ready-file {FORWARDER_READY} </dev/null >/run/clawrl/forwarder.log 2>&1 & "
            f"i=0; while [ ! -e {FORWARDER_READY} ]; do i=$((i+1)); "
            f"if [ $i -gt {int(timeout * 50)} ]; then cat /run/clawrl/forwarder.log; exit 1; fi; "
            "sleep 0.02; done"
        )
        r = await self.exec(["/bin/sh", "-c", script], timeout=timeout + 5, user="0:0")
        if not r.ok:
            raise SandboxError(f"forwarder did not start: {r.text.strip() or r.stderr!r}")

    @property
    def model_base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the model endpoint as seen from inside the sandbox."""
        return f"http://127.0.0.1:{self.spec.forwarder_port}"

    @property
    def closed(self) -> bool:
        """True after :meth:`destroy`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self.name} was destroyed")

    # ------------------------------------------------------------------ exec
    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = DEFAULT_OUTPUT_CAP,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run a command in the sandbox and wait for it.

        Args:
            cmd: a shell command line (run with ``/bin/sh -c``) or an argv list.
            timeout: seconds; at the deadline the command and every process of its process
                group are SIGKILLed (``timeout -s KILL`` inside the sandbox), then the host
                SIGKILLs every process still carrying this exec's tag (descendants that left
                the group with ``setsid``; a command still running after a few seconds' grace)
                and ``timed_out`` is True.
                ``None`` = no limit (the sandbox's wall clock still applies).
            env: extra environment variables for this command only (e.g. a session key).
            workdir: working directory (default: the spec's, ``/workspace``).
            user: ``uid[:gid]`` to run as (default: the spec's).
            stdin: bytes fed to the command's standard input (default: none, EOF).
            max_output_bytes: cap on collected stdout and on collected stderr (each); output
                beyond it is read and discarded (``*_truncated`` set).
            on_output: called with (``"stdout"`` | ``"stderr"``, chunk) for every chunk as it
                arrives (all of it, not capped); may be a coroutine function.

        Returns:
            The :class:`ExecResult`. A non-zero exit is a result, not an exception.

        Raises:
            SandboxClosedError: after :meth:`destroy`.
            SandboxGoneError: the container vanished (wall clock, reaper, external removal).
            SandboxSpecError: invalid ``cmd`` (non-strings, NUL bytes) / ``env``
                (``CLAWRL_EXEC_ID`` is reserved) / ``user`` (numeric ``uid[:gid]``) /
                ``stdin`` (not bytes) / ``timeout`` / ``max_output_bytes``.
        """
        self._check_open()
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
        tag = uuid.uuid4().hex
        args = ["exec", "--env", f"{_EXEC_TAG}={tag}"]
        if stdin is not None:
            args.append("-i")
        for k, v in (env or {}).items():
            args += ["--env", f"{k}={v}"]
        args += [
            "--workdir",
            check_sandbox_path(workdir, "workdir") if workdir else self.spec.workdir,
        ]
        args += ["--user", user or self.spec.user, self.id]
        if timeout is not None:
            args += ["timeout", "-s", "KILL", f"{timeout:.3f}s"]
        args += argv
        out = _Collector("stdout", max_output_bytes, on_output)
        err = _Collector("stderr", max_output_bytes, on_output)
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *self._podman.argv(*args),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

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
                    await self._kill_tagged(tag)
                    if not done:
                        with contextlib.suppress(ProcessLookupError):
                            proc.kill()
                    await work
                else:
                    await work
        except BaseException:  # cancelled, or an on_output callback raised
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(self._kill_tagged(tag))
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise
        duration = time.monotonic() - start
        rc = proc.returncode if proc.returncode is not None else -1
        if rc in (125, 126, 127) and not timed_out:
            msg = bytes(err.buf).decode("utf-8", "replace")
            if msg.startswith("Error:") and any(m in msg for m in _GONE_MARKERS):
                raise SandboxGoneError(f"sandbox {self.name} is gone: {msg.strip()}")
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

    def exec_stream(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = DEFAULT_OUTPUT_CAP,
    ) -> ExecStream:
        """Run a command and iterate over its output as it arrives.

        Same arguments as :meth:`exec`. Example::

            stream = sb.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done")
            async for chunk in stream:
                print(chunk.stream, chunk.data)
            print(stream.result.exit_code)
        """
        kwargs: dict[str, object] = {
            "timeout": timeout,
            "env": env,
            "workdir": workdir,
            "user": user,
            "stdin": stdin,
            "max_output_bytes": max_output_bytes,
        }
        return ExecStream(self, cmd, kwargs)

    async def _kill_tagged(self, tag: str) -> None:
        """SIGKILL every process in the sandbox started by the exec tagged ``tag``."""
        script = (
            f"for d in /proc/[0-9]*; do "
            f"if grep -qsxz '{_EXEC_TAG}={tag}' \"$d/environ\" 2>/dev/null; then "
            'kill -9 "${d#/proc/}" 2>/dev/null; fi; done; exit 0'
        )
        with contextlib.suppress(PodmanError):
            await self._podman.run(
                "exec", "--user", "0:0", self.id, "/bin/sh", "-c", script, check=False, timeout=30
            )

    # ------------------------------------------------------------------ files
    async def put_files(self, files: Mapping[str, FileContent]) -> None:
        """Write files into the sandbox (one ``tar`` stream, one podman call).

        Args:
            files: sandbox path (absolute, or relative to ``/workspace``) → bytes, text
                (UTF-8), or a host :class:`~pathlib.Path` (a file, or a directory copied
                recursively; host symlinks are skipped). Parent directories are created; files
                belong to the spec's user.

        Raises:
            SandboxSpecError: a bad path or host source (see :func:`_build_tar`).
            SandboxError: the write failed (e.g. ``/workspace`` is full: ENOSPC).
        """
        self._check_open()
        uid, gid = _uid_gid(self.spec.user)
        await self._put_tar(_build_tar(files, uid, gid))

    async def _put_tar(self, data: bytes) -> None:
        r = await self.exec(
            ["tar", "-x", "-f", "-", "-C", "/", "--no-overwrite-dir"],
            stdin=data,
            user="0:0",
            workdir="/",
            timeout=300,
        )
        if not r.ok:
            raise SandboxError(
                f"writing files into {self.name} failed: {r.stderr.decode(errors='replace').strip()}"
            )

    async def put_file(self, path: str, content: bytes | str | Path) -> None:
        """Write one file (see :meth:`put_files`)."""
        await self.put_files({path: content})

    async def put_dir(self, host_dir: Path | str, dest: str = WORKSPACE) -> None:
        """Copy the host directory ``host_dir`` recursively to ``dest`` in the sandbox."""
        p = Path(host_dir)
        if not p.is_dir():
            raise SandboxSpecError(f"{host_dir} is not a directory")
        await self.put_files({dest: p})

    async def _find_init(self) -> SandboxInit:
        if self._init is None:
            r = await self._podman.run(
                "inspect", "--format", "{{.State.Pid}}", self.id, check=False, timeout=30
            )
            pid = r.stdout.decode().strip()
            if r.returncode != 0 or not pid.isdigit() or pid == "0":
                raise SandboxGoneError(f"sandbox {self.name} is gone (no PID 1)")
            self._init = await asyncio.to_thread(SandboxInit.of, int(pid))
        return self._init

    async def get_file(self, path: str, max_bytes: int = 1 << 30) -> bytes:
        """Read one regular file from the sandbox, from the host (see :mod:`.hostfs`).

        Raises:
            SandboxFileNotFoundError: no such regular file (a directory, FIFO, device, or a
                symlink anywhere on the path counts as missing).
            SandboxCopyLimitError: the file is larger than ``max_bytes``.
            SandboxGoneError: the sandbox is gone.
        """
        self._check_open()
        p = check_sandbox_path(path)
        init = await self._find_init()
        return await asyncio.to_thread(read_file, init, p, max_bytes)

    async def get_dir(
        self,
        path: str,
        host_dest: Path | str,
        max_bytes: int = 1 << 30,
        *,
        limits: CopyLimits | None = None,
    ) -> Path:
        """Copy the sandbox directory ``path`` recursively into the host directory ``host_dest``.

        Read from the host through the sandbox's ``/proc/<pid>/root`` without running any
        program of the sandbox and without following its symlinks (see :mod:`.hostfs`): only
        regular files and directories are copied; symlinks, FIFOs, sockets and devices are
        skipped. Call :meth:`kill_all` first when no process of the sandbox may change the
        files while they are read.

        Args:
            path: directory in the sandbox.
            host_dest: host directory (created); files land only inside it.
            max_bytes: bound on the bytes of file content (overrides ``limits.max_bytes``).
            limits: the other bounds (file count, path length, depth, wall time).

        Returns:
            ``host_dest`` as a :class:`~pathlib.Path`.

        Raises:
            SandboxFileNotFoundError: ``path`` is not a directory in the sandbox.
            SandboxCopyLimitError: a bound was hit; ``host_dest`` holds a partial copy.
            SandboxGoneError: the sandbox is gone.
        """
        await self.copy_out(path, host_dest, max_bytes, limits=limits)
        return Path(host_dest)

    async def copy_out(
        self,
        path: str,
        host_dest: Path | str,
        max_bytes: int = 1 << 30,
        *,
        limits: CopyLimits | None = None,
    ) -> CopyStats:
        """:meth:`get_dir`, returning what was copied and skipped (:class:`CopyStats`)."""
        self._check_open()
        p = check_sandbox_path(path)
        lim = dataclasses.replace(limits or CopyLimits(), max_bytes=max_bytes)
        init = await self._find_init()
        return await asyncio.to_thread(copy_tree, init, p, Path(host_dest), lim)

    async def kill_all(self, timeout: float = 10.0) -> int:
        """SIGKILL every process in the sandbox except its PID 1, from the host, and return
        once none is left (the sandbox stays up and accepts :meth:`exec`).

        The forwarder is killed too; :meth:`start_forwarder` restarts it.

        Returns:
            How many processes were signalled.

        Raises:
            SandboxGoneError: the sandbox is gone.
            SandboxError: some process was still alive after ``timeout`` seconds.
        """
        self._check_open()
        init = await self._find_init()
        return await asyncio.to_thread(kill_sandbox_processes, init, timeout)

    async def wipe(self, path: str) -> bool:
        """Delete everything inside the sandbox directory ``path``, from the host, without
        following symlinks (mount points stay). Returns True if it is now empty.

        Raises:
            SandboxGoneError: the sandbox is gone.
        """
        self._check_open()
        init = await self._find_init()
        return await asyncio.to_thread(wipe_tree, init, check_sandbox_path(path))

    # ------------------------------------------------------------------ lifetime
    async def alive(self) -> bool:
        """True while the container exists and runs."""
        if self._closed:
            return False
        r = await self._podman.run(
            "inspect", "--format", "{{.State.Running}}", self.id, check=False, timeout=30
        )
        return r.returncode == 0 and r.stdout.strip() == b"true"

    async def destroy(self) -> None:
        """Kill every process and remove the container (idempotent; never raises for a
        container that is already gone)."""
        if self._closed:
            return
        self._closed = True
        await self._podman.run("rm", "-f", "--ignore", "-t", "0", self.id, check=False, timeout=60)
        _LIVE.pop(self.id, None)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.destroy())

    def __repr__(self) -> str:
        state = "destroyed" if self._closed else "live"
        return f"<Sandbox {self.name} {self.id[:12]} {state}>"


def shell_join(argv: Sequence[str]) -> str:
    """Quote an argv for ``/bin/sh -c`` (convenience for callers building command lines)."""
    return shlex.join(argv)
