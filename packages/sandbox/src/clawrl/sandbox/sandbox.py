"""One sandbox: a podman container with limits, a private workspace and no network.

The parts of its life live beside it: the ``podman run`` command line (:mod:`.run_args`), one
command's run (:mod:`.execute`), the tar stream of files put into it (:mod:`.tarball`), and
reading files out from the host (:mod:`.hostfs`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import shlex
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Unpack

from .errors import (
    PodmanError,
    SandboxClosedError,
    SandboxCreateError,
    SandboxError,
    SandboxGoneError,
    SandboxSpecError,
)
from .execute import (
    DEFAULT_OUTPUT_CAP,
    Collector,
    ExecOptions,
    ExecStream,
    OutputCallback,
    check_exec,
    exec_args,
    exec_result,
    kill_tagged_script,
    run_exec,
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
from .podman import CommandResult, Podman, conmon_dir, shared_podman
from .reaper import RunIdentity, current_identity
from .run_args import FORWARDER_PATH, FORWARDER_READY, run_args
from .run_args import FORWARDER_SOURCE as FORWARDER_SOURCE  # re-exported
from .spec import (
    EXEC_TAG_VAR,
    MODEL_SOCKET_PATH,
    WORKSPACE,
    ExecResult,
    FileContent,
    SandboxSpec,
    check_sandbox_path,
)
from .tarball import build_tar as _build_tar
from .tarball import uid_gid

__all__ = ["DEFAULT_OUTPUT_CAP", "ExecStream", "OutputCallback", "Sandbox"]


# Containers this process created and has not destroyed: removed at interpreter exit, so a
# normal exit (even without closing pools) leaves nothing; SIGKILL is the reaper's job.
_LIVE: dict[str, Podman] = {}
_EXIT_HOOK: list[bool] = []


def _register_exit_cleanup(pm: Podman) -> None:
    if _EXIT_HOOK:
        return
    _EXIT_HOOK.append(True)

    def cleanup() -> None:
        by_host: dict[int, tuple[Podman, list[str]]] = {}  # one rm per podman endpoint
        for cid, podman in list(_LIVE.items()):
            by_host.setdefault(id(podman), (podman, []))[1].append(cid)
        for podman, ids in by_host.values():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    podman.argv("rm", "-f", "--ignore", "-t", "0", *ids),
                    cwd=conmon_dir(),
                    capture_output=True,
                    timeout=120,
                    check=False,
                )

    atexit.register(cleanup)


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
        uid, gid = uid_gid(spec.user)
        # Read the workspace files before any container exists: a bad host source is a spec error.
        files_tar = _build_tar(spec.files, uid, gid) if spec.files else None
        try:
            if spec.read_only_root:
                res = await pm.run(*run_args(spec, ident, name), timeout=timeout)
            else:
                res = await _run_capped_root(pm, spec, ident, name, timeout)
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
            f"{EXEC_TAG_VAR}=forwarder setsid python3 {FORWARDER_PATH} --port {port} --socket {MODEL_SOCKET_PATH} "
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
        argv = check_exec(
            cmd,
            timeout=timeout,
            env=env,
            user=user,
            stdin=stdin,
            max_output_bytes=max_output_bytes,
        )
        tag = uuid.uuid4().hex
        args = exec_args(
            self.id,
            argv,
            tag,
            timeout=timeout,
            env=env,
            workdir=check_sandbox_path(workdir, "workdir") if workdir else self.spec.workdir,
            user=user or self.spec.user,
            interactive=stdin is not None,
        )
        out = Collector("stdout", max_output_bytes, on_output)
        err = Collector("stderr", max_output_bytes, on_output)
        rc, timed_out, duration = await run_exec(
            self._podman,
            args,
            stdin=stdin,
            timeout=timeout,
            out=out,
            err=err,
            kill_tagged=lambda: self._kill_tagged(tag),
        )
        return exec_result(self.name, rc, timed_out, duration, out, err)

    def exec_stream(self, cmd: str | Sequence[str], **options: Unpack[ExecOptions]) -> ExecStream:
        """Run a command and iterate over its output as it arrives.

        Same arguments as :meth:`exec`. Example::

            stream = sb.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done")
            async for chunk in stream:
                print(chunk.stream, chunk.data)
            print(stream.result.exit_code)
        """
        return ExecStream(self, cmd, options)

    async def _kill_tagged(self, tag: str) -> None:
        """SIGKILL every process in the sandbox started by the exec tagged ``tag``."""
        with contextlib.suppress(PodmanError):
            await self._podman.run(
                "exec",
                "--user",
                "0:0",
                self.id,
                "/bin/sh",
                "-c",
                kill_tagged_script(tag),
                check=False,
                timeout=30,
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
        uid, gid = uid_gid(self.spec.user)
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

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.destroy())

    def __repr__(self) -> str:
        state = "destroyed" if self._closed else "live"
        return f"<Sandbox {self.name} {self.id[:12]} {state}>"


def shell_join(argv: Sequence[str]) -> str:
    """Quote an argv for ``/bin/sh -c`` (convenience for callers building command lines)."""
    return shlex.join(argv)


_RUN_ROOT: str | None = None


async def _run_capped_root(
    pm: Podman, spec: SandboxSpec, ident: RunIdentity, name: str, timeout: float
) -> CommandResult:
    """Start a sandbox whose root is writable, with that root's overlay on a size-capped
    tmpfs (``spec.limits.root_size``) instead of podman's storage on the host disk.

    The root is always an overlaid ``--rootfs`` (an image is mounted with ``podman image
    mount`` and keeps its environment). The container is created, a tmpfs is mounted where
    podman will put that overlay's upper and work directories
    (``<runroot>/overlay-containers/<id>/rootfs``), then the container is started; podman
    unmounts the tmpfs itself when it removes the container.

    Raises:
        PodmanError: a podman step failed; SandboxCreateError: the tmpfs cannot be mounted
            (it needs root on the host).
    """
    global _RUN_ROOT
    image_root: Path | None = None
    image_env: dict[str, str] | None = None
    if spec.image is not None:
        mounted = await pm.run("image", "mount", spec.image, timeout=timeout)
        image_root = Path(mounted.stdout.decode().strip())
        info = await pm.run(
            "image", "inspect", "--format", "{{json .Config.Env}}", spec.image, timeout=timeout
        )
        raw = json.loads(info.stdout.decode() or "null") or []
        image_env = dict(e.partition("=")[::2] for e in raw if isinstance(e, str) and "=" in e)
    argv = run_args(spec, ident, name, image_root=image_root, image_env=image_env)
    assert argv[:2] == ["run", "-d"]
    res = await pm.run("create", *argv[2:], timeout=timeout)
    cid = res.stdout.decode().strip()
    if _RUN_ROOT is None:
        info = await pm.run("info", "--format", "{{.Store.RunRoot}}", timeout=timeout)
        _RUN_ROOT = info.stdout.decode().strip()
    upper = Path(_RUN_ROOT) / "overlay-containers" / cid / "rootfs"
    upper.mkdir(mode=0o700, exist_ok=True)
    size = spec.limits.root_bytes
    proc = await asyncio.create_subprocess_exec(
        "mount",
        "-t",
        "tmpfs",
        "-o",
        f"size={size},mode=0700",
        "clawrl-root",
        str(upper),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        await pm.run("rm", "-f", "--ignore", "-t", "0", cid, check=False)
        raise SandboxCreateError(
            "cannot cap the writable root: mounting a tmpfs at "
            f"{upper} failed ({err.decode().strip()}); a writable root needs root on the host"
        )
    await pm.run("start", cid, timeout=timeout)
    return CommandResult(0, cid.encode() + b"\n", res.stderr)
