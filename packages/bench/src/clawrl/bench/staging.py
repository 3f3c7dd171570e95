"""Content-addressed staging of task files that a loader generates (Terminal-Bench 1's
tests and solution, AgentBench OS's scripts): ``<cache>/clawrl/bench/<kind>/<digest>/``."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["stage_files"]


def _cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "clawrl" / "bench"


def stage_files(
    kind: str, version: str, files: Mapping[str, bytes], dirs: Iterable[str] = ()
) -> Path:
    """The directory holding ``files`` (relative POSIX path -> content) and the empty
    directories ``dirs``, under ``$XDG_CACHE_HOME/clawrl/bench/<kind>/`` (default
    ``~/.cache``), named by a digest of ``version`` and the files.

    It is written in a temporary directory beside it and published with an atomic rename,
    so concurrent loaders of the same task agree and a crash leaves no half-written entry;
    an existing entry is returned as it is.

    Raises:
        OSError: the cache cannot be written.
    """
    h = hashlib.sha256(version.encode())
    for rel, data in sorted(files.items()):
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    base = _cache_root() / kind
    dest = base / h.hexdigest()[:16]
    if dest.is_dir():
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=base))
    try:
        for rel, data in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        for d in dirs:
            (tmp / d).mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
