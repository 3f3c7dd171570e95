"""Shared hooks of the cross-package tests: tests marked ``podman`` skip where podman is
missing."""

from __future__ import annotations

import shutil

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("podman") is not None and shutil.which("podman") is None:
        pytest.skip("needs podman")
