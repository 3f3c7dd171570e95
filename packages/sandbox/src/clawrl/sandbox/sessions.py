"""What a grader that runs in a used sandbox needs: surviving task processes and root changes.

A grader that runs in the sandbox an agent used (AgentBench OS checks) must know that nothing
the agent left runs, while the task's own background processes (AgentBench ``start``)
do, and that the agent changed none of the programs the grader runs:

* :func:`pin_session` pins a *session* of processes by its leader (host pid and start time,
  read from the host's ``/proc``); :func:`kill_all_but` SIGKILLs every process of the
  sandbox but its PID 1 and the members of pinned sessions whose leader is still the pinned
  process. A process can join a session only by being forked inside it, and a session's id
  cannot be reused while its leader lives, so nothing the agent starts passes as a member;
  a session whose leader died (or was killed) is not spared at all;
* :func:`root_changes` lists what changed in the sandbox's root filesystem against its image
  (the container's own overlay layer: ``podman diff``, or, for a writable root kept on a
  size-capped tmpfs, that overlay's upper directory read from the host, since ``podman diff``
  sees nothing of it; tmpfs places such as ``/tmp`` and the home directory are not part of
  it); :func:`bits_removed_only` tells which changed entries of a writable root are the
  image's own with nothing changed but some permission bits cleared.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import PodmanError, SandboxError
from .hostfs import SandboxInit, kill_sandbox_processes, sandbox_members
from .reaper import process_start_ticks

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = [
    "PinnedSession",
    "RootChanges",
    "bits_removed_only",
    "kill_all_but",
    "left_processes",
    "pin_session",
    "root_changes",
]


@dataclass(frozen=True)
class PinnedSession:
    """A session of sandbox processes :func:`kill_all_but` spares.

    Attributes:
        sandbox_pid: the leader's pid inside the sandbox.
        host_pid: the leader's pid on the host (= the session id seen from the host).
        start_ticks: the leader's start time (clock ticks since boot), which tells it from a
            later process with a recycled pid.
    """

    sandbox_pid: int
    host_pid: int
    start_ticks: int

    def alive(self) -> bool:
        """Whether the pinned leader still runs (same pid, same start time)."""
        return process_start_ticks(self.host_pid) == self.start_ticks


@dataclass(frozen=True)
class RootChanges:
    """Paths (absolute, inside the sandbox) changed in the root filesystem since creation."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    def all(self) -> list[tuple[str, str]]:
        """``(kind, path)`` pairs, kind ``A`` / ``C`` / ``D`` as ``podman diff`` prints."""
        return [
            *(("A", p) for p in self.added),
            *(("C", p) for p in self.changed),
            *(("D", p) for p in self.deleted),
        ]


