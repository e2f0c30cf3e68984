import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxfed import numerics
from jaxfed.jaxcompat import enable_x64

mp.mp.dps = 40


def _reference(fn, x):
    return np.array([float(fn(mp.mpf(float(v)))) for v in x])


X_PHI = np.concatenate([-np.geomspace(0.999, 1e-9, 60), np.geomspace(1e-9, 1e6, 80), [-0.5, 0.5, 0.49999, 0.50001]])
X_PSI = np.concatenate([np.geomspace(1e-3, 1e7, 200), [4.0, 7.999, 8.0, 8.001]])


# Bounds on the relative error, a little above the measured worst (2 and 4 ulps).
@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 4e-7), (jnp.float64, 1.5e-15)])
def test_x_minus_log1p_matches_mpmath(dtype, rtol):
    with enable_x64(dtype == jnp.float64):
        x = np.asarray(jnp.asarray(X_PHI, dtype), np.float64)  # the values the dtype can hold
        got = np.asarray(numerics.x_minus_log1p(jnp.asarray(x, dtype)), np.float64)
    want = _reference(lambda v: v - mp.log1p(v), x)
    np.testing.assert_allclose(got, want, rtol=rtol)
    assert np.all(got >= 0)


# Relative error bounds (ψ − log, ψ′ − 1/x) stated in jaxfed.numerics, measured worst: 10 and 7 ulps in
# float32; in float64 the asymptotic series' 4.5e-12 and 3.5e-13.
@pytest.mark.parametrize("dtype, rtol_psi, rtol_tri", [(jnp.float32, 1.5e-6, 1e-6), (jnp.float64, 1e-11, 1e-12)])
def test_digamma_and_trigamma_differences_match_mpmath(dtype, rtol_psi, rtol_tri):
    with enable_x64(dtype == jnp.float64):
        x = np.asarray(jnp.asarray(X_PSI, dtype), np.float64)
        psi = np.asarray(numerics.digamma_minus_log(jnp.asarray(x, dtype)), np.float64)
        tri = np.asarray(numerics.trigamma_minus_reciprocal(jnp.asarray(x, dtype)), np.float64)
    np.testing.assert_allclose(psi, _reference(lambda v: mp.digamma(v) - mp.log(v), x), rtol=rtol_psi)
    np.testing.assert_allclose(tri, _reference(lambda v: mp.polygamma(1, v) - 1 / v, x), rtol=rtol_tri)


def test_series_truncations_meet_their_stated_bounds():
    """The truncation errors the comments state, in mpmath (the series are plain arithmetic): φ's atanh
    series at its worst point x = −1/2 (5.2e-9 with 7 terms, 6.6e-18 with 16); ψ(x) − log x by its series
    for x >= 8 (< 1e-11, measured 4.5e-12); ψ′(x) − 1/x by its series for x >= 8 and x >= 4 (< 1e-12 and
    < 2e-8, measured 3.5e-13 and 8.4e-9); the cancellation factors of the recurrences below the series
    (digamma 23, trigamma 16 / 32 for n = 4 / 8); φ(x) >= 0.18|x| where the plain difference takes over."""
    x = np.concatenate([-np.geomspace(0.999, 0.5, 50), np.geomspace(0.5, 1e6, 50)])
    assert np.all(x - np.log1p(x) >= 0.18 * np.abs(x))
    for terms, bound in ((numerics._SERIES_TERMS[4], 5.3e-9), (numerics._SERIES_TERMS[8], 6.7e-18)):
        x = mp.mpf(-0.5)
        y = x / (2 + x)

        def series(n, y=y):
            return sum(y ** (2 * j) / (2 * j + 3) for j in range(n))

        assert abs(2 * y**3 * (series(200) - series(terms))) / (x - mp.log1p(x)) < bound
    xs = [mp.mpf(8) * (1 + mp.mpf(j) / 25) for j in range(100)]
    psi = max(abs(numerics._digamma_minus_log_series(x) / (mp.digamma(x) - mp.log(x)) - 1) for x in xs)
    assert psi < 1e-11
    for start, bound in ((8, 1e-12), (4, 2e-8)):
        xs = [mp.mpf(start) * (1 + mp.mpf(j) / 25) for j in range(100)]
        tri = max(abs(numerics._trigamma_minus_reciprocal_series(x) / (mp.polygamma(1, x) - 1 / x) - 1) for x in xs)
        assert tri < bound
    factor = 0.0
    for x in (mp.mpf(v) for v in np.geomspace(1e-3, 7.999, 200)):
        parts = [numerics._digamma_minus_log_series(x + 8), mp.log1p(8 / x)] + [-1 / (x + k) for k in range(8)]
        factor = max(factor, float(sum(abs(p) for p in parts) / abs(sum(parts))))
    assert factor < 23
    for n, bound in ((4, 16), (8, 32)):
        factor = 0.0
        for x in (mp.mpf(v) for v in np.geomspace(1e-3, n * 0.9999, 200)):
            upper = (
                sum(1 / (x + k) ** 2 for k in range(n))
                + 1 / (x + n)
                + numerics._trigamma_minus_reciprocal_series(x + n)
            )
            factor = max(factor, float((upper + 1 / x) / (upper - 1 / x)))
        assert factor < bound


