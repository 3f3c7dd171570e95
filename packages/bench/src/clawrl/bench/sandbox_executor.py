"""An :class:`~clawrl.bench.Executor` that runs every spec in its own clawrl.sandbox sandbox.

Each :meth:`SandboxExecutor.run` takes a fresh podman sandbox (the default root: the host's
``/usr`` read-only, ``--network none``, no model socket and no forwarder), copies every
mount's host directory in at its target path, runs the command there with the spec's
timeout, then **kills every process left in the sandbox from the host**
(:meth:`~clawrl.sandbox.Sandbox.kill_all`) before anything is read back, copies writable
mounts with ``persist=True`` back to their host directories (replacing their contents, so
deletions and moves are kept; host-side, size-capped: :class:`~clawrl.sandbox.CopyLimits`),
and destroys the sandbox. Nothing of an earlier sandbox — e.g. the agent's — is visible: a
verifier run this way sees only the files it was given, and nothing it started can change
what is copied back.

Warm sandboxes (``warm=N``): the executor keeps N empty sandboxes created in advance
(a :class:`~clawrl.sandbox.SandboxPool` on a private event loop), so a run does not wait for
``podman run``; each is still used **once** and destroyed (in the background) afterwards,
never reset and reused. :meth:`SandboxExecutor.close` destroys the idle ones (the executor
stays usable and warms again on its next run).

Host symlinks inside mounted directories are not copied in (clawrl.sandbox never follows
them).

A spec with a container state (:attr:`~clawrl.bench.ExecSpec.state`: what the agent's
sandbox changed, :func:`clawrl.sandbox.snapshot_state`) runs in a fresh sandbox of the base
spec (never a warm one) with a writable root: the state is restored first (the image's own
``rm`` and ``tar``; a state that cannot be restored is reported as
:attr:`~clawrl.bench.ExecResult.output_error`, the agent's files caused it), its read-only
mounts are host bind mounts, read-only, over whatever the state holds there, and the
writable mounts are staged as above.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import io
import os
import shutil
import tarfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from clawrl.bench.errors import ExecutorError
from clawrl.bench.executors import OUTPUT_LIMIT, ExecResult, ExecSpec, Mount
from clawrl.sandbox import (
    CopyLimits,
    Sandbox,
    SandboxCopyLimitError,
    SandboxError,
    SandboxFileNotFoundError,
    SandboxGoneError,
    SandboxPool,
    SandboxSpec,
    owned_tempdir,
    restore_state,
)
from clawrl.sandbox import ExecResult as SandboxExecResult

__all__ = ["SandboxExecutor"]

T = TypeVar("T")

#: Wall clock given to sandboxes whose base spec has none: a sandbox leaked by a dead
#: process (or one kept warm) stops by itself after this many seconds.
DEFAULT_WALL_CLOCK_S = 3600.0
#: Seconds kept between a warm sandbox's wall clock and the end of a run's timeout.
_WALL_MARGIN_S = 60.0
#: The root supervisor of every run (``sh -c _SUPERVISE sh CWD USER TIMEOUT ARGV...``),
#: one exec: it stages the mounts (a tar archive on stdin; a staging failure, e.g. a full
#: workspace tmpfs, exits 125 like any start failure), enters the working directory, and
#: starts the command — as ``USER`` (``uid:gid``, through ``setpriv``) when one is given —
#: with its stdout and stderr in files of a root-only directory (:data:`SUPERVISOR_DIR`)
#: that it opened itself, and a watchdog that kills it after ``TIMEOUT`` seconds. When the
#: command's main process exits it SIGKILLs every other process of the sandbox but PID 1
#: at once (``kill -9 -1``: no process can fork past it), again until none is left (one
#: still alive after 50 rounds is reported), and only then writes the tails of the output
#: and the exit status there. Nothing the command started can write its output or its
#: files once it is killed; a root process that busy-polls the main process's
#: ``/proc/<pid>/stat`` can still act in the microseconds between its exit (a zombie) and
#: the kill — run the command as a ``USER`` where it needs no root. (The exec runs
#: without ``timeout``'s wrapper, which ``kill -9 -1`` would kill.)
SUPERVISOR_DIR = "/run/clawrl-verifier"
_SUPERVISE = r"""
tar -x -f - -C / --no-overwrite-dir || exit 125
d=@DIR@
mkdir -m 700 "$d" || exit 125
cd -- "$1" || exit 125
u=$2
t=$3
shift 3
if [ -n "$u" ]; then
  p=$PWD
  while [ -n "$p" ] && [ "$p" != / ]; do chmod a+x "$p" || exit 125; p=${p%/*}; done
  command -v setpriv >/dev/null 2>&1 || { echo "[clawrl] no setpriv: cannot drop privileges" >&2; exit 125; }
  set -- setpriv --reuid="${u%%:*}" --regid="${u#*:}" --clear-groups -- "$@"
fi
"$@" </dev/null >"$d/out" 2>"$d/err" &
w=$!
(sleep "$t"; : > "$d/timeout"; kill -9 "$w") </dev/null >/dev/null 2>&1 &
wait "$w"
rc=$?
kill -9 -1 2>/dev/null
n=0
while :; do
  left=
  for f in /proc/[0-9]*/stat; do
    q=${f#/proc/}
    q=${q%/stat}
    case "$q" in 1|$$) continue ;; esac
    read -r l < "$f" 2>/dev/null || continue
    st=${l##*) }
    st=${st%% *}
    case "$st" in Z|X) ;; *) left="$left $q" ;; esac
  done
  [ -z "$left" ] && break
  n=$((n + 1))
  if [ "$n" -gt 50 ]; then echo "$left" > "$d/left"; break; fi
  kill -9 -1 2>/dev/null
  [ "$n" -gt 2 ] && sleep 0.1
