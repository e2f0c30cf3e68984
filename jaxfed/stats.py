"""Summaries over the trial axis: medians and credible bands, from raw trials or streamed.

Raw metrics are arrays (point, trial, …); :func:`band` takes their quantiles directly.

For sweeps too large to keep, the engine streams each chunk into a :class:`SummaryAccumulator`
and returns a :class:`Summary` per metric: count, NaN count, mean and standard error, and a
histogram on a fixed signed log-spaced grid from which quantiles are read. The sketch and its
error:

- bins are ``10^(k/100)`` wide in magnitude over 1e-12 <= |x| < 1e8 (100 per decade), mirrored
  for negative values, with one bin for |x| < 1e-12 (reported as 0) and values beyond 1e8 clamped
  into the outermost bins;
- a quantile is the inverted-CDF order statistic located to its bin and interpolated
  log-linearly inside it, so it is within a factor 10^(1/100) (2.33% relative) of the exact
  inverted-CDF quantile of the same trials, for 1e-12 <= |x| < 1e8;
- counts merge exactly (integer addition) across chunks, devices and processes; sums are
  accumulated in float64 strictly in trial order (``np.add.accumulate``), so the mean does not
  depend on how trials were chunked either.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "Band",
    "band",
    "Summary",
    "SummaryAccumulator",
    "summary_quantile",
    "merge_point_groups",
    "HIST_LOG_MIN",
    "HIST_LOG_MAX",
    "HIST_PER_DECADE",
]

HIST_LOG_MIN = -12  # smallest magnitude with its own bins: 1e-12
HIST_LOG_MAX = 8  # magnitudes from 1e8 on are clamped into the last bin
HIST_PER_DECADE = 100  # bins per decade: relative quantile error <= 10**(1/100) − 1 = 2.33%
_N_SIDE = (HIST_LOG_MAX - HIST_LOG_MIN) * HIST_PER_DECADE  # bins per sign
_ZERO = _N_SIDE  # index of the |x| < 1e-12 bin
N_BINS = 2 * _N_SIDE + 1
_ROWS_PER_BLOCK = 8192  # trial rows per accumulation block (bounds the host's temporary memory)


class Band(NamedTuple):
    """Median and central credible band over trials, per point and time index."""

    median: np.ndarray  # (n_points, *time)
    lower: np.ndarray  # (n_points, *time) quantile (1 − mass)/2
    upper: np.ndarray  # (n_points, *time) quantile (1 + mass)/2
    mass: float  # probability mass inside [lower, upper]


class Summary(NamedTuple):
    """Streaming summary of one metric over trials; arrays are (n_points, *time)."""

    count: np.ndarray  # finite trials per cell (int64)
    nan_count: np.ndarray  # NaN or ±inf trials per cell (int64)
    mean: np.ndarray  # float64
    se: np.ndarray  # standard error of the mean, float64
    hist: np.ndarray  # (n_points, *time, N_BINS) int32 counts on the signed log grid


def band(values, mass: float = 0.75, axis: int = 1) -> Band:
    """Median and the central ``mass`` band (default 75%: the 12.5% and 87.5% quantiles).

    Args:
        values: raw array with a trial axis, e.g. (point, trial, slot), or a :class:`Summary`
            (quantiles from its histogram, see the module docstring for their error).
        mass: probability inside the band, in (0, 1).
        axis: the trial axis of a raw array.
    """
    if not 0.0 < mass < 1.0:
        raise ValueError(f"mass must be in (0, 1), got {mass}")
    qs = [0.5, (1 - mass) / 2, (1 + mass) / 2]
    if isinstance(values, Summary):
        med, lo, hi = (summary_quantile(values, q) for q in qs)
    else:
        med, lo, hi = np.quantile(values, qs, axis=axis)
    return Band(median=med, lower=lo, upper=hi, mass=mass)


def _bin_index(x: np.ndarray) -> np.ndarray:
    magnitude = np.abs(x)
    with np.errstate(divide="ignore"):
        level = np.floor((np.log10(magnitude) - HIST_LOG_MIN) * HIST_PER_DECADE)
    level = np.clip(np.nan_to_num(level, neginf=0), 0, _N_SIDE - 1).astype(np.int64)
    index = np.where(x > 0, _ZERO + 1 + level, _ZERO - 1 - level)
    return np.where(magnitude < 10.0**HIST_LOG_MIN, _ZERO, index)


def _bin_value(index: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Log-linear position ``fraction`` ∈ [0, 1] inside bin ``index`` (0 for the zero bin)."""
    side = np.abs(index - _ZERO) - 1
    exponent = HIST_LOG_MIN + (side + fraction) / HIST_PER_DECADE
    return np.where(index == _ZERO, 0.0, np.sign(index - _ZERO) * 10.0**exponent)


