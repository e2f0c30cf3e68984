"""Summaries over the trial axis: medians and credible bands, from raw trials or streamed.

Raw metrics are arrays (point, trial, …); :func:`band` takes their quantiles directly.

For sweeps too large to keep, the engine summarises each chunk on the device and returns a
:class:`Summary` per metric: count, NaN count, mean and standard error, and a
histogram on a fixed signed log-spaced grid from which quantiles are read. The sketch and its
error:

- bins are ``10^(k/100)`` wide in magnitude over 1e-12 <= |x| < 1e8 (100 per decade), mirrored
  for negative values, with one bin for |x| < 1e-12 (reported as 0) and values beyond 1e8 clamped
  into the outermost bins;
- a quantile is the inverted-CDF order statistic located to its bin and interpolated
  log-linearly inside it, so it is within a factor 10^(1/100) (2.33% relative) of the exact
  inverted-CDF quantile of the same trials, for 1e-12 <= |x| < 1e8;
- a value's bin is decided by exact comparisons with the bin edges ``10^(k/100)`` rounded to the
  value's dtype (a logarithm only guesses it), so NumPy on the host and XLA on a device agree;
- counts merge exactly (integer addition) across chunks, devices and processes; sums are taken in
  float64 over fixed blocks of :data:`SUMMARY_BLOCK` trials aligned to trial indices (a fixed tree
  of additions inside a block), and the block sums are merged in trial order, so the mean does
  not depend on how trials were chunked or sharded either.

The engine computes the per-chunk part (:func:`chunk_summary`) on the device inside the compiled
chunk function and folds it into a :class:`SummaryState` on the host (:func:`fold`); the host
receives (points × metric shape × bins) per chunk instead of every value.

Verdicts on a paper's claims are paired comparisons across trials (:func:`paired_verdict`): the
per-trial difference (or log-ratio) of two metrics computed on the same trials, a seeded
percentile-bootstrap interval of its median or mean, an exact two-sided sign test, and a verdict
"reproduced", "not reproduced" or "inconclusive" read from the interval.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

from jaxfed import validation

__all__ = [
    "Band",
    "Verdict",
    "EQUAL_RATIO_MARGIN",
    "MIN_UNTIED_PAIRS",
    "SIGN_TEST_ALPHA",
    "bootstrap_interval",
    "sign_test",
    "paired_verdict",
    "not_testable",
    "verdict_table",
    "band",
    "Summary",
    "SummaryAccumulator",
    "SummaryState",
    "SUMMARY_BLOCK",
    "bin_index",
    "chunk_summary",
    "empty_state",
    "fold",
    "finish",
    "result_of",
    "summary_quantile",
    "median_se",
    "fraction_at_most",
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
SUMMARY_BLOCK = 64
"""Trials per float64 sum block: blocks are [k·64, (k+1)·64) in trial indices (a power of two)."""
# Lower edges of the magnitude levels 0 … _N_SIDE − 1, then the top 1e8 (float64, rounded to a
# value's dtype where used).
_EDGES = 10.0 ** (HIST_LOG_MIN + np.arange(_N_SIDE + 1) / HIST_PER_DECADE)


class Band(NamedTuple):
    """Median and central credible band over trials, per point and time index."""

    median: np.ndarray  # (n_points, *time)
    lower: np.ndarray  # (n_points, *time) quantile (1 − mass)/2
    upper: np.ndarray  # (n_points, *time) quantile (1 + mass)/2
    mass: float  # probability mass inside [lower, upper]


class Summary(NamedTuple):
    """Streaming summary of one metric over trials; arrays are (n_points, *time)."""

    count: np.ndarray  # type: ignore[assignment]  # a field named like tuple.count (public); finite trials per cell (int64)
    nan_count: np.ndarray  # NaN or ±inf trials per cell (int64)
    mean: np.ndarray  # float64
    se: np.ndarray  # standard error of the mean, float64
    hist: np.ndarray  # (n_points, *time, N_BINS) int32 counts on the signed log grid


def band(values, mass: float = 0.75, axis: int = 1) -> Band:
    """Median and the central ``mass`` band (default 75%: the 12.5% and 87.5% quantiles).

    Args:
        values: raw array with a trial axis, e.g. (point, trial, slot), or a :class:`Summary`
            (quantiles from its histogram, see the module docstring for their error). NaN and
            ±inf trials are left out in both cases (a cell without a finite trial gives NaN).
        mass: probability inside the band, in (0, 1).
        axis: the trial axis of a raw array.
    """
    validation.probability("mass", mass, low_open=True, high_open=True)
    qs = [0.5, (1 - mass) / 2, (1 + mass) / 2]
    if isinstance(values, Summary):
        med, lo, hi = (summary_quantile(values, q) for q in qs)
    else:
        # Non-finite trials are left out, as summaries leave them out: both modes give one band.
        finite = np.isfinite(values)
        if finite.all():
            med, lo, hi = np.quantile(values, qs, axis=axis)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a cell with no finite trial: NaN
                med, lo, hi = np.nanquantile(np.where(finite, values, np.nan), qs, axis=axis)
    return Band(median=med, lower=lo, upper=hi, mass=mass)


def _bin_index(x: np.ndarray) -> np.ndarray:
    return bin_index(np.asarray(x), np)


def _binned_dtype(dtype) -> np.dtype:
    """Floats are binned in their own dtype, anything else as float32."""
    return np.dtype(dtype) if np.issubdtype(dtype, np.floating) else np.dtype(np.float32)


def bin_index(x, xp):
    """Histogram bin of each value of ``x`` (NumPy or jax.numpy as ``xp``; identical results).

    The logarithm only guesses the level; one comparison with each neighbouring edge (in the
    value's dtype, exact) decides it, so the bin does not depend on the library's ``log10``.
    Non-finite values get some bin; callers mask them out.
    """
    x = x.astype(_binned_dtype(x.dtype))
    edges = xp.asarray(_EDGES.astype(x.dtype))
    magnitude = xp.abs(x)
    finite = xp.isfinite(magnitude) & (magnitude > 0)
    safe = xp.where(finite, magnitude, 1)
    guess = xp.clip(xp.floor((xp.log10(safe) - HIST_LOG_MIN) * HIST_PER_DECADE), 0, _N_SIDE - 1).astype(np.int32)
    level = guess - (safe < edges[guess]).astype(np.int32) + (safe >= edges[guess + 1]).astype(np.int32)
    level = xp.clip(level, 0, _N_SIDE - 1)
    index = xp.where(x > 0, _ZERO + 1 + level, _ZERO - 1 - level)
    return xp.where(magnitude < edges[0], _ZERO, index).astype(np.int32)


def _bin_value(index: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Log-linear position ``fraction`` ∈ [0, 1] inside bin ``index`` (0 for the zero bin)."""
    side = np.abs(index - _ZERO) - 1
    exponent = HIST_LOG_MIN + (side + fraction) / HIST_PER_DECADE
    return np.where(index == _ZERO, 0.0, np.sign(index - _ZERO) * 10.0**exponent)


class SummaryAccumulator:
    """Accumulates chunks of trials of one metric into a :class:`Summary` (host, NumPy): sums in
    float64 trial by trial. The engine's summaries (:func:`chunk_summary` on the device, then
    :func:`fold`) give the same counts and histograms and means within float64 rounding; this is
    the straightforward reference they are tested against, and a host-side summary for callers.

    Cells are (point, *time); :meth:`add` takes a chunk (point, trial, *time) of the *next*
    trials in order. Besides the :class:`Summary` fields it counts, per point, the trials with
    a non-finite value in any cell (``nonfinite_trials``), the figure raw mode reports too.
    """

    FIELDS = ("count", "nan_count", "total", "total_sq", "hist", "nonfinite_trials")

    def __init__(self, cell_shape: tuple):
        self.nonfinite_trials = np.zeros(cell_shape[:1], np.int64)  # per point: trials with any non-finite cell
        self.count = np.zeros(cell_shape, np.int64)
        self.nan_count = np.zeros(cell_shape, np.int64)
        self.total = np.zeros(cell_shape, np.float64)
        self.total_sq = np.zeros(cell_shape, np.float64)
        self.hist = np.zeros(cell_shape + (N_BINS,), np.int32)

    @classmethod
    def from_state(cls, state: dict) -> SummaryAccumulator:
        acc = cls(state["count"].shape)
        for field in cls.FIELDS:
            setattr(acc, field, np.array(state[field]))
        return acc

    def state(self) -> dict:
        """The arrays that :meth:`from_state` restores the accumulator from (the engine stores them)."""
        return {f: getattr(self, f) for f in self.FIELDS}

    def add(self, chunk: np.ndarray) -> None:
        """Adds a chunk (point, trial, *time) of the next trials, in blocks of trial rows so the
        host's temporary memory stays bounded whatever the chunk size."""
        values = np.moveaxis(np.asarray(chunk), 1, 0)  # (trial, point, *time), a view
        for start in range(0, values.shape[0], _ROWS_PER_BLOCK):
            self._add_block(values[start : start + _ROWS_PER_BLOCK])

    def _add_block(self, values: np.ndarray) -> None:
        finite = np.isfinite(values)
        self.nan_count += (~finite).sum(0)
        self.nonfinite_trials += (~finite).reshape(finite.shape[:2] + (-1,)).any(-1).sum(0)
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
        return result_of(SummaryState(*(getattr(self, f) for f in self.FIELDS)))


class SummaryState(NamedTuple):
    """A summary of trials [0, n) of one metric, cells (point, *time); host arrays.

    ``total``/``total_sq`` are float64 sums of whole :data:`SUMMARY_BLOCK` blocks merged in trial
    order; :func:`fold` adds a chunk's :func:`chunk_summary`, :func:`finish` the last partial block.
    """

    count: np.ndarray  # type: ignore[assignment]  # a field named like tuple.count (public); finite trials per cell (int64)
    nan_count: np.ndarray  # NaN or ±inf trials per cell (int64)
    total: np.ndarray  # float64
    total_sq: np.ndarray  # float64
    hist: np.ndarray  # (*cells, N_BINS) int32
    nonfinite_trials: np.ndarray  # (points,) int64: trials with a non-finite value in any cell


def empty_state(cell_shape: tuple) -> SummaryState:
    """The summary of no trial, for cells (point, *time)."""
    return SummaryState(
        count=np.zeros(cell_shape, np.int64),
        nan_count=np.zeros(cell_shape, np.int64),
        total=np.zeros(cell_shape, np.float64),
        total_sq=np.zeros(cell_shape, np.float64),
        hist=np.zeros(cell_shape + (N_BINS,), np.int32),
        nonfinite_trials=np.zeros(cell_shape[:1], np.int64),
    )


def _tree_sum(a, axis: int):
    """Sum over ``axis`` (length a power of two) by a fixed tree of elementwise additions: the
    same IEEE operations in the same order for NumPy and XLA, whatever the batch or sharding."""
    while a.shape[axis] > 1:
        half = a.shape[axis] // 2
        lo = tuple(slice(None) if i != axis else slice(0, half) for i in range(a.ndim))
        hi = tuple(slice(None) if i != axis else slice(half, None) for i in range(a.ndim))
        a = a[lo] + a[hi]
    return a.sum(axis)  # one element: exact


def chunk_summary(values, n_valid, xp) -> dict:
    """What the summary needs from a chunk of trials (``xp``: NumPy or jax.numpy under x64).

    Args:
        values: (points, T, *time), T a multiple of :data:`SUMMARY_BLOCK`, trial 0 of the chunk
            at a multiple of it in trial indices.
        n_valid: trials [0, n_valid) of the chunk count, the rest (padding) are ignored; a
            scalar, or one count per point.

    Returns:
        dict of int32 ``count``, ``nan_count`` (points, *time), ``nonfinite_trials`` (points,),
        ``hist`` (points, *time, N_BINS), and float64 ``block_total``, ``block_sq``
        (points, T / SUMMARY_BLOCK, *time): per trial block, the sum of the finite values (and of
        their squares, exact in float64 for float32 values) in a fixed order.
    """
    n_points, n_trials = values.shape[:2]
    cells = values.shape[2:]
    per_point = xp.asarray(n_valid).reshape((-1, 1) + (1,) * len(cells))  # (1 or points, 1, …)
    valid = xp.arange(n_trials).reshape((1, n_trials) + (1,) * len(cells)) < per_point
    finite = xp.isfinite(values)
    used, bad = finite & valid, (~finite) & valid
    clean = xp.where(used, values, 0).astype(np.float64)
    blocks = clean.reshape((n_points, n_trials // SUMMARY_BLOCK, SUMMARY_BLOCK) + cells)
    n_cells = n_points * int(np.prod(cells, dtype=np.int64))
    flat = (xp.arange(n_cells, dtype=np.int32).reshape((n_points, 1) + cells) * N_BINS + bin_index(values, xp)).ravel()
    weights = used.astype(np.int32).ravel()
    if xp is np:
        hist = np.bincount(flat, weights, minlength=n_cells * N_BINS).astype(np.int32)
    else:
        hist = xp.zeros(n_cells * N_BINS, np.int32).at[flat].add(weights)
    return {
        "count": used.sum(1, dtype=np.int32),
        "nan_count": bad.sum(1, dtype=np.int32),
        "nonfinite_trials": bad.reshape(n_points, n_trials, -1).any(-1).sum(1, dtype=np.int32),
        "hist": hist.reshape((n_points,) + cells + (N_BINS,)),
        "block_total": _tree_sum(blocks, 2),
        "block_sq": _tree_sum(blocks * blocks, 2),
    }


_FOLD_SLAB = 256  # sum blocks folded per step (see fold)


def fold(state: SummaryState, part: dict, n_blocks: int) -> SummaryState:
    """``state`` followed by a chunk's :func:`chunk_summary` (host arrays), of which the first
    ``n_blocks`` trial blocks hold trials; block sums are added one after another, in trial order."""

    def in_order(total, blocks):
        # ((total + b0) + b1) + …: the order that makes the sum independent of the chunking.
        # NumPy's reduce adds one after another along any axis but the fast one (where it sums
        # pairwise), so the cells stay on the fast axis, two at least (a scalar metric gets a zero
        # column). In slabs of blocks, so that what is copied stays in cache: a GPU chunk of 1.9e6
        # trials has 29,000 blocks (an accumulate took 0.17 s per field, slabs 0.015 s).
        n_cells = math.prod(total.shape[1:])
        acc = total.reshape(len(total), 1, n_cells)
        rows = blocks[:, :n_blocks].reshape(len(total), n_blocks, n_cells)
        if n_cells == 1:
            acc, rows = (np.concatenate([a, np.zeros_like(a)], axis=2) for a in (acc, rows))
        for first in range(0, n_blocks, _FOLD_SLAB):
            acc = np.add.reduce(
                np.concatenate([acc, rows[:, first : first + _FOLD_SLAB]], axis=1), axis=1, keepdims=True
            )
        return acc[:, 0, :n_cells].reshape(total.shape)

    return SummaryState(
        count=state.count + part["count"],
        nan_count=state.nan_count + part["nan_count"],
        total=in_order(state.total, np.asarray(part["block_total"])),
        total_sq=in_order(state.total_sq, np.asarray(part["block_sq"])),
        hist=state.hist + part["hist"],
        nonfinite_trials=state.nonfinite_trials + part["nonfinite_trials"],
    )


def finish(state: SummaryState, tail: np.ndarray, lengths=None) -> tuple[SummaryState, Summary]:
    """(state, Summary) after the last, partial block: ``tail`` (points, < SUMMARY_BLOCK, *time)
    raw values, summarised on the host by the same :func:`chunk_summary`; ``lengths``: per point,
    the tail trials that count (default: all)."""
    n = tail.shape[1]
    padded = np.zeros((tail.shape[0], SUMMARY_BLOCK) + tail.shape[2:], tail.dtype)
    padded[:, :n] = tail
    state = fold(state, chunk_summary(padded, n if lengths is None else np.asarray(lengths), np), 1 if n else 0)
    return state, result_of(state)


def result_of(state: SummaryState) -> Summary:
    """The :class:`Summary` (mean, standard error, …) of a state."""
    n = state.count.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = state.total / n
        var = np.maximum(state.total_sq - n * mean * mean, 0.0) / (n - 1)
        se = np.sqrt(var / n)
    return Summary(count=state.count, nan_count=state.nan_count, mean=mean, se=se, hist=state.hist)


def summary_quantile(summary: Summary, q) -> np.ndarray:
    """Inverted-CDF quantile ``q`` (a number, or an array broadcast to the cells) per cell from the
    histogram (within 2.33%, see module doc)."""
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


# --------------------------------------------------------------------------- verdicts
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_TESTABLE = "not testable here"
_CLAIMS = ("greater", "less", "equal")
_TRANSFORMS = ("difference", "log_ratio")
_STATISTICS = ("median", "mean")


class Verdict(NamedTuple):
    """A paired comparison of two metrics over the same trials and what it says about a claim.

    ``estimate``, ``lower`` and ``upper`` are on the scale the claim is stated in: a difference
    a − b, or for ``transform="log_ratio"`` the ratio a / b (the interval of the log-ratio mapped
    back by exp).
    """

    claim: str  # human-readable claim, e.g. "complete converges before star"
    estimate: float  # statistic of the paired differences (or ratio)
    lower: float  # bootstrap interval at ``level``
    upper: float
    level: float
    p_value: float  # exact two-sided sign test of "median difference = 0" (ties dropped)
    fraction_greater: float  # fraction of used pairs with a > b
    n: int  # pairs used (both values finite)
    n_dropped: int  # pairs dropped because a value was NaN or infinite
    verdict: str  # "reproduced" | "not reproduced" | "inconclusive"
    n_untied: int = 0  # pairs with a != b: those that can carry a directional effect
    reason: str = ""  # why a directional claim the interval supports is still inconclusive

    def interval_text(self, fmt: str = "{:.3g}") -> str:
        return f"{fmt.format(self.estimate)} [{fmt.format(self.lower)}, {fmt.format(self.upper)}]"


def bootstrap_interval(values, statistic: str = "median", level: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """Percentile-bootstrap interval of ``statistic`` over the last axis, vectorised over the rest.

    Resamples the last axis with replacement ``n_boot`` times (the same resampling indices for every
    leading index, from ``numpy.random.default_rng(seed)``, so the result is reproducible) and returns
    ``(estimate, lower, upper)`` with the (1 ∓ level)/2 quantiles of the resampled statistic.
    """
    validation.one_of("statistic", statistic, _STATISTICS)
    validation.probability("level", level, low_open=True, high_open=True)
    validation.integer("n_boot", n_boot, 1)
    x = np.asarray(values, np.float64)
    n = x.shape[-1]
    if n == 0:
        raise ValueError("bootstrap_interval needs at least one value")
    reduce = np.median if statistic == "median" else np.mean
    rng = np.random.default_rng(seed)
    estimate = reduce(x, axis=-1)
    # Resample in slabs so memory stays at ~32 MB whatever n_boot and n.
    slab = max(1, int(4_000_000 // max(n * max(x[..., 0].size, 1), 1)))
    slabs = []
    for start in range(0, int(n_boot), slab):
        idx = rng.integers(0, n, size=(min(slab, int(n_boot) - start), n))
        slabs.append(reduce(x[..., idx], axis=-1))  # (..., slab)
    boots = np.concatenate(slabs, axis=-1)
    lower, upper = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=-1)
    return estimate, lower, upper


def sign_test(differences) -> float:
    """Exact two-sided sign test p-value of "positive and negative differences are equally likely".

    Zeros are dropped; p = min(1, 2·P[Bin(n, 1/2) <= min(n₊, n₋)]). 1.0 when nothing is left.
    """
    d = np.asarray(differences, np.float64).ravel()
    n_pos, n_neg = int((d > 0).sum()), int((d < 0).sum())
    n = n_pos + n_neg
    if n == 0:
        return 1.0
    k = min(n_pos, n_neg)
    # log of the Bin(n, 1/2) pmf at 0..k, summed stably.
    j = np.arange(k + 1)
    log_pmf = _log_comb(n, j) - n * np.log(2.0)
    top = log_pmf.max()
    return float(min(1.0, 2.0 * np.exp(top) * np.exp(log_pmf - top).sum()))


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    from math import lgamma

    return np.array([lgamma(n + 1) - lgamma(int(i) + 1) - lgamma(n - int(i) + 1) for i in k])


MIN_UNTIED_PAIRS = 10
"""A directional claim is "reproduced" only when at least this many pairs differ (a != b)."""
SIGN_TEST_ALPHA = 0.05
"""... and the two-sided sign test rejects "no direction" at this level, in the claimed direction."""
EQUAL_RATIO_MARGIN = 0.05
"""Every "≈" claim on a ratio holds when the ratio's interval lies within [1/1.05, 1.05] (margin
log 1.05 on the log scale). Directional claims take no margin: any effect that the interval and the
sign test agree on counts, so a ratio of 1.01 [1.005, 1.015] is both "a > b" and "a ≈ b"."""


def paired_verdict(
    a,
    b,
    claim: str,
    expect: str = "greater",
    transform: str = "difference",
    statistic: str = "median",
    margin: float = 0.0,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Verdict:
    """Verdict on a claim about two metrics measured on the same trials (pair i = trial i).

    With d_i = a_i − b_i (``transform="difference"``) or d_i = log(a_i / b_i) (``"log_ratio"``,
    both positive), the bootstrap interval [lo, hi] of the median (or mean) of d at ``level``
    decides:

    - ``expect="greater"`` (claim a > b): reproduced if lo > margin, not reproduced if hi <= margin
      (the effect is absent or reversed), else inconclusive;
    - ``expect="less"`` (claim a < b): mirror image, with −margin;
    - ``expect="equal"`` (claim |a − b| <= margin, margin > 0): reproduced if the interval lies inside
      [−margin, margin], not reproduced if it lies entirely outside, else inconclusive.

    A directional claim ("greater" or "less") must also be carried by the trials, not by a few of
    them: "reproduced" needs the interval **and** the exact sign test to agree — at least
    :data:`MIN_UNTIED_PAIRS` pairs that differ (``n_untied``), a sign-test p below
    :data:`SIGN_TEST_ALPHA`, more of them in the claimed direction — else the verdict is
    inconclusive and ``reason`` says which condition failed (4 shifted trials out of 100, the
    other 96 tied, are never "reproduced", whatever the bootstrap of the mean says).

    For ``"log_ratio"`` the margin is on the log scale (a 5% ratio margin is log(1.05)) and the
    reported estimate and interval are ratios. Pairs with a non-finite value are dropped and
    counted in ``n_dropped``; with no pair left the verdict is inconclusive.

    >>> rng = np.random.default_rng(0)
    >>> before = rng.exponential(1.0, 400)
    >>> after = before * 1.2 * np.exp(rng.normal(0, 0.1, 400))
    >>> v = paired_verdict(after, before, "after > before", transform="log_ratio")
    >>> v.verdict, v.interval_text("{:.2f}")
    ('reproduced', '1.20 [1.18, 1.21]')
    """
    validation.one_of("expect", expect, _CLAIMS)
    validation.one_of("transform", transform, _TRANSFORMS)
    validation.non_negative("margin", margin)
    if expect == "equal":
        validation.check("margin", margin, margin > 0, "> 0 with expect='equal'")
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    validation.check("b", b.size, a.shape == b.shape, f"of one length with a ({a.size})")
    ok = np.isfinite(a) & np.isfinite(b)
    if transform == "log_ratio":
        if np.any((a[ok] <= 0) | (b[ok] <= 0)):
            raise ValueError("transform='log_ratio' needs positive values in a and b")
        d = np.log(a[ok]) - np.log(b[ok])
    else:
        d = a[ok] - b[ok]
    n, dropped = int(d.size), int(a.size - d.size)
    if n == 0:
        nan = float("nan")
        return Verdict(claim, nan, nan, nan, level, 1.0, nan, 0, dropped, INCONCLUSIVE)
    est, lo, hi = (float(v) for v in bootstrap_interval(d, statistic, level, n_boot, seed))
    if expect == "greater":
        verdict = REPRODUCED if lo > margin else NOT_REPRODUCED if hi <= margin else INCONCLUSIVE
    elif expect == "less":
        verdict = REPRODUCED if hi < -margin else NOT_REPRODUCED if lo >= -margin else INCONCLUSIVE
    else:
        inside = -margin <= lo and hi <= margin
        outside = lo > margin or hi < -margin
        verdict = REPRODUCED if inside else NOT_REPRODUCED if outside else INCONCLUSIVE
    p_value, untied = sign_test(d), int((d != 0).sum())
    reason = _not_carried(d, expect, p_value) if verdict == REPRODUCED and expect != "equal" else ""
    verdict = INCONCLUSIVE if reason else verdict
    if transform == "log_ratio":
        est, lo, hi = np.exp(est), np.exp(lo), np.exp(hi)
    frac = float((d > 0).mean())
    return Verdict(claim, float(est), float(lo), float(hi), level, p_value, frac, n, dropped, verdict, untied, reason)


def _not_carried(d: np.ndarray, expect: str, p_value: float) -> str:
    """Why the trials do not carry a directional effect the interval shows ("" when they do): too
    few pairs differ, or the sign test does not reject "no direction" in the claimed direction."""
    untied = int((d != 0).sum())
    n_claimed = int((d > 0).sum() if expect == "greater" else (d < 0).sum())
    if untied < MIN_UNTIED_PAIRS:
        return f"only {untied} of {d.size} pairs differ (at least {MIN_UNTIED_PAIRS} needed)"
    if p_value >= SIGN_TEST_ALPHA or 2 * n_claimed <= untied:
        return f"sign test p = {p_value:.2g} ({n_claimed} of {untied} differing pairs in the claimed direction)"
    return ""


def not_testable(claim: str, reason: str) -> Verdict:
    """The verdict on a claim that the settings cannot detect (``reason`` says why): no statistic."""
    nan = float("nan")
    return Verdict(claim, nan, nan, nan, float("nan"), nan, nan, 0, 0, NOT_TESTABLE, 0, reason)


def verdict_table(
    verdicts: list, what: str = "paired statistic", fmt: str = "{:.3g}", sections: list | None = None
) -> str:
    """Markdown table of verdicts: claim, statistic with interval, sign-test p, pairs, verdict; with
    ``sections`` (one name per verdict) a first column naming where each claim is stated."""
    if not verdicts:
        return ""
    level = next((v.level for v in verdicts if v.verdict != NOT_TESTABLE), 0.95)
    first, rule = ("| section ", "|---") if sections is not None else ("", "")
    rows = [
        f"{first}| claim | {what} [{level:.0%} interval] | a > b in | sign-test p | pairs | verdict |",
        f"{rule}|---|---|---|---|---|---|",
    ]
    for i, v in enumerate(verdicts):
        where = f"| {sections[i]} " if sections is not None else ""
        dropped = f" ({v.n_dropped} dropped)" if v.n_dropped else ""
        untied = f", {v.n_untied} differ" if v.n_untied < v.n else ""
        why = f" ({v.reason})" if v.reason else ""
        if v.verdict == NOT_TESTABLE:
            rows.append(f"{where}| {v.claim} | – | – | – | – | **{v.verdict}**{why} |")
            continue
        rows.append(
            f"{where}| {v.claim} | {v.interval_text(fmt)} | {v.fraction_greater:.0%} | {v.p_value:.2g} | "
            f"{v.n}{untied}{dropped} | **{v.verdict}**{why} |"
        )
    return "\n".join(rows)
