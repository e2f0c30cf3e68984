"""Summaries over the trial axis: medians and credible bands."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Band", "band"]


class Band(NamedTuple):
    """Median and central credible band over trials, per point and time index."""

    median: np.ndarray  # (n_points, *time)
    lower: np.ndarray  # (n_points, *time) quantile (1 − mass)/2
    upper: np.ndarray  # (n_points, *time) quantile (1 + mass)/2
    mass: float  # probability mass inside [lower, upper]


def band(values: np.ndarray, mass: float = 0.75, axis: int = 1) -> Band:
    """Median and the central ``mass`` band (default 75%: the 12.5% and 87.5% quantiles).

    Args:
        values: array with a trial axis, e.g. (point, trial, slot).
        mass: probability inside the band, in (0, 1).
        axis: the trial axis.
    """
    if not 0.0 < mass < 1.0:
        raise ValueError(f"mass must be in (0, 1), got {mass}")
    q = np.quantile(values, [0.5, (1 - mass) / 2, (1 + mass) / 2], axis=axis)
    return Band(median=q[0], lower=q[1], upper=q[2], mass=mass)
