"""Named plug-ins (harness adapters, task layouts): a registry of built-in factories, the
entry points of installed packages, and import paths ``module:attribute``.

A :class:`PluginRegistry` finds a plug-in by name (:meth:`~PluginRegistry.get`) in this
order: a registered name, the name of an entry point in its group, an import path
``module:attribute`` (importable from the running Python or from the current folder, added
to ``sys.path`` as ``python -m`` does). The object named is a subclass of the registry's
base class (or any callable returning an instance), called without arguments, or an
instance. An instance without a ``name`` takes the name it was asked by.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar, cast

__all__: list[str] = []

T = TypeVar("T")


class PluginRegistry(Generic[T]):
    """Plug-ins of one kind (``kind``: ``"harness"``, ``"task layout"``), instances of
    ``base``, found in ``factories`` (name -> factory; kept by reference, so later
    registrations count), the entry-point ``group``, or an import path; ``error`` is
    raised (with a one-line message naming the plug-in) for what cannot be found or made."""

    def __init__(
        self,
        kind: str,
        base: type[Any],
        group: str,
        factories: dict[str, Callable[[], T]],
        error: Callable[[str], Exception],
    ) -> None:
        self.kind, self.base, self.group = kind, base, group
        self.factories, self.error = factories, error
        self._scanned: tuple[tuple[str, ...], dict[str, EntryPoint]] | None = None

    def entry_points(self) -> dict[str, EntryPoint]:
        """The installed entry points of the group, by name (scanned again when
        ``sys.path`` changes: a scan takes milliseconds, and loaders ask once a task)."""
        key = tuple(sys.path)
        if self._scanned is None or self._scanned[0] != key:
            self._scanned = (key, {ep.name: ep for ep in entry_points(group=self.group)})
        return self._scanned[1]

    def names(self) -> list[str]:
        """The registered names and the installed entry points (import paths are accepted
        too but not listed)."""
        return sorted({*self.factories, *self.entry_points()})

    def register(self, name: str, factory: Callable[[], T], *, replace: bool = False) -> None:
        """Make ``name`` build ``factory()``.

        Raises:
            ValueError: ``name`` is taken (and not ``replace``), or contains ``:``.
        """
        if ":" in name:
            raise ValueError(f"{self.kind} name {name!r}: ':' is for import paths")
        if name in self.factories and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self.factories[name] = factory

    def load_path(self, spec: str) -> object:
        """The object an import path ``module:attribute`` names."""
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise self.error(f"{self.kind} {spec!r}: an import path is 'module:attribute'")
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` does: modules in the current folder
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise self.error(f"{self.kind} {spec!r}: cannot import {module_name}: {exc}") from exc
        obj: object = module
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise self.error(f"{self.kind} {spec!r}: {module_name} has no {attr}") from None
        return obj

    def make(self, spec: str, obj: object) -> T:
        """An instance from ``obj`` (an instance, a subclass or a factory) named ``spec``."""
        base = self.base.__name__
        if not isinstance(obj, self.base):
            if not callable(obj):
                raise self.error(
                    f"{self.kind} {spec!r} is a {type(obj).__name__}, not a {base} subclass"
                )
            try:
                made = obj()
            except Exception as exc:
                raise self.error(f"{self.kind} {spec!r}: constructing it failed: {exc}") from exc
            if not isinstance(made, self.base):
                raise self.error(f"{self.kind} {spec!r} made a {type(made).__name__}, not a {base}")
            obj = made
        if not getattr(obj, "name", None):
            obj.name = spec  # type: ignore[attr-defined]
        return cast(T, obj)

    def get(self, name: str) -> T:
        """The plug-in ``name`` names (see the module docstring).

        Raises:
            the registry's ``error``: an unknown name (the message lists the known ones),
                an import path that does not import, or an object that makes no instance.
        """
        if name in self.factories:
            return self.factories[name]()
        eps = self.entry_points()
        if name in eps:
            try:
                obj = eps[name].load()
            except Exception as exc:
                raise self.error(
                    f"{self.kind} {name!r}: loading entry point {eps[name].value} failed: {exc}"
                ) from exc
            return self.make(name, obj)
        if ":" in name:
            return self.make(name, self.load_path(name))
        raise self.error(
            f"unknown {self.kind} {name!r}; known: {', '.join(self.names())} "
            "(or an import path 'module:Class')"
        )
