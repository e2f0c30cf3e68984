"""KL(Beta(η) ‖ q*) by quadrature against a float64 reference.

The reference integrates the plain (textbook) log densities in u = logit θ with the trapezoidal
rule on 400,001 points over [−40, 40] in float64: for integrands analytic in a strip around the
real axis and decaying at both ends the trapezoidal rule converges geometrically, so its error is
far below 1e-10 here (checked against mpmath at 40 digits while developing).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import betaln, expit, log_expit, ndtr

from jaxfed.gfvl import expfam, likelihoods, quadrature
from jaxfed.jaxcompat import enable_x64

U = np.linspace(-40.0, 40.0, 400_001)


def reference_kl(a, b, a0, b0, n1, n0, eps, alpha):
    lp = a0 * log_expit(U) + b0 * log_expit(-U)
    lp = lp + (n1 * np.log(eps + (1 - 2 * eps) * expit(U)) + n0 * np.log(eps + (1 - 2 * eps) * expit(-U))) / alpha
    top = lp.max()
    log_z = top + np.log(np.trapezoid(np.exp(lp - top), U))
    lq = a * log_expit(U) + b * log_expit(-U) - betaln(a, b)
    return np.trapezoid(np.exp(lq) * (lq - lp), U) + log_z


def _posterior_shapes(a0, b0, n1, n0, eps, alpha, scale=1.0):
    """A Beta matching the target's mean and variance (then scaled), for q's near convergence."""
    t = expit(U)
    lp = a0 * log_expit(U) + b0 * log_expit(-U)
    lp = lp + (n1 * np.log(eps + (1 - 2 * eps) * t) + n0 * np.log(eps + (1 - 2 * eps) * expit(-U))) / alpha
    w = np.exp(lp - lp.max())
    w /= w.sum()
    m = (w * t).sum()
    v = (w * (t - m) ** 2).sum()
    k = m * (1 - m) / v - 1
    return m * k * scale, (1 - m) * k * scale


def _cases():
    """(a, b, a0, b0, n1, n0, ε, α): the experiments' targets (noisy Bernoulli ε = 0.1 and the
    Bernoulli ε = 0, 1000 points with the sum loss or 10 with the mean loss, α = 1 and 2, a heavy-tailed
    ε = 0.3 target) with q from the prior to within KL ~1e-6 of the target."""
    out = []
    targets = [(0.1, 663.0, 337.0, 1.0), (0.1, 6.63, 3.37, 1.0), (0.0, 700.0, 300.0, 2.0), (0.3, 660.0, 340.0, 1.0)]
    for eps, n1, n0, alpha in targets:
        a, b = _posterior_shapes(2.0, 2.0, n1, n0, eps, alpha)
        qs = [(2.0, 2.0), (a / 2, b / 2), (a, b), (a * 1.02, b), (a * 1.002, b), (a + 0.05, b), (3 * a, 3 * b)]
        for qa, qb in qs:
            out.append((qa, qb, 2.0, 2.0, n1, n0, eps, alpha))
    out.append((352.0, 152.0, 2.0, 2.0, 700.0, 300.0, 0.0, 2.0))  # ε = 0: q is q* exactly (conjugate)
    return np.array(out)


CASES = _cases()


@functools.cache
def _kl_fn():
    def kl(case):
        a, b, a0, b0, n1, n0, eps, alpha = case
        lik = likelihoods.noisy_bernoulli(eps)
        data = jnp.stack([n1, n0])

        def loss_change(theta_ref, t):
            return lik.loss_change(data, theta_ref, t)

        target = quadrature.make_target(jnp.stack([a0, b0]), loss_change, alpha)
        return quadrature.kl_to_target(jnp.stack([a, b]), target, loss_change, alpha)

    return jax.jit(jax.vmap(kl))


@functools.cache
def _references():
    return np.array([reference_kl(*c) for c in CASES])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_kl_matches_the_float64_reference(dtype):
    """float32: within 1e-6 absolute wherever KL <= 1, and 1e-6 relative above (float32 cannot hold
    more: its spacing at KL = 100 is 8e-6). float64: within 1e-9 absolute + 1e-9 relative."""
    ref = _references()
    with enable_x64(dtype == jnp.float64):
        got = np.asarray(_kl_fn()(jnp.asarray(CASES, dtype)), np.float64)
    assert np.all(np.isfinite(got)) and np.all(got >= 0)
    err = np.abs(got - ref)
    if dtype == jnp.float32:
        ok = np.where(ref <= 1.0, err <= 1e-6, err <= 1e-6 * ref)
    else:
        ok = err <= 1e-9 + 1e-9 * ref
    assert np.all(ok), [(tuple(c), r, g) for c, r, g, o in zip(CASES, ref, got, ok) if not o]
    assert ref.min() < 1e-5 and ref.max() > 10  # the cases span near-convergence to the prior
    # the last case is q = q* (the conjugate posterior)
    assert got[-1] < 5e-7 and ref[-1] < 1e-12


def test_degenerate_q_gives_a_finite_value():
    """Shapes at the projection floor (1e-3) and huge ones: outside the accuracy range, but finite and >= 0."""
    lik = likelihoods.noisy_bernoulli(0.1)
    data = jnp.array([663.0, 337.0])

    def loss_change(theta_ref, t):
        return lik.loss_change(data, theta_ref, t)

    @jax.jit
    def kl(etas):
        target = quadrature.make_target(expfam.beta_natural(2.0, 2.0), loss_change, 1.0)
        return jax.vmap(lambda e: quadrature.kl_to_target(e, target, loss_change, 1.0))(etas)

    got = np.asarray(kl(jnp.array([[1e-3, 1e-3], [1e-3, 500.0], [500.0, 1e-3], [1e7, 1e7], [1e6, 1.0]])))
    assert np.all(np.isfinite(got)) and np.all(got >= 0)
    assert np.all(got > 1.0)  # all far from the target


def test_user_log_likelihood_target():
    eps = 0.1

    def log_lik(z, theta):
        p = eps + (1 - 2 * eps) * theta
        return z * jnp.log(p) + (1 - z) * jnp.log1p(-p)

    z = jnp.concatenate([jnp.ones(33), jnp.zeros(17)])
    padded = likelihoods.PaddedData(z=z[None], weight=jnp.ones((1, 50)))
    user = likelihoods.from_log_lik(log_lik)
    with enable_x64(True):
        prior = expfam.beta_natural(2.0, 2.0)
        pooled = user.pool(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), padded))

        def loss_change(theta_ref, t):
            return user.loss_change(pooled, theta_ref, t)

        def kl(eta):
            target = quadrature.make_target(prior, loss_change, 1.0)
            return quadrature.kl_to_target(eta, target, loss_change, 1.0)

        value = jax.jit(kl)(jnp.array([20.0, 11.0]))
    np.testing.assert_allclose(value, reference_kl(20.0, 11.0, 2.0, 2.0, 33.0, 17.0, eps, 1.0), rtol=1e-8)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_window_constants_and_the_mode_meet_their_comments(dtype):
    """σ(U) 2 to 4 ulps below 1 (σ(−U) ≈ (e/2)ε), the core's Gaussian mass beyond ±W 1.2e-15, and the target's
    mode within half a zoomed spacing of the exact one: a conjugate target (ε = 0) has its mode in u at
    log((a0 + n1/α)/(b0 + n0/α)); 1.2e-7 (float32) and 2.7e-7 (float64) bound the grid, plus rounding."""
    eps = float(jnp.finfo(dtype).eps)
    limit = quadrature._logit_limit(dtype)
    with enable_x64(dtype == jnp.float64):
        top, bottom = (float(jax.nn.sigmoid(jnp.asarray(v, dtype))) for v in (limit, -limit))
        assert 1.0 - top >= eps and 1.0 - top <= 2 * eps
        assert bottom == pytest.approx(np.e / 2 * eps, rel=1e-3)
        lik = likelihoods.bernoulli()
        data = jnp.asarray([700.0, 300.0], dtype)
        target = jax.jit(
            lambda d: quadrature.make_target(
                expfam.beta_natural(2.0, 3.0).astype(dtype), lambda r, t: lik.loss_change(d, r, t), 2.0
            )
        )(data)
        mode = float(target.u_ref)
    assert 2 * ndtr(-quadrature.CORE_WIDTH) < 1.3e-15
    spacing = 2 * limit / (quadrature._GRID - 1)
    grid_bound = 0.5 * spacing * 8.0**-quadrature._ZOOMS
    assert grid_bound < (1.3e-7 if dtype == jnp.float32 else 2.8e-7)
    assert abs(mode - np.log((2.0 + 350.0) / (3.0 + 150.0))) <= grid_bound + 8 * eps
