"""Loading tasks in any layout (:mod:`clawrl.bench.tasks`), auto-detected by :func:`load_task`.

The five built-in layouts: built-in (:mod:`~clawrl.bench.tasks.builtin`), Harbor /
Terminal-Bench 2 (:mod:`~clawrl.bench.tasks.harbor`), Terminal-Bench 1
(:mod:`~clawrl.bench.tasks.tb1`), ClawGym-Bench (:mod:`~clawrl.bench.tasks.clawgym`) and
AgentBench OS (:mod:`~clawrl.bench.tasks.agentbench_os`: a suite directory of ``.json``
arrays of tasks, loaded by :func:`load_suite` when it holds no task directory); more come
from plug-ins (:func:`~clawrl.bench.tasks.get_layout`).

Detection asks each layout in turn (:func:`~clawrl.bench.tasks.detecting_layouts`):
``data_entry.json`` → ClawGym; ``task.toml`` with a top-level ``id`` → built-in; any other
``task.toml`` → Harbor; ``task.yaml`` → Terminal-Bench 1; then the plug-ins. Every failure
raises :class:`TaskLoadError` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.task import Layout, Task
from clawrl.bench.tasks.base import TaskLayout
from clawrl.bench.tasks.files import validation_reason
from clawrl.bench.tasks.registry import detecting_layouts, get_layout
from pydantic import ValidationError

__all__ = ["builtin_suite_dir", "detect_layout", "load_builtin_suite", "load_suite", "load_task"]


def detect_layout(path: Path | str) -> Layout | str:
    """Return the layout of the task directory ``path`` (a :class:`Layout` for a built-in
    one, else the plug-in layout's name).

    Raises:
        TaskLoadError: ``path`` is not a directory, or no layout recognises it (built-in:
            neither ``data_entry.json``, ``task.toml`` nor ``task.yaml``), or its
            ``task.toml`` is not valid TOML.
    """
    return _detect(Path(path), detecting_layouts())


def _detect(root: Path, kinds: list[TaskLayout]) -> Layout | str:
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory")
    for layout in kinds:
        if layout.detect(root):
            return Layout(layout.name) if layout.name in Layout._value2member_map_ else layout.name
    raise TaskLoadError(
        root,
        "no task.toml (built-in or Harbor layout), task.yaml (Terminal-Bench 1) or "
        "data_entry.json (ClawGym layout)",
    )


def load_task(path: Path | str, layout: str | TaskLayout | None = None) -> Task:
    """Load the task directory ``path`` in whichever layout it is written (``layout``: in
    that one, a name or an import path of :func:`~clawrl.bench.tasks.get_layout`); the
    layout finishes it as a suite of one (a ClawGym task gets the ClawGym image of its own
    imports, :func:`clawrl.bench.tasks.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: the directory is not a valid task; ``reason`` says why.
        UnknownLayoutError: ``layout`` names no layout.
    """
    return _finish([_load_one(path, layout)])[0]


def _load_one(
    path: Path | str,
    layout: str | TaskLayout | None = None,
    kinds: list[TaskLayout] | None = None,
) -> Task:
    root = Path(path).resolve()
    if layout is None:
        layout = _detect(root, detecting_layouts() if kinds is None else kinds)
    kind = get_layout(layout)
    try:
        return kind.load(root)
    except ValidationError as exc:
        raise TaskLoadError(root, validation_reason(exc)) from exc


def _finish(tasks: list[Task]) -> list[Task]:
    """``tasks``, each layout's finished by that layout (:meth:`TaskLayout.finish`), in
    the same order."""
    out = list(tasks)
    for name in dict.fromkeys(t.layout for t in tasks):
        where = [i for i, t in enumerate(out) if t.layout == name]
        done = get_layout(name).finish([out[i] for i in where])
        for i, task in zip(where, done, strict=True):
            out[i] = task
    return out


def load_suite(path: Path | str, layout: str | TaskLayout | None = None) -> list[Task]:
    """Load every task directory directly under ``path`` (sorted by task id; ``layout``:
    only that layout's, see :func:`load_task`).

    ``path`` may also be a single task directory, a directory of a layout's suite files
    (AgentBench OS) when it holds no task directory, or one suite file (an AgentBench OS
    ``.json``, a dataset file of :mod:`~clawrl.bench.tasks.dataset`). Hidden directories and directories
    without any task file are skipped; a directory that looks like a task but fails to load
    raises. Each layout finishes its tasks together (ClawGym tasks share one ClawGym image
    built from the imports of all of them,
    :func:`clawrl.bench.tasks.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: a task failed to load, ``path`` is not a directory, no task was
            found, or two tasks share an id.
        UnknownLayoutError: ``layout`` names no layout.
    """
    root = Path(path)
    kinds = [get_layout(layout)] if layout is not None else detecting_layouts()
    if root.is_file():
        kind = next((k for k in kinds if k.detect_suite(root)), None)
        if kind is not None:
            return _check_unique(root, _finish(kind.load_suite(root)))
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory (nor a suite file of a layout)")
    if _looks_like_task(root, kinds):
        return [load_task(root, layout)]
    tasks = [
        _load_one(child, layout, kinds)
        for child in sorted(root.iterdir())
        if child.is_dir()
        and not child.name.startswith((".", "_"))
        and _looks_like_task(child, kinds)
    ]
    if not tasks:
        for kind in kinds:
            if kind.detect_suite(root):
                return _check_unique(root, _finish(kind.load_suite(root)))
        raise TaskLoadError(root, "no task directories (or AgentBench OS .json files) found")
    return _check_unique(root, _finish(tasks))


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


def _looks_like_task(path: Path, kinds: list[TaskLayout]) -> bool:
    """Whether one of ``kinds`` detects the task directory ``path`` (one whose files it
    cannot read counts: loading it then says why)."""
    for kind in kinds:
        try:
            if kind.detect(path):
                return True
        except TaskLoadError:
            return True
    return False


def _check_unique(root: Path, tasks: list[Task]) -> list[Task]:
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskLoadError(
                root, f"duplicate task id {task.id!r} ({seen[task.id]}, {task.root})"
            )
        seen[task.id] = task.root
    return sorted(tasks, key=lambda t: t.id)
