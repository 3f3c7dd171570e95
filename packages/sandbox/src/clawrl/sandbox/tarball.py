"""The tar stream that places files into a sandbox (:meth:`Sandbox.put_files`, ``spec.files``)."""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Mapping
from pathlib import Path

from .errors import SandboxSpecError
from .spec import FileContent, check_sandbox_path

__all__ = ["build_tar", "uid_gid"]


def uid_gid(user: str) -> tuple[int, int]:
    """(uid, gid) of a ``uid[:gid]`` user string (gid defaults to uid)."""
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


def _add_host_dir(
    tar: tarfile.TarFile, name: str, src: Path, dest: str, uid: int, gid: int
) -> None:
    """Add the entries below the host directory ``src`` under ``name`` (not ``name`` itself).

    Symlinks and special files are skipped: host symlinks are never followed out of the tree.
    """
    for sub in sorted(src.rglob("*")):
        rel = sub.relative_to(src).as_posix()
        if sub.is_symlink() or not (sub.is_dir() or sub.is_file()):
            continue  # never follow host symlinks out of the tree
        if sub.is_dir():
            _add_dir(tar, f"{name}/{rel}", uid, gid)
        else:
            mode = 0o755 if os.access(sub, os.X_OK) else 0o644
            _add_bytes(tar, f"{name}/{rel}", _read_host(sub, dest), uid, gid, mode)


def build_tar(files: Mapping[str, FileContent], uid: int, gid: int) -> bytes:
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
            if not isinstance(content, Path):
                data = content.encode() if isinstance(content, str) else content
                _add_bytes(tar, name, data, uid, gid, 0o644)
                continue
            if not content.exists():
                raise SandboxSpecError(f"host path {content} (for {path}) does not exist")
            if not (content.is_dir() or content.is_file()):
                # a FIFO would block the event loop forever, a device would stream forever
                raise SandboxSpecError(
                    f"host path {content} (for {path}) is not a regular file or a directory"
                )
            if content.is_dir():
                _add_host_dir(tar, name, content, path, uid, gid)
                if name not in dirs_done:
                    _add_dir(tar, name, uid, gid)
            else:
                mode = 0o755 if os.access(content, os.X_OK) else 0o644
                _add_bytes(tar, name, _read_host(content, path), uid, gid, mode)
    return buf.getvalue()
