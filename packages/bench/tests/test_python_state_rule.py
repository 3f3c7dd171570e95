"""Which changes of the agent's container to the Python the trusted runner starts are
tampering (``verify._python_planted``): planted code that would run as root is refused;
honest installs (packages in site directories, Debian's split standard-library parts, new
C extensions, bytecode caches) are not."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from clawrl.bench.verify import _python_planted


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("C", "/usr/bin/python3"),
        ("A", "/usr/local/bin/python3.11"),
        ("C", "/usr/local/bin/pytest"),
        ("A", "/usr/lib/python3/dist-packages/zz.pth"),
        ("A", "/usr/local/lib/python3.11/site-packages/sitecustomize.py"),
        ("A", "/usr/lib/python3.11/usercustomize.py"),
        ("C", "/usr/lib/python3.11/json/__init__.py"),
        ("D", "/usr/lib/python3.11/os.py"),
        ("A", "/usr/lib/python3.11/colorsys2.py"),
        ("A", "/usr/lib/python3.11/pytest.py"),
        ("A", "/usr/lib/python3.11/lib-dynload/pytest.cpython-311-x86_64-linux-gnu.so"),
        ("C", "/usr/local/lib/python3.11/site-packages/_pytest/junitxml.py"),
        ("A", "/usr/local/lib/python3.11/site-packages/pluggy/_hooks.py"),
    ],
)
def test_planted_python_is_tampering(kind: str, path: str) -> None:
    assert _python_planted(kind, PurePosixPath(path))


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("A", "/usr/local/lib/python3.11/site-packages/requests/__init__.py"),
        ("C", "/usr/lib/python3/dist-packages/yaml/__init__.py"),
        ("A", "/usr/lib/python3.11/ensurepip/__init__.py"),
        ("A", "/usr/lib/python3.11/venv/__init__.py"),
        ("A", "/usr/lib/python3.11/lib-dynload/_gdbm.cpython-311-x86_64-linux-gnu.so"),
        ("A", "/usr/local/lib/python3.11/__pycache__/json.cpython-311.pyc"),
        ("C", "/usr/lib/python3.11/json/__pycache__/decoder.cpython-311.pyc"),
        ("A", "/usr/local/lib/python3.11/site-packages"),
        ("A", "/usr/local/bin/flask"),
        ("C", "/etc/hosts"),
    ],
)
def test_honest_installs_are_not_tampering(kind: str, path: str) -> None:
    assert not _python_planted(kind, PurePosixPath(path))
