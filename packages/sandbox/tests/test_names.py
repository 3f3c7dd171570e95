"""A name from a sandbox (any bytes) as printable, lossless UTF-8."""

from __future__ import annotations

import os
import re
from pathlib import Path

from clawrl.sandbox import printable_name, printable_strings
from hypothesis import given
from hypothesis import strategies as st


def test_undecodable_bytes_are_written_as_escapes() -> None:
    raw = b"bad_\xff\xfe.txt"
    assert printable_name(raw) == "bad_\\xff\\xfe.txt"
    assert printable_name(os.fsdecode(raw)) == "bad_\\xff\\xfe.txt"  # as os.walk gives it
    assert printable_name(Path(os.fsdecode(raw))) == "bad_\\xff\\xfe.txt"
    assert (
        printable_name("d\u00e9j\u00e0 vu/\u65e5\u672c.txt") == "d\u00e9j\u00e0 vu/\u65e5\u672c.txt"
    )
    assert printable_name("x\ud800y") == "x\\xed\\xa0\\x80y"  # a surrogate os.fsencode rejects


def _back(text: str) -> bytes:
    """The bytes a printable name stands for (its ``\\xNN`` escapes undone)."""
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m[1], 16)]), text.encode("utf-8"))


@given(st.binary(max_size=40).filter(lambda raw: b"\\" not in raw))
def test_every_name_becomes_valid_utf8_losslessly(raw: bytes) -> None:
    text = printable_name(os.fsdecode(raw))
    assert text == printable_name(raw)
    assert _back(text) == raw  # valid UTF-8 (encoded above), and the bytes come back


def test_printable_strings_reaches_keys_and_nested_values() -> None:
    bad = os.fsdecode(b"\xff")
    assert printable_strings({bad: [bad, (1, bad)], "n": 1.5, "z": None}) == {
        "\\xff": ["\\xff", [1, "\\xff"]],
        "n": 1.5,
        "z": None,
    }
