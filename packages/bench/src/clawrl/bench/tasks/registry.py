"""The task-layout registry: names -> :class:`~clawrl.bench.tasks.TaskLayout` s.

A layout is named in one of three ways (:func:`get_layout`):

- a built-in name (``builtin``, ``harbor``, ``terminal-bench-1``, ``clawgym``,
  ``agentbench-os``; ``dataset``, a dataset file of built-in tasks), or one added with
  :func:`register_layout`;
- the name of an entry point in the group ``clawrl.task_layouts`` of an installed package
  (``[project.entry-points."clawrl.task_layouts"] my-layout = "my_pkg.layout:MyLayout"``);
- an import path ``module:attribute`` (``my_pkg.layout:MyLayout``), importable from the
  running Python or from the current folder.

Auto-detection (:func:`detecting_layouts`) asks the built-in layouts first, then the
registered ones and the installed entry points; a layout named by import path is used
where it is named (``bench --layout``). The built-in layouts are imported when first
asked for, so that the loader, the runner and the verifier import no layout module.
"""

from __future__ import annotations

from collections.abc import Callable

from clawrl.bench.errors import BenchError
from clawrl.bench.plugins import PluginRegistry
from clawrl.bench.task import Task
from clawrl.bench.tasks.base import TaskLayout

__all__ = [
    "TASK_LAYOUT_ENTRY_POINT_GROUP",
    "UnknownLayoutError",
    "detecting_layouts",
    "get_layout",
    "layout_names",
    "layout_of",
    "register_layout",
]

#: the entry-point group installed packages list their task layouts in
TASK_LAYOUT_ENTRY_POINT_GROUP = "clawrl.task_layouts"

LayoutFactory = Callable[[], TaskLayout]

#: The built-in layouts, in detection order (ClawGym's ``data_entry.json`` first).
_BUILTIN: dict[str, str] = {
    "clawgym": "clawrl.bench.tasks.clawgym:ClawGymLayout",
    "builtin": "clawrl.bench.tasks.builtin:BuiltinLayout",
    "harbor": "clawrl.bench.tasks.harbor:HarborLayout",
    "terminal-bench-1": "clawrl.bench.tasks.tb1:TB1Layout",
    "agentbench-os": "clawrl.bench.tasks.agentbench_os:AgentBenchOSLayout",
    "dataset": "clawrl.bench.tasks.dataset:DatasetLayout",
}


class UnknownLayoutError(BenchError, ValueError):
    """A task layout name that is neither built in, registered, an entry point, nor an
    importable ``module:attribute`` path, or an object there that makes no layout."""


def _builtin(path: str) -> LayoutFactory:
    return lambda: _LAYOUTS.make(path, _LAYOUTS.load_path(path))


_REGISTRY: dict[str, LayoutFactory] = {name: _builtin(path) for name, path in _BUILTIN.items()}
_LAYOUTS = PluginRegistry(
    "task layout", TaskLayout, TASK_LAYOUT_ENTRY_POINT_GROUP, _REGISTRY, UnknownLayoutError
)
_MADE: dict[str, TaskLayout] = {}


def layout_names() -> list[str]:
    """Names :func:`get_layout` knows: the built-in and registered ones and the installed
    entry points (import paths are accepted too but not listed)."""
    return _LAYOUTS.names()


def register_layout(name: str, factory: LayoutFactory, *, replace: bool = False) -> None:
    """Make ``name`` build ``factory()`` (a :class:`TaskLayout` subclass, or a function
    returning one).

    Raises:
        ValueError: ``name`` is taken (and not ``replace``), or contains ``:``.
    """
    _LAYOUTS.register(name, factory, replace=replace)
    _MADE.pop(name, None)


def get_layout(name: str | TaskLayout) -> TaskLayout:
    """The layout ``name`` names (a layout instance is returned as is), made once per name.

    Raises:
        UnknownLayoutError (a ValueError): unknown name (the message lists the known ones),
            an import path that does not import, or an object that makes no layout.
    """
    if isinstance(name, TaskLayout):
        return name
    key = str(name)
    if key not in _MADE:
        layout = _LAYOUTS.get(key)
        layout.name = key  # what its tasks' Task.layout holds: layout_of finds it by that
        _MADE[key] = layout
    return _MADE[key]


def layout_of(task: Task) -> TaskLayout:
    """The layout ``task`` was loaded from (:attr:`~clawrl.bench.Task.layout`).

    Raises:
        UnknownLayoutError: that layout is not known in this process.
    """
    return get_layout(str(task.layout))


def detecting_layouts() -> list[TaskLayout]:
    """The layouts auto-detection asks, in order: the built-in ones, then the registered
    ones and the installed entry points."""
    names = [*_BUILTIN, *sorted(set(layout_names()) - set(_BUILTIN))]
    return [get_layout(n) for n in names]
