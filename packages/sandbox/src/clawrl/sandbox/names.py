"""Names from a sandbox are data: a file name there is any bytes but ``/`` and NUL, and
Python hands one that is not UTF-8 over as a string with lone surrogates
(``surrogateescape``), which no JSON writer accepts. :func:`printable_name` is the one
conversion every stored name goes through: the name's UTF-8 kept as is, every other byte
written ``\\xNN`` (lossless, printable, valid UTF-8). :func:`printable_strings` applies it
to every string of a JSON-like value, for writers that must not be crashed by a name that
reached them another way (an error message, a log line)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["printable_name", "printable_strings"]


def printable_name(name: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """``name`` (a path or file name, as ``os`` returns it, or its bytes) as valid UTF-8
    text: the bytes that are not UTF-8 as ``\\xNN``; a valid name is returned unchanged.
    (The conversion of ``os.fsencode(p).decode("utf-8", "backslashreplace")``, also for a
    string with surrogates that ``os.fsencode`` rejects.)"""
    raw = os.fspath(name)
    if isinstance(raw, str):
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            raw = raw.encode("utf-8", "surrogateescape" if _escaped(raw) else "surrogatepass")
        else:
            return raw
    return raw.decode("utf-8", "backslashreplace")


def _escaped(text: str) -> bool:
    """Whether every surrogate of ``text`` is one ``surrogateescape`` made (a raw byte)."""
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)


def printable_strings(value: Any) -> Any:
    """``value`` with every string in it (dict keys included, through lists, tuples and
    dicts) made valid UTF-8 by :func:`printable_name`; other values as they are."""
    if isinstance(value, str):
        return printable_name(value)
    if isinstance(value, dict):
        return {printable_strings(k): printable_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_strings(v) for v in value]
    return value
