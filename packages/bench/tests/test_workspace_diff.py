"""The workspace diff of a rollout (before / after the harness ran) against a brute-force
dict difference."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clawrl.bench import workspace_diff
from hypothesis import given, settings
from hypothesis import strategies as st


def test_workspace_diff_kinds(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "sub").mkdir(parents=True)
        (d / "same.txt").write_text("x\n")
    (a / "gone.txt").write_text("bye\n")
    (a / "edit.txt").write_text("one\ntwo\n")
    (b / "edit.txt").write_text("one\nthree\n")
    (b / "sub" / "new.bin").write_bytes(b"\0\1\2")
    (b / "empty").mkdir()
    os.symlink("same.txt", b / "link")
    changes = {c.path: c for c in workspace_diff(a, b)}
    assert set(changes) == {"gone.txt", "edit.txt", "sub/new.bin", "empty", "link"}
    assert changes["gone.txt"].change == "removed" and changes["gone.txt"].size_after is None
    assert changes["edit.txt"].change == "changed"
    assert "-two" in (changes["edit.txt"].diff or "") and "+three" in (
        changes["edit.txt"].diff or ""
    )
    assert changes["sub/new.bin"].change == "added" and changes["sub/new.bin"].diff is None
    assert changes["empty"].kind == "dir" and changes["link"].kind == "symlink"
    assert workspace_diff(a, a) == []


@settings(max_examples=40, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from("abcdef"), st.binary(max_size=8), max_size=6),
    after=st.dictionaries(st.sampled_from("abcdef"), st.binary(max_size=8), max_size=6),
)
def test_workspace_diff_matches_dict_difference(
    tmp_path_factory: pytest.TempPathFactory, before: dict[str, bytes], after: dict[str, bytes]
) -> None:
    root = tmp_path_factory.mktemp("ws")
    for name, files in (("a", before), ("b", after)):
        (root / name).mkdir()
        for k, v in files.items():
            (root / name / k).write_bytes(v)
    changes = {c.path: c.change for c in workspace_diff(root / "a", root / "b")}
    expected = {k: "added" for k in after.keys() - before.keys()}
    expected |= {k: "removed" for k in before.keys() - after.keys()}
    expected |= {k: "changed" for k in before.keys() & after.keys() if before[k] != after[k]}
    assert changes == expected


def test_undecodable_names_are_stored_printable(tmp_path: Path) -> None:
    """A name that is not UTF-8 is stored as printable, valid UTF-8 (its other bytes as
    ``\\xNN``), in the path and in the diff's header."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / os.fsdecode(b"bad_\xff\xfe.txt")).write_text("x\n")
    [change] = workspace_diff(a, b)
    assert change.path == "bad_\\xff\\xfe.txt" and "+++ b/bad_\\xff\\xfe.txt" in (change.diff or "")
    change.model_dump_json()  # valid UTF-8 throughout
