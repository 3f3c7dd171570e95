"""Reading a task directory's files, shared by the layouts (:mod:`clawrl.bench.tasks`):
every failure is a :class:`~clawrl.bench.TaskLoadError` with the reason."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.task import SOLUTION_MOUNT, SolutionSpec
from pydantic import ValidationError

__all__ = [
    "read_instruction",
    "read_text",
    "read_toml",
    "solution_spec",
    "toml_table",
    "validation_reason",
]


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise TaskLoadError(path.parent, f"{path.name} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise TaskLoadError(path.parent, f"cannot read {path.name}: {exc}") from exc


def read_text(root: Path, name: str) -> str:
    path = root / name
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(root, f"{name} is not UTF-8: {exc}") from exc
    except OSError as exc:
        raise TaskLoadError(root, f"cannot read {name}: {exc}") from exc


def toml_table(root: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TaskLoadError(root, f"task.toml: [{key}] must be a table")
    return value


def read_instruction(root: Path, inline: Any) -> str:
    if inline is not None and not isinstance(inline, str):
        raise TaskLoadError(root, "instruction must be a string")
    has_file = (root / "instruction.md").is_file()
    if inline and has_file:
        raise TaskLoadError(root, "both an inline instruction and instruction.md")
    text = inline if inline else (read_text(root, "instruction.md") if has_file else "")
    if not text.strip():
        raise TaskLoadError(root, "no instruction (inline `instruction` or instruction.md)")
    return text.strip()


def solution_spec(root: Path, command: tuple[str, ...]) -> SolutionSpec | None:
    sol = root / "solution"
    if not (sol / "solve.sh").is_file():
        return None
    return SolutionSpec(files_dir=sol, mount_path=SOLUTION_MOUNT, command=command)


def validation_reason(exc: ValidationError) -> str:
    """A task model's validation error as one reason naming the first invalid field."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"invalid field {where!r}: {first['msg']}"
