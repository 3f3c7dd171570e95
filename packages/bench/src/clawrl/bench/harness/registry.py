"""The harness registry: names -> adapters with their defaults.

A harness is named in one of three ways (:func:`get_harness`):

- a built-in name (``reference``, ``mini-swe-agent``, ``oracle``, ``noop``, the npm
  harnesses), or one added with :func:`register_harness`;
- the name of an entry point in the group ``clawrl.harnesses`` of an installed package
  (``[project.entry-points."clawrl.harnesses"] my-agent = "my_pkg.harness:MyHarness"``);
- an import path ``module:attribute`` (``my_pkg.harness:MyHarness``), importable from the
  running Python or from the current folder (added to ``sys.path`` as ``python -m`` does).

The object named is a :class:`HarnessAdapter` subclass (or any callable returning an
adapter), called without arguments, or an adapter instance. An adapter without a ``name``
takes the name it was asked by.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from clawrl.bench.errors import BenchError
from clawrl.bench.harness.base import HarnessAdapter
from clawrl.bench.harness.mini_swe_agent import MiniSweAgentHarness
from clawrl.bench.harness.node import NODE_HARNESS_FACTORIES
from clawrl.bench.harness.noop import NoopHarness
from clawrl.bench.harness.oracle import OracleHarness
from clawrl.bench.harness.reference import ReferenceHarness

__all__ = [
    "HARNESS_ENTRY_POINT_GROUP",
    "UnknownHarnessError",
    "get_harness",
    "harness_names",
    "register_harness",
]

#: the entry-point group installed packages list their harnesses in
HARNESS_ENTRY_POINT_GROUP = "clawrl.harnesses"

HarnessFactory = Callable[[], HarnessAdapter]

_REGISTRY: dict[str, HarnessFactory] = {
    "reference": ReferenceHarness,
    "mini-swe-agent": MiniSweAgentHarness,
    "oracle": OracleHarness,
    "noop": NoopHarness,
    **NODE_HARNESS_FACTORIES,
}


class UnknownHarnessError(BenchError, ValueError):
    """A harness name that is neither registered, an entry point, nor an importable
    ``module:attribute`` path, or an object there that does not make an adapter."""


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=HARNESS_ENTRY_POINT_GROUP)}


def harness_names() -> list[str]:
    """Names :func:`get_harness` knows: the built-in and registered ones and the installed
    entry points (import paths are accepted too but not listed)."""
    return sorted({*_REGISTRY, *_entry_points()})


def register_harness(name: str, factory: HarnessFactory, *, replace: bool = False) -> None:
    """Make ``name`` build ``factory()`` (an adapter class, or a function returning one).

    Raises:
        ValueError: ``name`` is taken (and not ``replace``), or contains ``:``.
    """
    if ":" in name:
        raise ValueError(f"harness name {name!r}: ':' is for import paths")
    if name in _REGISTRY and not replace:
        raise ValueError(f"harness {name!r} is already registered")
    _REGISTRY[name] = factory


def _load_path(spec: str) -> object:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UnknownHarnessError(f"harness {spec!r}: an import path is 'module:attribute'")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules in the current folder
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownHarnessError(f"harness {spec!r}: cannot import {module_name}: {exc}") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownHarnessError(f"harness {spec!r}: {module_name} has no {attr}") from None
    return obj


def _adapter(spec: str, obj: object) -> HarnessAdapter:
    if not isinstance(obj, HarnessAdapter):
        if not callable(obj):
            raise UnknownHarnessError(
                f"harness {spec!r} is a {type(obj).__name__}, not a HarnessAdapter subclass"
            )
        try:
            made = obj()
        except Exception as exc:
            raise UnknownHarnessError(f"harness {spec!r}: constructing it failed: {exc}") from exc
        if not isinstance(made, HarnessAdapter):
            raise UnknownHarnessError(
                f"harness {spec!r} made a {type(made).__name__}, not a HarnessAdapter"
            )
        obj = made
    if not obj.name:
        obj.name = spec
    return obj


def get_harness(name: str | HarnessAdapter) -> HarnessAdapter:
    """The adapter ``name`` names (an adapter instance is returned as is): a registered
    name, an entry point of the group ``clawrl.harnesses``, or an import path
    ``module:attribute``.

    Raises:
        UnknownHarnessError (a ValueError): unknown name (the message lists the known ones),
            an import path that does not import, or an object that makes no adapter.
    """
    if isinstance(name, HarnessAdapter):
        return name
    if name in _REGISTRY:
        return _REGISTRY[name]()
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()
        except Exception as exc:
            raise UnknownHarnessError(
                f"harness {name!r}: loading entry point {eps[name].value} failed: {exc}"
            ) from exc
        return _adapter(name, obj)
    if ":" in name:
        return _adapter(name, _load_path(name))
    raise UnknownHarnessError(
        f"unknown harness {name!r}; known: {', '.join(harness_names())} "
        "(or an import path 'module:Class')"
    )
