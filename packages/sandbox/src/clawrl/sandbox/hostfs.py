"""Host-side access to a live sandbox: its processes and files, without running its programs.

Everything here works from the host through ``/proc/<pid>`` of the sandbox's PID 1, so no
program inside the sandbox is executed and no archive the sandbox produced is parsed:

* :func:`kill_sandbox_processes` SIGKILLs every process of the sandbox's PID namespace except
  its PID 1 (through pidfds, so a recycled pid is never signalled);
* :func:`copy_tree` / :func:`read_file` read the sandbox's files through the ``/proc/<pid>/root``
  directory of its PID 1, opening every component relative to its parent with ``O_NOFOLLOW``
  (a symlink the agent planted never leads out of the sandbox), and accept only regular files
  and directories, within :class:`CopyLimits`;
* :func:`wipe_tree` empties a sandbox directory the same way.

Why not ``podman exec tar``: a process the agent left behind can stop that ``tar`` and write its
own archive into its stdout, and in a writable root the agent can replace ``tar`` or
``/etc/ld.so.preload``; Python's ``tarfile`` filters have had bypasses (CVE-2025-4517). Here the
host decides what it reads, and it reads only inodes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import SandboxCopyLimitError, SandboxError, SandboxFileNotFoundError, SandboxGoneError
from .reaper import process_start_ticks

__all__ = [
    "CopyLimits",
    "CopyStats",
    "SandboxInit",
    "copy_tree",
    "kill_sandbox_processes",
    "read_file",
    "wipe_tree",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CopyLimits:
    """Bounds of one copy out of a sandbox; a bound that is hit raises
    :class:`~clawrl.sandbox.SandboxCopyLimitError` (nothing is half-trusted).

    Attributes:
        max_bytes: total bytes of regular-file content (a sparse file counts its apparent size).
        max_files: regular files plus directories.
        max_path_length: characters of a path relative to the copied directory.
        max_depth: directory levels below the copied directory.
        timeout_s: wall-clock seconds for the whole copy.
    """

    max_bytes: int = 1 << 30
    max_files: int = 100_000
    max_path_length: int = 1024
    max_depth: int = 64
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_files", "max_path_length", "max_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"CopyLimits.{name} must be an int >= 1, got {value!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"CopyLimits.timeout_s must be > 0, got {self.timeout_s!r}")


@dataclass(frozen=True)
class CopyStats:
    """What :func:`copy_tree` copied and left out.

    Attributes:
        files: regular files copied.
        dirs: directories copied (the top one excluded).
        bytes: bytes of file content copied.
        skipped: entries left out (symlinks, FIFOs, sockets, devices, entries that changed
            type while being read).
    """

    files: int
    dirs: int
    bytes: int
    skipped: int


@dataclass(frozen=True)
class SandboxInit:
    """The host's handle on a sandbox's PID 1: its host pid, the start time that tells it from a
    later process with a recycled pid, its PID namespace, and its cgroups (the content of
    ``/proc/<pid>/cgroup``, which also holds processes of PID namespaces nested inside the
    sandbox's; a sandbox cannot leave its cgroup: ``/sys/fs/cgroup`` is masked)."""

    pid: int
    start_ticks: int
    pid_ns: str
    cgroup: bytes = b""

    @classmethod
    def of(cls, pid: int) -> SandboxInit:
        """Describe host process ``pid`` (a container's PID 1).

        Raises:
            SandboxGoneError: no such process.
        """
        ticks = process_start_ticks(pid)
        try:
            ns = os.readlink(f"/proc/{pid}/ns/pid")
            cgroup = _cgroup(pid)
        except OSError as e:
            raise SandboxGoneError(f"sandbox init process {pid} is gone: {e}") from e
        if ticks is None or process_start_ticks(pid) != ticks:
            raise SandboxGoneError(f"sandbox init process {pid} is gone")
        return cls(pid, ticks, ns, cgroup)

    def has_member(self, pid: int) -> bool:
        """Whether host process ``pid`` belongs to this sandbox: in its PID namespace, or in
        its cgroups (a PID namespace nested inside the sandbox, e.g. ``unshare -pf``)."""
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == self.pid_ns:
                return True
            return bool(self.cgroup) and _in_cgroups(_cgroup(pid), self.cgroup)
        except OSError:
            return False

    def check(self) -> None:
        """Raise :class:`SandboxGoneError` unless the process is still this sandbox's PID 1."""
        if process_start_ticks(self.pid) != self.start_ticks:
            raise SandboxGoneError(f"sandbox init process {self.pid} is gone")

    @contextlib.contextmanager
    def root(self) -> Iterator[int]:
        """A directory fd of the sandbox's ``/`` (in its own mount namespace).

        Raises:
            SandboxGoneError: the sandbox's PID 1 is gone (checked before and after opening,
                so the fd never belongs to a process that took over the pid).
        """
        self.check()
        try:
            fd = os.open(f"/proc/{self.pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise SandboxGoneError(f"cannot open the sandbox's root: {e}") from e
        try:
            self.check()
            yield fd
        finally:
            os.close(fd)


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return b"X"
    return data[data.rfind(b")") + 2 : data.rfind(b")") + 3]


def _cgroup(pid: int) -> bytes:
    with open(f"/proc/{pid}/cgroup", "rb") as f:
        return f.read()


def _cgroup_paths(text: bytes) -> dict[bytes, bytes]:
    """``/proc/<pid>/cgroup`` as {hierarchy id + controllers: path}."""
    out = {}
    for line in text.splitlines():
        key, sep, path = line.rpartition(b":")
        if sep:
            out[key] = path
    return out


def _in_cgroups(text: bytes, sandbox: bytes) -> bool:
    """Whether a process with cgroups ``text`` is in the sandbox's cgroups ``sandbox`` or
    below them, in every hierarchy the sandbox is in (a child cgroup does not hide it)."""
    theirs = _cgroup_paths(text)
    # hierarchies where the sandbox sits at the root say nothing (every process is there);
    # with none left, only the PID namespace decides (never "every host process")
    mine = {k: root for k, root in _cgroup_paths(sandbox).items() if root not in (b"", b"/")}
    return bool(mine) and all(
        (p := theirs.get(k)) is not None and (p == root or p.startswith(root + b"/"))
        for k, root in mine.items()
    )


def sandbox_members(init: SandboxInit) -> list[int]:
    """Host pids of the live (non-zombie) processes of the sandbox (nested PID namespaces
    included), its PID 1 excluded."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid != init.pid and init.has_member(pid) and _state(pid) not in (b"Z", b"X"):
            out.append(pid)
    return out


def _kill(pid: int, init: SandboxInit) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        # the pidfd pins the process: if it still belongs to the sandbox, the signal reaches it
        if init.has_member(pid):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def kill_sandbox_processes(
    init: SandboxInit, timeout_s: float = 10.0, spared: Callable[[int], bool] | None = None
) -> int:
    """SIGKILL every process of the sandbox but its PID 1 (and those ``spared(host pid)``
    keeps), until none is left.

    Repeats the sweep while new processes appear (a fork racing the sweep); each sweep lists
    the sandbox's PID namespace from the host's ``/proc``.

    Returns:
        How many processes were signalled.

    Raises:
        SandboxGoneError: the sandbox's PID 1 is gone.
        SandboxError: processes were still alive after ``timeout_s`` seconds.
    """
    init.check()
    deadline = time.monotonic() + timeout_s
    killed = 0
    while True:
        pids = [p for p in sandbox_members(init) if spared is None or not spared(p)]
        if not pids:
            return killed
        if time.monotonic() > deadline:
            raise SandboxError(
                f"{len(pids)} sandbox processes still alive after {timeout_s:g} s of SIGKILL"
            )
        for pid in pids:
            _kill(pid, init)
        killed += len(pids)
        time.sleep(0.005)


# ---------------------------------------------------------------------------- files


def _components(path: str) -> list[str]:
    p = PurePosixPath(path)
    if not p.is_absolute():
        raise SandboxError(f"sandbox path must be absolute, got {path!r}")
    parts = [c for c in p.parts[1:] if c not in ("", ".")]
    if ".." in parts:
        raise SandboxError(f"sandbox path must not contain '..', got {path!r}")
    return parts


def _open_dir(root_fd: int, parts: list[str], shown: str) -> int:
    """Open the directory ``parts`` below ``root_fd`` without following any symlink."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise SandboxFileNotFoundError(
                        f"{shown}: not a directory in the sandbox (symlinks are not followed)"
                    ) from e
                raise SandboxError(f"{shown}: {e}") from e
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_file(init: SandboxInit, path: str, max_bytes: int) -> bytes:
    """The content of the regular file ``path`` of the sandbox.

    Raises:
        SandboxFileNotFoundError: no such regular file (a symlink anywhere on the path, a
            directory, a FIFO or device counts as missing).
        SandboxCopyLimitError: the file is larger than ``max_bytes``.
        SandboxGoneError: the sandbox is gone.
    """
    parts = _components(path)
    if not parts:
        raise SandboxFileNotFoundError(f"{path}: not a regular file")
    with init.root() as root:
        dfd = _open_dir(root, parts[:-1], path)
        try:
            try:
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dfd)
            except OSError as e:
                raise SandboxFileNotFoundError(f"{path}: {os.strerror(e.errno or 0)}") from e
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SandboxFileNotFoundError(f"{path}: not a regular file")
            if st.st_size > max_bytes:
                raise SandboxCopyLimitError(
                    "max_bytes", f"{path} is {st.st_size} bytes, more than max_bytes={max_bytes}"
                )
            data = _read_at_most(fd, max_bytes + 1)
        finally:
            os.close(fd)
    if len(data) > max_bytes:
        raise SandboxCopyLimitError("max_bytes", f"{path} is larger than max_bytes={max_bytes}")
    return data