def _stat_fields(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return []
    return data[data.rfind(b")") + 2 :].split()


def _session_of(pid: int) -> int | None:
    """Host session id of host process ``pid`` (field 6 of proc(5)), None if gone."""
    fields = _stat_fields(pid)
    return int(fields[3]) if len(fields) > 3 else None


def _sandbox_pid(pid: int) -> int | None:
    """The innermost pid of host process ``pid`` (the last ``NSpid`` entry)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _find_leader(init: SandboxInit, sandbox_pid: int) -> PinnedSession:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            same_ns = os.readlink(f"/proc/{pid}/ns/pid") == init.pid_ns
        except OSError:
            continue
        if not same_ns or _sandbox_pid(pid) != sandbox_pid:
            continue
        ticks = process_start_ticks(pid)
        if ticks is None or _session_of(pid) != pid:
            raise SandboxError(f"sandbox process {sandbox_pid} is not a session leader")
        return PinnedSession(sandbox_pid, pid, ticks)
    raise SandboxError(f"no process {sandbox_pid} in the sandbox")


async def pin_session(sb: Sandbox, sandbox_pid: int) -> PinnedSession:
    """Pin the session led by the sandbox's process ``sandbox_pid`` (its pid inside).

    Raises:
        SandboxError: no such process, or it is not a session leader (``setsid``).
        SandboxGoneError: the sandbox is gone.
    """
    init = await sb._find_init()
    return await asyncio.to_thread(_find_leader, init, sandbox_pid)


#: Characters of a command line :func:`left_processes` keeps.
_COMMAND_CHARS = 60


def _command_line(pid: int) -> str | None:
    """The command line of host process ``pid``, its arguments joined by spaces and cut
    at :data:`_COMMAND_CHARS` (its command name when it has none; ``None``: gone, or
    clawrl's own model forwarder, which every sandbox with a model socket runs)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if b"\0CLAWRL_EXEC_ID=forwarder\0" in b"\0" + f.read():
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).rstrip(b"\0").split(b"\0")
        if argv == [b""]:
            with open(f"/proc/{pid}/comm", "rb") as f:
                argv = [f.read().strip()]
    except OSError:
        return None
    line = " ".join(a.decode("utf-8", "backslashreplace") for a in argv)
    return line if len(line) <= _COMMAND_CHARS else line[: _COMMAND_CHARS - 1] + "…"


async def left_processes(sb: Sandbox) -> list[str]:
    """The command lines (``/proc/<pid>/cmdline``, cut to 60 characters) of the processes
    alive in ``sb`` but its PID 1 and clawrl's model forwarder, read from the host: after
    an agent's command returned, what it left running (daemons, background jobs).

    Raises:
        SandboxGoneError: the sandbox is gone.
    """
    sb._check_open()
    init = await sb._find_init()

    def names() -> list[str]:
        return [n for n in map(_command_line, sandbox_members(init)) if n is not None]

    return await asyncio.to_thread(names)


async def kill_all_but(
    sb: Sandbox, keep: Collection[PinnedSession] = (), timeout: float = 10.0
) -> int:
    """:meth:`Sandbox.kill_all`, sparing the members of the ``keep`` sessions whose leader is
    still the pinned process (checked at every sweep). Returns how many were signalled.

    Raises:
        SandboxGoneError: the sandbox is gone.
        SandboxError: some process was still alive after ``timeout`` seconds.
    """
    sb._check_open()
    init = await sb._find_init()

    def spared(pid: int) -> bool:
        live = {s.host_pid for s in keep if s.alive()}
        return bool(live) and _session_of(pid) in live

    return await asyncio.to_thread(kill_sandbox_processes, init, timeout, spared)


async def root_changes(sb: Sandbox) -> RootChanges:
    """What changed in ``sb``'s root filesystem against its image (``podman diff``).

    Raises:
        SandboxError: podman could not tell (e.g. a ``--rootfs`` sandbox, or it is gone).
    """
    sb._check_open()
    if not sb.spec.read_only_root:
        return await asyncio.to_thread(_overlay_changes, sb)
    try:
        res = await sb._podman.run("diff", "--format", "json", sb.id, timeout=60)
        data = json.loads(res.stdout.decode("utf-8", "replace") or "{}")
    except (PodmanError, ValueError) as exc:
        raise SandboxError(f"cannot list the root changes of {sb.name}: {exc}") from exc
    if not isinstance(data, dict):
        raise SandboxError(f"podman diff of {sb.name}: unexpected output")

    def paths(key: str) -> tuple[str, ...]:
        value = data.get(key) or []
        return tuple(sorted(str(p) for p in value)) if isinstance(value, list) else ()

    return RootChanges(paths("added"), paths("changed"), paths("deleted"))


def overlay_dirs(sb: Sandbox) -> tuple[str, list[str]]:
    """The upper directory and the lower directories of a capped writable root's overlay
    (``Sandbox.create`` keeps it on a tmpfs at ``<runroot>/overlay-containers/<id>/rootfs``),
    read from the host's mount table, never from inside the sandbox.

    Raises:
        SandboxError: the overlay is not mounted (never taken for "nothing changed").
    """
    merge = upper = None
    lowers: list[str] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" - ", 1)
                head = fields[0].split()
                if len(head) < 5 or len(fields) < 2:
                    continue
                point = head[4].replace("\\040", " ")
                if f"/overlay-containers/{sb.id}/rootfs/merge" not in point:
                    continue
                options = fields[1].split()[-1].split(",")
                for opt in options:
                    if opt.startswith("upperdir="):
                        upper = opt.removeprefix("upperdir=")
                    elif opt.startswith("lowerdir="):
                        lowers = opt.removeprefix("lowerdir=").split(":")
                merge = point
    except OSError as exc:
        raise SandboxError(f"cannot list the root changes of {sb.name}: {exc}") from exc
    if merge is None or upper is None or not os.path.isdir(upper):
        raise SandboxError(
            f"cannot list the root changes of {sb.name}: its root's overlay is not mounted"
        )
    return upper, lowers


