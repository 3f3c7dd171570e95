"""An :class:`~clawrl.bench.Executor` that runs every spec in a fresh clawrl.sandbox sandbox.

Each :meth:`SandboxExecutor.run` creates a podman sandbox (the default root: the host's
``/usr`` read-only, ``--network none``), copies every mount's host directory in at its
target path, runs the command there with the spec's timeout, copies writable mounts with
``persist=True`` back to their host directories (replacing their contents, so deletions
and moves are kept), and destroys the sandbox. Nothing of an earlier sandbox — e.g. the
agent's — is visible: a verifier run this way sees only the files it was given.

Host symlinks inside mounted directories are not copied in (clawrl.sandbox never follows
them).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from clawrl.bench.errors import ExecutorError
from clawrl.bench.executors import OUTPUT_LIMIT, ExecResult, ExecSpec
from clawrl.sandbox import SandboxError, SandboxSpec, SyncSandbox

__all__ = ["SandboxExecutor"]


class SandboxExecutor:
    """Run :class:`ExecSpec` s in fresh podman sandboxes (see the module docstring).

    Args:
        base_spec: sandbox template (limits, image or rootfs, env); its ``files`` are
            replaced by the mounts of each spec and its root is made writable so that mount
            targets such as ``/tests`` or ``/app`` can be created.
        run_id: run id label of the sandboxes (default: the process's).

    Thread-safe: several threads may call :meth:`run` at once.
    """

    def __init__(self, base_spec: SandboxSpec | None = None, run_id: str | None = None) -> None:
        self.base_spec = base_spec or SandboxSpec()
        self.run_id = run_id

    def run(self, spec: ExecSpec) -> ExecResult:
        """Run ``spec``; raises :class:`ExecutorError` if the sandbox cannot be created or used."""
        sb_spec = dataclasses.replace(
            self.base_spec,
            files={m.target: m.source for m in spec.mounts},
            read_only_root=False,
        )
        try:
            with SyncSandbox(sb_spec, run_id=self.run_id) as sb:
                res = sb.exec(
                    list(spec.argv),
                    timeout=spec.timeout_s,
                    env=dict(spec.env),
                    workdir=spec.cwd,
                    max_output_bytes=OUTPUT_LIMIT,
                )
                for mount in spec.mounts:
                    if not mount.read_only and mount.persist:
                        with tempfile.TemporaryDirectory(prefix="clawrl-sbcopy-") as tmp:
                            sb.get_dir(mount.target, Path(tmp) / "d")
                            _replace_contents(mount.source, Path(tmp) / "d")
        except SandboxError as exc:
            raise ExecutorError(f"sandbox: {exc}") from exc
        return ExecResult(
            exit_code=None if res.timed_out else res.exit_code,
            stdout=res.stdout.decode("utf-8", errors="replace"),
            stderr=res.stderr.decode("utf-8", errors="replace"),
            duration_s=res.duration_s,
            timed_out=res.timed_out,
        )


def _replace_contents(dest: Path, src: Path) -> None:
    for child in list(dest.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for child in src.iterdir():
        shutil.move(str(child), dest / child.name)
