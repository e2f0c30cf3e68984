import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxfed import numerics

mp.mp.dps = 40


def _reference(fn, x):
    return np.array([float(fn(mp.mpf(float(v)))) for v in x])


X_PHI = np.concatenate([-np.geomspace(0.999, 1e-9, 60), np.geomspace(1e-9, 1e6, 80), [-0.5, 0.5, 0.49999, 0.50001]])
X_PSI = np.concatenate([np.geomspace(1e-3, 1e7, 200), [4.0, 7.999, 8.0, 8.001]])


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 1e-6), (jnp.float64, 1e-13)])
def test_x_minus_log1p_matches_mpmath(dtype, rtol):
    with jax.enable_x64(dtype == jnp.float64):
        x = np.asarray(jnp.asarray(X_PHI, dtype), np.float64)  # the values the dtype can hold
        got = np.asarray(numerics.x_minus_log1p(jnp.asarray(x, dtype)), np.float64)
    want = _reference(lambda v: v - mp.log1p(v), x)
    np.testing.assert_allclose(got, want, rtol=rtol)
    assert np.all(got >= 0)


@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 2e-6), (jnp.float64, 1e-10)])
def test_digamma_and_trigamma_differences_match_mpmath(dtype, rtol):
    with jax.enable_x64(dtype == jnp.float64):
        x = np.asarray(jnp.asarray(X_PSI, dtype), np.float64)
        psi = np.asarray(numerics.digamma_minus_log(jnp.asarray(x, dtype)), np.float64)
        tri = np.asarray(numerics.trigamma_minus_reciprocal(jnp.asarray(x, dtype)), np.float64)
    np.testing.assert_allclose(psi, _reference(lambda v: mp.digamma(v) - mp.log(v), x), rtol=rtol)
    np.testing.assert_allclose(tri, _reference(lambda v: mp.polygamma(1, v) - 1 / v, x), rtol=rtol)
