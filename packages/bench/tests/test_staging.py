"""Content-addressed staging of loader-generated task files."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench.staging import stage_files


def test_same_files_same_entry_other_files_other_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    files = {"tests/run.sh": b"echo ok\n", "solution/solve.sh": b"true\n"}
    a = stage_files("kind", "v1", files, ("environment",))
    assert a.parent == tmp_path / "clawrl" / "bench" / "kind"
    assert (a / "tests/run.sh").read_bytes() == b"echo ok\n" and (a / "environment").is_dir()
    assert stage_files("kind", "v1", dict(reversed(files.items()))) == a  # order-free
    assert stage_files("kind", "v2", files) != a  # the version is part of the name
    assert stage_files("kind", "v1", {**files, "tests/run.sh": b"echo no\n"}) != a
    assert not list(a.parent.glob(".stage-*"))  # no temporary directory left behind
