"""Typed errors of clawrl.ise_synth: catch :class:`IseSynthError` for all of them."""

from __future__ import annotations

__all__ = [
    "EmbeddingError",
    "ExecutionError",
    "IseSynthError",
    "RenderError",
    "SimulatorDriftError",
    "SimulatorError",
    "TaxonomyError",
]


class IseSynthError(Exception):
    """Base class of every error raised by clawrl.ise_synth."""


class TaxonomyError(IseSynthError, ValueError):
    """The taxonomy data (personas, domains, complexity mix) is missing or inconsistent."""


class RenderError(IseSynthError):
    """An intent could not be rendered (e.g. the LLM endpoint failed or answered nothing)."""


class EmbeddingError(IseSynthError, ValueError):
    """Embeddings could not be computed or have the wrong shape/values."""


class SimulatorError(IseSynthError):
    """The user simulator answered something unusable (not the JSON object, bad fields) or
    its endpoint failed."""


class SimulatorDriftError(SimulatorError):
    """The simulator produced no valid user turn within its regeneration budget.

    Attributes:
        generations: generations made; drifted: how many of them left the user role (drift
        tags); invalid: how many did not parse as the JSON contract (``invalid: …``);
        reasons: the rejection reason of each, in order.
    """

    def __init__(
        self,
        message: str,
        *,
        generations: int,
        drifted: int,
        reasons: list[str],
        invalid: int = 0,
    ) -> None:
        super().__init__(message)
        self.generations = generations
        self.drifted = drifted
        self.invalid = invalid
        self.reasons = reasons

    @property
    def all_invalid(self) -> bool:
        """Every rejected generation was invalid JSON (no role drift)."""
        return self.drifted == 0 and self.invalid > 0


class ExecutionError(IseSynthError):
    """Stage 3 could not run a session (sandbox, proxy or harness infrastructure failure)."""
