"""A snapshot of a used sandbox's filesystem state, to be restored into a fresh sandbox.

:func:`snapshot_state` records, from the host and without running any program of the
sandbox, what the sandbox changed against its image: the entries of a capped writable
root's overlay upper directory (added and changed files, directories, symlinks;
whiteouts and opaque directories become deletions) and the contents of the given tmpfs
places (``/tmp``, the home directory, ``/var/tmp``: fresh in every sandbox, so all they
hold is new). The result is a tar archive on the host (GNU format: names kept as the
bytes they are, owners numeric) and a list of deleted paths. :meth:`Sandbox.exec` of
``rm -rf`` and ``tar -x`` in a fresh sandbox of the same image restores it
(:func:`restore_state`).

Call it after every process of the sandbox is dead (:meth:`Sandbox.kill_all`): nothing
may change the files while they are read. Paths at or below ``exclude`` (and the
``exclude`` paths' ancestors, which a snapshot could otherwise replace by a symlink) are
never restored, only listed: the caller puts fresh copies there. Python bytecode caches
(`__pycache__`, `*.pyc`) are listed and never restored.
"""

from __future__ import annotations

import asyncio
import os
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .errors import SandboxCopyLimitError, SandboxError
from .names import printable_name
from .sessions import overlay_dirs
from .spec import check_sandbox_path

if TYPE_CHECKING:
    from .sandbox import Sandbox

__all__ = ["SandboxState", "restore_state", "snapshot_state"]

_OPAQUE = "trusted.overlay.opaque"
#: The link the container runtime makes in every sandbox's root.
_RUNTIME_LINK = ("/etc/mtab", "/proc/mounts")
#: Deleted paths per ``rm -rf`` exec (bounded argv).
_RM_BATCH = 200


@dataclass(frozen=True)
class SandboxState:
    """What a sandbox changed against its image (:func:`snapshot_state`).

    Attributes:
        archive: host path of the tar archive of the added and changed entries (relative
            to ``/``).
        deleted: absolute in-sandbox paths to delete before the archive is extracted
            (deleted entries, and opaque directories whose image contents were replaced).
        changes: ``(kind, path)`` pairs, kind ``A`` (added), ``C`` (a changed file or
            link) or ``D`` (deleted), paths as lossless printable text
            (:func:`~clawrl.sandbox.printable_name`); a directory that only changed
            because entries in it did is not listed.
        size: bytes of file content in the archive.
    """

    archive: Path
    deleted: tuple[str, ...] = ()
    changes: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    size: int = 0


def _covered(path: str, exclude: Sequence[str], ancestors: bool = True) -> bool:
    """Whether ``path`` lies at or below an excluded path, or (``ancestors``) is an
    ancestor of one."""
    p = PurePosixPath(path)
    for ex in exclude:
        e = PurePosixPath(ex)
        if p == e or e in p.parents or (ancestors and p in e.parents):
            return True
    return False


class _Writer:
    def __init__(self, archive: Path, max_bytes: int) -> None:
        # closed by the caller (_snapshot), whatever happens
        self.tar = tarfile.open(archive, "w", format=tarfile.GNU_FORMAT)  # noqa: SIM115
        self.max_bytes = max_bytes
        self.size = 0

    def add(self, host: str, name: str) -> None:
        """Add the entry at host path ``host`` (a file, directory or symlink) as ``name``."""
        info = self.tar.gettarinfo(host, arcname=name)
        info.uname = info.gname = ""
        if info.isreg():
            self.size += info.size
            if self.size > self.max_bytes:
                raise SandboxCopyLimitError(
                    "max_bytes",
                    f"the sandbox's changed files hold more than {self.max_bytes} bytes",
                )
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                self.tar.addfile(info, f)
        else:
            self.tar.addfile(info)


def _rel(inside: str) -> str:
    return inside.lstrip("/")


