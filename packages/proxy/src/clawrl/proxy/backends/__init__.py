"""Inference backends behind one interface (:class:`InferenceBackend`)."""

from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.null import NullBackend
from clawrl.proxy.backends.scripted import ScriptedBackend, ScriptedCompletion

__all__ = [
    "BackendError",
    "GenerationRequest",
    "GenerationResult",
    "InferenceBackend",
    "NullBackend",
    "SamplingParams",
    "ScriptedBackend",
    "ScriptedCompletion",
    "TokenDelta",
]
