"""Medians, credible bands and quantiles over the trial axis, from raw trials or from a streamed summary.

Raw metrics are arrays (point, trial, …); :func:`band` takes their quantiles directly. A
:class:`~jaxfed.stats.summary.Summary` (the engine's streamed summary, :mod:`jaxfed.stats.summary`)
gives its quantiles from its histogram (:func:`summary_quantile`, within a factor 10^(1/100), 2.33%
relative, of the exact quantile of the same trials), the standard error of its median
(:func:`median_se`) and the fraction of trials at most a tolerance (:func:`fraction_at_most`).

This part of :mod:`jaxfed.stats` imports :mod:`jaxfed.stats.summary` only.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from jaxfed import validation
from jaxfed.stats.summary import _EDGES, _ZERO, N_BINS, Summary, _bin_value

__all__ = [
    "Band",
    "band",
    "summary_quantile",
    "median_se",
    "fraction_at_most",
]


class Band(NamedTuple):
    """Median and central credible band over trials, per point and time index."""

    median: np.ndarray  # (n_points, *time)
    lower: np.ndarray  # (n_points, *time) quantile (1 − mass)/2
    upper: np.ndarray  # (n_points, *time) quantile (1 + mass)/2
    mass: float  # probability mass inside [lower, upper]


def band(values, mass: float = 0.75, axis: int = 1) -> Band:
    """Median and the central ``mass`` band (default 75%: the 12.5% and 87.5% quantiles).

    Args:
        values: raw array with a trial axis, e.g. (point, trial, slot), or a :class:`Summary`
            (quantiles from its histogram, within 2.33%: :mod:`jaxfed.stats.summary`). NaN and
            ±inf trials are left out in both cases (a cell without a finite trial gives NaN).
        mass: probability inside the band, in (0, 1).
        axis: the trial axis of a raw array.

    Returns:
        The :class:`Band`, each array the cells' shape (the trial axis removed).
    """
    validation.probability("mass", mass, low_open=True, high_open=True)
    kept = getattr(_KEPT, "bands", None)
    if kept is not None and isinstance(values, np.ndarray):
        key = (id(values), values.shape, values.dtype.str, mass, axis)
        digest = zlib.crc32(np.ascontiguousarray(values).data)  # (catches a change in place, cheaper than a hash)
        found = kept.get(key)
        if found is None or found[1] != digest:  # (not seen, or its values changed since)
            kept[key] = found = (values, digest, _band(values, mass, axis))  # (values held: its id stays its own)
        kept_band = found[2]  # (copies: a caller may write to one)
        return Band(np.copy(kept_band.median), np.copy(kept_band.lower), np.copy(kept_band.upper), mass)
    return _band(values, mass, axis)


@contextlib.contextmanager
def bands_reused() -> Iterator[None]:
    """Within it (in this thread), :func:`band` of the same raw array, unchanged, with the same
    ``mass`` and ``axis`` takes its quantiles once: a run's figure and its report band the same
    metric, and ``np.quantile`` over every raw trial is the longest part of writing them. Nested
    uses share the outermost's bands; they are dropped at its end."""
    outer = getattr(_KEPT, "bands", None)
    if outer is None:
        _KEPT.bands = {}
    try:
        yield
    finally:
        if outer is None:
            _KEPT.bands = None


_KEPT = threading.local()
"""``bands``: {(id, shape, dtype, mass, axis): (values, CRC-32 of its bytes, Band)} while
:func:`bands_reused` is open in the thread, else absent or None."""


def _band(values, mass: float, axis: int) -> Band:
    qs = [0.5, (1 - mass) / 2, (1 + mass) / 2]
    if isinstance(values, Summary):
        med, lo, hi = (summary_quantile(values, q) for q in qs)
    else:
        med, lo, hi = _raw_quantiles(np.asarray(values), qs, axis)
    return Band(median=med, lower=lo, upper=hi, mass=mass)


TRIAL_BLOCK = 4096
"""Trials per pass of a host scan of raw values (the figure's exact share, the non-finite count):
a temporary the size of a block, not of the metric (on some virtual machines a page touched for
the first time costs far more than the compare; benchmarks/fresh_memory.py)."""

_CELLS_PER_BLOCK = 32
"""Cells whose trials :func:`_raw_quantiles` sorts at a time (a few MB: in cache, one buffer reused)."""


def _raw_quantiles(values: np.ndarray, qs: list, axis: int) -> np.ndarray:
    """``np.quantile(values, qs, axis=axis)`` over the finite values of each cell (NaN where a
    cell has none), the same bits, computed a block of cells at a time: the block's trials copied
    into rows (the trial axis last in memory), sorted (NumPy sorts contiguous rows with SIMD) and
    their quantiles taken (a quantile depends only on the sorted values). About twice as fast as
    ``np.quantile`` along the middle axis of a raw (point, trial, slot) array, whose partition
    walks strided memory, and without its copy of the whole array.

    Non-finite trials are left out, as summaries leave them out: both modes give one band."""
    n_trials = values.shape[axis]
    if not np.issubdtype(values.dtype, np.floating) or n_trials == 0:
        return _quantiles_of_finite(values, qs, axis)
    lead, rest = values.shape[:axis], values.shape[axis + 1 :]
    cells = values.reshape(int(np.prod(lead, dtype=np.int64)), n_trials, int(np.prod(rest, dtype=np.int64)))
    out = None
    rows = np.empty((min(_CELLS_PER_BLOCK, cells.shape[2]), n_trials), values.dtype)
    for a in range(cells.shape[0]):
        for r0 in range(0, cells.shape[2], _CELLS_PER_BLOCK):
            block = rows[: min(_CELLS_PER_BLOCK, cells.shape[2] - r0)]
            block[...] = cells[a, :, r0 : r0 + len(block)].T
            block.sort(axis=-1)
            # Sorted, a NaN or +inf ends its row and -inf starts it.
            if np.isfinite(block[:, 0]).all() and np.isfinite(block[:, -1]).all():
                q = np.quantile(block.T, qs, axis=0, overwrite_input=True)
            else:
                q = _quantiles_of_finite(block.T, qs, 0)
            if out is None:
                out = np.empty((len(qs), cells.shape[0], cells.shape[2]), q.dtype)
            out[:, a, r0 : r0 + len(block)] = q
    if out is None:  # (no cell)
        return _quantiles_of_finite(values, qs, axis)
    return out.reshape((len(qs), *lead, *rest))