def _same_as_image(full: str, rel: str, lowers: list[str]) -> bool:
    """Whether the entry at ``full`` is the image's own ``rel`` unchanged (type, mode,
    owner; a file's bytes, up to 1 MiB; a link's target)."""
    try:
        st = os.lstat(full)
    except OSError:
        return False
    for low in lowers:
        try:
            lo = os.lstat(os.path.join(low, rel))
        except OSError:
            continue
        same = (st.st_mode, st.st_uid, st.st_gid) == (lo.st_mode, lo.st_uid, lo.st_gid)
        if not same or stat.S_ISDIR(st.st_mode):
            return same
        if stat.S_ISLNK(st.st_mode):
            return os.readlink(full) == os.readlink(os.path.join(low, rel))
        if not stat.S_ISREG(st.st_mode) or st.st_size != lo.st_size or st.st_size > 1 << 20:
            return False
        with open(full, "rb") as a, open(os.path.join(low, rel), "rb") as b:
            return a.read() == b.read()
    return False


#: Directory levels below a walked top that a snapshot follows (deeper: a limit error).
MAX_DEPTH = 256


def _walk(top: str, budget: list[int]) -> list[tuple[str, str]]:
    """``(host path, path relative to top)`` of every entry below ``top``, parents first,
    never following a symlink; iterative (no recursion limit to reach). ``budget``: a
    one-element list of entries still allowed, shared by the walks of one snapshot.

    Raises:
        SandboxCopyLimitError: more entries than the budget, or a tree deeper than
            :data:`MAX_DEPTH`.
    """
    out: list[tuple[str, str]] = []
    stack: list[tuple[str, int]] = [(top, 0)]
    while stack:
        dirpath, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SandboxCopyLimitError(
                "max_depth", f"a directory tree deeper than {MAX_DEPTH} levels"
            )
        try:
            names = sorted(os.listdir(dirpath))
        except OSError:
            continue
        budget[0] -= len(names)
        if budget[0] < 0:
            raise SandboxCopyLimitError("max_files", "more changed entries than the limit")
        subdirs = []
        for name in names:
            full = os.path.join(dirpath, name)
            out.append((full, os.path.relpath(full, top)))
            if os.path.isdir(full) and not os.path.islink(full):
                subdirs.append((full, depth + 1))
        stack.extend(reversed(subdirs))
    return out


def _snapshot(
    root_dir: str,
    upper: str | None,
    lowers: list[str],
    places: Sequence[str],
    exclude: Sequence[str],
    ignore: Sequence[str],
    archive: Path,
    max_bytes: int,
    max_entries: int,
) -> SandboxState:
    budget = [max_entries]
    deleted: list[str] = []
    changes: list[tuple[str, str]] = []
    writer = _Writer(archive, max_bytes)

    def keep(full: str, inside: str, kind: str) -> None:
        """List the change; archive it unless it is excluded."""
        if kind == "D":
            changes.append((kind, inside))
            if not _covered(inside, exclude):
                deleted.append(inside)
            return
        if kind:
            changes.append((kind, inside))
        if not _covered(inside, exclude) and not _bytecode(inside):
            writer.add(full, inside.lstrip("/"))

    try:
        if upper is not None:
            for full, rel in _walk(upper, budget):
                inside = "/" + rel
                if _covered(inside, ignore, ancestors=False):
                    continue
                st = os.lstat(full)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    keep(full, inside, "D")
                    continue
                if not _plain(st.st_mode):
                    continue  # sockets, FIFOs, devices: never restored
                in_lower = any(os.path.lexists(os.path.join(low, rel)) for low in lowers)
                if stat.S_ISDIR(st.st_mode) and in_lower:
                    try:
                        opaque = os.getxattr(full, _OPAQUE, follow_symlinks=False) == b"y"
                    except OSError:
                        opaque = False
                    if opaque and not _covered(inside, exclude):
                        deleted.append(inside)  # removed and made again: image's entries gone
                if (inside, os.path.islink(full) and os.readlink(full)) == _RUNTIME_LINK:
                    continue  # made by the container runtime in every sandbox
                if not in_lower:
                    kind = "A"
                elif stat.S_ISDIR(st.st_mode):  # listed when its mode or owner changed
                    kind = "" if _same_as_image(full, rel, lowers) else "C"
                else:
                    kind = "C"
                keep(full, inside, kind)
        for place in places:
            if _covered(place, ignore, ancestors=False) or _covered(place, exclude, False):
                continue
            top = root_dir + place
            if os.path.islink(top) or not os.path.isdir(top):
                continue
            for full, rel in _walk(top, budget):
                inside = f"{place}/{rel}"
                if _covered(inside, ignore, ancestors=False):
                    continue
                if not _plain(os.lstat(full).st_mode):
                    continue
                if _same_as_image(full, _rel(inside), lowers):
                    continue  # the image's own file, copied into the tmpfs at start
                keep(full, inside, "A")
    finally:
        writer.tar.close()
    shown = tuple((kind, printable_name(path)) for kind, path in changes)
    return SandboxState(archive, tuple(deleted), shown, writer.size)