def _overlay_changes(sb: Sandbox) -> RootChanges:
    """The changes of a capped writable root: every entry of the overlay's upper directory
    (:func:`overlay_dirs`) is a path the sandbox wrote — added when no lower layer has it,
    changed when one does, deleted when it is a whiteout (a 0/0 character device)."""
    upper, lowers = overlay_dirs(sb)
    added: list[str] = []
    changed: list[str] = []
    deleted: list[str] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, upper)
            inside = "/" + rel
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                deleted.append(inside)
            elif any(os.path.lexists(os.path.join(low, rel)) for low in lowers):
                changed.append(inside)
            else:
                added.append(inside)
    return RootChanges(tuple(sorted(added)), tuple(sorted(changed)), tuple(sorted(deleted)))


#: Overlay attributes that make an entry of the upper directory stand for something other
#: than the lower entry at its path: an opaque directory hides the image's entries, a
#: redirect serves another lower path, a metacopy keeps its data elsewhere.
_OVERLAY_INDIRECTION = ("opaque", "redirect", "metacopy")


def _same_bytes(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def _only_bits_removed(upper: str, lowers: list[str], path: str, bits: int) -> bool:
    """Whether the upper entry at ``path`` is the image's entry there (the top-most lower
    layer that has it) with some of ``bits`` cleared and nothing else changed."""
    rel = path.lstrip("/")
    full = os.path.join(upper, rel)
    try:
        st = os.lstat(full)
        names = os.listxattr(full, follow_symlinks=False)
    except OSError:
        return False
    if any(word in name for name in names for word in _OVERLAY_INDIRECTION):
        return False
    for low in lowers:
        image = os.path.join(low, rel)
        try:
            lo = os.lstat(image)
        except OSError:
            continue
        mode, image_mode = stat.S_IMODE(st.st_mode), stat.S_IMODE(lo.st_mode)
        if (
            stat.S_IFMT(st.st_mode) != stat.S_IFMT(lo.st_mode)
            or (st.st_uid, st.st_gid) != (lo.st_uid, lo.st_gid)
            or mode & ~image_mode  # a bit added
            or image_mode & ~mode & ~bits  # a bit removed that may not be
        ):
            return False
        if stat.S_ISDIR(st.st_mode):
            return True  # its entries' own changes are listed apart
        if stat.S_ISLNK(st.st_mode):
            return os.readlink(full) == os.readlink(image)
        if not stat.S_ISREG(st.st_mode) or st.st_size != lo.st_size:
            return False
        try:
            return _same_bytes(full, image)
        except OSError:
            return False
    return False


async def bits_removed_only(sb: Sandbox, paths: Collection[str], bits: int) -> frozenset[str]:
    """Those of ``paths`` (changed entries of ``sb``'s writable root: :func:`root_changes`)
    that are the image's own entry with nothing changed but some of the permission ``bits``
    cleared: the same type, owner and group, no bit added, no other bit removed, the same
    content (a file's bytes, a link's target), and no overlay indirection (a directory
    made again, so that the image's entries are hidden; a renamed directory served in
    another's place). A directory's own entries are changes of their own. Read from the
    host, the overlay's upper directory against the image's layers.

    Raises:
        SandboxError: the root is not a writable overlay whose layers can be read.
    """
    sb._check_open()
    if sb.spec.read_only_root:
        raise SandboxError(f"{sb.name} has a read-only root: no upper directory to read")
    if not paths:
        return frozenset()
    upper, lowers = await asyncio.to_thread(overlay_dirs, sb)
    return frozenset(
        await asyncio.to_thread(
            lambda: [p for p in paths if _only_bits_removed(upper, lowers, p, bits)]
        )
    )