done
tail -c @LIMIT@ "$d/out" > "$d/out.tail"
tail -c @LIMIT@ "$d/err" > "$d/err.tail"
echo "$rc" > "$d/rc"
""".replace("@DIR@", SUPERVISOR_DIR).replace("@LIMIT@", str(OUTPUT_LIMIT))
#: Seconds the host waits beyond a run's timeout for its supervisor before killing it all.
_SUPERVISOR_GRACE_S = 30.0
#: Seconds a caller of :meth:`SandboxExecutor.run` waits beyond the spec's timeout (sandbox
#: creation, staging, copying back) before the run is cancelled and fails.
_RUN_SLACK_S = 300.0
#: Seconds :meth:`SandboxExecutor.close` and :meth:`SandboxExecutor.interrupt` wait at most.
_CLOSE_TIMEOUT_S = 30.0


class SandboxExecutor:
    """Run :class:`ExecSpec` s in fresh podman sandboxes (see the module docstring).

    Args:
        base_spec: sandbox template (limits, image or rootfs, env); its ``files`` are
            replaced by the mounts of each spec, its root is made writable so that mount
            targets such as ``/tests`` or ``/app`` can be created, its model socket is
            dropped, and it gets a wall clock of :data:`DEFAULT_WALL_CLOCK_S` if it has none.
        run_id: run id label of the sandboxes (default: the process's).
        warm: empty sandboxes kept created in advance (0: create one per run).
        copy_limits: bounds of each copy back to the host (default
            :class:`~clawrl.sandbox.CopyLimits`).

    Thread-safe: several threads may call :meth:`run` at once.
    """

    def __init__(
        self,
        base_spec: SandboxSpec | None = None,
        run_id: str | None = None,
        *,
        warm: int = 0,
        copy_limits: CopyLimits | None = None,
    ) -> None:
        if warm < 0:
            raise ValueError(f"warm must be >= 0, got {warm}")
        base = base_spec or SandboxSpec()
        limits = base.limits
        if limits.wall_clock_s is None:
            limits = dataclasses.replace(limits, wall_clock_s=DEFAULT_WALL_CLOCK_S)
        self.base_spec = dataclasses.replace(
            base, files={}, read_only_root=False, model_socket=None, forwarder=False, limits=limits
        )
        self.run_id = run_id
        self.warm = warm
        self.copy_limits = copy_limits or CopyLimits()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: SandboxPool | None = None
        self._pool_ready: asyncio.Future[SandboxPool] | None = None
        self._running: set[asyncio.Task[Any]] = set()  # runs in progress (on self._loop)

    # ------------------------------------------------------------------ public
    def run(self, spec: ExecSpec) -> ExecResult:
        """Run ``spec``; see :class:`~clawrl.bench.Executor`.

        When processes of the sandbox survive :meth:`~clawrl.sandbox.Sandbox.kill_all`,
        nothing is copied back and the result has ``exit_code=None`` (not a timeout), with
        the reason in ``stderr``.

        Raises:
            ExecutorError: the sandbox cannot be created or used, a copy back hit
                :attr:`copy_limits`, the run did not end within the spec's timeout + 300 s
                (it is cancelled), or :meth:`interrupt` cancelled it.
        """
        return self._call(self._tracked(self._run(spec)), spec.timeout_s + _RUN_SLACK_S)

    def close(self) -> None:
        """Destroy the warm sandboxes (idle ones at once; sandboxes in use are destroyed
        by their runs as usual); waits at most 30 s. Idempotent; a later :meth:`run` warms
        again."""
        with self._lock:
            pool, self._pool, self._pool_ready = self._pool, None, None
            loop = self._loop
        if pool is not None and loop is not None:
            fut = asyncio.run_coroutine_threadsafe(pool.close(), loop)
            with contextlib.suppress(SandboxError, concurrent.futures.TimeoutError):
                fut.result(timeout=_CLOSE_TIMEOUT_S)

    def interrupt(self) -> None:
        """Cancel every run in progress (their callers get :class:`ExecutorError`; their
        sandboxes are destroyed) and :meth:`close`; waits at most 30 s for each. For a
        batch that stops early (Ctrl-C): no verifier outlives it."""
        with self._lock:
            loop = self._loop
        if loop is not None:
            fut = asyncio.run_coroutine_threadsafe(self._cancel_running(), loop)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                fut.result(timeout=_CLOSE_TIMEOUT_S + 5)
        self.close()

    def __enter__(self) -> SandboxExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="clawrl-bench-sbexec", daemon=True
                ).start()
                self._loop = loop
            loop = self._loop
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return fut.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()  # its sandbox is destroyed in the background
            raise ExecutorError(f"sandbox run did not end within {timeout_s:g} s") from None
        except concurrent.futures.CancelledError:
            raise ExecutorError("sandbox run cancelled (interrupted)") from None

    async def _tracked(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro``, listed in :attr:`_running` while it runs (on the executor's loop)."""
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            return await coro
        finally:
            self._running.discard(task)

    async def _cancel_running(self) -> None:
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        if tasks:  # each destroys its sandbox before it ends
            await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)

    async def _get_pool(self) -> SandboxPool:
        # runs on the executor's loop: no lock needed between coroutines
        if self._pool_ready is None:
            fut: asyncio.Future[SandboxPool] = asyncio.get_running_loop().create_future()
            self._pool_ready = fut
            pool = SandboxPool(
                max_sandboxes=self.warm + 64,
                warm=[(self.base_spec, self.warm)],
                run_id=self.run_id,
                gc_on_start=False,
                factory=self._create_warm,
            )
            await pool.start()
            self._pool = pool
            fut.set_result(pool)
        return await asyncio.shield(self._pool_ready)

    async def _create_warm(self, spec: SandboxSpec) -> Sandbox:
        sb = await Sandbox.create(spec, run_id=self.run_id)
        try:
            await sb.kill_all()  # kills nothing yet; looks up the sandbox's PID 1 in advance
        except BaseException:
            await asyncio.shield(sb.destroy())
            raise
        return sb

    async def _acquire(self, spec: ExecSpec) -> tuple[Sandbox, SandboxPool | None]:
        """A fresh, never used sandbox: a warm one if it has enough wall clock left."""
        if self.warm > 0:
            pool = await self._get_pool()
            sb = await pool.acquire(self.base_spec)
            wall = self.base_spec.limits.wall_clock_s or DEFAULT_WALL_CLOCK_S
            left = wall - (time.time() - sb.created_at)
            if left > spec.timeout_s + _WALL_MARGIN_S:
                return sb, pool
            await pool.release(sb, broken=True)
        wall = max(
            self.base_spec.limits.wall_clock_s or DEFAULT_WALL_CLOCK_S,
            spec.timeout_s + _WALL_MARGIN_S,
        )
        limits = dataclasses.replace(self.base_spec.limits, wall_clock_s=wall)
        sb = await Sandbox.create(
            dataclasses.replace(self.base_spec, limits=limits), run_id=self.run_id
        )
        return sb, None

    async def _run(self, spec: ExecSpec) -> ExecResult:
        try:
            if spec.state is not None:
                sb, pool = await self._from_state(spec), None
            else:
                sb, pool = await self._acquire(spec)
        except SandboxError as exc:
            raise ExecutorError(f"sandbox: {exc}") from exc
        try:
            if spec.state is not None:
                problem = await restore_state(sb, spec.state)
                if problem:  # the agent's state cannot be made again: its files caused it
                    return ExecResult(
                        exit_code=None,
                        stdout="",
                        stderr=f"[clawrl] {problem}",
                        duration_s=0.0,
                        output_error=f"the agent's container state cannot be restored: {problem}",
                    )
                spec = dataclasses.replace(
                    spec, mounts=tuple(m for m in spec.mounts if not m.read_only), state=None
                )
            return await self._run_in(sb, spec)
        except SandboxError as exc:
            raise ExecutorError(f"sandbox: {exc}") from exc
        finally:
            if pool is not None:
                # never reused: destroyed in the background, and the pool warms a new one
                await pool.release(sb, broken=True)
            else:
                await asyncio.shield(sb.destroy())

    async def _from_state(self, spec: ExecSpec) -> Sandbox:
        """A fresh sandbox (never a warm one) for a run on the agent's container state:
        the base spec with a writable root and the spec's read-only mounts bound read-only
        (host bind mounts, over whatever the state holds at their targets)."""
        wall = max(
            self.base_spec.limits.wall_clock_s or DEFAULT_WALL_CLOCK_S,
            spec.timeout_s + _WALL_MARGIN_S,
        )
        bound = {str(m.source): m.target for m in spec.mounts if m.read_only}
        base = self.base_spec
        fresh = dataclasses.replace(
            base,
            limits=dataclasses.replace(base.limits, wall_clock_s=wall),
            read_only_root=False,
            read_only_mounts={**base.read_only_mounts, **bound},
        )
        return await Sandbox.create(fresh, run_id=self.run_id)

    async def _run_in(self, sb: Sandbox, spec: ExecSpec) -> ExecResult:
        owner = _owner(spec.user)
        staged = await asyncio.to_thread(_tar_of, spec, owner)
        start = time.monotonic()
        argv = ["/bin/sh", "-c", _SUPERVISE, "sh", spec.cwd, spec.user or "", f"{spec.timeout_s:g}"]
        try:
            res: SandboxExecResult | None = await asyncio.wait_for(
                sb.exec(
                    [*argv, *spec.argv],
                    stdin=staged,
                    env=dict(spec.env),
                    workdir="/",
                    max_output_bytes=OUTPUT_LIMIT,
                ),
                spec.timeout_s + _SUPERVISOR_GRACE_S,
            )
        except TimeoutError:  # the supervisor itself hung: everything is killed below
            res = None
        duration = time.monotonic() - start
        try:
            # The supervisor killed everything at the command's exit; a timed-out run (or a
            # supervisor that failed) is cleaned up here, before anything is read back.
            await sb.kill_all()
        except SandboxGoneError:
            raise
        except SandboxError as exc:
            return ExecResult(
                exit_code=None,
                stdout="",
                stderr=f"[clawrl] processes survived kill_all, nothing copied back: {exc}",
                duration_s=duration,
                timed_out=False,
                output_error=f"processes of the verifier survived every kill: {exc}",
            )
        report = await _supervisor_report(sb)
        if report is None:  # the supervisor failed (staging, working directory) or hung
            return ExecResult(
                exit_code=None if res is None else res.exit_code,
                stdout="" if res is None else res.stdout.decode("utf-8", errors="replace"),
                stderr="" if res is None else res.stderr.decode("utf-8", errors="replace"),
                duration_s=duration,
                timed_out=res is None,
            )
        exit_code, stdout, stderr, left, timed_out = report
        problems = [f"processes still alive after the supervisor's kill: {left}"] if left else []
        for mount in spec.mounts:
            if not mount.read_only and mount.persist:
                problems += await self._copy_back(sb, mount)
        return ExecResult(
            exit_code=None if timed_out or left else exit_code,
            stdout=stdout,
            stderr=stderr,
            duration_s=duration,
            timed_out=timed_out,
            output_error="; ".join(problems),
        )

    async def _copy_back(self, sb: Sandbox, mount: Mount) -> list[str]:
        """Copy the writable ``mount`` back to its host directory, whole, or say why not:
        what the command's files caused (the directory replaced by a link or removed,
        links or special files in it, the copy limits) is a problem to report, never an
        error of the infrastructure; :class:`SandboxGoneError` is raised."""
        with owned_tempdir("clawrl-sbcopy-") as tmp:
            dest = Path(tmp) / "d"
            try:
                stats = await sb.copy_out(
                    mount.target, dest, self.copy_limits.max_bytes, limits=self.copy_limits
                )
            except SandboxFileNotFoundError:
                return [f"{mount.target} is no longer a directory (removed or made a link)"]
            except SandboxCopyLimitError as exc:
                return [f"{mount.target} is over the copy-back limits: {exc}"]
            if stats.skipped:
                return [
                    f"{mount.target} holds {stats.skipped} entries that are links or special "
                    "files (not copied back)"
                ]
            await asyncio.to_thread(_replace_contents, mount.source, dest)
        return []


