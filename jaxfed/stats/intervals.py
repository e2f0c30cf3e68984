"""Intervals and tests over trials: the exact order-statistic interval of a quantile
(:func:`quantile_interval`), the seeded percentile bootstrap (:func:`bootstrap_interval`), the
interval a report gives (:func:`interval`: the exact one for a median, the bootstrap for a mean),
the exact two-sided sign test (:func:`sign_test`) and the binomial helpers they share.

This part of :mod:`jaxfed.stats` imports NumPy and :mod:`jaxfed.validation` only: not
:mod:`jaxfed.stats.verdicts`, which builds on it, nor :mod:`jaxfed.stats.summary`, which it does
not need.
"""

from __future__ import annotations

import math

import numpy as np

from jaxfed import validation

__all__ = ["bootstrap_interval", "quantile_interval", "interval", "sign_test"]

_STATISTICS = ("median", "mean")


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

    Args:
        values: array (..., n) of values; the interval is over the last axis.
        q: the quantile, in (0, 1).
        level: the confidence level, in (0, 1).

    Returns:
        ``(estimate, lower, upper)``, float64 arrays of shape (...) (scalars for 1-D values).

    Raises:
        ValueError: ``q`` or ``level`` outside (0, 1), or no values.

    Examples:
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

    Args:
        values: array (..., n) of values.
        statistic: "median" or "mean".
        level: the confidence level, in (0, 1).
        n_boot: number of resamples >= 1.
        seed: integer seed of the resampling.

    Returns:
        ``(estimate, lower, upper)``, float64 arrays of shape (...).

    Raises:
        ValueError: a bad ``statistic``, ``level`` or ``n_boot``, or no values.
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
    percentile-bootstrap interval (:func:`bootstrap_interval`), over the last axis.

    Args:
        values: array (..., n) of values.
        statistic: "median" or "mean".
        level: the confidence level, in (0, 1).
        n_boot: resamples of the mean's bootstrap.
        seed: integer seed of the mean's bootstrap.

    Returns:
        ``(estimate, lower, upper)``, float64 arrays of shape (...).

    Raises:
        ValueError: a bad ``statistic`` or ``level``, or no values.

    Examples:
        >>> est, lo, hi = interval(np.arange(1.0, 101.0))
        >>> float(est), float(lo), float(hi)
        (50.5, 40.0, 61.0)
    """
    validation.one_of("statistic", statistic, _STATISTICS)
    if statistic == "median":
        return quantile_interval(values, 0.5, level)
    return bootstrap_interval(values, "mean", level, n_boot, seed)


def sign_test(differences) -> float:
    """Exact two-sided sign test p-value of "positive and negative differences are equally likely".

    Zeros are dropped; p = min(1, 2·P[Bin(n, 1/2) <= min(n₊, n₋)]). 1.0 when nothing is left.

    Args:
        differences: the paired differences, any shape (flattened).

    Returns:
        The p-value, a Python float in (0, 1].

    Examples:
        >>> round(sign_test([1.0] * 10), 5)
        0.00195
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
