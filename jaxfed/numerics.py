"""Cancellation-free elementary functions shared by the likelihoods, the natural gradient and the
quadrature (docs/gfvl.md §A4b: differences of large log terms must not be formed naively in float32).

Each function is elementwise and jit/vmap-compatible. Accuracy *of the result* (tests/gfvl/test_numerics.py against
mpmath; measured worst): :func:`x_minus_log1p` within 2 ulps in float32 and 4 in float64; in float32
:func:`digamma_minus_log` within 10 ulps and :func:`trigamma_minus_reciprocal` within 7; in float64 those two are
limited by their asymptotic series, to 5e-12 and 4e-13 relative.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "x_minus_log1p",
    "xlogx_bregman",
    "log_gamma_remainder_bregman",
    "digamma_minus_log",
    "trigamma_minus_reciprocal",
    "standard_normal",
]

# Below this |x| the atanh series is used in x_minus_log1p; beyond, x − log1p(x) >= 0.18 |x| and
# the plain difference loses less than one decimal digit.
_SERIES_LIMIT = 0.5
# Terms y^3, y^5, … of the series by dtype itemsize; with |y| <= 1/3 the truncation error is below
# the dtype's epsilon (worst at x = −1/2: 5.2e-9 of φ with 7 terms in float32, 6.6e-18 with 16 in float64).
_SERIES_TERMS = {4: 7, 8: 16}


def x_minus_log1p(x: jax.Array, one_plus_x: jax.Array | None = None) -> jax.Array:
    """φ(x) = x − log(1 + x) >= 0 for x > −1, without cancellation near 0: the Bregman divergence of
    −log u from u = 1 to u = 1 + x.

    With y = x/(2 + x), log1p(x) = 2 atanh(y) and x − 2y = x·y, hence
    φ(x) = x·y − 2 (y³/3 + y⁵/5 + y⁷/7 + …), a sum with no cancellation for |x| < 1/2.

    ``one_plus_x``, where given, is 1 + x formed without rounding x first (a ratio x₂/x₁ when
    x = (x₂ − x₁)/x₁); beyond the series' range its logarithm replaces log1p(x), whose rounded argument
    would lose the digits of a ratio near 0.

    Args:
        x: an array of x > −1, any shape, float32 or float64 (traced).
        one_plus_x: optional, 1 + x formed more accurately than by adding (same shape as ``x``).

    Returns:
        φ(x), an array of the shape and dtype of ``x``.

    Examples:
        >>> from jaxfed.numerics import x_minus_log1p
        >>> print(f"{float(x_minus_log1p(1e-4)):.4e}")
        4.9997e-09
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
    log = jnp.log1p(xf) if one_plus_x is None else jnp.log(jnp.where(small, 1.0, one_plus_x))
    return jnp.where(small, near, xf - log)


# The series of xlogx_bregman by dtype itemsize: used for |y| < limit, y = x/(2 + x), with enough terms that the
# truncation error is below the dtype's epsilon there (0.4¹⁹/19 < 3e-9 in float32; 0.2²⁴/24 < 1e-18 in float64).
# The wider float32 range keeps the plain formula to where it cancels by less than a factor 3.
_XLOGX_SERIES = {4: (0.4, 19), 8: (0.2, 24)}


def xlogx_bregman(x: jax.Array, one_plus_x: jax.Array | None = None) -> jax.Array:
    """(1 + x)·log(1 + x) − x >= 0 for x > −1, without cancellation near 0: the Bregman divergence of
    u·log u from u = 1 to u = 1 + x (``one_plus_x`` as in :func:`x_minus_log1p`).

    With y = x/(2 + x) (so 1 + x = (1 + y)/(1 − y) and log(1 + x) = 2 atanh y) it is
    2/(1 − y)·((1 + y) atanh y − y), and (1 + y) atanh y − y = y² + y³/3 + y⁴/3 + y⁵/5 + y⁶/5 + …
    (the coefficient of y^k is 1/k for odd k, 1/(k − 1) for even k): terms of one sign for y > 0
    and decreasing ones for y < 0.

    Args:
        x: an array of x > −1, any shape, float32 or float64 (traced).
        one_plus_x: optional, 1 + x formed more accurately than by adding (same shape as ``x``).

    Returns:
        (1 + x)·log(1 + x) − x, an array of the shape and dtype of ``x``.
    """
    x = jnp.asarray(x)
    limit, n_terms = _XLOGX_SERIES[jnp.result_type(x).itemsize]
    y = x / (2.0 + x)
    small = jnp.abs(y) < limit
    ys = jnp.where(small, y, 0.0)
    series = jnp.zeros_like(ys)
    for k in range(n_terms + 1, 1, -1):
        series = 1.0 / (k if k % 2 else k - 1) + ys * series
    near = 2.0 / (1.0 - ys) * ys * ys * series
    q = jnp.where(small, 1.0, 1.0 + x if one_plus_x is None else one_plus_x)
    return jnp.where(small, near, q * jnp.log(q) - jnp.where(small, 0.0, x))