def _quantiles_of_finite(values: np.ndarray, qs: list, axis: int) -> np.ndarray:
    """``np.quantile`` along ``axis`` of the finite values (``np.nanquantile`` with the non-finite
    ones as NaN where there are any)."""
    finite = np.isfinite(values)
    if finite.all():
        return np.quantile(values, qs, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a cell with no finite trial: NaN
        return np.nanquantile(np.where(finite, values, np.nan), qs, axis=axis)


def summary_quantile(summary: Summary, q) -> np.ndarray:
    """Inverted-CDF quantile ``q`` (a number, or an array broadcast to the cells) per cell from the
    histogram (within 2.33%: :mod:`jaxfed.stats.summary`).

    Args:
        summary: a streamed :class:`~jaxfed.stats.summary.Summary`.
        q: the quantile's probability, in [0, 1].

    Returns:
        Per cell the quantile (NaN where the cell has no finite trial).
    """
    cum = np.cumsum(summary.hist, axis=-1, dtype=np.int64)
    n = cum[..., -1]
    rank = np.maximum(np.ceil(q * n), 1).astype(np.int64)  # the rank-th smallest finite value
    index = np.minimum((cum < rank[..., None]).sum(-1), N_BINS - 1)
    below = (
        np.take_along_axis(cum, index[..., None], -1)[..., 0]
        - np.take_along_axis(summary.hist, index[..., None], -1)[..., 0]
    )
    in_bin = np.maximum(np.take_along_axis(summary.hist, index[..., None], -1)[..., 0], 1)
    fraction = (rank - below - 0.5) / in_bin
    # Inside a negative bin, magnitudes decrease with rank.
    fraction = np.where(index < _ZERO, 1.0 - fraction, fraction)
    return np.where(n > 0, _bin_value(index, fraction), np.nan)


def fraction_at_most(summary: Summary, tol: float = 0.0) -> np.ndarray:
    """Per cell, the fraction of finite trials whose value is below the histogram's bin edge
    nearest above ``tol`` (every value < 1e-12 for ``tol`` = 0: the zero bin and the negative
    bins). A summary cannot tell 0 from 1e-13; raw values give exact fractions.

    Args:
        summary: a streamed :class:`~jaxfed.stats.summary.Summary`.
        tol: the tolerance (0: values below 1e-12).

    Returns:
        Per cell the fraction, in [0, 1] (NaN where the cell has no finite trial).

    Examples:
        >>> from jaxfed.stats.summary import SummaryAccumulator
        >>> acc = SummaryAccumulator((1, 1))  # one point, one slot
        >>> acc.add(np.array([[[0.0], [0.0], [1e-3], [0.5]]]))
        >>> [float(v) for v in fraction_at_most(acc.result())[0]]
        [0.5]
    """
    level = max(int(np.searchsorted(_EDGES, tol, side="left")), 1)  # first edge >= tol (>= 1e-12)
    last = _ZERO + level if tol > _EDGES[0] else _ZERO  # bins [0, last] hold only values < that edge
    below = summary.hist[..., : last + 1].sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(summary.count > 0, below / summary.count, np.nan)


def median_se(summary: Summary) -> np.ndarray:
    """Standard error of the median per cell, from the histogram (order statistics, no density estimate).

    The ranks n/2 ± √n/2 bracket the sample median with ±1 standard deviation of its binomial
    rank, so half the distance between those order statistics estimates the median's standard
    error (the distribution-free interval of the median, Hettmansperger & Sheather 1986):

        se_med ≈ (Q(1/2 + 1/(2√n)) − Q(1/2 − 1/(2√n))) / 2,

    with Q the histogram's quantile (:func:`summary_quantile`, each within 2.33% relative).
    Below the histogram's resolution (an SE under ~2.33% of |median|, where both quantiles fall in
    one or two bins) the figure is interpolated inside bins and only approximate. Cells with
    fewer than 4 finite trials give +inf (never meets a target).

    Args:
        summary: a streamed :class:`~jaxfed.stats.summary.Summary`.

    Returns:
        Per cell the standard error of the median (+inf below 4 finite trials).

    Examples:
        >>> from jaxfed.stats.summary import SummaryAccumulator
        >>> rng = np.random.default_rng(0)
        >>> acc = SummaryAccumulator((1,))
        >>> acc.add(rng.normal(5.0, 1.0, (1, 10_000)))
        >>> float(np.round(median_se(acc.result())[0], 3))  # exact: sqrt(pi / 2) / sqrt(n) = 0.0125
        0.013
    """
    n = np.asarray(summary.count, np.float64)
    half_width = 0.5 / np.sqrt(np.maximum(n, 1.0))
    lower = summary_quantile(summary, 0.5 - half_width)
    upper = summary_quantile(summary, 0.5 + half_width)
    return np.where(n >= 4, (upper - lower) / 2, np.inf)
