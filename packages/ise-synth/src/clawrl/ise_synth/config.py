"""``synth``'s configuration file: a TOML (or a saved ``config.json``) whose sections are the
commands that take one — ``[intents]``, ``[simulate]``, ``[run]`` — and whose keys are those
commands' flags with underscores (``--max-user-turns`` → ``max_user_turns``).

The flags' defaults are the only defaults. A value resolves, lowest to highest: the flag's
default, the file's ``[COMMAND]`` section, ``--set [COMMAND.]key=value`` (values parsed as
TOML, falling back to a plain string), then a flag given on the command line. The resolved
values of the command are saved with its output (:func:`save_resolved`), without API keys,
and can be passed back as ``--config`` to run it again.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawrl.bench import parse_override_value, read_config_file
from clawrl.ise_synth.errors import IseSynthError

__all__ = ["CONFIG_COMMANDS", "load_config_file", "resolve_args", "save_resolved"]

#: The commands that read a config file and save their resolved configuration.
CONFIG_COMMANDS = ("intents", "simulate", "run")
#: Namespace entries that are not configuration (never read from a file, never saved).
_NOT_CONFIG = frozenset({"command", "config", "overrides", "help"})
#: Never saved: secrets (default: ``$OPENAI_API_KEY``).
_SECRETS = frozenset({"api_key", "sim_api_key"})
#: Required, from a flag or the file.
_REQUIRED = {"intents": ("out",), "simulate": ("intents", "out"), "run": ("out",)}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML (``.json``: a saved resolved configuration).

    Raises:
        IseSynthError: unreadable or malformed file.
    """
    return read_config_file(path, IseSynthError)


def _apply_overrides(data: dict[str, Any], command: str, overrides: list[str]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().rpartition(".")
        if not sep or not name:
            raise IseSynthError(f"--set {item!r} is not [command.]key=value")
        table = out.setdefault(section if dot else command, {})
        if not isinstance(table, dict):
            raise IseSynthError(f"[{section}] must be a table")
        table[name] = parse_override_value(raw.strip())
    return out


def _coerce(action: argparse.Action, section: str, value: Any) -> Any:
    """A file value as the flag would have parsed it (paths, floats), its choices checked."""
    where = f"[{section}] {action.dest}"
    kind = action.type
    if value is not None and callable(kind):
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif isinstance(value, str) and kind is not str:
            try:
                value = kind(value)
            except (TypeError, ValueError) as exc:
                raise IseSynthError(f"{where}: {exc}") from exc
        elif kind in (int, float) and not isinstance(value, kind):
            raise IseSynthError(f"{where}: expected {kind.__name__}, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise IseSynthError(f"{where}: {value!r} is not one of {sorted(action.choices)}")
    return value


def _section_values(sub: argparse.ArgumentParser, section: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise IseSynthError(f"[{section}] must be a table")
    actions = {a.dest: a for a in sub._actions if a.dest not in _NOT_CONFIG}
    unknown = set(table) - set(actions)
    if unknown:
        raise IseSynthError(
            f"unknown key(s) in [{section}]: {sorted(unknown)} (known: {sorted(actions)})"
        )
    return {k: _coerce(actions[k], section, v) for k, v in table.items()}


def resolve_args(
    parser: argparse.ArgumentParser,
    commands: Mapping[str, argparse.ArgumentParser],
    argv: list[str] | None,
) -> argparse.Namespace:
    """Parse ``argv`` with the config file and ``--set`` overrides of a command laid under
    its flags (see the module docstring). Every section of the file is checked against its
    command's flags, so a typo anywhere is an error.

    Raises:
        IseSynthError: unreadable file, unknown section / key, a value of the wrong type,
            or a required value (``-o``, ``--intents``) given nowhere.
    """
    args = parser.parse_args(argv)
    if args.command not in CONFIG_COMMANDS:
        return args
    data = load_config_file(args.config) if args.config else {}
    data = _apply_overrides(data, args.command, args.overrides)
    resolved: dict[str, dict[str, Any]] = {}
    for section, table in data.items():
        if section not in CONFIG_COMMANDS:
            raise IseSynthError(
                f"unknown config section [{section}] (known: {list(CONFIG_COMMANDS)})"
            )
        resolved[section] = _section_values(commands[section], section, table)
    sub = commands[args.command]
    sub.set_defaults(**resolved.get(args.command, {}))
    args = parser.parse_args(argv)  # flags on the command line win over the file
    missing = [k for k in _REQUIRED[args.command] if getattr(args, k, None) is None]
    if missing:
        raise IseSynthError(
            f"synth {args.command} needs {', '.join(missing)} (a flag, or in [{args.command}])"
        )
    return args


def resolved_config(args: argparse.Namespace) -> dict[str, Any]:
    """``{command: {key: value}}`` of a resolved namespace, API keys left out."""
    values = {
        k: str(v) if isinstance(v, Path) else v
        for k, v in sorted(vars(args).items())
        if k not in _NOT_CONFIG and k not in _SECRETS
    }
    return {args.command: values}


def save_resolved(args: argparse.Namespace, path: Path) -> Path:
    """Write the resolved configuration of ``args`` to ``path`` (JSON); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(resolved_config(args), indent=2) + "\n")
    return path
