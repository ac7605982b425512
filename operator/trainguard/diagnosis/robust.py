"""Robust statistics for the rules: medians and the median absolute deviation, so one noisy point or
one broken rank does not drag the reference the others are judged against."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MAD_TO_SIGMA = 1.4826
"""MAD x this estimates the standard deviation of normally distributed data."""


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values))


def mad(values: Sequence[float]) -> float:
    centre = median(values)
    return median([abs(v - centre) for v in values])


def robust_z(values: Sequence[float], floor_ratio: float = 0.01) -> list[float]:
    """Each value's distance from the median in robust standard deviations (MAD x 1.4826), with the
    deviation floored at floor_ratio x |median| so identical peers do not turn noise into an outlier."""
    centre = median(values)
    scale = max(MAD_TO_SIGMA * mad(values), floor_ratio * abs(centre), 1e-12)
    return [(v - centre) / scale for v in values]


def spread(values: Sequence[float]) -> float:
    """Robust standard deviation (MAD x 1.4826)."""
    return MAD_TO_SIGMA * mad(values) if values else 0.0


def pstdev(values: Sequence[float]) -> float:
    return float(statistics.pstdev(values)) if len(values) > 1 else 0.0
