"""Cancellation-free elementary functions shared by the likelihoods, the natural gradient and the
quadrature (docs/gfvl.md §A4b: differences of large log terms must not be formed naively in float32).

Each function is elementwise, jit/vmap-compatible and accurate to a few ulps *of its result*
(tests/test_numerics.py compares them with mpmath).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["x_minus_log1p", "digamma_minus_log", "trigamma_minus_reciprocal"]

# Below this |x| the atanh series is used in x_minus_log1p; beyond, x − log1p(x) >= 0.09 |x| and
# the plain difference loses less than one decimal digit.
_SERIES_LIMIT = 0.5
# Terms y^3, y^5, … of the series by dtype itemsize; with |y| <= 1/3 the truncation error is below
# the dtype's epsilon (5e-9 relative with 7 terms in float32, 1e-16 with 16 in float64).
_SERIES_TERMS = {4: 7, 8: 16}


def x_minus_log1p(x: jax.Array) -> jax.Array:
    """φ(x) = x − log(1 + x) >= 0 for x > −1, without cancellation near 0.

    With y = x/(2 + x), log1p(x) = 2 atanh(y) and x − 2y = x·y, hence
    φ(x) = x·y − 2 (y³/3 + y⁵/5 + y⁷/7 + …), a sum with no cancellation for |x| < 1/2.
    """
    x = jnp.asarray(x)
    small = jnp.abs(x) < _SERIES_LIMIT
    xs = jnp.where(small, x, 0.0)
    y = xs / (2.0 + xs)
    y2 = y * y
    series = jnp.zeros_like(y)
    for j in range(_SERIES_TERMS[y.dtype.itemsize], 0, -1):
        series = 1.0 / (2 * j + 1) + y2 * series
    near = xs * y - 2.0 * y * y2 * series
    xf = jnp.where(small, 1.0, x)
    return jnp.where(small, near, xf - jnp.log1p(xf))


# Below this argument the recurrences ψ(x) = ψ(x + n) − Σ 1/(x + k) and ψ′(x) = ψ′(x + n) + Σ 1/(x + k)²
# shift x to x + n >= _ASYMPTOTIC before the asymptotic series (a compact graph, unlike
# jax.scipy.special.polygamma's zeta series, and as accurate).
_ASYMPTOTIC = 8.0
_SHIFT = 8


def _digamma_minus_log_series(x):
    """−1/(2x) − 1/(12x²) + 1/(120x⁴) − 1/(252x⁶) + 1/(240x⁸) − 1/(132x¹⁰): ψ(x) − log x for
    x >= 8 to < 1e-11 relative."""
    r = 1.0 / x
    r2 = r * r
    return -0.5 * r - r2 * (1 / 12 - r2 * (1 / 120 - r2 * (1 / 252 - r2 * (1 / 240 - r2 / 132))))


def _trigamma_minus_reciprocal_series(x):
    """ψ′(x) − 1/x by its asymptotic series 1/(2x²) + Σ_{k=1..7} B_{2k}/x^{2k+1} (Bernoulli numbers).
    The first omitted term bounds the error: < 1e-12 relative for x >= 8, < 2e-8 for x >= 4."""
    r = 1.0 / x
    r2 = r * r
    bernoulli = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6)
    series = bernoulli[-1]
    for b in bernoulli[-2::-1]:
        series = b + r2 * series
    return r2 * (0.5 + r * series)


# Where the trigamma series takes over, by dtype itemsize: its error there is below the dtype's epsilon.
_TRIGAMMA_SERIES_FROM = {4: 4, 8: 8}


def digamma_minus_log(x: jax.Array) -> jax.Array:
    """ψ(x) − log x for x > 0, without the cancellation of the difference for large x.

    The asymptotic series for x >= 8; below, ψ(x) − log x = g(x + 8) + log1p(8/x) − Σ_{k<8} 1/(x + k)
    with g the series (terms of moderate size: no cancellation beyond a factor ~5).
    """
    x = jnp.asarray(x)
    large = x >= _ASYMPTOTIC
    xl = jnp.where(large, x, _ASYMPTOTIC)
    xs = jnp.where(large, 1.0, x)
    shifted = _digamma_minus_log_series(xs + _SHIFT) + jnp.log1p(_SHIFT / xs)
    for k in range(_SHIFT):
        shifted = shifted - 1.0 / (xs + k)
    return jnp.where(large, _digamma_minus_log_series(xl), shifted)


def trigamma_minus_reciprocal(x: jax.Array) -> jax.Array:
    """g(x) = ψ′(x) − 1/x for x > 0, without the cancellation of the difference for large x.

    For x >= n (n = 4 in float32, 8 in float64) the asymptotic series; below, the recurrence
    ψ′(x) = Σ_{k<n} 1/(x+k)² + ψ′(x+n) moves the argument into the series' range (g(x) >= 1/(2x²),
    so subtracting 1/x loses at most a couple of bits). A few divisions: several times cheaper than
    ``jax.scipy.special.polygamma`` (a Hurwitz-zeta evaluation) on the KL's hot path.
    """
    x = jnp.asarray(x)
    n = _TRIGAMMA_SERIES_FROM[jnp.result_type(x).itemsize]
    small = x < n
    shifted = jnp.where(small, x + n, x)
    g_shifted = _trigamma_minus_reciprocal_series(shifted)
    recurrence = sum(1.0 / ((x + k) * (x + k)) for k in range(n)) + 1.0 / shifted + g_shifted - 1.0 / x
    return jnp.where(small, recurrence, g_shifted)
