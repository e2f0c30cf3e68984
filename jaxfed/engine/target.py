"""Precision targets: run each point until the standard error of a metric's mean (or median) is
at most a target, deciding from completed chunks only."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxfed import stats, validation

TARGET_STATISTICS = ("mean", "median")
"""What a precision target bounds the standard error of: the mean (from the float64 sums) or the
median (from the histogram, :func:`jaxfed.stats.median_se`)."""


class Target(NamedTuple):
    """A precision target: every point runs until the standard error of ``statistic`` (the mean
    or the median) of ``metric`` (at ``cell``, or the worst cell when None) is at most ``se``."""

    se: float
    metric: str
    cell: tuple | None  # the target cell of the metric; None: every cell (the worst counts)
    statistic: str = "mean"


def parse_target(se, metric: str | None, specs: dict, statistic: str = "mean") -> Target:
    """The :class:`Target` of ``se`` and ``"NAME"`` or ``"NAME@i"`` / ``"NAME@i,j"``.

    Args:
        se: the standard error to reach, a positive finite number.
        metric: ``"NAME"``, or ``"NAME@i"`` / ``"NAME@i,j"`` for one element of a metric with axes.
        specs: the trial's metrics, ``{name: (shape, dtype)}``.
        statistic: which statistic's standard error (:data:`TARGET_STATISTICS`).

    Returns:
        The :class:`Target`.

    Raises:
        ValueError: one line, for a target that is not a positive finite number, an unknown
            metric (naming the known ones), an empty index, one that does not exist in its shape or a
            statistic other than those in :data:`TARGET_STATISTICS`.
    """
    validation.check("target_se", se, isinstance(se, (int, float)) and not isinstance(se, bool), "a number")
    validation.positive("target_se", se)
    validation.one_of("target_statistic", statistic, TARGET_STATISTICS)
    if not isinstance(metric, str) or not metric:
        validation.fail(
            "target_metric",
            metric,
            f"one of {', '.join(sorted(specs))} (optionally NAME@index) with target_se",
        )
    name, at, index_text = metric.partition("@")
    if name not in specs:
        raise ValueError(f"target metric {name!r} does not exist; metrics: {', '.join(sorted(specs))}")
    shape = specs[name][0]
    if not at:
        return Target(float(se), name, None, statistic)
    if not index_text.strip():  # "kl@" was taken as "kl" (every cell) and recorded as "kl@"
        raise ValueError(
            f"target metric {metric!r} has an empty index after '@': give {name}@i for one cell, "
            f"or {name} alone for the worst cell"
        )
    try:
        index = tuple(int(part) for part in index_text.split(","))
    except ValueError:
        index = None
    if not shape:
        raise ValueError(f"target metric {name!r} is a scalar per trial: give it without @index")
    if index is None or len(index) != len(shape) or not all(0 <= i < n for i, n in zip(index, shape)):
        raise ValueError(
            f"target metric index {index_text!r} does not exist in {name!r}, whose cells have shape {list(shape)} "
            f"(use {name}@i with 0 <= i < n{' per axis, comma-separated' if len(shape) > 1 else ''})"
        )
    return Target(float(se), name, index, statistic)


def worst_se(summary, target: Target) -> np.ndarray:
    """Per point, the standard error of the target's statistic in its cell (or the worst over
    cells; NaN or inf when a cell has too few finite trials, which never meets a target)."""
    se = np.asarray(summary.se if target.statistic == "mean" else stats.median_se(summary))
    se = se[(slice(None),) + target.cell] if target.cell is not None else se.reshape(se.shape[0], -1)
    se = np.where(np.isnan(se), np.inf, se)
    return se if se.ndim == 1 else se.max(axis=1, initial=-np.inf)


def still_running(states: dict, counts: np.ndarray, n_trials: int, target: Target) -> np.ndarray:
    """Per point, whether it needs another chunk: fewer than ``n_trials`` trials and the target
    not yet met by the trials done (decided from completed chunks only)."""
    se = worst_se(stats.summary.result_of(states[target.metric]), target)
    return (counts < n_trials) & ~(se <= target.se)
