"""Reading a configuration file and ``--set`` values, shared by the ``bench``, ``train`` and
``synth`` command lines (each then checks the keys against its own schema)."""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_config_flags", "parse_override_value", "read_config_file"]


def read_config_file(
    path: str | Path, error: Callable[[str], Exception] = ValueError
) -> dict[str, Any]:
    """The table of a TOML file (a ``.json`` file: a saved resolved configuration).

    Args:
        path: the file.
        error: the exception type raised (called with the message), so that each command
            line reports its own error type (``ConfigError``, ``IseSynthError``, ...).

    Raises:
        error: the file cannot be read, is not valid TOML / JSON, or is not a table; the
            message names the file.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read config {p}: {exc}") from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{p}: {exc}") from exc
    if not isinstance(data, dict):
        raise error(f"{p}: not a table")
    return data


def parse_override_value(text: str) -> Any:
    """A ``--set key=VALUE`` value as TOML (``3``, ``0.5``, ``true``, ``[1, 2]``,
    ``"quoted"``); anything that is not a TOML value is the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def add_config_flags(
    parser: argparse.ArgumentParser, *, config_help: str, set_metavar: str, set_help: str
) -> None:
    """Add ``--config FILE`` and the repeatable ``--set KEY=VALUE`` (collected, in order, in
    ``args.overrides``; each value is read with :func:`parse_override_value`) to ``parser``."""
    parser.add_argument("--config", help=config_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar=set_metavar,
        help=set_help,
    )
