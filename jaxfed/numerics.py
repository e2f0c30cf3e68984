"""Cancellation-free elementary functions shared by the likelihoods, the natural gradient and the
quadrature (SPEC A4b: differences of large log terms must not be formed naively in float32).

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
    """1/(2x²) + 1/(6x³) − 1/(30x⁵) + 1/(42x⁷) − 1/(30x⁹) + 5/(66x¹¹): ψ′(x) − 1/x for x >= 8 to
    < 1e-12 relative."""
    r = 1.0 / x
    r2 = r * r
    return r2 * (0.5 + r * (1 / 6 + r2 * (-1 / 30 + r2 * (1 / 42 + r2 * (-1 / 30 + r2 * (5 / 66))))))


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
    """ψ′(x) − 1/x for x > 0, without the cancellation of the difference for large x.

    The asymptotic series for x >= 8; below, ψ′(x) − 1/x = h(x + 8) + 1/(x + 8) − 1/x + Σ_{k<8} 1/(x + k)²
    with h the series (the result is >= 1/(2x²) > 0.0078 there, so the sum loses < 2 digits).
    """
    x = jnp.asarray(x)
    large = x >= _ASYMPTOTIC
    xl = jnp.where(large, x, _ASYMPTOTIC)
    xs = jnp.where(large, 1.0, x)
    shifted = _trigamma_minus_reciprocal_series(xs + _SHIFT) + 1.0 / (xs + _SHIFT) - 1.0 / xs
    for k in range(_SHIFT):
        shifted = shifted + 1.0 / ((xs + k) * (xs + k))
    return jnp.where(large, _trigamma_minus_reciprocal_series(xl), shifted)
