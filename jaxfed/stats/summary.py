"""The engine's streaming summary core: what the engine keeps of the trials of a metric too large to keep.

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

This part of :mod:`jaxfed.stats` imports NumPy, JAX and :mod:`jaxfed.validation` only, never
:mod:`jaxfed.stats.intervals` or :mod:`jaxfed.stats.verdicts`: those build on the trials a run
keeps, this part is what the engine keeps of them. The medians, bands and quantiles read from a
:class:`Summary` (or from raw trials) are in :mod:`jaxfed.stats.quantiles`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = [
    "Summary",
    "SummaryState",
    "SUMMARY_BLOCK",
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
"""Levels of a state's binary counter of block sums: 2^32 blocks (2^38 trials); a state of more
blocks has one more level per bit (:func:`levels_for`), so that every state up to 2^38 trials keeps
this layout, byte for byte."""
HIST_INT32_TRIALS = 2**31 - 1
"""A state's histograms are int32 up to this many trials per point (every bin fits), int64 beyond
(:func:`hist_dtype`): the layout of every smaller state stays as it was."""


def levels_for(blocks: int) -> int:
    """Levels of the binary counter of a state of ``blocks`` sum blocks: :data:`SUM_LEVELS`, or one
    per bit of ``blocks`` beyond 2^32 (a run of 2^53 trials: 48)."""
    return max(SUM_LEVELS, int(blocks).bit_length())


def hist_dtype(trials: int) -> np.dtype:
    """The dtype of the histograms of a state of ``trials`` trials per point (at most): int32 up to
    :data:`HIST_INT32_TRIALS`, int64 beyond, so that no bin count wraps."""
    return np.dtype(np.int32 if trials <= HIST_INT32_TRIALS else np.int64)


def _widened(levels: np.ndarray, blocks: int) -> np.ndarray:
    """``levels`` (rows, L, …) with zero levels added up to :func:`levels_for` ``blocks``."""
    missing = levels_for(blocks) - levels.shape[1]
    if missing <= 0:
        return levels
    return np.concatenate([levels, np.zeros(levels.shape[:1] + (missing,) + levels.shape[2:], levels.dtype)], 1)


# Lower edges of the magnitude levels 0 … _N_SIDE − 1, then the top 1e8 (float64, rounded to a
# value's dtype where used).
_EDGES = 10.0 ** (HIST_LOG_MIN + np.arange(_N_SIDE + 1) / HIST_PER_DECADE)


class Summary(NamedTuple):
    """Streaming summary of one metric over trials; arrays are (n_points, *time)."""

    count: np.ndarray  # type: ignore[assignment]  # a field named like tuple.count (public); finite trials per cell (int64)
    nan_count: np.ndarray  # NaN or ±inf trials per cell (int64)
    mean: np.ndarray  # float64
    se: np.ndarray  # standard error of the mean, float64
    hist: np.ndarray  # (n_points, *time, N_BINS) int32 counts on the signed log grid


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
    # A shard's summary of blocks [F, F + N) (F = ``first`` > 0, :func:`range_state`): its sums
    # are the aligned pieces of :func:`dyadic_pieces` (F, N), rising in level up to the last
    # piece of the highest level (``left``, by level) and falling after it (``total``, by level,
    # as above). None: F = 0, where nothing rises.
    first: np.ndarray | None = None  # (points,) int64: F
    left: np.ndarray | None = None  # (points, SUM_LEVELS, *time) float64
    left_sq: np.ndarray | None = None  # the same for the squares


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


def range_state(cell_shape: tuple, first_block: int) -> SummaryState:
    """The summary of no trial from block ``first_block`` on (a shard's start): :func:`empty_state`
    with the rising pieces of a range that does not start at 0 (see :class:`SummaryState`)."""
    state = empty_state(cell_shape)
    if not first_block:
        return state
    return state._replace(
        first=np.full(cell_shape[:1], first_block, np.int64),
        left=np.zeros_like(state.total),
        left_sq=np.zeros_like(state.total_sq),
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
    levels = _widened(levels, n + sum(1 << j for j, _ in pieces)).copy()  # never in place: the store's
    # writer thread may still read the last state
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


def _peak(pieces: list) -> int:
    """Index of the last piece of the highest level: where the rising pieces end."""
    top = max((j for j, _ in pieces), default=0)
    return max((i for i, (j, _) in enumerate(pieces) if j == top), default=0)


def _range_pushed(left, right, first: int, n: int, pieces: list, sums) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) of blocks [first, first + n) (see :class:`SummaryState`) followed by the
    ``pieces`` [(j, k), …] from block first + n on with sums ``sums`` (rows, ≥ len(pieces), …):
    the pieces in order on a stack, two siblings D(j, 2k), D(j, 2k + 1) on top replaced by their
    sum D(j + 1, k) (left + right, as :func:`_pushed` adds them), until none are; what is left is
    the aligned pieces of the longer range, each the same fixed function of its trials."""
    held = dyadic_pieces(first, n)
    peak = _peak(held)
    stack = [(j, k, left[:, j] if i < peak else right[:, j]) for i, (j, k) in enumerate(held)]
    for i, (j, k) in enumerate(pieces):
        carry = sums[:, i]
        while stack and k % 2 == 1 and stack[-1][:2] == (j, k - 1):
            carry = stack.pop()[2] + carry
            j, k = j + 1, k // 2
        stack.append((j, k, carry))
    grown = dyadic_pieces(first, n + sum(1 << j for j, _ in pieces))
    if [(j, k) for j, k, _ in stack] != grown:
        raise AssertionError(f"pieces {pieces} do not continue blocks [{first}, {first + n})")
    blocks = n + sum(1 << j for j, _ in pieces)
    left, right = np.zeros_like(_widened(left, blocks)), np.zeros_like(_widened(right, blocks))
    peak = _peak(grown)
    for i, (j, _, value) in enumerate(stack):
        (left if i < peak else right)[:, j] = value
    return left, right


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
    total, total_sq, left, left_sq = state.total, state.total_sq, state.left, state.left_sq
    if n_blocks and state.first is not None:  # a shard's range
        if np.unique(state.first).size != 1 or np.unique(state.blocks).size != 1:
            raise AssertionError("a shard's points summarise the same blocks")
        first, n = int(state.first[0]), int(state.blocks[0])
        pieces = dyadic_pieces(first + n, n_blocks)
        left, total = _range_pushed(left, total, first, n, pieces, np.asarray(part["sum_pieces"]))
        left_sq, total_sq = _range_pushed(left_sq, total_sq, first, n, pieces, np.asarray(part["sq_pieces"]))
    elif n_blocks:
        done = np.asarray(state.blocks)
        reach = int(done.max(initial=0)) + n_blocks  # (a counter past 2^32 blocks grows its levels)
        total, total_sq = _widened(total, reach).copy(), _widened(total_sq, reach).copy()
        for n in np.unique(done):
            rows = done == n
            pieces = dyadic_pieces(int(n), n_blocks)
            total[rows] = _pushed(total[rows], int(n), pieces, np.asarray(part["sum_pieces"])[rows])
            total_sq[rows] = _pushed(total_sq[rows], int(n), pieces, np.asarray(part["sq_pieces"])[rows])
    hist, trials = state.hist, np.max(state.count + state.nan_count + part["count"] + part["nan_count"], initial=0)
    if hist.dtype != hist_dtype(int(trials)):  # past 2^31 − 1 trials: int64, before a bin could wrap
        hist, hist_in_place = hist.astype(hist_dtype(int(trials))), True  # (a new array: this state's own)
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
        first=state.first,
        left=left,
        left_sq=left_sq,
    )


