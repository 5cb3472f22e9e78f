"""Order statistics used by every suite, so "p99" means the same thing everywhere."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def thin(values: Sequence[float], limit: int = 2000) -> list[float]:
    """At most ``limit`` evenly spaced values of ``values`` (sorted), for plots and JSON."""
    ordered = sorted(values)
    if len(ordered) <= limit:
        return ordered
    step = len(ordered) / limit
    return [ordered[int(i * step)] for i in range(limit)]
