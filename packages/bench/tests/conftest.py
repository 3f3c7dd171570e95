"""Shared hooks of bench's tests: tests marked ``podman`` skip where podman is missing; the
``one_line`` fixture reads a CLI's single line of output."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("podman") is not None and shutil.which("podman") is None:
        pytest.skip("needs podman")


@pytest.fixture
def one_line(capsys: pytest.CaptureFixture[str]) -> Callable[[], str]:
    """Reads what was printed so far and returns it, asserting that it is one line."""

    def read() -> str:
        printed = capsys.readouterr()
        lines = [ln for ln in (printed.out + printed.err).splitlines() if ln.strip()]
        assert len(lines) == 1, lines
        return lines[0]

    return read
