import functools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import optax
import pytest
from scipy import integrate, special, stats

from jaxfed import gfvl
from jaxfed.gfvl import expfam, likelihoods, natgrad
from jaxfed.gfvl.expfam import BETA
from jaxfed.jaxcompat import enable_x64

mp.mp.dps = 30

# Shapes covering Cheng's BC (min < 1) and BB (min > 1) branches, the boundary and near-converged
# posteriors of the experiments.
SHAPES = [(0.3, 0.5), (0.5, 4.0), (1.0, 1.0), (2.0, 3.0), (1.5, 900.0), (700.0, 300.0)]


@functools.cache
def _sampler(n):
    return jax.jit(lambda key, eta: expfam.beta_sample_score(key, eta, n))


@pytest.mark.parametrize("a, b", SHAPES)
def test_beta_sampler_moments(a, b):
    """E[T(θ) − μ] = 0 and Var(T_i) = FIM_ii within 4 standard errors, and E[θ] = a/(a+b)."""
    n = 200_000
    theta, score = _sampler(n)(jax.random.key(11), jnp.array([a, b]))
    theta, score = np.asarray(theta, np.float64), np.asarray(score, np.float64)
    assert np.all(np.isfinite(score)) and np.all((theta > 0) & (theta < 1))
    mean, se = score.mean(0), score.std(0) / np.sqrt(n)
    assert np.all(np.abs(mean) <= 4 * se), (mean, se)
    fisher = np.diag(np.asarray(BETA.fisher(jnp.array([a, b], jnp.float32)), np.float64))
    var = score.var(0)
    se_var = np.sqrt(((score - mean) ** 4).mean(0) - var**2) / np.sqrt(n)
    assert np.all(np.abs(var - fisher) <= 4 * se_var + 1e-6 * fisher), (var, fisher, se_var)
    assert abs(theta.mean() - a / (a + b)) <= 4 * theta.std() / np.sqrt(n)


@pytest.mark.parametrize("a, b", [(0.5, 4.0), (2.0, 3.0), (700.0, 300.0)])
def test_beta_sampler_distribution_in_float64(a, b):
    """Kolmogorov–Smirnov against SciPy's Beta CDF (fixed seed; the threshold 1e-4 is the false-alarm
    probability of an exact sampler)."""
    with enable_x64(True):
        theta, _ = expfam.beta_sample_score(jax.random.key(5), jnp.array([a, b]), 100_000)
    assert stats.kstest(np.asarray(theta), stats.beta(a, b).cdf).pvalue > 1e-4


def _reference_gradient(eta, n1, n0, eps):
    """∇_η E_q[L] = E_q[L (T − μ)] by adaptive quadrature in float64."""
    a, b = eta
    mu = special.digamma(np.array([a, b])) - special.digamma(a + b)
    dist = stats.beta(a, b)

    def loss(t):
        return -(n1 * np.log(eps + (1 - 2 * eps) * t) + n0 * np.log(eps + (1 - 2 * eps) * (1 - t)))

    lo, hi = dist.ppf(1e-14), dist.isf(1e-14)
    points = dist.ppf([1e-6, 0.01, 0.5, 0.99, 1 - 1e-6])
    out = []
    for i, stat in enumerate((np.log, np.log1p)):
        sign = 1 if i == 0 else -1
        f = lambda t: dist.pdf(t) * loss(t) * ((stat(sign * t) if i == 1 else stat(t)) - mu[i])  # noqa: E731
        out.append(integrate.quad(f, lo, hi, points=points, limit=200, epsabs=0, epsrel=1e-9)[0])
    return np.array(out)


@functools.cache
def _gradients(baseline):
    """jit(vmap) of ĝ over keys for the noisy Bernoulli agent (66, 34); η and c are traced."""
    lik = likelihoods.noisy_bernoulli(0.1)
    data = jnp.array([66.0, 34.0])

    def one(key, eta, c):
        return natgrad.reinforce_gradient(key, BETA, eta, lambda t: lik.loss(data, t), 30, baseline, c)

    return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


