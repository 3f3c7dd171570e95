"""Executors: where verifier and oracle commands run.

An :class:`ExecSpec` describes one command in *sandbox terms*: an argv, a working
directory and environment using in-sandbox paths, and a list of :class:`Mount` s that put
host directories at in-sandbox paths. An :class:`Executor` runs it and returns an
:class:`ExecResult`.

* :class:`LocalExecutor` runs the command as a host subprocess (``/usr/bin`` tools only:
  bash, coreutils, Debian's ``python3``) with a timeout. It has no mount namespace, so it
  *translates paths*: every mount target is replaced by its host directory in the argv,
  the working directory, the environment, and in the text of files under read-only mounts
  (which it first copies to a private directory). Good for trusted task code (CI, the
  oracle); agent code belongs in a sandbox: :func:`~clawrl.bench.verify` refuses to run,
  on a ``LocalExecutor``, a verifier that executes workspace code unless the executor was
  built with ``trust_workspace_code=True`` (workspaces whose code you wrote yourself).
* A sandbox executor (clawrl.sandbox) runs the same spec in a podman container with real
  bind mounts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from clawrl.bench.errors import ExecutorError
from clawrl.sandbox import SandboxState, owned_tempdir

__all__ = ["ExecResult", "ExecSpec", "Executor", "LocalExecutor", "Mount"]

#: Bytes of stdout / stderr kept in an :class:`ExecResult` (the tail).
OUTPUT_LIMIT = 64 * 1024
_TEXT_LIMIT = 2 * 1024 * 1024


@dataclass(frozen=True)
class Mount:
    """Host directory ``source`` visible at the absolute in-sandbox path ``target``.

    ``persist`` (writable mounts only): whether the command's changes must reach
    ``source``. Executors that copy files in and out (the sandbox executor) skip copying
    back mounts with ``persist=False``.

    ``private``: only root may read the tree (the trusted verifier files, which agent code
    run by a verifier as an unprivileged user must not see): the sandbox executor stages it
    root-owned with directories 0700 and files 0600 (0700 if executable), in place of any
    entries another mount has at or below ``target``; :class:`LocalExecutor` gives its
    private copy of a read-only mount the same modes.
    """

    source: Path
    target: str
    read_only: bool = True
    persist: bool = True
    private: bool = False

    def __post_init__(self) -> None:
        if not PurePosixPath(self.target).is_absolute():
            raise ValueError(f"mount target must be absolute: {self.target!r}")


@dataclass(frozen=True)
class ExecSpec:
    """One command to run. Paths in ``argv``, ``cwd`` and ``env`` are in-sandbox paths.

    ``timeout_s`` is wall-clock seconds; on expiry the whole process group is killed.

    ``user``: ``"uid:gid"`` the command runs as under a root supervisor, its writable
    mounts and private mounts handed to that user (the sandbox executor); ``None``: root.
    :class:`LocalExecutor` runs every command as the host user and ignores it.

    ``state``: the agent's container state (:func:`clawrl.sandbox.snapshot_state`) the
    command must see: the sandbox executor restores it into a fresh sandbox with a
    writable root before anything else, and there binds the read-only mounts read-only
    (over whatever the state holds at their targets); :class:`LocalExecutor` refuses it.
    """

    argv: tuple[str, ...]
    cwd: str
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    user: str | None = None
    state: SandboxState | None = None


@dataclass(frozen=True)
class ExecResult:
    """Outcome of a command that started.

    ``exit_code`` is ``None`` when the command was killed by the timeout; ``stdout`` and
    ``stderr`` are decoded UTF-8 (replacement on errors), the last :data:`OUTPUT_LIMIT`
    bytes; ``duration_s`` is wall-clock seconds.

    ``output_error``: why a writable mount could not be read back whole (it was replaced by
    a link or removed, it held links or special files, or it hit the copy limits): what the
    command's own files caused, never the infrastructure; ``""``: read back whole.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    output_error: str = ""


@runtime_checkable
class Executor(Protocol):
    """Runs an :class:`ExecSpec`. Raises :class:`ExecutorError` only if it cannot start it."""

    def run(self, spec: ExecSpec) -> ExecResult:
        """Run ``spec`` to completion or timeout."""
        ...


def _tail(data: bytes) -> str:
    return data[-OUTPUT_LIMIT:].decode("utf-8", errors="replace")


