"""Loading tasks in any layout, auto-detected by :func:`load_task`.

Layouts: built-in (:mod:`~clawrl.bench.tasks.builtin`), Harbor / Terminal-Bench 2
(:mod:`~clawrl.bench.tasks.harbor`), Terminal-Bench 1 (:mod:`~clawrl.bench.tasks.tb1`),
ClawGym-Bench (:mod:`~clawrl.bench.tasks.clawgym`) and AgentBench OS
(:mod:`~clawrl.bench.tasks.agentbench_os`: a suite directory of ``.json`` arrays of tasks,
loaded by :func:`load_suite` when it holds no task directory).

Detection: ``data_entry.json`` → ClawGym; ``task.toml`` with a top-level ``id`` → built-in;
any other ``task.toml`` → Harbor; ``task.yaml`` → Terminal-Bench 1. Every failure raises
:class:`TaskLoadError` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.task import Layout, Task
from clawrl.bench.tasks.builtin import load_builtin
from clawrl.bench.tasks.clawgym import load_clawgym, with_clawgym_image
from clawrl.bench.tasks.files import read_toml
from clawrl.bench.tasks.harbor import load_harbor
from pydantic import ValidationError

__all__ = ["builtin_suite_dir", "detect_layout", "load_builtin_suite", "load_suite", "load_task"]


def detect_layout(path: Path | str) -> Layout:
    """Return the layout of the task directory ``path``.

    Raises:
        TaskLoadError: ``path`` is not a directory, or holds neither ``data_entry.json`` nor
            ``task.toml``, or its ``task.toml`` is not valid TOML.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory")
    if (root / "data_entry.json").is_file():
        return Layout.CLAWGYM
    toml_path = root / "task.toml"
    if toml_path.is_file():
        data = read_toml(toml_path)
        return Layout.BUILTIN if "id" in data else Layout.HARBOR
    if (root / "task.yaml").is_file():
        return Layout.TB1
    raise TaskLoadError(
        root,
        "no task.toml (built-in or Harbor layout), task.yaml (Terminal-Bench 1) or "
        "data_entry.json (ClawGym layout)",
    )


def load_task(path: Path | str) -> Task:
    """Load the task directory ``path`` in whichever layout it is written; a ClawGym task
    gets the ClawGym image of its own imports (:func:`clawrl.bench.tasks.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: the directory is not a valid task; ``reason`` says why.
    """
    task = _load_one(path)
    return with_clawgym_image([task])[0] if task.layout is Layout.CLAWGYM else task


def _load_one(path: Path | str) -> Task:
    root = Path(path).resolve()
    layout = detect_layout(root)
    try:
        if layout is Layout.CLAWGYM:
            return load_clawgym(root)
        if layout is Layout.BUILTIN:
            return load_builtin(root)
        if layout is Layout.TB1:
            from clawrl.bench.tasks.tb1 import load_tb1

            return load_tb1(root)
        return load_harbor(root)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskLoadError(root, f"invalid field {where!r}: {first['msg']}") from exc


def load_suite(path: Path | str) -> list[Task]:
    """Load every task directory directly under ``path`` (sorted by task id).

    ``path`` may also be a single task directory. Hidden directories and directories
    without any task file are skipped; a directory that looks like a task but fails to load
    raises. ClawGym tasks share one ClawGym image built from the imports of all of them
    (:func:`clawrl.bench.tasks.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: a task failed to load, ``path`` is not a directory, no task was
            found, or two tasks share an id.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory")
    if _looks_like_task(root):
        return [load_task(root)]
    tasks = [
        _load_one(child)
        for child in sorted(root.iterdir())
        if child.is_dir() and not child.name.startswith((".", "_")) and _looks_like_task(child)
    ]
    if not tasks:
        from clawrl.bench.tasks.agentbench_os import is_agentbench_file, load_agentbench_os

        if any(is_agentbench_file(p) for p in root.iterdir()):
            return _check_unique(root, load_agentbench_os(root))
        raise TaskLoadError(root, "no task directories (or AgentBench OS .json files) found")
    return _check_unique(root, with_clawgym_image(tasks))


def builtin_suite_dir() -> Path:
    """Host path of the built-in suite shipped as package data (one directory per task)."""
    return Path(str(resources.files("clawrl.bench").joinpath("tasks_data", "builtin")))


def load_builtin_suite(
    categories: Iterable[str] | None = None, difficulties: Iterable[str] | None = None
) -> list[Task]:
    """Load the built-in suite, optionally filtered by category keys and difficulties."""
    tasks = load_suite(builtin_suite_dir())
    if categories is not None:
        wanted = set(categories)
        tasks = [t for t in tasks if t.category in wanted]
    if difficulties is not None:
        levels = set(difficulties)
        tasks = [t for t in tasks if t.difficulty in levels]
    return tasks


def _looks_like_task(path: Path) -> bool:
    return any((path / name).is_file() for name in ("task.toml", "task.yaml", "data_entry.json"))


def _check_unique(root: Path, tasks: list[Task]) -> list[Task]:
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskLoadError(
                root, f"duplicate task id {task.id!r} ({seen[task.id]}, {task.root})"
            )
        seen[task.id] = task.root
    return sorted(tasks, key=lambda t: t.id)