@pytest.mark.parametrize("eta", [(3.0, 2.0), (60.0, 25.0)])
@pytest.mark.parametrize("baseline, c", [("constant", 0.0), ("constant", 40.0), ("leave-one-out", 0.0)])
def test_reinforce_gradient_is_unbiased(eta, baseline, c):
    """Mean of 20,000 independent ĝ (S = 30) within 4 standard errors of the quadrature value."""
    g = _gradients(baseline)(jax.random.split(jax.random.key(3), 20_000), jnp.array(eta), c)
    g = np.asarray(g, np.float64)
    want = _reference_gradient(eta, 66.0, 34.0, 0.1)
    se = g.std(0) / np.sqrt(len(g))
    assert np.all(np.abs(g.mean(0) - want) <= 4 * se), (g.mean(0), want, se)


def test_leave_one_out_baseline_lowers_the_variance():
    keys, eta = jax.random.split(jax.random.key(8), 20_000), jnp.array([60.0, 25.0])
    loo = np.asarray(_gradients("leave-one-out")(keys, eta, 0.0)).std(0)
    assert np.all(loo < 0.1 * np.asarray(_gradients("constant")(keys, eta, 0.0)).std(0))


def _fd_hessian(a, b):
    """Hessian of A(η) = log Γ(a) + log Γ(b) − log Γ(a + b) by mpmath finite differences (30 digits)."""
    f = lambda x, y: mp.loggamma(x) + mp.loggamma(y) - mp.loggamma(x + y)  # noqa: E731
    order = {(0, 0): (2, 0), (0, 1): (1, 1), (1, 0): (1, 1), (1, 1): (0, 2)}
    return np.array([[float(mp.diff(f, (a, b), order[i, j])) for j in range(2)] for i in range(2)])


@pytest.mark.parametrize("a, b", [(0.01, 3.0), (0.7, 0.4), (2.0, 3.0), (50.0, 20.0), (700.0, 300.0), (1e4, 3e3)])
def test_fisher_matches_the_finite_difference_hessian_of_the_log_partition(a, b):
    hess = _fd_hessian(a, b)
    v = np.array([0.3, -1.7])
    with enable_x64(True):
        eta = jnp.array([a, b])
        np.testing.assert_allclose(BETA.fisher(eta), hess, rtol=1e-9)
        np.testing.assert_allclose(natgrad.fisher_solve(BETA, eta, jnp.asarray(v)), np.linalg.solve(hess, v), rtol=1e-8)
        generic = BETA._replace(name="beta, generic solve")  # not in the closed forms: P×P solve
        got = natgrad.fisher_solve(generic, eta, jnp.asarray(v))
        np.testing.assert_allclose(got, np.linalg.solve(hess, v), rtol=1e-7)
    # float32: the closed form keeps the determinant (whose 1/x terms cancel) accurate
    got = natgrad.fisher_solve(BETA, jnp.array([a, b], jnp.float32), jnp.asarray(v, jnp.float32))
    np.testing.assert_allclose(got, np.linalg.solve(hess, v), rtol=2e-5)


def test_natural_gradient_of_a_conjugate_loss_is_its_statistics():
    """For L = −s·T(θ), ∇_η E_q[L] = −FIM s, so the step is η + ρ (s − α (η − η_cav)) exactly."""
    with enable_x64(True):
        eta, cav, s = jnp.array([30.0, 12.0]), jnp.array([20.0, 9.0]), jnp.array([7.0, 2.0])
        grad = -BETA.fisher(eta) @ s
        got = natgrad.natural_gradient_step(BETA, eta, grad, cav, 0.1, 2.0)
        np.testing.assert_allclose(got, eta + 0.1 * (s - 2.0 * (eta - cav)), rtol=1e-12)