# Stirling's series of log Γ(x) − ((x − ½) log x − x + ½ log 2π): B_2j / (2j (2j − 1) x^(2j−1)), j = 1, 2, …
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
# By dtype itemsize: (shift n: the series is used at x + n when x < n; its number of terms). The first omitted
# term, relative to the remainder's divergence, is below the dtype's epsilon from x = n on.
_LOG_GAMMA_SERIES = {4: (4, 4), 8: (10, 7)}


def _stirling_bregman(t: jax.Array, x2: jax.Array, n_terms: int) -> jax.Array:
    """The Bregman divergence of Stirling's remainder μ(x) = Σ_j c_j x^(1−2j) from x₁ to x₂ = x₁(1 + t).

    Per term m = 2j − 1: x₂^(−m) − x₁^(−m) + m(x₂ − x₁)x₁^(−m−1) = t² P_m(t) / x₂^m, with the polynomial
    P_m(t) = Σ_i (m·C(m, i+1) − C(m, i+2)) t^i of non-negative coefficients (exact, no cancellation for t > 0).
    """
    inv = 1.0 / x2
    total = jnp.zeros_like(t)
    for j in range(n_terms):
        m = 2 * j + 1
        poly = jnp.zeros_like(t)
        for i in range(m - 1, -1, -1):
            poly = float(m * math.comb(m, i + 1) - math.comb(m, i + 2)) + t * poly
        total = total + _STIRLING[j] * poly * inv**m
    return t * t * total


