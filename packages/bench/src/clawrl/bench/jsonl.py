"""Reading JSON-lines files (one JSON object per line): bench's run records, ise-synth's
intents and trajectories, rl-core's SFT data; and writing JSON that no file name can
crash (:func:`json_bytes`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from clawrl.sandbox import printable_strings

__all__ = ["iter_json_objects", "json_bytes"]


def json_bytes(value: Any, *, indent: bool = False) -> bytes:
    """``value`` as JSON (orjson; ``indent``: two spaces). A string that is not valid
    UTF-8 — a file name from a sandbox, carried by a path or a message — is written as
    :func:`clawrl.sandbox.printable_name` shows it (``\\xNN`` for its bytes), never an
    error: no writer of results or logs is crashed by a name.

    Raises:
        TypeError: ``value`` holds something that is not JSON (orjson's error).
    """
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        return orjson.dumps(printable_strings(value), option=option)


def iter_json_objects(
    path: str | Path,
    error: Callable[[str], Exception] = ValueError,
    *,
    torn_tail_ok: bool = True,
) -> Iterator[dict[str, Any]]:
    """Each line of a JSONL file as a dict, in file order; blank lines are skipped.

    Args:
        path: the file.
        error: the exception type raised (called with the message), so each caller
            reports its own error type.
        torn_tail_ok: a last line without its newline that is not valid JSON is a write
            an interrupted run never finished: skipped (the resume point), not an error.

    Raises:
        error: the file cannot be read, or a line is not valid JSON or not a JSON object;
            the message names ``path:line``.
    """
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as exc:
        raise error(f"cannot read {path}: {exc}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if torn_tail_ok and n == len(lines):
                return
            raise error(f"{path}:{n}: not valid JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise error(f"{path}:{n}: not a JSON object")
        yield obj