class LocalExecutor:
    """Run specs as host subprocesses with path translation (see the module docstring).

    Args:
        path: ``PATH`` given to commands; the default sees only ``/usr/bin`` and ``/bin``,
            as a sandbox whose root is the host's ``/usr`` does.
        trust_workspace_code: the workspaces verified through this executor hold only
            code you trust (an oracle's output, an untouched task workspace, CI fixtures),
            so verifiers that execute workspace code may run on the host. Never set it for
            an agent's workspace.
    """

    def __init__(self, path: str = "/usr/bin:/bin", *, trust_workspace_code: bool = False) -> None:
        self.path = path
        self.trust_workspace_code = trust_workspace_code

    def run(self, spec: ExecSpec) -> ExecResult:
        """Run ``spec``; see :class:`Executor`."""
        if spec.state is not None:
            raise ExecutorError("a container state to verify on needs a sandbox executor")
        with owned_tempdir("clawrl-local-") as scratch:
            mapping = self._materialise(spec.mounts, Path(scratch))
            translate = _Translator(mapping)
            cwd = translate.path(spec.cwd)
            if not Path(cwd).is_dir():
                raise ExecutorError(f"working directory {spec.cwd!r} is not mounted ({cwd})")
            home = Path(scratch) / "home"
            home.mkdir()
            env = {
                "PATH": self.path,
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "TMPDIR": scratch,
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1",
            }
            env.update({k: translate.text(v) for k, v in spec.env.items()})
            argv = [translate.text(a) for a in spec.argv]
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ExecutorError(f"cannot start {argv[0]!r}: {exc}") from exc
            try:
                out, err = proc.communicate(timeout=spec.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                with _suppress_lookup():
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                timed_out = True
            finally:
                # reap anything the command left behind in its process group
                with _suppress_lookup():
                    os.killpg(proc.pid, signal.SIGKILL)
            return ExecResult(
                exit_code=None if timed_out else proc.returncode,
                stdout=_tail(out),
                stderr=_tail(err),
                duration_s=time.monotonic() - start,
                timed_out=timed_out,
            )

    @staticmethod
    def _materialise(mounts: tuple[Mount, ...], scratch: Path) -> dict[str, Path]:
        """Map each mount target to a host dir; read-only mounts become translated copies."""
        mapping: dict[str, Path] = {}
        for i, mount in enumerate(mounts):
            if not mount.source.is_dir():
                raise ExecutorError(f"mount source {mount.source} is not a directory")
            mapping[str(PurePosixPath(mount.target))] = mount.source.resolve()
            if mount.read_only:
                copy = scratch / f"mount{i}"
                shutil.copytree(mount.source, copy, symlinks=True)
                if mount.private:
                    make_private(copy)
                mapping[str(PurePosixPath(mount.target))] = copy
        translate = _Translator(mapping)
        for target, host in mapping.items():
            source = next(m for m in mounts if str(PurePosixPath(m.target)) == target)
            if source.read_only:
                translate.rewrite_tree(host)
        return mapping


def _set_tree_modes(root: Path, dir_mode: int, file_mode: int) -> None:
    """Give every directory under ``root`` (``root`` included) ``dir_mode`` and every
    file ``file_mode``, or ``dir_mode`` where the owner may execute it; symlinks are left
    alone (never followed)."""
    root.chmod(dir_mode)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            if path.is_dir():
                path.chmod(dir_mode)
            else:
                path.chmod(dir_mode if path.stat().st_mode & 0o100 else file_mode)


def make_private(root: Path) -> None:
    """Give the tree at ``root`` the modes of a :attr:`Mount.private` tree: directories
    0700, files 0600, or 0700 where the owner may execute them."""
    _set_tree_modes(root, 0o700, 0o600)


def make_readable(root: Path) -> None:
    """Give the tree at ``root`` the modes of a read-only, non-private mount: directories
    0755, files 0644, or 0755 where the owner may execute them."""
    _set_tree_modes(root, 0o755, 0o644)


def _suppress_lookup() -> AbstractContextManager[None]:
    return suppress(ProcessLookupError, PermissionError)


class _Translator:
    """Replace in-sandbox mount targets by host paths (longest target first)."""

    def __init__(self, mapping: Mapping[str, Path]) -> None:
        self.mapping = dict(mapping)
        targets = sorted(self.mapping, key=len, reverse=True)
        if targets:
            alternatives = "|".join(re.escape(t) for t in targets)
            self.pattern: re.Pattern[str] | None = re.compile(
                rf"(?<![\w./-])({alternatives})(?![\w.-])"
            )
        else:
            self.pattern = None

    def text(self, value: str) -> str:
        if self.pattern is None:
            return value
        return self.pattern.sub(lambda m: str(self.mapping[m.group(1)]), value)

    def path(self, value: str) -> str:
        return self.text(str(PurePosixPath(value)))

    def rewrite_tree(self, root: Path) -> None:
        for path in root.rglob("*"):
            if path.is_symlink() or not path.is_file() or path.stat().st_size > _TEXT_LIMIT:
                continue
            data = path.read_bytes()
            if b"\0" in data:
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            new = self.text(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
