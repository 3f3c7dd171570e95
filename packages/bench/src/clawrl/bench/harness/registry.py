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

from collections.abc import Callable

from clawrl.bench.errors import BenchError
from clawrl.bench.harness.base import HarnessAdapter
from clawrl.bench.harness.mini_swe_agent import MiniSweAgentHarness
from clawrl.bench.harness.node import NODE_HARNESS_FACTORIES
from clawrl.bench.harness.noop import NoopHarness
from clawrl.bench.harness.oracle import OracleHarness
from clawrl.bench.harness.reference import ReferenceHarness
from clawrl.bench.plugins import PluginRegistry

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


_BUILTIN = frozenset(_REGISTRY)

_HARNESSES = PluginRegistry(
    "harness", HarnessAdapter, HARNESS_ENTRY_POINT_GROUP, _REGISTRY, UnknownHarnessError
)


def harness_names() -> list[str]:
    """Names :func:`get_harness` knows: the built-in and registered ones and the installed
    entry points (import paths are accepted too but not listed)."""
    return _HARNESSES.names()


def builtin_harness_names() -> list[str]:
    """The harnesses that ship with clawrl-bench (no plug-in, nothing registered later)."""
    return sorted(_BUILTIN)


def register_harness(name: str, factory: HarnessFactory, *, replace: bool = False) -> None:
    """Make ``name`` build ``factory()`` (an adapter class, or a function returning one).

    Raises:
        ValueError: ``name`` is taken (and not ``replace``), or contains ``:``.
    """
    _HARNESSES.register(name, factory, replace=replace)


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
    return _HARNESSES.get(name)
