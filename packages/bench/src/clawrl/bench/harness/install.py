"""Installed harness runtimes: the cache, installer commands, install-once under a lock.

Runtimes live in ``<cache>/<name>-<version>/`` (:func:`harness_cache_dir`), the layout and
lock of ``tools/harnesses/install.sh``, so either one installs a runtime once for both; a
``.complete`` stamp marks a finished install and a failed one leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawrl.bench.harness.base import HarnessAdapter, HarnessInstallError, ProgressFn

__all__ = ["CachedHarness", "harness_cache_dir", "run_streamed"]


def harness_cache_dir() -> Path:
    """Root of the cached harness runtimes: ``$CLAWRL_HARNESS_CACHE`` or
    ``~/.cache/clawrl/harnesses`` (shared with ``tools/harnesses/install.sh``)."""
    env = os.environ.get("CLAWRL_HARNESS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "clawrl" / "harnesses"


def run_streamed(
    argv: list[str],
    say: ProgressFn,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    tail_lines: int = 20,
) -> tuple[int, list[str]]:
    """Run an installer command to its end, passing each non-empty line of its combined
    stdout/stderr to ``say``; returns its exit status and its last ``tail_lines`` lines.

    The pipe is always closed and the process always reaped (a ``with`` block: an unclosed
    pipe is a ``ResourceWarning``, an error under the tests' ``filterwarnings=error``); if
    reading is interrupted (``say`` raising, ``KeyboardInterrupt``), the process is killed
    first, so it can never be left running or block on a full pipe.

    Raises:
        HarnessInstallError: the command cannot be started.
    """
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise HarnessInstallError(f"cannot start {argv[0]!r}: {exc}") from exc
    with proc:
        assert proc.stdout is not None
        tail: list[str] = []
        try:
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    tail = [*tail, line][-tail_lines:]
                    say(line)
        except BaseException:
            proc.kill()
            raise
        rc = proc.wait()
    return rc, tail


class CachedHarness(HarnessAdapter):
    """An adapter whose runtime is installed once into ``<cache>/<key>-<version>/``.

    Subclasses set :attr:`key`, ``version``, ``cache_dir`` and implement :attr:`binary` and
    :meth:`_install`; :meth:`prepare` runs the install under the cache's lock (the one
    ``tools/harnesses/install.sh`` takes too), removes a half-made prefix on any failure and
    stamps a finished one ``.complete``.
    """

    #: directory name stem in the cache (``<key>-<version>``)
    key = ""
    version: str
    cache_dir: Path

    @property
    def prefix(self) -> Path:
        """``<cache>/<key>-<version>``."""
        return self.cache_dir / f"{self.key}-{self.version}"

    @property
    @abstractmethod
    def binary(self) -> Path:
        """The harness's launcher (host path = in-sandbox path)."""

    def installed(self) -> bool:
        return (self.prefix / ".complete").is_file() and self.binary.exists()

    def _preflight(self) -> None:
        """Check the installer's own tools before taking the lock (default: nothing).

        Raises:
            HarnessInstallError: a tool is missing.
        """

    @abstractmethod
    def _install(self, say: ProgressFn) -> None:
        """Install into the (empty) :attr:`prefix`.

        Raises:
            HarnessInstallError: the install failed.
        """

    def prepare(self, progress: ProgressFn | None = None) -> None:
        """Install the pinned runtime unless cached (under the cache's install lock).

        Raises:
            HarnessInstallError: a tool is missing or the install failed (the prefix is
                removed).
        """
        say = progress or (lambda _msg: None)
        if self.installed():
            return
        self._preflight()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the lock tools/harnesses/install.sh takes too
            if self.installed():
                return
            started = time.monotonic()
            shutil.rmtree(self.prefix, ignore_errors=True)
            try:
                self._install(say)
            except BaseException:
                shutil.rmtree(self.prefix, ignore_errors=True)
                raise
            (self.prefix / ".complete").touch()
            say(f"{self.key} {self.version}: installed in {time.monotonic() - started:.0f} s")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "version": self.version}