def _read_at_most(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(_CHUNK, n - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _Budget:
    def __init__(self, limits: CopyLimits, shown: str) -> None:
        self.limits = limits
        self.shown = shown
        self.deadline = time.monotonic() + limits.timeout_s
        self.files = self.dirs = self.bytes = self.skipped = 0

    def entry(self, rel: str) -> None:
        lim = self.limits
        if rel.count("/") >= lim.max_depth:
            raise SandboxCopyLimitError(
                "max_depth", f"{self.shown} is nested deeper than max_depth={lim.max_depth}"
            )
        if self.files + self.dirs >= lim.max_files:
            raise SandboxCopyLimitError(
                "max_files", f"{self.shown} holds more than max_files={lim.max_files} entries"
            )
        if len(rel) > lim.max_path_length:
            raise SandboxCopyLimitError(
                "max_path_length",
                f"{self.shown} holds a path of {len(rel)} characters "
                f"(max_path_length={lim.max_path_length})",
            )
        if time.monotonic() > self.deadline:
            raise SandboxCopyLimitError(
                "timeout_s", f"copying {self.shown} took longer than {lim.timeout_s:g} s"
            )

    def take(self, n: int) -> None:
        if self.bytes + n > self.limits.max_bytes:
            raise SandboxCopyLimitError(
                "max_bytes",
                f"{self.shown} holds more than max_bytes={self.limits.max_bytes} bytes of files",
            )
        self.bytes += n


def copy_tree(
    init: SandboxInit, path: str, dest: Path, limits: CopyLimits | None = None
) -> CopyStats:
    """Copy the sandbox directory ``path`` into the host directory ``dest`` (created).

    Only regular files (mode 0755 if executable, else 0644) and directories (0755) are
    written, each by name relative to its parent's fd, so nothing lands outside ``dest``;
    symlinks, FIFOs, sockets and devices are skipped and counted.

    Raises:
        SandboxFileNotFoundError: ``path`` is not a directory of the sandbox.
        SandboxCopyLimitError: a bound of ``limits`` was hit (``dest`` then holds a partial
            copy, which the caller must not trust).
        SandboxGoneError: the sandbox is gone.
    """
    lim = limits or CopyLimits()
    budget = _Budget(lim, path)
    dest.mkdir(parents=True, exist_ok=True)
    with init.root() as root:
        src = _open_dir(root, _components(path), path)
        try:
            dst = os.open(dest, _DIR_FLAGS)
        except BaseException:
            os.close(src)
            raise
        try:
            _copy_dir(src, dst, "", budget)
        finally:
            os.close(src)
            os.close(dst)
    return CopyStats(budget.files, budget.dirs, budget.bytes, budget.skipped)


def _copy_dir(src: int, dst: int, rel: str, budget: _Budget) -> None:
    try:
        names = sorted(os.listdir(src))
    except OSError as e:
        raise SandboxError(f"cannot list {budget.shown}/{rel}: {e}") from e
    for name in names:
        sub = f"{rel}/{name}" if rel else name
        budget.entry(sub)
        try:
            st = os.stat(name, dir_fd=src, follow_symlinks=False)
        except OSError:
            budget.skipped += 1
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                sfd = os.open(name, _DIR_FLAGS, dir_fd=src)
            except OSError:
                budget.skipped += 1  # replaced by something else meanwhile
                continue
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=dst)
                dfd = os.open(name, _DIR_FLAGS, dir_fd=dst)
                try:
                    budget.dirs += 1
                    _copy_dir(sfd, dfd, sub, budget)
                finally:
                    os.close(dfd)
            finally:
                os.close(sfd)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src, dst, name, budget)
        else:
            budget.skipped += 1


