"""Balanced-number codec (docs/kmeans.md §B3) against an independent NumPy implementation of its definition."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed.jaxcompat import enable_x64
from jaxfed.oac import balanced

BASES = [3, 5, 7]
DIGITS = [1, 2, 3, 4, 5]

# One compiled function per (β, D, shape) instead of op-by-op dispatch keeps the suite fast.
encode = jax.jit(balanced.encode, static_argnums=(1, 2))
decode = jax.jit(balanced.decode, static_argnums=(1,))


# --------------------------------------------------------------------------- reference (docs/kmeans.md §B3)
def ref_scaled(v, beta, digits, vmax):
    """ξ v′/v_max + ξ + 1/2 in float64, v′ = clamp(v, ±v_max), written as docs/kmeans.md §B3 states it."""
    xi = (beta**digits - 1) // 2
    clamped = np.maximum(-vmax, np.minimum(np.asarray(v, np.float64), vmax))
    return xi * clamped / vmax + xi + 0.5


def ref_encode(v, beta, digits, vmax):
    n = np.floor(ref_scaled(v, beta, digits, vmax)).astype(np.int64)
    numerals = []
    for _ in range(digits):  # least significant first
        numerals.append(n % beta - (beta - 1) // 2)
        n = n // beta
    assert np.all(n == 0)
    return np.stack(numerals, axis=-1)


def ref_decode(numerals, beta, vmax):
    numerals = np.asarray(numerals, np.int64)
    digits = numerals.shape[-1]
    xi = (beta**digits - 1) // 2
    integer = np.sum(numerals * beta ** np.arange(digits, dtype=np.int64), axis=-1)
    return vmax / xi * integer


def halfway_points(beta, digits):
    """With v_max = ξ the decision thresholds v = m − ξ − 1/2 are exact binary numbers."""
    xi = (beta**digits - 1) // 2
    m = np.arange(0, 2 * xi + 2)
    return m - xi - 0.5, float(xi)


def test_values(seed, vmax):
    rng = np.random.default_rng(seed)
    random = rng.uniform(-1.3 * vmax, 1.3 * vmax, 300)
    edges = np.array([0.0, vmax, -vmax, 2 * vmax, -2 * vmax, 1e30, -1e30, np.inf, -np.inf, -0.0])
    return np.concatenate([random, edges])


test_values.__test__ = False  # a helper, not a test


# --------------------------------------------------------------------------- agreement with the reference
def values_and_vmax(beta, digits, dtype):
    """Random and edge values with v_max = 2.5, then the exact halfway points with v_max = ξ
    (in float32 only those where the half-integer ξ·v′ is exact), with a per-element v_max."""
    xi = (beta**digits - 1) // 2
    v = test_values(beta * 10 + digits, 2.5)
    half, vmax_half = halfway_points(beta, digits)
    if dtype == np.float32:
        half = half[np.abs(half) * xi < 2**23]
    vmax = np.concatenate([np.full(v.shape, 2.5), np.full(half.shape, vmax_half)])
    return np.concatenate([v, half]).astype(dtype), vmax.astype(dtype), v.size


@pytest.mark.parametrize("beta,digits", list(itertools.product(BASES, DIGITS)))
def test_encode_matches_reference_float64(beta, digits):
    """float64: exact agreement on random, edge and exact halfway values."""
    with enable_x64(True):
        v, vmax, _ = values_and_vmax(beta, digits, np.float64)
        got = np.asarray(encode(jnp.asarray(v), beta, digits, jnp.asarray(vmax)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, ref_encode(v, beta, digits, vmax))


@pytest.mark.parametrize("beta,digits", list(itertools.product(BASES, DIGITS)) + [(3, 15), (5, 10), (7, 8)])
def test_encode_matches_reference_float32(beta, digits):
    """float32, up to the float32 limit β^D <= 2^24: exact except within the rounding of (ξ v′)/v_max
    (relative 2^-23 of ξ, two roundings) of a decision threshold, where a neighbouring level is allowed.
    Halfway points with v_max = ξ, where ξ·v′ is exact in float32, must agree exactly."""
    xi = (beta**digits - 1) // 2
    v, vmax, n_random = values_and_vmax(beta, digits, np.float32)
    got = np.asarray(encode(jnp.asarray(v), beta, digits, jnp.asarray(vmax)))
    ref = ref_encode(v, beta, digits, vmax.astype(np.float64))
    scaled = ref_scaled(v, beta, digits, vmax.astype(np.float64))
    near = np.abs(scaled - np.round(scaled)) <= 2.0**-22 * (xi + 1)
    near[n_random:] = False  # the halfway points are exact
    np.testing.assert_array_equal(got[~near], ref[~near])
    level_gap = np.abs(ref_decode(got, beta, xi) - ref_decode(ref, beta, xi))  # in units of levels
    assert np.all(level_gap[near] <= 1)
    if xi < 2**16:  # near the float32 limit most values are within rounding of a threshold
        assert near.mean() < 0.05


@pytest.mark.parametrize("beta,digits", [(3, 19), (5, 13), (7, 11)])
def test_int32_limit_is_safe_in_float64(beta, digits):
    """At the largest D that int32 allows, levels 0 and 2ξ and random values encode exactly."""
    with enable_x64(True):
        v = test_values(7, 1.0)
        got = np.asarray(encode(jnp.asarray(v), beta, digits, 1.0))
        np.testing.assert_array_equal(got, ref_encode(v, beta, digits, 1.0))
        half = (beta - 1) // 2
        np.testing.assert_array_equal(got[-2], -half)  # -inf -> level 0: every numeral minimal
        np.testing.assert_array_equal(got[-3], half)  # +inf -> level 2ξ: every numeral maximal


# --------------------------------------------------------------------------- codec properties
@pytest.mark.parametrize("beta,digits", list(itertools.product(BASES, DIGITS)))
def test_codec_properties(beta, digits):
    """Numerals: int32, shape v.shape + (D,), in {−(β−1)/2..(β−1)/2}; decode matches the reference;
    |decode(encode(v)) − clamp(v)| <= v_max/(2ξ) plus float32 rounding of v_max (two roundings of the
    threshold, one of the decoded value), and the bound is attained within a factor 2;
    decode(Σ_k η_k) = Σ_k decode(η_k), exactly (integers) with v_max = ξ."""
    vmax = 1.7
    xi = (beta**digits - 1) // 2
    v = test_values(beta + digits, vmax)[:300].reshape(60, 5).astype(np.float32)
    numerals = encode(jnp.asarray(v), beta, digits, vmax)
    assert numerals.shape == (60, 5, digits) and numerals.dtype == jnp.int32
    half = (beta - 1) // 2
    assert int(numerals.min()) >= -half and int(numerals.max()) <= half

    decoded = decode(numerals, beta, vmax)
    assert decoded.shape == (60, 5) and decoded.dtype == jnp.float32
    np.testing.assert_allclose(decoded, ref_decode(np.asarray(numerals), beta, vmax), rtol=2**-22, atol=0)
    err = np.abs(np.asarray(decoded, np.float64) - np.clip(v.astype(np.float64), -vmax, vmax))
    assert np.all(err <= vmax / (2 * xi) + 2.0**-21 * vmax), err.max() * 2 * xi / vmax
    assert err.max() >= vmax / (4 * xi)

    summed = jnp.sum(numerals, axis=0)
    ref = np.sum(ref_decode(np.asarray(numerals), beta, vmax), axis=0)
    np.testing.assert_allclose(decode(summed, beta, vmax), ref, rtol=2**-20, atol=2**-20)
    integer_sum = np.sum(np.asarray(numerals, np.int64) * beta ** np.arange(digits), axis=(0, 2))
    np.testing.assert_array_equal(decode(summed, beta, float(xi)), integer_sum)


def test_vmax_broadcasts_and_jit_vmap_agree():
    v = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
    vmax = jnp.array([0.5, 1.0, 2.0])
    direct = balanced.encode(v, 3, 4, vmax)
    np.testing.assert_array_equal(direct, ref_encode(np.asarray(v), 3, 4, np.asarray(vmax, np.float64)))
    per_column = jnp.stack([balanced.encode(v[:, i], 3, 4, vmax[i]) for i in range(3)], axis=1)
    np.testing.assert_array_equal(direct, per_column)
    jitted = jax.jit(balanced.encode, static_argnums=(1, 2))(v, 3, 4, vmax)
    np.testing.assert_array_equal(direct, jitted)
    mapped = jax.vmap(lambda x, m: balanced.encode(x, 3, 4, m))(v.T, vmax)
    np.testing.assert_array_equal(direct, jnp.swapaxes(mapped, 0, 1))


def test_max_level():
    assert balanced.max_level(3, 4) == 40 and balanced.max_level(7, 1) == 3


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("beta", [1, 2, 4, 0, -3, 3.0, True, "3"])
def test_invalid_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        balanced.encode(jnp.zeros(3), beta, 2, 1.0)


@pytest.mark.parametrize("digits", [0, -1, 2.5])
def test_invalid_digits(digits):
    with pytest.raises(ValueError, match="digits"):
        balanced.encode(jnp.zeros(3), 3, digits, 1.0)


@pytest.mark.parametrize("beta,digits", [(3, 20), (5, 14), (7, 12)])
def test_int32_overflow_rejected(beta, digits):
    with pytest.raises(ValueError, match="int32"):
        balanced.check_base(beta, digits)


@pytest.mark.parametrize("beta,digits", [(3, 16), (5, 11), (7, 9)])
def test_float32_precision_limit(beta, digits):
    with pytest.raises(ValueError, match="2\\*\\*24"):
        balanced.encode(jnp.zeros(3, jnp.float32), beta, digits, 1.0)
    with enable_x64(True):  # allowed in float64
        assert balanced.encode(jnp.zeros(3, jnp.float64), beta, digits, 1.0).shape == (3, digits)


def test_decode_needs_digit_axis():
    with pytest.raises(ValueError, match="digit axis"):
        balanced.decode(jnp.int32(1), 3, 1.0)