@pytest.mark.parametrize(
    "grad",
    [[1e30, -1e30], [-1e30, -1e30], [3e38, 3e38], [np.nan, 0.0], [np.inf, 1.0], [0.0, -np.inf]],
)
@pytest.mark.parametrize("rho", [1e-3, 1e6])
def test_steps_stay_in_the_domain_and_never_produce_nan(grad, rho):
    eta, cav = jnp.array([2.0, 300.0]), jnp.array([1.0, 1.0])
    out = np.asarray(natgrad.natural_gradient_step(BETA, eta, jnp.asarray(grad, jnp.float32), cav, rho, 1.0))
    assert np.all(np.isfinite(out)) and np.all(out >= expfam.BETA_MIN_SHAPE)
    if not np.all(np.isfinite(grad)):
        np.testing.assert_array_equal(out, eta)  # a non-finite proposal is discarded


def test_optax_chain_reproduces_the_step_and_follows_a_schedule():
    with enable_x64(True):
        eta, cav = jnp.array([40.0, 15.0]), jnp.array([30.0, 10.0])
        grads = [jnp.array([0.3, -0.2]), jnp.array([-0.1, 0.4])]
        schedule = optax.exponential_decay(0.05, transition_steps=1, decay_rate=0.5)
        opt = natgrad.natural_gradient_descent(BETA, schedule)
        state = opt.init(eta)
        params = eta
        for i, g in enumerate(grads):
            updates, state = opt.update(natgrad.free_energy_gradient(BETA, params, g, cav, 2.0), state, params)
            rate = schedule(jnp.int32(i))  # 0.05·0.5^i, as optax evaluates it from its int32 step count
            expected = natgrad.natural_gradient_step(BETA, params, g, cav, rate, 2.0)
            params = optax.apply_updates(params, updates)
            np.testing.assert_allclose(params, expected, rtol=1e-12)
        # the last transformation keeps a huge step inside the domain (up to the rounding of p + (Π − p))
        updates, _ = opt.update(jnp.array([1e9, 1e9]), state, params)
        np.testing.assert_allclose(optax.apply_updates(params, updates), expfam.BETA_MIN_SHAPE, rtol=1e-12)
    with pytest.raises(ValueError, match="params"):
        natgrad.fisher_preconditioner(BETA).update(jnp.ones(2), optax.EmptyState())


def test_reinforce_is_vmap_and_jit_consistent():
    lik = likelihoods.noisy_bernoulli(0.1)
    data, eta = jnp.array([6.0, 4.0]), jnp.array([5.0, 3.0])
    keys = jax.random.split(jax.random.key(2), 4)

    def one(k):
        return natgrad.reinforce_gradient(k, BETA, eta, lambda t: lik.loss(data, t), 8, "leave-one-out")

    one_jit = jax.jit(one)
    looped = np.stack([one_jit(k) for k in keys])
    np.testing.assert_allclose(jax.jit(jax.vmap(one))(keys), looped, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=1, baseline="leave-one-out"), "n_samples"),
        (dict(n_samples=4, baseline="median"), "baseline"),
    ],
)
def test_bad_estimator_settings_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        natgrad.reinforce_gradient(jax.random.key(0), BETA, jnp.array([2.0, 2.0]), lambda t: t, **kwargs)


# --------------------------------------------------------------------------- mean-field Gaussian fast path
def _generic_natural(key, family, eta, loss, n, baseline, c):
    return natgrad.fisher_solve(family, eta, natgrad.reinforce_gradient(key, family, eta, loss, n, baseline, c))


# (means, precisions): moderate; a large mean over a small spread (the generic solve's 2m ĝ₁ − ĝ₂ cancels);
# very wide and very narrow coordinates side by side
_MF_CASES = [
    (np.array([0.3, -1.2]), np.array([2.0, 0.5])),
    (np.array([1e3, -5e2, 7.0]), np.array([1e4, 1e6, 1.0])),
    (np.array([0.0, 1e-3, -2.0, 40.0]), np.array([1e-6, 1e8, 3.0, 0.01])),
]
_MF_LOSSES = {
    "logistic": lambda x, y: lambda th: jnp.sum(jax.nn.softplus(-(th @ x.T) * y), -1),
    "offset quadratic": lambda x, y: lambda th: 1e8 + jnp.sum((th - 1.0) ** 2, -1),
    "huge": lambda x, y: lambda th: 1e30 * jnp.tanh(jnp.sum(th, -1)),
}