def log_gamma_remainder_bregman(x1: jax.Array, x2: jax.Array, h: jax.Array | None = None) -> jax.Array:
    """The Bregman divergence D_G(x₁ → x₂) = G(x₂) − G(x₁) − (x₂ − x₁)G′(x₁) of
    G(x) = log Γ(x) − x log x + x, for x₁, x₂ > 0, without forming the large terms that cancel.

    With h = x₂ − x₁ (pass it where it is known more accurately than the difference of x₂ and x₁)
    and G(x) = ½ log 2π − ½ log x + μ(x) (Stirling), for x₁, x₂ >= n:
    D_G = ½ φ(h/x₁) + D_μ, with φ(r) = r − log(1 + r) (:func:`x_minus_log1p`) and D_μ from
    :func:`_stirling_bregman`. Below n the recurrence log Γ(x) = log Γ(x + n) − Σ_{k<n} log(x + k) shifts
    the series to y = x + n:
    D_G(x) = D_G(y) + [y₁ ψ(h/y₁) − x₁ ψ(h/x₁)] + Σ_{k<n} φ(h/(x₁ + k)), with ψ(r) = (1 + r) log(1 + r) − r
    (:func:`xlogx_bregman`); where |h| is not small against x₁ the bracket is written
    x₂(log(1 + n/x₂) − log(1 + n/x₁)) + n log(y₂/y₁), which does not cancel when x₁ ≫ n > x₂.
    n and the series' terms by dtype: (4, 4) in float32, (10, 7) in float64.

    Args:
        x1: the point x₁ > 0 the divergence is taken from, an array (traced).
        x2: the point x₂ > 0, an array broadcastable with ``x1``.
        h: optional, x₂ − x₁ where it is known more accurately than their difference.

    Returns:
        D_G(x₁ → x₂) >= 0, an array of the broadcast shape of ``x1`` and ``x2``.
    """
    x1, x2 = jnp.broadcast_arrays(jnp.asarray(x1), jnp.asarray(x2))
    h = x2 - x1 if h is None else h
    n, n_terms = _LOG_GAMMA_SERIES[jnp.result_type(x1).itemsize]
    shifted = jnp.minimum(x1, x2) < n
    shift = jnp.where(shifted, jnp.asarray(n, x1.dtype), 0.0)
    y1, y2 = x1 + shift, x2 + shift
    t = h / y1
    r = h / x1
    inverses = [1.0 / (x1 + k) for k in range(n)]
    # φ and ψ are each evaluated once, on their arguments stacked along a new leading axis (one
    # copy of each series in the program, not one per term), and the terms are added in order.
    # (Not a reduction over that axis: as one over a trailing axis of n it was 20 times slower on a CPU.)
    phi = x_minus_log1p(
        jnp.stack([t] + [h * inv for inv in inverses]),
        jnp.stack([y2 / y1] + [(x2 + k) * inv for k, inv in enumerate(inverses)]),
    )
    psi = xlogx_bregman(jnp.stack([t, r]), jnp.stack([y2 / y1, x2 / x1]))
    value = 0.5 * phi[0] + _stirling_bregman(t, y2, n_terms)
    near = jnp.abs(r / (2.0 + r)) < _XLOGX_SERIES[jnp.result_type(x1).itemsize][0]
    by_series = y1 * psi[0] - x1 * psi[1]
    combined = x2 * (jnp.log1p(shift / x2) - jnp.log1p(shift / x1)) + shift * jnp.log(y2 / y1)
    # (A where rather than a product with shift = 0: XLA may fuse y₁ψ − x₁ψ into one FMA, not exactly 0.)
    value = value + jnp.where(shifted, jnp.where(near, by_series, combined), 0.0)
    steps = phi[1]
    for k in range(2, n + 1):
        steps = steps + phi[k]
    return value + jnp.where(shifted, steps, 0.0)


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
    with g the series (terms of moderate size: they cancel by at most a factor 23, just below x = 8).

    Args:
        x: an array of x > 0, any shape, float32 or float64 (traced).

    Returns:
        ψ(x) − log x (negative), an array of the shape and dtype of ``x``.

    Examples:
        >>> from jaxfed.numerics import digamma_minus_log
        >>> print(f"{float(digamma_minus_log(1000.0)):.4e}")
        -5.0008e-04
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
    so subtracting 1/x cancels by at most a factor 16 in float32 and 32 in float64, just below x = n).
    A few divisions: several times cheaper than
    ``jax.scipy.special.polygamma`` (a Hurwitz-zeta evaluation) on the KL's hot path.

    Args:
        x: an array of x > 0, any shape, float32 or float64 (traced).

    Returns:
        ψ′(x) − 1/x (positive), an array of the shape and dtype of ``x``.
    """
    x = jnp.asarray(x)
    n = _TRIGAMMA_SERIES_FROM[jnp.result_type(x).itemsize]
    small = x < n
    shifted = jnp.where(small, x + n, x)
    g_shifted = _trigamma_minus_reciprocal_series(shifted)
    recurrence = sum(1.0 / ((x + k) * (x + k)) for k in range(n)) + 1.0 / shifted + g_shifted - 1.0 / x
    return jnp.where(small, recurrence, g_shifted)


# --------------------------------------------------------------------------- standard normal draws
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA


def _rotate_left(x, r: int):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 hash (20 rounds), written out round by round: the same function as JAX's
    ``threefry2x32`` primitive, whose CPU lowering rolls the rounds into a 5-step loop."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(_THREEFRY_PARITY))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _threefry_key_words(key):
    """(k1, k2) of a Threefry key (typed or raw uint32[2]), or None for another generator or setting."""
    if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]  # (JAX options are dynamic)
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != () or str(jax.random.key_impl(key)) != "threefry2x32":
            return None  # jax.random.normal refuses an array of keys, and handles other generators
        key = jax.random.key_data(key)
    elif not (key.dtype == jnp.uint32 and key.shape == (2,) and jax.config.jax_default_prng_impl == "threefry2x32"):  # type: ignore[attr-defined]
        return None
    return key[0], key[1]


def standard_normal(key: jax.Array, shape: tuple[int, ...], dtype=float) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, bit for bit, computed faster on XLA's CPU backend.

    Two costs of ``jax.random.normal`` on the CPU, measured on the (S, d) = (20, 11) draws of the
    mean-field Gaussian vmapped over trials (benchmarks/gfvl_logistic.py):

    - its Threefry rounds are lowered as a rolled 5-step loop on the CPU (to save compile time): one
      small kernel per step; written out (:func:`_threefry2x32`, the same hash) the 20 rounds fuse
      into one loop, about 3x faster;
    - the bits are turned into normals (a uniform, then ``erf_inv``) on an array of the requested
      shape, and XLA vectorises that loop along the last axis only: a short last axis (d = 11) runs
      almost scalar, 4x slower than on a flat vector; so the normals are made flat and reshaped.

    The fast path is taken for float32 draws from a Threefry key with ``jax_threefry_partitionable``
    on (JAX's default): it reproduces JAX's construction (the bits of counter i are the xor of the two
    words of Threefry(key, (0, i)), then the same uniform on [nextafter(−1, 0), 1) and √2 erf⁻¹);
    otherwise this is ``jax.random.normal`` on the flat shape. tests/gfvl/test_numerics.py checks the values
    are identical to ``jax.random.normal``'s, under jit and vmap, so a JAX release that changes its
    construction fails that test rather than the statistics. (Identical from JAX 0.10; on 0.7.2 and
    0.8.0 XLA's CPU erf⁻¹ rounds ``jax.random.normal``'s shaped loop differently from the flat one,
    by at most 3 ulps in about 1% of a (20, 11) draw: this function's values are the flat loop's on
    every version.)

    Args:
        key: a JAX PRNG key (traced; vmap over keys for one draw per trial).
        shape: the shape of the draw, a tuple of ints (static).
        dtype: the float dtype of the values (static); float means JAX's default float.

    Returns:
        An array of ``shape`` and ``dtype`` of standard normal values, equal to
            ``jax.random.normal(key, shape, dtype)``.
    """
    shape = tuple(int(n) for n in shape)
    size = math.prod(shape)
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    words = _threefry_key_words(key) if dtype == jnp.float32 and 0 < size < 2**32 else None
    if words is None:
        return jax.random.normal(key, (size,), dtype).reshape(shape)
    hi, lo = _threefry2x32(words[0], words[1], jnp.zeros((size,), jnp.uint32), lax.iota(jnp.uint32, size))
    bits = hi ^ lo
    floats = lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - np.float32(1.0)
    low = np.nextafter(np.float32(-1.0), np.float32(0.0), dtype=np.float32)
    u = jnp.maximum(low, floats * (np.float32(1.0) - low) + low)
    return (np.float32(np.sqrt(2.0)) * lax.erf_inv(u)).reshape(shape)
