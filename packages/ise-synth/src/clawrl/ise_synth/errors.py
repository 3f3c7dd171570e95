"""Typed errors of clawrl.ise_synth: catch :class:`IseSynthError` for all of them."""

from __future__ import annotations

__all__ = ["EmbeddingError", "IseSynthError", "RenderError", "TaxonomyError"]


class IseSynthError(Exception):
    """Base class of every error raised by clawrl.ise_synth."""


class TaxonomyError(IseSynthError, ValueError):
    """The taxonomy data (personas, domains, complexity mix) is missing or inconsistent."""


class RenderError(IseSynthError):
    """An intent could not be rendered (e.g. the LLM endpoint failed or answered nothing)."""


class EmbeddingError(IseSynthError, ValueError):
    """Embeddings could not be computed or have the wrong shape/values."""