# --------------------------------------------------------------------------- standard_normal (fast path)
def _as_bits(x):
    x = np.asarray(x)
    return x.view(np.int32 if x.dtype == np.float32 else np.int64)


SHAPED_ERF_INV_ULPS = 0 if tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 10) else 4
"""How far jax.random.normal on a shaped array may be from the flat draws of standard_normal: 0 (bit
for bit) from JAX 0.10 (measured on 0.10.2 and 0.12.1); on JAX 0.7.2 and 0.8.0 XLA's CPU erf⁻¹
rounds a short last axis's loop and the flat loop differently, by at most 3 ulps (measured) in about 1% of
the draws of a (20, 11) shape (measured)."""


def _assert_same_draws(got, want, ulps: int) -> None:
    if ulps == 0:
        np.testing.assert_array_equal(_as_bits(got), _as_bits(want))
    else:
        assert np.abs(_as_bits(got).astype(np.int64) - _as_bits(want).astype(np.int64)).max() <= ulps


@pytest.mark.parametrize("shape", [(1,), (3,), (20, 11), (7, 3, 5), (2, 1), (1000,)])
def test_standard_normal_is_jax_random_normal_bit_for_bit(shape):
    """The unrolled-Threefry path reproduces jax.random.normal exactly: eager, jitted and vmapped over
    keys (the layout of the experiments), for keys from key(), fold_in and split (within
    :data:`SHAPED_ERF_INV_ULPS` on JAX before 0.10, for a shape whose last axis is short)."""
    ulps = SHAPED_ERF_INV_ULPS if len(shape) > 1 else 0
    keys = [jax.random.key(0), jax.random.fold_in(jax.random.key(7), 2**31 + 5), jax.random.split(jax.random.key(3))[1]]
    for key in keys:
        got = numerics.standard_normal(key, shape, jnp.float32)
        want = jax.random.normal(key, shape, jnp.float32)
        assert got.shape == want.shape and got.dtype == want.dtype
        _assert_same_draws(got, want, ulps)
    batch = jax.random.split(jax.random.key(11), 257)
    got = jax.jit(jax.vmap(lambda k: numerics.standard_normal(k, shape, jnp.float32)))(batch)
    want = jax.jit(jax.vmap(lambda k: jax.random.normal(k, shape, jnp.float32)))(batch)
    _assert_same_draws(got, want, ulps)


def test_standard_normal_extreme_uniforms_and_raw_keys():
    """Many draws (tails of the uniform: bits near 0 and 2^32 − 1 hit erf⁻¹ near ±1) and a raw
    uint32[2] key give the same values as jax.random.normal; all finite."""
    key = jax.random.key(123)
    got = jax.jit(lambda k: numerics.standard_normal(k, (1 << 20,), jnp.float32))(key)
    want = jax.jit(lambda k: jax.random.normal(k, (1 << 20,), jnp.float32))(key)
    np.testing.assert_array_equal(_as_bits(got), _as_bits(want))
    assert np.all(np.isfinite(np.asarray(got)))
    raw = jax.random.PRNGKey(5)
    np.testing.assert_array_equal(
        _as_bits(numerics.standard_normal(raw, (4, 6), jnp.float32)), _as_bits(jax.random.normal(raw, (4, 6)))
    )


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_standard_normal_other_generators_fall_back(impl):
    key = jax.random.key(1, impl=impl)
    np.testing.assert_array_equal(
        _as_bits(numerics.standard_normal(key, (20, 11), jnp.float32)), _as_bits(jax.random.normal(key, (20, 11)))
    )