def _copy_file(src: int, dst: int, name: str, budget: _Budget) -> None:
    try:
        sfd = os.open(name, _FILE_FLAGS, dir_fd=src)
    except OSError:
        budget.skipped += 1
        return
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            budget.skipped += 1
            return
        budget.take(st.st_size)  # a sparse file counts its apparent size, before any read
        mode = 0o755 if st.st_mode & 0o111 else 0o644
        dfd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode, dir_fd=dst)
        try:
            left = st.st_size
            while left > 0:
                chunk = os.read(sfd, min(_CHUNK, left))
                if not chunk:
                    break  # truncated meanwhile: keep what was there
                os.write(dfd, chunk)
                left -= len(chunk)
            os.fchmod(dfd, mode)
        finally:
            os.close(dfd)
        budget.files += 1
    finally:
        os.close(sfd)


_WIPE_DEPTH = 256


def _mount_points(init: SandboxInit) -> set[str]:
    """Mount points of the sandbox's mount namespace (its PID 1's ``mountinfo``)."""
    try:
        with open(f"/proc/{init.pid}/mountinfo", "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        raise SandboxGoneError(f"cannot read the sandbox's mounts: {e}") from e
    out = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 4:  # octal escapes (\040 for a space) decoded
            out.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def wipe_tree(init: SandboxInit, path: str) -> bool:
    """Delete everything inside the sandbox directory ``path`` (kept itself), never following
    a symlink and never touching a mount point (unlinking one from the host would detach the
    sandbox's mount, e.g. its model socket); what cannot be removed, or lies deeper than 256
    levels, is left.

    Returns:
        True if ``path`` now holds nothing but mount points and the directories leading to
        them (or does not exist).

    Raises:
        SandboxGoneError: the sandbox is gone.
    """
    parts = _components(path)
    top = "/" + "/".join(parts)
    mounts = _mount_points(init)
    with init.root() as root:
        try:
            fd = _open_dir(root, parts, path)
        except SandboxFileNotFoundError:
            return True
        try:
            _wipe(fd, top.rstrip("/"), mounts, 0)
            left = [f"{top.rstrip('/')}/{n}" for n in os.listdir(fd)]
            return all(p in mounts or any(m.startswith(p + "/") for m in mounts) for p in left)
        finally:
            os.close(fd)


def _wipe(fd: int, where: str, mounts: set[str], depth: int) -> None:
    if depth > _WIPE_DEPTH:
        return
    with contextlib.suppress(OSError):
        for name in os.listdir(fd):
            sub_path = f"{where}/{name}"
            if sub_path in mounts:
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                try:
                    _wipe(sub, sub_path, mounts, depth + 1)
                finally:
                    os.close(sub)
                if not any(m.startswith(sub_path + "/") for m in mounts):
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=fd)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
