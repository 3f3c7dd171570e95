"""Typed errors of clawrl.prefixtree (catch :class:`PrefixTreeError` for all of them)."""

from __future__ import annotations

__all__ = [
    "DuplicateCallError",
    "InvalidCallError",
    "MaskTooLargeError",
    "PrefixTreeError",
    "SerializationError",
    "UnknownCallError",
]


class PrefixTreeError(Exception):
    """Base class of every error raised by clawrl.prefixtree."""


class InvalidCallError(PrefixTreeError, ValueError):
    """A call record is malformed: missing field, wrong type, empty prompt, a logprob count
    that differs from the completion length, a negative token id, a NaN logprob, ..."""


class DuplicateCallError(PrefixTreeError, ValueError):
    """A call_id is inserted twice with different content (or into two different rollouts)."""


class UnknownCallError(PrefixTreeError, KeyError):
    """A call_id (or rollout_id) that the tree does not hold."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0]) if self.args else ""


class SerializationError(PrefixTreeError, ValueError):
    """Serialized bytes are not a valid prefix tree (or metadata is not JSON-serializable)."""


class MaskTooLargeError(PrefixTreeError, ValueError):
    """A dense N×N attention mask was requested for a tree larger than the allowed size."""