async def _supervisor_report(sb: Sandbox) -> tuple[int, str, str, str, bool] | None:
    """The exit status, stdout and stderr tails, surviving processes and whether its
    watchdog fired, as the supervisor wrote them (read from the host, never through a
    program of the sandbox); ``None`` when it wrote no status (it failed before the command
    ran, or was killed)."""

    async def read(name: str) -> str | None:
        try:
            data = await sb.get_file(f"{SUPERVISOR_DIR}/{name}", OUTPUT_LIMIT + 4096)
        except (SandboxFileNotFoundError, SandboxCopyLimitError):
            return None
        return data[-OUTPUT_LIMIT:].decode("utf-8", errors="replace")

    status = (await read("rc") or "").strip()
    if not status.isdigit():
        return None
    out, err, left = await read("out.tail"), await read("err.tail"), await read("left")
    timed_out = await read("timeout") is not None
    return int(status), out or "", err or "", (left or "").strip(), timed_out


def _owner(user: str | None) -> tuple[int, int] | None:
    if user is None:
        return None
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise ExecutorError(f"user must be 'uid' or 'uid:gid' (numeric), got {user!r}")
    return int(uid), int(gid or uid)


def _tar_of(spec: ExecSpec, owner: tuple[int, int] | None = None) -> bytes:
    """A tar archive (relative to ``/``) of every mount's host directory at its target,
    owned by root, directories 0755, files 0755 or 0644 — for a private mount
    (:attr:`~clawrl.bench.Mount.private`) directories 0700, files 0700 or 0600, and no entry
    of another mount at or below its target (e.g. a ClawGym verifier inside the workspace
    is staged from the private mount only); host symlinks and special files are left out.
    ``owner`` (uid, gid): the owner of writable and private mounts' entries instead of root
    (the user a supervised command runs as).

    Raises:
        ExecutorError: a mount source is not a directory or cannot be read.
    """
    buf = io.BytesIO()
    now = int(time.time())

    def add(name: str, data: bytes | None, mode: int, own: tuple[int, int] = (0, 0)) -> None:
        info = tarfile.TarInfo(name)
        info.mtime, info.mode = now, mode
        info.uid, info.gid = own
        if data is None:
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        else:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    private = [m.target.strip("/") for m in spec.mounts if m.private]

    def shadowed(name: str, own: str) -> bool:
        """Whether ``name`` lies at or below a private mount other than ``own``'s."""
        return any(p != own and (name == p or name.startswith(f"{p}/")) for p in private)

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for mount in spec.mounts:
            root = mount.source
            if root.is_symlink() or not root.is_dir():
                raise ExecutorError(f"mount source {root} is not a directory")
            top = mount.target.strip("/")
            dir_mode, file_mode = (0o700, 0o600) if mount.private else (0o755, 0o644)
            own = owner if owner and (mount.private or not mount.read_only) else (0, 0)
            parts = top.split("/")
            for i in range(1, len(parts)):
                add("/".join(parts[:i]), None, 0o755)
            add(top, None, dir_mode, own)
            try:
                for dirpath, dirnames, filenames in os.walk(root):
                    base = Path(dirpath)
                    rel = base.relative_to(root).as_posix()
                    prefix = top if rel == "." else f"{top}/{rel}"
                    for name in sorted(dirnames):
                        if (base / name).is_symlink() or shadowed(f"{prefix}/{name}", top):
                            # host symlinks are never followed; a private mount brings its own
                            dirnames.remove(name)
                        else:
                            add(f"{prefix}/{name}", None, dir_mode, own)
                    for name in sorted(filenames):
                        path = base / name
                        if (
                            path.is_symlink()
                            or not path.is_file()
                            or shadowed(f"{prefix}/{name}", top)
                        ):
                            continue
                        mode = dir_mode if os.access(path, os.X_OK) else file_mode
                        add(f"{prefix}/{name}", path.read_bytes(), mode, own)
            except OSError as exc:
                raise ExecutorError(f"cannot read mount source {root}: {exc}") from exc
    return buf.getvalue()


def _replace_contents(dest: Path, src: Path) -> None:
    for child in list(dest.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for child in src.iterdir():
        shutil.move(str(child), dest / child.name)