def test_standard_normal_float64_and_non_partitionable_fall_back():
    with enable_x64(True):
        key = jax.random.key(2)
        got = numerics.standard_normal(key, (20, 11), jnp.float64)
        assert got.dtype == jnp.float64
        np.testing.assert_array_equal(_as_bits(got), _as_bits(jax.random.normal(key, (20, 11), jnp.float64)))
    with jax.threefry_partitionable(False):
        key = jax.random.key(3)
        np.testing.assert_array_equal(
            _as_bits(numerics.standard_normal(key, (20, 11), jnp.float32)), _as_bits(jax.random.normal(key, (20, 11)))
        )


def test_standard_normal_refuses_what_jax_refuses():
    """An array of keys (not one key) is refused as by jax.random.normal; an empty shape gives an empty array."""
    with pytest.raises((TypeError, ValueError)):
        numerics.standard_normal(jax.random.split(jax.random.key(0), 3), (2,), jnp.float32)
    assert numerics.standard_normal(jax.random.key(0), (0, 3), jnp.float32).shape == (0, 3)


# Measured worst relative errors (float32 / float64): (1 + x) log(1 + x) − x 2.7e-7 / 1.2e-15 (2 and 5 ulps); the
# log-gamma remainder's divergence 1.6e-6 / 2.1e-14.
@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 5e-7), (jnp.float64, 2e-15)])
def test_xlogx_bregman_matches_mpmath(dtype, rtol):
    with enable_x64(dtype == jnp.float64):
        x = np.asarray(jnp.asarray(X_PHI, dtype), np.float64)
        got = np.asarray(numerics.xlogx_bregman(jnp.asarray(x, dtype)), np.float64)
    want = _reference(lambda v: (1 + v) * mp.log1p(v) - v, x)
    np.testing.assert_allclose(got, want, rtol=rtol)
    assert np.all(got >= 0)


def test_the_ratio_argument_keeps_the_digits_of_a_ratio_near_zero():
    """x = (x₂ − x₁)/x₁ rounds 1 + x to few digits when x₂ ≪ x₁; the ratio x₂/x₁ passed as one_plus_x
    keeps them (without it both functions are off by more than 1e-3 relative here)."""
    x1, x2 = np.float32(9e4), np.float32(0.5)
    x, ratio = jnp.float32((x2 - x1) / x1), jnp.float32(x2 / x1)
    with mp.workdps(40):
        r = mp.mpf(float(x2)) / mp.mpf(float(x1)) - 1
        phi, psi = float(r - mp.log1p(r)), float((1 + r) * mp.log1p(r) - r)
    assert float(numerics.x_minus_log1p(x, ratio)) == pytest.approx(phi, rel=1e-6)
    assert float(numerics.xlogx_bregman(x, ratio)) == pytest.approx(psi, rel=1e-6)
    assert abs(float(numerics.x_minus_log1p(x)) / phi - 1) > 1e-5


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 2e-6), (jnp.float64, 1e-13)])
def test_log_gamma_remainder_bregman_matches_mpmath(dtype, rtol):
    """D_G(x₁ → x₂) for G(x) = log Γ(x) − x log x + x, on both sides of the shift (x < n and x >= n) and
    across it, small and large steps; relative to its value (all terms are of its size or smaller)."""
    rng = np.random.default_rng(1)
    x1 = 10 ** rng.uniform(-1, 4, 300)
    x2 = x1 * np.exp(rng.choice([-1, 1], 300) * 10 ** rng.uniform(-4, 1, 300))
    with enable_x64(dtype == jnp.float64):
        a, b = (np.asarray(jnp.asarray(v, dtype), np.float64) for v in (x1, x2))
        got = np.asarray(numerics.log_gamma_remainder_bregman(jnp.asarray(a, dtype), jnp.asarray(b, dtype)), np.float64)

    def bregman(u, v):
        g = lambda z: mp.loggamma(z) - z * mp.log(z) + z  # noqa: E731
        return g(v) - g(u) - (v - u) * (mp.digamma(u) - mp.log(u))

    with mp.workdps(50):
        want = np.array([float(bregman(mp.mpf(float(u)), mp.mpf(float(v)))) for u, v in zip(a, b)])
    keep = want > 1e-12
    assert keep.sum() > 250
    np.testing.assert_allclose(got[keep], want[keep], rtol=rtol)
