"""Latency statistics shared by the benchmark scripts in this folder (imported by name:
each script runs with this folder first on ``sys.path``)."""

from __future__ import annotations

import statistics


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (0 <= q <= 1), interpolated linearly between ranks.

    Raises:
        IndexError: ``xs`` is empty.
    """
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, float]:
    """p50, p95 and mean of ``xs`` (rounded to 0.1 ms) and its count.

    Raises:
        IndexError: ``xs`` is empty.
    """
    return {
        "p50": round(pct(xs, 0.5), 4),
        "p95": round(pct(xs, 0.95), 4),
        "mean": round(statistics.fmean(xs), 4),
        "n": len(xs),
    }
