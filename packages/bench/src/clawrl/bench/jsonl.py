"""Reading JSON-lines files (one JSON object per line): bench's run records, ise-synth's
intents and trajectories, rl-core's SFT data."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

__all__ = ["iter_json_objects"]


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
