"""Shared hooks of the cross-package tests: tests marked ``podman`` skip where podman is
missing; the ``interrupts`` fixture for the Ctrl-C / SIGTERM tests of the commands."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("podman") is not None and shutil.which("podman") is None:
        pytest.skip("needs podman")


class Interrupts:
    """What the interrupt tests of ``bench``, ``train`` and ``synth`` share."""

    @staticmethod
    def containers(run_id: str) -> list[str]:
        """The podman containers (running or not) labelled with ``run_id``."""
        out = subprocess.run(
            ["podman", "ps", "-a", "--filter", f"label=clawrl.run_id={run_id}", "-q"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.split()

    @staticmethod
    def send(
        proc: subprocess.Popen[str], sig: int, timeout: float = 60
    ) -> tuple[int | None, float]:
        """Send ``sig`` as a user would — SIGINT (Ctrl-C) to the whole process group, SIGTERM
        (``kill``) to the process only — and wait; (exit status or None, seconds taken). A
        process still running after ``timeout`` is killed with its group."""
        t0 = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        elapsed = time.monotonic() - t0
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return rc, elapsed


@pytest.fixture
def interrupts() -> Interrupts:
    return Interrupts()