class SummaryAccumulator:
    """Accumulates chunks of trials of one metric into a :class:`Summary` (host, NumPy).

    Cells are (point, *time); :meth:`add` takes a chunk (point, trial, *time) of the *next*
    trials in order.
    """

    def __init__(self, cell_shape: tuple):
        self.count = np.zeros(cell_shape, np.int64)
        self.nan_count = np.zeros(cell_shape, np.int64)
        self.total = np.zeros(cell_shape, np.float64)
        self.total_sq = np.zeros(cell_shape, np.float64)
        self.hist = np.zeros(cell_shape + (N_BINS,), np.int32)

    @classmethod
    def from_state(cls, state: dict) -> "SummaryAccumulator":
        acc = cls(state["count"].shape)
        for field in ("count", "nan_count", "total", "total_sq", "hist"):
            setattr(acc, field, np.array(state[field]))
        return acc

    def state(self) -> dict:
        return {f: getattr(self, f) for f in ("count", "nan_count", "total", "total_sq", "hist")}

    def add(self, chunk: np.ndarray) -> None:
        """Adds a chunk (point, trial, *time) of the next trials, in blocks of trial rows so the
        host's temporary memory stays bounded whatever the chunk size."""
        values = np.moveaxis(np.asarray(chunk), 1, 0)  # (trial, point, *time), a view
        for start in range(0, values.shape[0], _ROWS_PER_BLOCK):
            self._add_block(values[start : start + _ROWS_PER_BLOCK])

    def _add_block(self, values: np.ndarray) -> None:
        finite = np.isfinite(values)
        self.nan_count += (~finite).sum(0)
        self.count += finite.sum(0)
        clean = np.where(finite, values, 0).astype(np.float64)
        # Running sums strictly in trial order: the result does not depend on chunking.
        self.total = np.add.accumulate(np.concatenate([self.total[None], clean]), axis=0)[-1]
        self.total_sq = np.add.accumulate(np.concatenate([self.total_sq[None], clean * clean]), axis=0)[-1]
        n_cells = self.count.size
        cells = np.arange(n_cells).reshape(self.count.shape)
        flat = (cells * N_BINS + _bin_index(values))[finite]
        self.hist += np.bincount(flat, minlength=n_cells * N_BINS).reshape(self.hist.shape).astype(np.int32)

    def result(self) -> Summary:
        n = self.count.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.total / n
            var = np.maximum(self.total_sq - n * mean * mean, 0.0) / (n - 1)
            se = np.sqrt(var / n)
        return Summary(count=self.count, nan_count=self.nan_count, mean=mean, se=se, hist=self.hist)


def summary_quantile(summary: Summary, q: float) -> np.ndarray:
    """Inverted-CDF quantile ``q`` per cell from the histogram (within 2.33%, see module doc)."""
    cum = np.cumsum(summary.hist, axis=-1, dtype=np.int64)
    n = cum[..., -1]
    rank = np.maximum(np.ceil(q * n), 1).astype(np.int64)  # the rank-th smallest finite value
    index = np.minimum((cum < rank[..., None]).sum(-1), N_BINS - 1)
    below = np.take_along_axis(cum, index[..., None], -1)[..., 0] - np.take_along_axis(
        summary.hist, index[..., None], -1
    )[..., 0]
    in_bin = np.maximum(np.take_along_axis(summary.hist, index[..., None], -1)[..., 0], 1)
    fraction = (rank - below - 0.5) / in_bin
    # Inside a negative bin, magnitudes decrease with rank.
    fraction = np.where(index < _ZERO, 1.0 - fraction, fraction)
    return np.where(n > 0, _bin_value(index, fraction), np.nan)


def merge_point_groups(parts: list, n_points: int) -> Summary:
    """Assembles per-group summaries (rows, Summary) into one Summary over all points."""
    first = parts[0][1]
    fields = {}
    for field, value in first._asdict().items():
        out = np.zeros((n_points,) + value.shape[1:], value.dtype)
        for rows, summary in parts:
            out[rows] = getattr(summary, field)
        fields[field] = out
    return Summary(**fields)