def _pieces_of(state: SummaryState, levels: np.ndarray, rising: np.ndarray | None) -> tuple[list, np.ndarray]:
    """(pieces, their sums (rows, pieces, …)) a state holds in ``levels`` and ``rising``."""
    first = 0 if state.first is None else int(state.first[0])
    pieces = dyadic_pieces(first, int(state.blocks[0]))
    peak = _peak(pieces)
    sums = [rising[:, j] if i < peak else levels[:, j] for i, (j, _) in enumerate(pieces)]  # type: ignore[index]
    return pieces, np.stack(sums, 1) if sums else levels[:, :0]


def joined(before: SummaryState, after: SummaryState) -> SummaryState:
    """The summary of two adjacent ranges of whole blocks, ``before`` [F, G) and ``after``
    [G, H) (every point at the same blocks; ``after`` the summary of a shard), as one fold of
    ``after``'s pieces onto ``before``: the same bits as a run that summarised [F, H) itself.
    The histograms and counts are added (integers)."""
    start = 0 if before.first is None else int(before.first[0])
    after_first = 0 if after.first is None else int(after.first[0])
    if np.unique(before.blocks).size > 1 or np.unique(after.blocks).size > 1:
        raise ValueError("joined: every point of a summary must cover the same blocks")
    if start + int(before.blocks[0]) != after_first:
        raise ValueError(f"joined: blocks [{start}, {start + int(before.blocks[0])}) are not followed by {after_first}")
    _, sums = _pieces_of(after, after.total, after.left)  # (the pieces fold takes from [G, H))
    _, squares = _pieces_of(after, after.total_sq, after.left_sq)
    part = dict(
        count=after.count, nan_count=after.nan_count, nonfinite_trials=after.nonfinite_trials, hist=after.hist,
        sum_pieces=sums, sq_pieces=squares,
    )  # fmt: skip
    if before.first is not None and start == 0:  # a range from 0 is an ordinary state
        before = before._replace(first=None, left=None, left_sq=None)
    return fold(before, part, int(after.blocks[0]))


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
    if state.left is not None and state.left_sq is not None:  # a shard's: its rising pieces too
        total, total_sq = level_total(state.left) + total, level_total(state.left_sq) + total_sq
    return _summary(state.count, state.nan_count, total, total_sq, state.hist)


def _summary(count, nan_count, total, total_sq, hist) -> Summary:
    """mean = Σx / n, se = √(max(Σx² − n·mean², 0) / (n − 1) / n), per cell."""
    n = count.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
        var = np.maximum(total_sq - n * mean * mean, 0.0) / (n - 1)
        se = np.sqrt(var / n)
    return Summary(count=count, nan_count=nan_count, mean=mean, se=se, hist=hist)


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
