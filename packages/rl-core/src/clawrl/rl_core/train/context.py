"""What a run of the train loop works with once it is set up (:class:`RunContext`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clawrl.bench import ModelEndpoint, Task
from clawrl.bench.harness import HarnessAdapter
from clawrl.proxy import InferenceBackend

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    """The proxy endpoint and the backend behind it (weights are synced into it), the
    train and held-out tasks, the harnesses training rollouts run through and those the
    held-out evaluation runs through (the same unless ``[eval] harnesses`` is set)."""

    endpoint: ModelEndpoint
    backend: InferenceBackend
    train: Sequence[Task]
    held: Sequence[Task]
    harnesses: Sequence[HarnessAdapter]
    eval_harnesses: Sequence[HarnessAdapter] = ()
