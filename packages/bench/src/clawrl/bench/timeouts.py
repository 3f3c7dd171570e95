"""Agent time limits that follow the backend's speed, so that a slow machine does not turn
into timeouts.

A task's agent timeout (or ``RolloutOptions.agent_timeout_s``) is taken as meant for a
backend that decodes ``timeout_reference_tps`` tokens per second. At the start of each
batch the runner measures the backend's decode speed S with one short generation through
the proxy (:func:`clawrl.proxy.measure_decode_rate`: tokens after the first over the time
from the first token to the last, as the proxy recorded them), and every agent timeout of
the batch (and the sandbox's wall clock with it) is multiplied by

    scale = min(timeout_max_scale, max(1, timeout_reference_tps / S))

e.g. 60 s at a reference of 20 tokens/s becomes 240 s on a CPU backend measured at 5
tokens/s. A faster backend never shortens a limit; the measurement failing leaves the scale
at 1. ``timeout_reference_tps = None`` turns scaling off.
"""

from __future__ import annotations

import math

__all__ = ["timeout_scale"]


def timeout_scale(
    measured_tps: float | None, reference_tps: float | None, max_scale: float
) -> float:
    """The factor agent timeouts are multiplied by (see the module docstring): 1 when either
    speed is unknown, else ``reference / measured`` clamped to ``[1, max_scale]``."""
    if (
        measured_tps is None
        or reference_tps is None
        or not math.isfinite(measured_tps)
        or measured_tps <= 0
    ):
        return 1.0
    return min(max_scale, max(1.0, reference_tps / measured_tps))
