"""A thin synchronous wrapper over :class:`~clawrl.sandbox.Sandbox` for scripts and notebooks.

The coroutines run on one private event loop in a daemon thread, so the wrapper also works
when the calling thread already runs an event loop (e.g. Jupyter)::

    with SyncSandbox(SandboxSpec()) as sb:
        print(sb.exec("echo hi").text)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, Unpack

from .execute import ExecOptions
from .hostfs import CopyLimits
from .podman import Podman
from .sandbox import Sandbox
from .spec import WORKSPACE, ExecResult, FileContent, SandboxSpec

__all__ = ["SyncSandbox"]

T = TypeVar("T")
_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def _portal() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="clawrl-sandbox-sync", daemon=True
            ).start()
            _loop = loop
        return _loop


def _call(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run_coroutine_threadsafe(coro, _portal()).result()


class SyncSandbox:
    """Blocking counterpart of :class:`Sandbox`; creating it creates the sandbox.

    Args:
        spec: what to create (default ``SandboxSpec()``).
        podman: backend (default: the shared one).
        run_id: run id label.

    Raises the same errors as :meth:`Sandbox.create`.
    """

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        *,
        podman: Podman | None = None,
        run_id: str | None = None,
    ) -> None:
        self.sandbox: Sandbox = _call(Sandbox.create(spec, podman=podman, run_id=run_id))

    @property
    def id(self) -> str:
        """Container id."""
        return self.sandbox.id

    def exec(self, cmd: str | Sequence[str], **options: Unpack[ExecOptions]) -> ExecResult:
        """See :meth:`Sandbox.exec`."""
        return _call(self.sandbox.exec(cmd, **options))

    def put_files(self, files: Mapping[str, FileContent]) -> None:
        """See :meth:`Sandbox.put_files`."""
        _call(self.sandbox.put_files(files))

    def put_file(self, path: str, content: bytes | str | Path) -> None:
        """See :meth:`Sandbox.put_file`."""
        _call(self.sandbox.put_file(path, content))

    def put_dir(self, host_dir: Path | str, dest: str = WORKSPACE) -> None:
        """See :meth:`Sandbox.put_dir`."""
        _call(self.sandbox.put_dir(host_dir, dest))

    def get_file(self, path: str, max_bytes: int = 1 << 30) -> bytes:
        """See :meth:`Sandbox.get_file`."""
        return _call(self.sandbox.get_file(path, max_bytes))

    def get_dir(
        self,
        path: str,
        host_dest: Path | str,
        max_bytes: int = 1 << 30,
        *,
        limits: CopyLimits | None = None,
    ) -> Path:
        """See :meth:`Sandbox.get_dir`."""
        return _call(self.sandbox.get_dir(path, host_dest, max_bytes, limits=limits))

    def kill_all(self, timeout: float = 10.0) -> int:
        """See :meth:`Sandbox.kill_all`."""
        return _call(self.sandbox.kill_all(timeout))

    def destroy(self) -> None:
        """See :meth:`Sandbox.destroy`."""
        _call(self.sandbox.destroy())

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.destroy()