@pytest.mark.parametrize("case", range(len(_MF_CASES)))
@pytest.mark.parametrize("loss_name", sorted(_MF_LOSSES))
@pytest.mark.parametrize(
    "baseline, c, n",
    [("leave-one-out", 0.0, 2), ("leave-one-out", 0.0, 20), ("constant", 3.5, 1), ("constant", -1e3, 7)],
)
def test_mean_field_fast_natural_gradient_matches_generic(case, loss_name, baseline, c, n):
    """natural_gradient_estimate's closed form vs FIM⁻¹ of reinforce_gradient on the same draws, float64,
    to rounding relative to the generic formula's terms (which cancel where |m| ≫ s)."""
    with enable_x64(True):
        m, p = _MF_CASES[case]
        d = len(m)
        family = expfam.mean_field_normal(d)
        eta = expfam.mean_field_natural(jnp.asarray(m), jnp.asarray(1.0 / p))
        rng = np.random.default_rng(case)
        loss = _MF_LOSSES[loss_name](jnp.asarray(rng.normal(size=(9, d))), jnp.asarray(rng.choice([-1.0, 1.0], 9)))
        for seed in range(3):
            key = jax.random.key(seed)
            fast = np.asarray(natgrad.natural_gradient_estimate(key, family, eta, loss, n, baseline, c))
            grad = np.asarray(natgrad.reinforce_gradient(key, family, eta, loss, n, baseline, c)).reshape(d, 2)
            slow = np.asarray(_generic_natural(key, family, eta, loss, n, baseline, c))
            g1, g2 = np.abs(grad[:, 0]), np.abs(grad[:, 1])
            scale = np.stack(
                [p * g1 + np.abs(m) * p * p * (2 * np.abs(m) * g1 + g2), p * p * (g2 / 2 + np.abs(m) * g1)], -1
            )
            assert np.all(np.abs(fast - slow) <= 1e-12 * scale.reshape(-1) + 1e-300), (fast, slow)
            assert np.all(np.isfinite(fast))


