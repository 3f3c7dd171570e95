"""The train loop's error."""

from __future__ import annotations

from clawrl.rl_core.errors import RLCoreError

__all__ = ["TrainError"]


class TrainError(RLCoreError):
    """The loop cannot go on (no usable rollouts, a weight sync failed, a bad checkpoint)."""
