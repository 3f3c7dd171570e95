"""The JSON-lines reader shared by bench, ise-synth and rl-core."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import iter_json_objects


class MyError(Exception):
    pass


def test_objects_in_order_blank_lines_skipped(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n\n  \n{"a": 2}\n')
    assert list(iter_json_objects(p)) == [{"a": 1}, {"a": 2}]


def test_a_torn_last_line_is_the_resume_point_unless_strict(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"a": 1}\n{"a": 2, "b"')  # interrupted while writing the last line
    assert list(iter_json_objects(p, MyError)) == [{"a": 1}]
    with pytest.raises(MyError, match=r"a\.jsonl:2: not valid JSON"):
        list(iter_json_objects(p, MyError, torn_tail_ok=False))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"a": 1}\n{broken\n{"a": 3}\n', ":2: not valid JSON"),  # not the last line
        (b'{"a": 1}\n{broken\n', ":2: not valid JSON"),  # terminated: not a torn write
        (b'{"a": 1}\n[1, 2]\n', ":2: not a JSON object"),
    ],
)
def test_bad_lines_raise_the_callers_error_with_the_line(
    tmp_path: Path, data: bytes, match: str
) -> None:
    p = tmp_path / "a.jsonl"
    p.write_bytes(data)
    with pytest.raises(MyError, match=match):
        list(iter_json_objects(p, MyError))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(MyError, match="cannot read"):
        list(iter_json_objects(tmp_path / "missing.jsonl", MyError))


def test_json_bytes_writes_undecodable_names_printable() -> None:
    """A string carrying a name that is not UTF-8 (a path in a message) never fails the
    write: it is written with its other bytes as ``\\xNN``."""
    import os

    from clawrl.bench import json_bytes

    bad = os.fsdecode(b"bad_\xff.txt")
    assert (
        json_bytes({"reason": f"cannot read {bad}"}) == b'{"reason":"cannot read bad_\\\\xff.txt"}'
    )
    assert json_bytes([1, "ok"], indent=True) == b'[\n  1,\n  "ok"\n]'