def test_mean_field_fast_path_float32_and_solver():
    """float32 (the experiments' dtype): the same draws (float32 normals) and the generic estimate agree to
    float32 rounding of the generic formula's terms; and a G-FVL solver on the mean-field family matches
    the same solver forced onto the generic path (a renamed copy of the family) in float64."""
    d, n = 5, 20
    m, p = np.linspace(-2.0, 3.0, d), np.geomspace(0.5, 50.0, d)
    x = np.random.default_rng(0).normal(size=(30, d))

    def loss(th):
        return jnp.sum(jax.nn.softplus(-(th @ jnp.asarray(x, th.dtype).T)), -1)

    family = expfam.mean_field_normal(d)
    eta32 = jnp.asarray(np.asarray(expfam.mean_field_natural(jnp.asarray(m), jnp.asarray(1.0 / p))), jnp.float32)
    for seed in range(5):
        key = jax.random.key(seed)
        fast = np.asarray(natgrad.natural_gradient_estimate(key, family, eta32, loss, n, "leave-one-out"))
        slow = np.asarray(_generic_natural(key, family, eta32, loss, n, "leave-one-out", 0.0))
        grad = np.abs(np.asarray(natgrad.reinforce_gradient(key, family, eta32, loss, n, "leave-one-out"), float))
        g1, g2 = grad.reshape(d, 2).T
        scale = np.stack(
            [p * g1 + np.abs(m) * p * p * (2 * np.abs(m) * g1 + g2), p * p * (g2 / 2 + np.abs(m) * g1)], -1
        )
        assert fast.dtype == np.float32
        assert np.all(np.abs(fast - slow) <= 1e-5 * scale.reshape(-1)), (fast, slow)

    with enable_x64(True):
        eta64 = expfam.mean_field_natural(jnp.asarray(m), jnp.asarray(1.0 / p))
        lik = likelihoods.Likelihood(name="t", loss=lambda data, th: loss(th), loss_change=None, pool=None)
        generic = family._replace(name="mean_field_normal (generic)")
        state = gfvl.init(eta64, 3)
        out = {}
        for name, fam in (("fast", family), ("generic", generic)):
            solve = gfvl.natgrad_solver(fam, lik, jnp.zeros((3, 1)), 1.0, 0.05, 4, n, "leave-one-out")
            out[name] = np.asarray(solve(jax.random.key(9), jnp.int32(1), state))
        np.testing.assert_allclose(out["fast"], out["generic"], rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- which families have a reparameterisation gradient
def _gaussian_without_closed_forms(family, name, reparameterisation):
    """A copy of a built-in Gaussian family under another name, without its closed-form draws (so that
    nothing but its ``reparameterisation`` field can say what it is)."""
    return family._replace(name=name, sample_score=None, fisher_solve=None, reparameterisation=reparameterisation)


def test_the_built_in_gaussians_declare_their_reparameterisation_and_the_others_none():
    assert expfam.NORMAL.reparameterisation == "normal"
    assert expfam.mean_field_normal(3).reparameterisation == "mean_field_normal"
    assert expfam.REPARAMETERISATIONS == ("normal", "mean_field_normal")
    for name in expfam.names():
        assert natgrad.reparameterisable(expfam.get(name)) == (name == "normal")


@pytest.mark.parametrize("layout", ["normal", "mean_field_normal"])
def test_a_user_family_with_a_reparameterisation_gets_the_same_gradient_as_the_built_in_one(layout):
    """A registered family takes part through its ``reparameterisation`` field, whatever its name: the
    same draws give the same gradient, bit for bit, and the solver accepts it."""
    built_in = expfam.NORMAL if layout == "normal" else expfam.mean_field_normal(2)
    family = _gaussian_without_closed_forms(built_in, "user-gaussian", layout)
    expfam.register(family)
    try:
        assert natgrad.reparameterisable(expfam.get("user-gaussian"))
        eta = jnp.asarray([0.6, -0.5] * (built_in.dim // 2))

        def loss(theta):
            return jnp.sum((theta - 0.3) ** 2, axis=-1) if layout == "mean_field_normal" else (theta - 0.3) ** 2

        for seed in range(3):
            key = jax.random.key(seed)
            ours = natgrad.reparameterisation_gradient(key, family, eta, loss, 8)
            theirs = natgrad.reparameterisation_gradient(key, built_in, eta, loss, 8)
            np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
        lik = likelihoods.Likelihood(name="t", loss=lambda data, th: loss(th), loss_change=None, pool=None)
        gfvl.natgrad_solver(family, lik, jnp.zeros((3, 1)), 1.0, 0.05, 1, 4, "reparameterisation")
    finally:
        expfam._FAMILIES.unregister("user-gaussian")


def test_a_family_without_a_reparameterisation_is_refused_naming_it():
    family = _gaussian_without_closed_forms(expfam.mean_field_normal(2), "user-plain", None)
    assert not natgrad.reparameterisable(family)
    message = r"family must be a Gaussian family with a reparameterisation .* got 'user-plain'"
    with pytest.raises(ValueError, match=message):
        natgrad.reparameterisation_gradient(jax.random.key(0), family, jnp.asarray([0.6, -0.5] * 2), jnp.sum, 4)
    with pytest.raises(ValueError, match=r"family 'user-odd': reparameterisation must be one of \(None, 'normal'"):
        expfam.register(family._replace(name="user-odd", reparameterisation="cauchy"))
    assert "user-odd" not in expfam.names()
