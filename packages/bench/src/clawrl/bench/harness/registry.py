"""The harness registry: names -> adapters with their defaults."""

from __future__ import annotations

from collections.abc import Callable

from clawrl.bench.harness.base import HarnessAdapter
from clawrl.bench.harness.mini_swe_agent import MiniSweAgentHarness
from clawrl.bench.harness.node import NODE_HARNESS_FACTORIES
from clawrl.bench.harness.noop import NoopHarness
from clawrl.bench.harness.oracle import OracleHarness
from clawrl.bench.harness.reference import ReferenceHarness

__all__ = ["get_harness", "harness_names"]

_REGISTRY: dict[str, Callable[[], HarnessAdapter]] = {
    "reference": ReferenceHarness,
    "mini-swe-agent": MiniSweAgentHarness,
    "oracle": OracleHarness,
    "noop": NoopHarness,
    **NODE_HARNESS_FACTORIES,
}


def harness_names() -> list[str]:
    """Names :func:`get_harness` knows."""
    return sorted(_REGISTRY)


def get_harness(name: str | HarnessAdapter) -> HarnessAdapter:
    """The adapter registered as ``name`` (an adapter instance is returned as is).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if isinstance(name, HarnessAdapter):
        return name
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown harness {name!r}; known: {', '.join(harness_names())}") from None
    return factory()