def _bytecode(inside: str) -> bool:
    """Python's bytecode caches: listed, never restored (a cache is made again from its
    source, and a forged one would run in place of the source it claims to be)."""
    return inside.endswith((".pyc", ".pyo")) or "/__pycache__" in inside


def _plain(mode: int) -> bool:
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)


async def snapshot_state(
    sb: Sandbox,
    archive: Path | str,
    *,
    places: Sequence[str] = ("/tmp", "/var/tmp"),
    exclude: Sequence[str] = (),
    ignore: Sequence[str] = (),
    max_bytes: int = 1 << 30,
    max_entries: int = 100_000,
) -> SandboxState:
    """Record what ``sb`` changed against its image into the host file ``archive`` (see
    the module docstring). ``places``: tmpfs directories whose whole contents count as
    changes (a read-only root has nothing else); ``exclude``: in-sandbox paths never
    restored, nor their ancestors (listed in :attr:`SandboxState.changes` all the same:
    what an agent planted there is for the record); ``ignore``: in-sandbox paths neither
    restored nor listed (the caller's own files); ``max_bytes``: bound on the file
    content recorded; ``max_entries``: bound on the entries walked.

    Raises:
        SandboxCopyLimitError: the changed files hold more than ``max_bytes``, more than
            ``max_entries`` entries, or a tree deeper than :data:`MAX_DEPTH`.
        SandboxGoneError: the sandbox is gone.
        SandboxError: the root's changes cannot be read (see
            :func:`~clawrl.sandbox.root_changes`).
    """
    sb._check_open()
    ex = [check_sandbox_path(p) for p in exclude]
    ig = [check_sandbox_path(p) for p in ignore]
    pl = [check_sandbox_path(p) for p in places]
    init = await sb._find_init()
    root_dir = f"/proc/{init.pid}/root"
    upper: str | None = None
    lowers: list[str] = []
    if not sb.spec.read_only_root:
        upper, lowers = await asyncio.to_thread(overlay_dirs, sb)
    try:
        return await asyncio.to_thread(
            _snapshot, root_dir, upper, lowers, pl, ex, ig, Path(archive), max_bytes, max_entries
        )
    except OSError as exc:
        raise SandboxError(f"cannot snapshot {sb.name}: {exc}") from exc


async def restore_state(sb: Sandbox, state: SandboxState, timeout: float = 300.0) -> str:
    """Apply ``state`` to the fresh sandbox ``sb`` (as root): delete ``state.deleted``,
    then extract the archive at ``/``. Returns ``""`` on success, else why it failed (the
    snapshot's own contents, e.g. an entry the image's tar cannot make).

    Raises:
        SandboxError: the sandbox cannot run the commands.
    """
    deleted = list(state.deleted)
    while len(deleted) > _RM_BATCH:  # the last batch goes with the extraction
        batch, deleted = deleted[:_RM_BATCH], deleted[_RM_BATCH:]
        r = await sb.exec(["rm", "-rf", "--", *batch], user="0:0", workdir="/", timeout=timeout)
        if not r.ok:
            return f"deleting: {r.stderr.decode('utf-8', 'replace').strip()[-500:]}"
    data = await asyncio.to_thread(state.archive.read_bytes)
    script = 'if [ "$#" -gt 0 ]; then rm -rf -- "$@" || exit 1; fi; exec tar -x -p -f - -C /'
    r = await sb.exec(
        ["/bin/sh", "-c", script, "sh", *deleted],
        stdin=data,
        user="0:0",
        workdir="/",
        timeout=timeout,
    )
    if not r.ok:
        return f"extracting: {r.stderr.decode('utf-8', 'replace').strip()[-500:]}"
    return ""
