"""What an agent changed: the diff of a finished workspace against the initial one."""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path
from typing import Literal

from clawrl.sandbox import printable_name
from pydantic import BaseModel, ConfigDict

__all__ = ["FileChange", "workspace_diff"]


class FileChange(BaseModel):
    """One path that differs between the initial and the final workspace.

    Attributes:
        path: POSIX path relative to the workspace root, as printable UTF-8: the bytes of a
            name that are not UTF-8 written ``\\xNN`` (:func:`clawrl.sandbox.printable_name`).
        change: ``added`` | ``changed`` | ``removed``.
        kind: ``file`` | ``symlink`` | ``dir`` (empty directories only) | ``other``.
        size_before / size_after: bytes (``None`` where the path does not exist).
        diff: unified diff of the text (``None`` for binary files, symlinks, or when either
            side exceeds the diff cap; then only sizes are given).
    """

    model_config = ConfigDict(frozen=True)

    path: str
    change: Literal["added", "changed", "removed"]
    kind: Literal["file", "symlink", "dir", "other"] = "file"
    size_before: int | None = None
    size_after: int | None = None
    diff: str | None = None


def _entries(root: Path) -> dict[str, tuple[str, Path]]:
    """relative path -> (kind, path) for files, symlinks, other specials and empty dirs."""
    out: dict[str, tuple[str, Path]] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in list(dirnames):
            p = base / name
            if p.is_symlink():
                out[p.relative_to(root).as_posix()] = ("symlink", p)
                dirnames.remove(name)
            elif not any(p.iterdir()):
                out[p.relative_to(root).as_posix()] = ("dir", p)
        for name in filenames:
            p = base / name
            kind = "symlink" if p.is_symlink() else "file" if p.is_file() else "other"
            out[p.relative_to(root).as_posix()] = (kind, p)
    return out


def _digest(kind: str, path: Path) -> str:
    if kind == "symlink":
        return "link:" + os.readlink(path)
    if kind == "file":
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                h.update(chunk)
        return h.hexdigest()
    return kind


def _text(path: Path | None, cap: int) -> list[str] | None:
    if path is None:
        return []
    if path.stat().st_size > cap:
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def workspace_diff(
    before: Path | str, after: Path | str, max_diff_bytes: int = 64 * 1024
) -> list[FileChange]:
    """Paths added, changed or removed from ``before`` to ``after`` (host directories).

    Files are compared by content (SHA-256), symlinks by target; empty directories count as
    entries (non-empty ones are implied by their files). Text files up to
    ``max_diff_bytes`` on both sides get a unified diff. Sorted by path.
    """
    a, b = _entries(Path(before)), _entries(Path(after))
    changes: list[FileChange] = []
    for rel in sorted(a.keys() | b.keys()):
        old, new = a.get(rel), b.get(rel)
        # an empty directory that merely filled up (or emptied) is not a change of its own
        if old is None and new is not None and new[0] == "dir" and (Path(before) / rel).is_dir():
            continue
        if new is None and old is not None and old[0] == "dir" and (Path(after) / rel).is_dir():
            continue
        if old is not None and new is not None:
            if old[0] == new[0] and _digest(*old) == _digest(*new):
                continue
            change: Literal["added", "changed", "removed"] = "changed"
        else:
            change = "added" if old is None else "removed"
        kind = (new or old)[0]  # type: ignore[index]
        size_before = old[1].lstat().st_size if old and old[0] == "file" else None
        size_after = new[1].lstat().st_size if new and new[0] == "file" else None
        diff: str | None = None
        name = printable_name(rel)
        both_files = all(e is None or e[0] == "file" for e in (old, new))
        if kind == "file" and both_files:
            lines_a = _text(old[1] if old else None, max_diff_bytes)
            lines_b = _text(new[1] if new else None, max_diff_bytes)
            if lines_a is not None and lines_b is not None:
                diff = "".join(
                    difflib.unified_diff(
                        lines_a,
                        lines_b,
                        fromfile="/dev/null" if old is None else f"a/{name}",
                        tofile="/dev/null" if new is None else f"b/{name}",
                    )
                )
        changes.append(
            FileChange(
                path=name,
                change=change,
                kind=kind,  # type: ignore[arg-type]
                size_before=size_before,
                size_after=size_after,
                diff=diff,
            )
        )
    return changes
