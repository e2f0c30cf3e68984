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
  of additions inside a block), and the block sums are merged by a fixed pairwise tree over
  aligned ranges of blocks (a binary counter, :class:`SummaryState`), so the mean does not depend
  on how trials were chunked, sharded or resumed either.

The engine computes the per-chunk part (:func:`chunk_summary`) on the device inside the compiled
chunk function and folds it into a :class:`SummaryState` on the host (:func:`fold`); the host
receives per chunk the counts and histograms (points × metric shape × bins) and O(log n) partial
sums per cell, whatever the chunk size, instead of every value.

Verdicts on a paper's claims are paired comparisons across trials (:func:`paired_verdict`): the
per-trial difference (or log-ratio) of two metrics computed on the same trials, an interval of its
median (exact, from order statistics: :func:`quantile_interval`) or mean (seeded percentile bootstrap:
:func:`bootstrap_interval`), an exact two-sided sign test, and a verdict "reproduced", "not
reproduced" or "inconclusive" read from the interval.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxfed import validation

__all__ = [
    "Band",
    "Verdict",
    "EQUAL_RATIO_MARGIN",
    "MIN_UNTIED_PAIRS",
    "SIGN_TEST_ALPHA",
    "bootstrap_interval",
    "quantile_interval",
    "interval",
    "sign_test",
    "paired_verdict",
    "not_testable",
    "verdict_table",
    "band",
    "Summary",
    "SummaryAccumulator",
    "SummaryState",
    "SUMMARY_BLOCK",
    "SUM_LEVELS",
    "HISTOGRAM_METHODS",
    "bin_index",
    "chunk_summary",
    "summary_of_blocks",
    "summary_pass",
    "SummaryPass",
    "count_into",
    "dyadic_pieces",
    "level_total",
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
SUM_LEVELS = 32
"""Levels of a state's binary counter of block sums: 2^32 blocks, more than uint32 trial indices reach."""
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

    The bin is decided by exact comparisons with the bin edges in the value's dtype, so it does
    not depend on the library's arithmetic. A float32 magnitude's level is read from a table
    indexed by its top 16 bits (:func:`_float32_level`); other dtypes guess it with a logarithm.
    Non-finite values get some bin; callers mask them out.
    """
    x = x.astype(_binned_dtype(x.dtype))
    edges = xp.asarray(_EDGES.astype(x.dtype))
    magnitude = xp.abs(x)
    if x.dtype == np.float32:
        level = _float32_level(magnitude, edges, xp)
    else:
        finite = xp.isfinite(magnitude) & (magnitude > 0)
        safe = xp.where(finite, magnitude, 1)
        guess = xp.clip(xp.floor((xp.log10(safe) - HIST_LOG_MIN) * HIST_PER_DECADE), 0, _N_SIDE - 1).astype(np.int32)
        level = guess - (safe < edges[guess]).astype(np.int32) + (safe >= edges[guess + 1]).astype(np.int32)
        level = xp.clip(level, 0, _N_SIDE - 1)
    index = xp.where(x > 0, _ZERO + 1 + level, _ZERO - 1 - level)
    return xp.where(magnitude < edges[0], _ZERO, index).astype(np.int32)


def _float32_levels_by_prefix() -> np.ndarray:
    """int32 (2^15,): the magnitude level (:data:`_EDGES`, clipped to [0, _N_SIDE − 1]) of the
    smallest non-negative float32 with each top-16-bit pattern (sign bit 0)."""
    smallest = (np.arange(1 << 15, dtype=np.uint32) << 16).view(np.float32)
    with np.errstate(invalid="ignore"):  # the NaN patterns: some level (masked out by the callers)
        level = np.searchsorted(_EDGES.astype(np.float32), smallest, side="right") - 1
    return np.clip(level, 0, _N_SIDE - 1).astype(np.int32)


_FLOAT32_LEVELS = _float32_levels_by_prefix()


def _float32_level(magnitude, edges, xp):
    """The level k of float32 magnitudes, edges[k] <= m < edges[k + 1] (clipped to
    [0, _N_SIDE − 1]), without a logarithm: the floats sharing their top 16 bits span at most a
    factor 1 + 2^-7, less than a level's 10^(1/100), so a magnitude's level is its prefix's
    smallest float's level (:data:`_FLOAT32_LEVELS`) or the next one, which one exact comparison
    with that next level's edge decides (a table read, a read of an edge and a comparison per
    value, where the logarithm cost a device more than the histogram's count itself)."""
    if xp is np:
        prefix = magnitude.view(np.uint32) >> 16
    else:
        prefix = jax.lax.shift_right_logical(jax.lax.bitcast_convert_type(magnitude, np.uint32), np.uint32(16))
    guess = xp.asarray(_FLOAT32_LEVELS)[prefix]
    return xp.minimum(guess + (magnitude >= edges[guess + 1]).astype(np.int32), _N_SIDE - 1)


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
        return _summary(self.count, self.nan_count, self.total, self.total_sq, self.hist)


class SummaryState(NamedTuple):
    """A summary of trials [0, n) of one metric, cells (point, *time); host arrays.

    The float64 sums are a binary counter over the :data:`SUMMARY_BLOCK` blocks summarised: with
    ``blocks`` = N and N = Σ_j 2^j·b_j in binary, ``total[:, j]`` holds the sum D(j, k) of the
    aligned range of blocks [k·2^j, (k+1)·2^j) that bit b_j stands for (0 where b_j = 0), where

        D(0, k) = the block's sum (a fixed tree inside the block),
        D(j, k) = D(j − 1, 2k) + D(j − 1, 2k + 1).

    Every D is a fixed function of the trials and their indices, so the state, and the total
    Σ_j D (added from the highest level down, :func:`level_total`), do not depend on how the
    trials were chunked, sharded or resumed. :func:`fold` adds a chunk's :func:`chunk_summary`
    (its O(log n) dyadic sums), :func:`finish` the last partial block.
    """

    count: np.ndarray  # type: ignore[assignment]  # a field named like tuple.count (public); finite trials per cell (int64)
    nan_count: np.ndarray  # NaN or ±inf trials per cell (int64)
    total: np.ndarray  # (points, SUM_LEVELS, *time) float64: the binary counter of block sums
    total_sq: np.ndarray  # (points, SUM_LEVELS, *time) float64: the same for the squares
    hist: np.ndarray  # (*cells, N_BINS) int32
    nonfinite_trials: np.ndarray  # (points,) int64: trials with a non-finite value in any cell
    blocks: np.ndarray  # (points,) int64: whole blocks summarised (N above)


def empty_state(cell_shape: tuple) -> SummaryState:
    """The summary of no trial, for cells (point, *time)."""
    levels = (cell_shape[0], SUM_LEVELS) + tuple(cell_shape[1:])
    return SummaryState(
        count=np.zeros(cell_shape, np.int64),
        nan_count=np.zeros(cell_shape, np.int64),
        total=np.zeros(levels, np.float64),
        total_sq=np.zeros(levels, np.float64),
        hist=np.zeros(cell_shape + (N_BINS,), np.int32),
        nonfinite_trials=np.zeros(cell_shape[:1], np.int64),
        blocks=np.zeros(cell_shape[:1], np.int64),
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


def dyadic_pieces(first: int, n: int) -> list[tuple[int, int]]:
    """The aligned ranges of blocks [k·2^j, (k+1)·2^j) that tile [first, first + n), each the
    largest that starts where the previous one ends: ``[(j, k), …]``, at most two per level.

    >>> dyadic_pieces(3, 10)  # blocks 3, 4–7, 8–11, 12
    [(0, 3), (2, 1), (2, 2), (0, 12)]
    """
    pieces, a, stop = [], int(first), int(first) + int(n)
    while a < stop:
        j = (stop - a).bit_length() - 1  # the largest that fits …
        if a:
            j = min(j, (a & -a).bit_length() - 1)  # … and is aligned at a
        pieces.append((j, a >> j))
        a += 1 << j
    return pieces


def _max_pieces(n_blocks: int) -> int:
    """At most two pieces per level up to the chunk's largest level (see :func:`dyadic_pieces`)."""
    return 2 * max(n_blocks, 1).bit_length()


def _dyadic_sums(blocks, first, n, xp):
    """The sums D(j, k) of :func:`dyadic_pieces` (first, n) of the block sums ``blocks``
    (points, M, *cells) of blocks [first, first + M), n <= M, by the pairwise tree of
    :class:`SummaryState`: (points, 2·bit_length(M), *cells), the pieces in order, zeros after.

    ``first`` and ``n`` may be traced (jax.numpy): the blocks are placed at their offset inside
    a buffer aligned to the chunk's largest level S = 2^L (L = ⌊log₂ M⌋), each level of the tree
    is one pairwise addition of the level below, and the pieces are read from the levels. A sum
    read this way covers blocks of the chunk only, so the buffer's zero padding never enters it.
    """
    n_points, width = blocks.shape[:2]
    top = max(width, 1).bit_length() - 1  # L
    span = 1 << top  # S
    powers = xp.asarray(1 << np.arange(top + 1, dtype=np.int64))
    first, n = xp.asarray(first).astype(np.int64), xp.asarray(n).astype(np.int64)
    base = first - first % span
    # The pieces' levels and positions (relative to base), found as dyadic_pieces does.
    levels, starts, a, stop = [], [], first, first + n
    for _ in range(_max_pieces(width)):
        fits = (stop - a >= powers).sum() - 1  # −1 when nothing is left
        aligned = (a % powers == 0).sum() - 1
        j = xp.minimum(fits, aligned)
        levels.append(j)
        starts.append(a - base)
        a = a + xp.where(j >= 0, xp.left_shift(np.int64(1), xp.maximum(j, 0)), 0)
    levels, starts = xp.stack(levels), xp.stack(starts)
    buffer_shape = (n_points, 3 * span) + tuple(blocks.shape[2:])  # offset < S and M < 2S
    level: Any
    if xp is np:
        level = np.zeros(buffer_shape, blocks.dtype)
        level[:, int(first - base) : int(first - base) + width] = blocks
    else:
        start = (0, first - base) + (0,) * (blocks.ndim - 2)
        level = jax.lax.dynamic_update_slice(xp.zeros(buffer_shape, blocks.dtype), blocks, start)
    out = xp.zeros((n_points, len(levels)) + tuple(blocks.shape[2:]), blocks.dtype)
    expand = (1, -1) + (1,) * (blocks.ndim - 2)
    for j in range(top + 1):
        if j:
            level = level[:, 0::2] + level[:, 1::2]  # D(j, k) = D(j − 1, 2k) + D(j − 1, 2k + 1)
        at = xp.clip(xp.right_shift(starts, j), 0, level.shape[1] - 1)
        out = xp.where((levels == j).reshape(expand), xp.take(level, at, axis=1), out)
    return out


HISTOGRAM_METHODS = ("scatter", "sort")
"""How a device counts values into the histogram's bins (identical counts): ``scatter`` adds
one per value into the bins (XLA's scatter-add; fast on a CPU, serialised on a GPU when many
values share a bin); ``sort`` sorts each cell's bin indices over the trials and reads the counts
as differences of :func:`jax.numpy.searchsorted` positions of the bin edges (no two writes to
one place)."""


def _histogram(bins, xp, method: str):
    """Counts (points, *cells, N_BINS) of the bins ``bins`` (points, T, *cells) of :class:`SummaryPass`
    (``N_BINS``: a value not counted)."""
    n_points, n_trials = bins.shape[:2]
    cells = tuple(bins.shape[2:])
    n_cells = n_points * math.prod(cells)
    if xp is np or method == "scatter":
        cell_index = xp.arange(n_cells, dtype=np.int32).reshape((n_points, 1) + cells)
        flat = xp.where(bins < N_BINS, cell_index * N_BINS + bins, n_cells * N_BINS).ravel()  # past the end: dropped
        if xp is np:
            hist = np.bincount(flat, minlength=n_cells * N_BINS + 1)[:-1].astype(np.int32)
        else:
            hist = xp.zeros(n_cells * N_BINS, np.int32).at[flat].add(1, mode="drop")
        return hist.reshape((n_points,) + cells + (N_BINS,))
    if method != "sort":
        raise ValueError(f"histogram={method!r}: expected one of {', '.join(HISTOGRAM_METHODS)}")
    keys = xp.sort(xp.moveaxis(bins, 1, -1).reshape(n_cells, n_trials), axis=-1)  # N_BINS sorts after every bin
    edges = xp.arange(N_BINS + 1, dtype=keys.dtype)
    at = jax.vmap(lambda row: xp.searchsorted(row, edges, side="left"))(keys)
    return xp.diff(at, axis=-1).astype(np.int32).reshape((n_points,) + cells + (N_BINS,))


def count_into(hist, row, bins, xp, method: str):
    """``hist`` (rows, *cells, N_BINS) int32 with the counts of the bins ``bins`` (T, *cells) of a
    :class:`SummaryPass` added to row ``row`` (may be traced): a micro-batch's values counted
    straight into a device's running histogram (jax.numpy), by one of :data:`HISTOGRAM_METHODS`.

    ``scatter`` adds into ``hist`` in place (no histogram of the micro-batch is formed: adding a
    dense one per micro-batch would cost more than the values' own scatter), a value not counted
    (bin ``N_BINS``) sent past the end and dropped; ``sort`` counts the micro-batch
    (:func:`_histogram`) and adds it to the row.
    """
    if method != "scatter":
        return hist.at[row].add(_histogram(bins[None], xp, method)[0])
    n_cells = math.prod(bins.shape[1:])
    cell = xp.arange(n_cells, dtype=np.int32).reshape(bins.shape[1:])
    flat = xp.where(bins < N_BINS, (row * n_cells + cell) * N_BINS + bins, hist.size).ravel()
    return hist.reshape(-1).at[flat].add(1, mode="drop").reshape(hist.shape)


class SummaryPass(NamedTuple):
    """What a summary needs from values (points, T, *cells), read once (:func:`summary_pass`)."""

    bins: Any  # (points, T, *cells) int32: each value's histogram bin, N_BINS where it does not count
    sums: Any  # (points, T / SUMMARY_BLOCK, *cells) float64: Σx of each block's counted values
    squares: Any  # the same for Σx²
    nonfinite_trials: Any  # (points,) int32: valid trials with a NaN or ±inf in some cell


def summary_pass(values, valid, xp) -> SummaryPass:
    """The bins, block sums and non-finite trials of ``values`` (points, T, *cells), T a multiple of
    :data:`SUMMARY_BLOCK`, where ``valid`` (broadcast to ``values``) says which trials count: one
    elementwise pass computes each value's finiteness, bin (:func:`bin_index`, or ``N_BINS`` when
    it is not counted) and float64 value and square, which the fixed trees of :func:`_tree_sum`
    add (XLA fuses the pass into its consumers; stacking values and squares into one tree copied a
    stored chunk's values and gained nothing inside the micro-batch loop on a CPU): a value counts
    when it is finite and valid,

        Σx, Σx² over each block of SUMMARY_BLOCK trials of the counted values (others as 0),
        non-finite trials = #{t valid : some cell of trial t is NaN or ±inf},

    the bits of computing finiteness, bins, sums and non-finite trials each from the values again
    (the separate passes, kept as the reference in tests/engine/test_summary_sums.py).
    A block's sums depend on its values only, so they are the same bits whether taken over a
    whole chunk or one micro-batch at a time; the squares of float32 values are exact in float64,
    so the device's bits are NumPy's (a float64 value's square rounds, and XLA may fuse it into
    the tree's first addition, an FMA: its Σx² may differ from NumPy's in the last bit).
    """
    n_points, n_trials = values.shape[:2]
    cells = tuple(values.shape[2:])
    finite = xp.isfinite(values)
    used = finite & valid
    bins = xp.where(used, bin_index(values, xp), N_BINS)
    clean = xp.where(used, values, 0).astype(np.float64)
    blocks = clean.reshape((n_points, n_trials // SUMMARY_BLOCK, SUMMARY_BLOCK) + cells)
    nonfinite = ((~finite) & valid).reshape(n_points, n_trials, -1).any(-1).sum(1, dtype=np.int32)
    return SummaryPass(bins, _tree_sum(blocks, 2), _tree_sum(blocks * blocks, 2), nonfinite)


def chunk_summary(values, n_valid, xp, first_block=0, n_blocks=None, histogram: str = "scatter") -> dict:
    """What the summary needs from a chunk of trials (``xp``: NumPy or jax.numpy under x64).

    Args:
        values: (points, T, *time), T a multiple of :data:`SUMMARY_BLOCK`: the blocks
            ``first_block`` + [0, T / SUMMARY_BLOCK) in trial indices.
        n_valid: trials [0, n_valid) of the chunk count, the rest (padding) are ignored; a
            scalar, or one count per point.
        first_block: the chunk's first block (may be traced).
        n_blocks: the blocks whose sums enter the state (default ``n_valid // SUMMARY_BLOCK``,
            a scalar; may be traced).
        histogram: one of :data:`HISTOGRAM_METHODS` (on the device; NumPy counts with bincount).

    Returns:
        :func:`summary_of_blocks` of the chunk's histogram, block sums and non-finite trials.
    """
    n_points, n_trials = values.shape[:2]
    cells = values.shape[2:]
    per_point = xp.asarray(n_valid).reshape((-1, 1) + (1,) * len(cells))  # (1 or points, 1, …)
    valid = xp.arange(n_trials).reshape((1, n_trials) + (1,) * len(cells)) < per_point
    one = summary_pass(values, valid, xp)
    return summary_of_blocks(
        _histogram(one.bins, xp, histogram),
        one.sums,
        one.squares,
        one.nonfinite_trials,
        n_valid,
        first_block,
        n_blocks,
        xp,
    )


def summary_of_blocks(hist, sums, squares, nonfinite_trials, n_valid, first_block, n_blocks, xp) -> dict:
    """A chunk's summary from its histogram ``hist`` (points, *time, N_BINS), its block sums
    ``sums`` and ``squares`` (points, M, *time) of :func:`summary_pass` over the blocks
    ``first_block`` + [0, M) and its ``nonfinite_trials`` (points,), of which trials
    [0, ``n_valid``) count (``n_blocks``: as in :func:`chunk_summary`).

    Returns:
        dict of int32 ``count``, ``nan_count`` (points, *time), ``nonfinite_trials`` (points,),
        ``hist`` (points, *time, N_BINS), and float64 ``sum_pieces``, ``sq_pieces``
        (points, 2·bit_length(M), *time): the sums D(j, k) of the values (and of their squares)
        over the :func:`dyadic_pieces` of blocks [first_block, first_block + n_blocks) (see
        :class:`SummaryState`), zeros after.
    """
    n_trials = sums.shape[1] * SUMMARY_BLOCK
    if n_blocks is None:
        n_blocks = xp.asarray(n_valid) // SUMMARY_BLOCK
    # Every finite value counted is in one bin, and every value counted is finite or not: two
    # sums over the bins (cells × N_BINS) instead of two passes over the chunk's values.
    count = hist.sum(-1, dtype=np.int32)
    n_counted = xp.minimum(xp.asarray(n_valid).astype(np.int32), n_trials).reshape((-1,) + (1,) * (count.ndim - 1))
    return {
        "count": count,
        "nan_count": n_counted - count,
        "nonfinite_trials": nonfinite_trials,
        "hist": hist,
        "sum_pieces": _dyadic_sums(sums, first_block, n_blocks, xp),
        "sq_pieces": _dyadic_sums(squares, first_block, n_blocks, xp),
    }


def _pushed(levels: np.ndarray, n: int, pieces: list, sums: np.ndarray) -> np.ndarray:
    """The binary counter ``levels`` (rows, SUM_LEVELS, …) of blocks [0, n) followed by the
    ``pieces`` [(j, k), …] (from block n on) with sums ``sums`` (rows, ≥ len(pieces), …)."""
    levels = levels.copy()  # never in place: the store's writer thread may still read the last state
    for i, (j, _) in enumerate(pieces):
        carry = sums[:, i]
        while n >> j & 1:  # the left sibling is there: D(j + 1, ·) = D(j, 2k) + D(j, 2k + 1)
            carry = levels[:, j] + carry
            levels[:, j] = 0.0
            n -= 1 << j  # its bit carries upwards
            j += 1
        levels[:, j] = carry
        n += 1 << j
    return levels


def fold(state: SummaryState, part: dict, n_blocks: int, hist_in_place: bool = False) -> SummaryState:
    """``state`` followed by a chunk's :func:`chunk_summary` (host arrays) whose sums were taken
    over blocks [N, N + ``n_blocks``) of each row, N its ``state.blocks``: O(log n) additions
    per cell. Rows may have done different numbers of blocks when ``n_blocks`` <= 1 (a sum over
    one block does not depend on where the block lies).

    ``hist_in_place``: the chunk's histogram is added into ``state.hist`` itself, which the
    returned state shares, instead of into a new array (the largest part of a fold: 14 MB for
    Fig. 3's 900 cells × N_BINS, a fresh array each chunk took twice as long as the addition);
    for a caller that owns that array and copies it before another thread reads it
    (:class:`jaxfed.engine.sinks.SummarySink`). The counts are the same either way. A ``part``
    without ``hist`` leaves the histograms to the caller (a sink that adds them on the device)."""
    total, total_sq = state.total, state.total_sq
    if n_blocks:
        done = np.asarray(state.blocks)
        total, total_sq = total.copy(), total_sq.copy()
        for n in np.unique(done):
            rows = done == n
            pieces = dyadic_pieces(int(n), n_blocks)
            total[rows] = _pushed(state.total[rows], int(n), pieces, np.asarray(part["sum_pieces"])[rows])
            total_sq[rows] = _pushed(state.total_sq[rows], int(n), pieces, np.asarray(part["sq_pieces"])[rows])
    hist = state.hist
    if "hist" in part:
        hist = np.add(hist, part["hist"], out=hist) if hist_in_place else hist + part["hist"]
    return SummaryState(
        count=state.count + part["count"],
        nan_count=state.nan_count + part["nan_count"],
        total=total,
        total_sq=total_sq,
        hist=hist,
        nonfinite_trials=state.nonfinite_trials + part["nonfinite_trials"],
        blocks=state.blocks + n_blocks,
    )


def level_total(levels: np.ndarray) -> np.ndarray:
    """Σ_j of a binary counter (points, SUM_LEVELS, …), from the highest level down (empty
    levels hold 0.0, which adds exactly): the sum over every block, a function of the trials
    and their indices only."""
    total = np.zeros(levels.shape[:1] + levels.shape[2:], np.float64)
    for j in range(levels.shape[1] - 1, -1, -1):
        total = total + levels[:, j]
    return total


def finish(state: SummaryState, tail: np.ndarray, lengths=None) -> tuple[SummaryState, Summary]:
    """(state, Summary) after the last, partial block: ``tail`` (points, < SUMMARY_BLOCK, *time)
    raw values, summarised on the host by the same :func:`chunk_summary`; ``lengths``: per point,
    the tail trials that count (default: all)."""
    n = tail.shape[1]
    padded = np.zeros((tail.shape[0], SUMMARY_BLOCK) + tail.shape[2:], tail.dtype)
    padded[:, :n] = tail
    used = n if lengths is None else np.asarray(lengths)
    state = fold(state, chunk_summary(padded, used, np, n_blocks=1 if n else 0), 1 if n else 0)
    return state, result_of(state)


def result_of(state: SummaryState) -> Summary:
    """The :class:`Summary` (mean, standard error, …) of a state."""
    total, total_sq = level_total(state.total), level_total(state.total_sq)
    return _summary(state.count, state.nan_count, total, total_sq, state.hist)


def _summary(count, nan_count, total, total_sq, hist) -> Summary:
    """mean = Σx / n, se = √(max(Σx² − n·mean², 0) / (n − 1) / n), per cell."""
    n = count.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = np.maximum(total_sq - n * mean * mean, 0.0) / (n - 1)
        se = np.sqrt(var / n)
    return Summary(count=count, nan_count=nan_count, mean=mean, se=se, hist=hist)


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
DIRECTION_ONLY = "direction only"
"""A directional effect the interval and the sign test agree on, smaller than the visible size
(:data:`VISIBLE_RATIO`, :data:`VISIBLE_FRACTION`): not what a figure shows."""
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
    lower: float  # interval at ``level`` (:func:`interval`)
    upper: float
    level: float
    p_value: float  # exact two-sided sign test of "median difference = 0" (ties dropped)
    fraction_greater: float  # fraction of used pairs with a > b
    n: int  # pairs used (both values finite)
    n_dropped: int  # pairs dropped because a value was NaN or infinite
    verdict: str  # "reproduced" | "not reproduced" | "inconclusive"
    n_untied: int = 0  # pairs with a != b: those that can carry a directional effect
    reason: str = (
        ""  # why the verdict is what it is beyond the interval (not carried, effect size, censoring, trials needed)
    )
    kind: str = ""  # "greater" | "less" | "equal" (an equivalence test) | "share" (a claim about each trial)

    def interval_text(self, fmt: str = "{:.3g}") -> str:
        return f"{fmt.format(self.estimate)} [{fmt.format(self.lower)}, {fmt.format(self.upper)}]"


def _binomial_log_pmf(n: int, q: float, lo: int, hi: int) -> np.ndarray:
    """log P[B = j] for j = lo … hi, B ~ Bin(n, q), 0 < q < 1: lgamma at hi, then downwards by the
    ratio of neighbouring terms, log pmf(j − 1) − log pmf(j) = log(j/(n − j + 1)) − log(q/(1 − q)),
    summed (the error grows away from hi, where a left tail's terms are smallest)."""
    j = np.arange(hi, lo, -1, dtype=np.float64)
    last = math.lgamma(n + 1) - math.lgamma(hi + 1) - math.lgamma(n - hi + 1) + hi * math.log(q)
    last += (n - hi) * math.log1p(-q)
    steps = np.log(j / (n - j + 1)) - (math.log(q) - math.log1p(-q))
    return (last + np.concatenate([[0.0], np.cumsum(steps)]))[::-1]


def _binomial_ranks(n: int, q: float, level: float) -> tuple[int, int]:
    """1-based ranks (l, u) of the order statistics that bound the q-quantile at ``level``.

    With B ~ Bin(n, q): l − 1 is the largest j with P[B <= j] <= (1 − level)/2 (l = 0: none, no lower
    bound) and u − 1 the smallest j with P[B <= j] >= (1 + level)/2 (u = n + 1: no upper bound). The
    pmf is summed in log space over nq ± (40σ + 40), outside of which the mass is below 1e-25.
    """
    sd = math.sqrt(n * q * (1 - q))
    lo, hi = max(0, math.floor(n * q - 40 * sd - 40)), min(n, math.ceil(n * q + 40 * sd + 40))
    log_pmf = _binomial_log_pmf(n, q, lo, hi)
    cdf = np.cumsum(np.exp(log_pmf - log_pmf.max()))
    cdf /= cdf[-1]
    tail = (1 - level) / 2
    return lo + int(np.searchsorted(cdf, tail, side="right")), lo + int(np.searchsorted(cdf, 1 - tail)) + 1


def quantile_interval(values, q: float = 0.5, level: float = 0.95):
    """Exact distribution-free interval of the q-quantile over the last axis (order statistics, no resampling).

    With x₍₁₎ <= … <= x₍ₙ₎ the sorted values and B ~ Bin(n, q), the interval is [x₍ₗ₎, x₍ᵤ₎] with

        l − 1 = max{j : P[B <= j] <= (1 − level)/2},    u − 1 = min{j : P[B <= j] >= (1 + level)/2}.

    The number of values at or below the true quantile ξ is Bin(n, F(ξ)) with F(ξ) >= q (and below it
    Bin(n, F(ξ⁻)) with F(ξ⁻) <= q), so P[x₍ₗ₎ <= ξ <= x₍ᵤ₎] >= level for every distribution, ties and
    atoms included (Hahn & Meeker 1991, §5.2); each tail misses with probability at most (1 − level)/2.
    Where n is too small for ``level`` (l = 0 or u = n + 1: for the median at 95%, n <= 5) the bound is
    −inf or +inf: the data cannot bound the quantile at that level. ``estimate`` is
    ``numpy.quantile(values, q)`` (the median for q = 1/2); rows with a NaN give NaN throughout.
    Vectorised over the leading axes (one pair of ranks for all rows); O(n) per row.

    >>> est, lo, hi = quantile_interval(np.arange(1.0, 101.0))
    >>> float(est), float(lo), float(hi)  # ranks 40 and 61 of 100
    (50.5, 40.0, 61.0)
    """
    validation.probability("q", q, low_open=True, high_open=True)
    validation.probability("level", level, low_open=True, high_open=True)
    x = np.asarray(values, np.float64)
    n = x.shape[-1]
    if n == 0:
        raise ValueError("quantile_interval needs at least one value")
    l, u = _binomial_ranks(n, q, level)
    kth = [k - 1 for k in (l, u) if 1 <= k <= n]
    part = np.partition(x, kth, axis=-1) if kth else x
    lower = part[..., l - 1] if l >= 1 else np.full(x.shape[:-1], -np.inf)
    upper = part[..., u - 1] if u <= n else np.full(x.shape[:-1], np.inf)
    has_nan = np.isnan(x).any(axis=-1)
    return np.quantile(x, q, axis=-1), np.where(has_nan, np.nan, lower)[()], np.where(has_nan, np.nan, upper)[()]


def _resampled_medians(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_boot`` resamples with replacement of each row of x (..., n), from ranks alone.

    The resample's indices are ⌊n·Vᵢ⌋ with Vᵢ iid uniform, so its k-th smallest index is ⌊n·V₍ₖ₎⌋ with
    V₍ₖ₎ ~ Beta(k, n + 1 − k), and the next one ⌊n·V₍ₖ₊₁₎⌋ with V₍ₖ₊₁₎ = V₍ₖ₎ + (1 − V₍ₖ₎)·Beta(1, n − k):
    the resampled median is the sorted row at those ranks (the mean of the two for even n), exactly
    in law the median of n indices drawn with replacement, in O(n log n + n_boot)."""
    n = x.shape[-1]
    s = np.sort(x, axis=-1)
    k = (n + 1) // 2
    v = rng.beta(k, n + 1 - k, n_boot)
    low = np.minimum((n * v).astype(np.int64), n - 1)
    if n % 2:
        return s[..., low]
    w = v + (1 - v) * rng.beta(1, n - k, n_boot)
    high = np.minimum((n * w).astype(np.int64), n - 1)
    return (s[..., low] + s[..., high]) / 2


def _resampled_means(x: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``n_boot`` resamples with replacement of each row of x (..., n).

    A resample's mean is Σⱼ cⱼ·vⱼ / n over the distinct values vⱼ with counts c ~ Multinomial(n, fⱼ/n)
    (fⱼ: how often vⱼ occurs): O(n_boot·d) for d distinct values, used where d <= n/8 and the row is
    finite (0·inf is NaN); otherwise n indices are drawn per resample, O(n_boot·n), in slabs of ~32 MB.
    Every row draws from its own copy of ``rng``'s state, so a row gives the same means alone or in a batch.
    """
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    out = np.empty((rows.shape[0], n_boot))
    state = rng.bit_generator.state
    for r, row in enumerate(rows):
        rng.bit_generator.state = state
        distinct, freq = np.unique(row, return_counts=True)
        if np.isfinite(distinct).all() and 8 * distinct.size <= n:
            out[r] = rng.multinomial(n, freq / n, size=n_boot) @ distinct / n
            continue
        slab = max(1, 4_000_000 // n)
        for start in range(0, n_boot, slab):
            idx = rng.integers(0, n, size=(min(slab, n_boot - start), n))
            out[r, start : start + idx.shape[0]] = row[idx].mean(axis=-1)
    return out.reshape(x.shape[:-1] + (n_boot,))


def bootstrap_interval(values, statistic: str = "median", level: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """Percentile-bootstrap interval of ``statistic`` over the last axis, vectorised over the rest.

    Draws ``n_boot`` resamples of the last axis with replacement (seeded by ``seed``: reproducible) and
    returns ``(estimate, lower, upper)``: the statistic of the values and the (1 ∓ level)/2 quantiles
    (``numpy.quantile``, linear) of the resampled statistic. The resamples are drawn in law, not index
    by index: a median from two Beta-distributed ranks of the sorted values, a mean from multinomial
    counts of the distinct values where they are few (:func:`_resampled_medians`,
    :func:`_resampled_means`); a row gives the same interval alone or in a batch. Reports use
    :func:`interval`, which takes the exact :func:`quantile_interval` for a median instead.
    """
    validation.one_of("statistic", statistic, _STATISTICS)
    validation.probability("level", level, low_open=True, high_open=True)
    validation.integer("n_boot", n_boot, 1)
    x = np.asarray(values, np.float64)
    if x.shape[-1] == 0:
        raise ValueError("bootstrap_interval needs at least one value")
    rng = np.random.default_rng(seed)
    if statistic == "median":
        estimate, boots = np.median(x, axis=-1), _resampled_medians(x, int(n_boot), rng)
    else:
        estimate, boots = np.mean(x, axis=-1), _resampled_means(x, int(n_boot), rng)
    lower, upper = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=-1)
    has_nan = np.isnan(x).any(axis=-1)
    return estimate, np.where(has_nan, np.nan, lower)[()], np.where(has_nan, np.nan, upper)[()]


def interval(values, statistic: str = "median", level: float = 0.95, n_boot: int = 2000, seed: int = 0):
    """``(estimate, lower, upper)`` of a report: the median's exact order-statistic interval
    (:func:`quantile_interval`, no resampling; ``n_boot`` and ``seed`` unused) or the mean's
    percentile-bootstrap interval (:func:`bootstrap_interval`), over the last axis."""
    validation.one_of("statistic", statistic, _STATISTICS)
    if statistic == "median":
        return quantile_interval(values, 0.5, level)
    return bootstrap_interval(values, "mean", level, n_boot, seed)


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
    # Bin(n, 1/2) at k − 40σ − 40 … k (the terms below add less than 1e-25 of the sum), summed stably.
    log_pmf = _binomial_log_pmf(n, 0.5, max(0, k - math.ceil(20 * math.sqrt(n) + 40)), k)
    top = log_pmf.max()
    return float(min(1.0, 2.0 * np.exp(top) * np.exp(log_pmf - top).sum()))


MIN_UNTIED_PAIRS = 10
"""A directional claim is "reproduced" only when at least this many pairs differ (a != b)."""
SIGN_TEST_ALPHA = 0.05
"""... and the two-sided sign test rejects "no direction" at this level, in the claimed direction."""
EQUAL_RATIO_MARGIN = 0.05
"""Every "≈" claim on a ratio holds when the ratio's interval lies within [1/1.05, 1.05] (margin
log 1.05 on the log scale): the interval inside the margin, i.e. two one-sided tests (TOST) at
2.5% each."""
VISIBLE_RATIO = 0.05
"""A directional claim read from a figure is "reproduced" only when its effect is visible: a median
(or mean) ratio at least 1.05 (or at most 1/1.05) …"""
VISIBLE_FRACTION = 0.05
"""… or a difference a − b at least 5% of the median |b| (unless the claim states its own visible
size, e.g. a number of slots: ``min_effect``). A smaller effect the trials agree on is
:data:`DIRECTION_ONLY`."""
FEW_TRIALS_SHARE = 0.5
"""A directional effect carried by fewer than this share of the trials (the others tie) says so in
its verdict."""
EACH_TRIAL_SHARE = 0.9
"""A claim about each trial ("when u is scheduled, …") holds when the share of trials meeting it
has its 95% interval above this share, and fails when the interval lies below it."""
VERDICT_POLICY = (
    "A directional claim (a > b) is **reproduced** when the 95% interval of the paired median (or mean) "
    "lies on the claimed side of no effect, at least 10 pairs differ, the exact sign test agrees (p < 0.05) **and** the effect "
    "is visible: a ratio of at least 1.05 (5%), a difference of at least 5% of the reference's median, or "
    "the size the claim states (e.g. slots); a smaller effect the trials agree on is **direction only** "
    "(counted apart). An effect carried by under half the trials (the others tie) says so in its verdict. "
    "An equality (≈) claim is an equivalence test: **reproduced** when the 95% interval lies inside the "
    "stated margin (±5% on a ratio; two one-sided tests at 2.5%), **not reproduced** when it lies outside; "
    "otherwise inconclusive, with the number of trials that would decide it at the observed spread. A "
    "claim about each trial is judged on the share of trials meeting it (95% Wilson interval above 90%). "
    "A first-passage reading (time, slots, iterations to a level; cover times) whose verdict the trials "
    "that never reached the level could change is **not testable (censored)**."
)


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
    min_effect: float | None = None,
    censored_a=None,
    censored_b=None,
    censoring: str = "",
) -> Verdict:
    """Verdict on a claim about two metrics measured on the same trials (pair i = trial i).

    With d_i = a_i − b_i (``transform="difference"``) or d_i = log(a_i / b_i) (``"log_ratio"``,
    both positive), the interval [lo, hi] of the median (or mean) of d at ``level`` (:func:`interval`:
    exact from order statistics for the median, ``n_boot`` percentile-bootstrap resamples for the mean)
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

    A directional claim is also read from a figure, so "reproduced" needs a visible effect: |estimate|
    at least ``min_effect`` (default: log 1.05 for a log-ratio, :data:`VISIBLE_FRACTION` of the median
    |b| for a difference; on the transform's scale); a smaller one is :data:`DIRECTION_ONLY` with the
    effect in ``reason``. One carried by under :data:`FEW_TRIALS_SHARE` of the pairs says so in
    ``reason``. An inconclusive "equal" claim's ``reason`` gives the trials that would decide it: the
    interval's half-width w scales as 1/√n, so n·(w / (margin − |estimate|))² (none when
    |estimate| >= margin).

    Censoring (first-passage readings): ``censored_a`` / ``censored_b`` mark the trials whose value is
    only a lower bound (the level was not reached by then; ``censoring`` says e.g. "within 200
    iterations"). The interval is then taken over every completion of the censored values (those
    differences sent to ±inf), and a verdict the completions could change is :data:`NOT_TESTABLE`,
    "censored: x% not reached within …"; a verdict they cannot change stands, with the share in
    ``reason``.

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
    cens_a = np.zeros(a.shape, bool) if censored_a is None else np.asarray(censored_a, bool).ravel()
    cens_b = np.zeros(b.shape, bool) if censored_b is None else np.asarray(censored_b, bool).ravel()
    reference = float(np.median(np.abs(b[ok]))) if ok.any() else float("nan")
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
    est, lo, hi = (float(v) for v in interval(d, statistic, level, n_boot, seed))
    verdict = _interval_verdict(expect, lo, hi, margin)
    p_value, untied = sign_test(d), int((d != 0).sum())
    reason = _not_carried(d, expect, p_value) if verdict == REPRODUCED and expect != "equal" else ""
    verdict = INCONCLUSIVE if reason else verdict
    if verdict == REPRODUCED and expect != "equal":
        visible = np.log1p(VISIBLE_RATIO) if transform == "log_ratio" else VISIBLE_FRACTION * reference
        visible = visible if min_effect is None else min_effect
        if abs(est) < visible:
            verdict, reason = (
                DIRECTION_ONLY,
                f"effect {_smaller_text(est, visible, transform)} < visible {_effect_text(visible, transform)}",
            )
        elif untied < FEW_TRIALS_SHARE * n:
            reason = f"carried by {untied} of {n} trials ({percent(untied / n)}); the others tie"
    if verdict == INCONCLUSIVE and expect == "equal" and not reason:
        reason = _trials_to_decide(n, est, lo, hi, margin)
    if verdict == NOT_REPRODUCED:
        side = "outside the margin" if expect == "equal" else "on the other side of no effect: absent or reversed"
        reason = f"the interval lies {side}"
    cens = (cens_a | cens_b)[ok]
    if cens.any():
        verdict, reason, lo, hi = _censored(
            d,
            cens_a[ok],
            cens_b[ok],
            expect,
            margin,
            verdict,
            reason,
            censoring,
            (statistic, level, n_boot, seed),
        )
    if transform == "log_ratio":
        est, lo, hi = np.exp(est), np.exp(lo), np.exp(hi)
    frac = float((d > 0).mean())
    out = (float(est), float(lo), float(hi), level, p_value, frac, n, dropped, verdict, untied, reason, expect)
    return Verdict(claim, *out)


def share_verdict(met, claim: str, share: float = EACH_TRIAL_SHARE, level: float = 0.95) -> Verdict:
    """Verdict on a claim about each trial: the share of trials meeting it (``met``, bools; NaN is
    dropped) with its Wilson score interval, p̂ ± z√(p̂(1−p̂)/n + z²/4n²) / (1 + z²/n) around
    (p̂ + z²/2n)/(1 + z²/n): reproduced when the interval lies above ``share``, not reproduced when it
    lies below, else inconclusive.

    >>> share_verdict(np.ones(200, bool), "each trial").verdict
    'reproduced'
    """
    met = np.asarray(met, np.float64).ravel()
    ok = np.isfinite(met)
    n, k = int(ok.sum()), float(met[ok].sum())
    if n == 0:
        return not_testable(claim, "no trial")
    z = float(np.sqrt(2) * _erfinv(level))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = max(0.0, float(centre - half)), min(1.0, float(centre + half))
    verdict = REPRODUCED if lo > share else NOT_REPRODUCED if hi < share else INCONCLUSIVE
    reason = f"{percent(p)} of {n} trials meet it; needs more than {share:.0%}"
    nan = float("nan")
    return Verdict(claim, p, lo, hi, level, nan, p, n, int(met.size - n), verdict, n, reason, "share")


def _erfinv(y: float) -> float:
    """erf⁻¹ by Newton's method on math.erf (a handful of steps to double precision for |y| < 1)."""
    x = 0.0
    for _ in range(60):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def _interval_verdict(expect: str, lo: float, hi: float, margin: float) -> str:
    """What the interval [lo, hi] says about the claim (see :func:`paired_verdict`); NaN bounds decide nothing."""
    if expect == "greater":
        return REPRODUCED if lo > margin else NOT_REPRODUCED if hi <= margin else INCONCLUSIVE
    if expect == "less":
        return REPRODUCED if hi < -margin else NOT_REPRODUCED if lo >= -margin else INCONCLUSIVE
    inside = -margin <= lo and hi <= margin
    outside = lo > margin or hi < -margin
    return REPRODUCED if inside else NOT_REPRODUCED if outside else INCONCLUSIVE


def _effect_text(x: float, transform: str) -> str:
    return f"{100 * np.expm1(abs(x)):.1f}%" if transform == "log_ratio" else f"{abs(x):.3g}"


def percent(share: float) -> str:
    """A share in whole percent, except that a share that is not 0 (or not 1) never reads "0%" (or "100%"):
    "<1%" and ">99%" (a verdict "censored: 0% of pairs" that censoring decided was a contradiction)."""
    if 0 < share < 0.005:
        return "<1%"
    if 0.995 <= share < 1:
        return ">99%"
    return f"{share:.0%}"


def _smaller_text(x: float, limit: float, transform: str) -> str:
    """:func:`_effect_text` of ``x`` with as many digits as it takes to read below that of ``limit``
    (|x| < limit: "4.96%" rather than "5.0%" beside a visible size of 5.0%)."""
    text = _effect_text(x, transform)
    for digits in (2, 3, 4):
        if text != _effect_text(limit, transform):
            break
        text = f"{100 * np.expm1(abs(x)):.{digits}f}%" if transform == "log_ratio" else f"{abs(x):.{digits + 2}g}"
    return text


def _trials_to_decide(n: int, est: float, lo: float, hi: float, margin: float) -> str:
    """The trials an equivalence test would need at the observed spread (half-width ∝ 1/√n)."""
    room, half = margin - abs(est), (hi - lo) / 2
    if not np.isfinite(half) or half <= 0:
        return ""
    if room <= 0:
        return "the estimate lies outside the margin: more trials would not show equality"
    return f"≈ {int(np.ceil(n * (half / room) ** 2))} trials would decide it at the observed spread"


def _censored(d, cens_a, cens_b, expect, margin, verdict, reason, censoring, options):
    """(verdict, reason, lo, hi) with censored pairs: a censored a only bounds d from below, a censored
    b from above; the interval over every completion is [lo with those sent to −inf, hi with them sent
    to +inf]. A verdict it cannot decide, where the observed values did, is not testable."""
    low = np.where(cens_b, -np.inf, d)
    high = np.where(cens_a, np.inf, d)
    with np.errstate(invalid="ignore"):
        lo = float(interval(low, *options)[1])
        hi = float(interval(high, *options)[2])
    share = float((cens_a | cens_b).mean())
    what = f"censored: {percent(share)} of pairs not reached{' ' + censoring if censoring else ''}"
    widened = _interval_verdict(expect, lo, hi, margin)
    if widened != INCONCLUSIVE:  # every completion gives the observed verdict
        return verdict, f"{reason}; {what}" if reason else what, lo, hi
    return NOT_TESTABLE, what, lo, hi


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
    return Verdict(claim, nan, nan, nan, float("nan"), nan, nan, 0, 0, NOT_TESTABLE, 0, reason, "")


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
        if v.kind in ("equal", "share"):  # decided by the interval against the margin / share alone
            decides = "equivalence: interval vs margin" if v.kind == "equal" else "share of trials"
            rows.append(
                f"{where}| {v.claim} | {v.interval_text(fmt)} | – | – ({decides}) | "
                f"{v.n}{dropped} | **{v.verdict}**{why} |"
            )
            continue
        rows.append(
            f"{where}| {v.claim} | {v.interval_text(fmt)} | {v.fraction_greater:.0%} | {v.p_value:.2g} | "
            f"{v.n}{untied}{dropped} | **{v.verdict}**{why} |"
        )
    return "\n".join(rows)
