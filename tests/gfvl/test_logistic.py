"""Bayesian logistic regression with G-FVL: the shipped data, the mean-field Gaussian family, the Gaussian
expectations E[softplus(a)] and E[σ(a)] against mpmath, the float64 centralised optimum (a stationary point of
the exact objective), G-FVL reaching it, and bad input."""

import functools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from scipy.special import expit

from jaxfed import cli, gfvl
from jaxfed.experiment import make_config
from jaxfed.experiments.gfvl import logistic as gfvl_logistic
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, logistic, natgrad
from jaxfed.jaxcompat import enable_x64


def _problem(n_features=3, n_agents=3, seed=0):
    x, y = logistic.load_breast_cancer()
    train, test = logistic.train_test_split(x, y, 0.2, seed, n_features)
    owner = logistic.split_iid(len(train.y), n_agents, seed)
    return train, test, logistic.to_padded(train, owner, n_agents)


def test_shipped_data_set_is_the_breast_cancer_set():
    x, y = logistic.load_breast_cancer()
    assert x.shape == (569, 30) and np.all(np.isfinite(x))
    assert (np.sum(y == 0), np.sum(y == 1)) == (212, 357)
    train, test = logistic.train_test_split(x, y, 0.2, 0, 5)
    assert train.x.shape == (455, 6) and test.x.shape == (114, 6) and np.all(train.x[:, -1] == 1.0)
    np.testing.assert_allclose(train.x[:, :-1].mean(0), 0.0, atol=1e-12)


def test_mean_field_family_closed_forms_match_the_dense_definitions():
    family = expfam.mean_field_normal(4)
    with enable_x64(True):
        eta = expfam.mean_field_natural(jnp.array([0.5, -1.0, 2.0, 30.0]), jnp.array([0.1, 2.0, 1e-4, 3.0]))
        v = jnp.linspace(-2.0, 3.0, 8)
        np.testing.assert_allclose(
            natgrad.fisher_solve(family, eta, v), jnp.linalg.solve(family.fisher(eta), v), rtol=1e-9
        )
        eta2 = eta * 1.001
        assert float(expfam.kl(family, eta, eta2)) == pytest.approx(
            float(expfam.kl_direct(family, eta, eta2)), rel=1e-6
        )
        theta, score = natgrad.sample_score(jax.random.key(0), family, eta, 4)
        np.testing.assert_allclose(score, family.sufficient_stats(theta) - family.mean(eta), rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_expected_loss_by_quadrature_matches_monte_carlo():
    train, _, data = _problem()
    pooled = logistic.likelihood().pool(data)
    with enable_x64(True):
        pooled = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), pooled)
        m, v = jnp.array([-0.5, 1.0, 0.3, 0.2]), jnp.array([0.04, 0.1, 0.02, 0.05])
        exact = float(logistic.expected_loss(pooled, m, v))
        theta = m + jnp.sqrt(v) * jax.random.normal(jax.random.key(1), (20_000, 4), jnp.float64)
        losses = np.asarray(logistic.likelihood().loss(pooled, theta))
    assert abs(losses.mean() - exact) < 4 * losses.std() / np.sqrt(len(losses))


def test_centralised_optimum_is_a_converged_fixed_point():
    _, _, data = _problem()
    with enable_x64(True):
        pooled = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), logistic.likelihood().pool(data))
        prior = expfam.mean_field_natural(jnp.zeros(4), jnp.ones(4))
        eta, change = logistic.centralised_optimum(pooled, prior, 1.0)
        assert float(change) < 1e-12
        # stationarity of E_q[L] + α KL(q ‖ p0): η = η0 − ∇_μ E_q[L] / α
        m, v = expfam.mean_field_moments(eta)
        g_m, g_v = jax.grad(logistic.expected_loss, argnums=(1, 2))(pooled, m, v)
        grad_mu = jnp.stack([g_m - 2 * m * g_v, g_v], -1).reshape(-1)
        np.testing.assert_allclose(eta, prior - grad_mu, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_gfvl_reaches_the_centralised_optimum():
    """REINFORCE natural-gradient G-FVL on 3 agents (~150 points each): the KL to q* falls more than
    tenfold in 150 slots (measured: 28 → 1.3 at ρ = 0.02; at ρ = 0.05 this case diverges)."""
    _, test, data = _problem()
    with enable_x64(True):
        pooled = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), logistic.likelihood().pool(data))
        prior64 = expfam.mean_field_natural(jnp.zeros(4), jnp.ones(4))
        target = np.asarray(logistic.centralised_optimum(pooled, prior64, 1.0)[0])
    family = expfam.mean_field_normal(4)
    solve = gfvl.natgrad_solver(family, logistic.likelihood(), data, 1.0, 0.02, 5, 20, "leave-one-out")
    schedule = gossip.mh_schedule(jax.random.key(0), jnp.asarray(graphs.complete(3)), 150)
    _, etas = jax.jit(lambda k: gfvl.learn(k, gfvl.init(jnp.asarray(np.asarray(prior64), float), 3), schedule, solve))(
        jax.random.key(1)
    )
    kl = np.asarray(expfam.kl(family, etas, jnp.asarray(target, float)))
    assert np.all(np.isfinite(kl)) and np.median(kl[-20:]) < kl[0] / 10, (kl[0], np.median(kl[-20:]))
    log_lik, accuracy = logistic.predictive_metrics(etas[-1], test)
    assert float(accuracy) > 0.85 and float(log_lik) > -0.4


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: logistic.check_data(np.array([[1.0, np.nan]]), np.array([1.0])),
            r"x must be finite, got \[1.0, nan\] at index 0",
        ),
        (
            lambda: logistic.check_data(np.ones((2, 2)), np.array([0.0, 2.0])),
            r"y must be labels in \{0, 1\}, got \[2.0\]",
        ),
        (
            lambda: logistic.to_padded(logistic.Dataset(np.ones((3, 2)), np.ones(3)), np.zeros(2, int), 2),
            r"owner must have shape \(3,\) \(one entry per point\), got \(2,\)",
        ),
        (lambda: expfam.mean_field_normal(0), "n_dims must be an integer >= 1, got 0"),
    ],
)
def test_bad_input_names_the_parameter(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "setting, message",
    [
        ("splits=iid,dirichlet", "splits must be names from ('iid', 'label-skew'), got 'dirichlet'"),
        ("forget_agent=10", "forget_agent must be an agent index in [0, 10), got 10"),
        ("n_features=31", "n_features must be an integer in [1, 30], got 31"),
        ("loss_normalisation=median", "loss_normalisation must be one of ('sum', 'mean'), got 'median'"),
    ],
)
def test_experiment_refuses_bad_parameters_in_one_line(setting, message, capsys, tmp_path):
    with pytest.raises(ValueError):
        make_config(gfvl_logistic.Config, dict([setting.split("=")]))
    assert cli.main(["run", "gfvl-logistic", "--set", setting, "--out", str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr().err == f"jaxfed: error: {message}\n"


@pytest.mark.slow
def test_small_experiment_runs_with_verdicts():
    from jaxfed.runs import run_experiment

    cfg = make_config(
        gfvl_logistic.Config, {"n_slots": "30", "learn_slots": "30", "n_features": "3", "topologies": "complete"}
    )
    config_json, results = run_experiment(gfvl_logistic.EXPERIMENT, cfg, n_trials=4, quiet=True)
    assert np.asarray(results["kl"]).shape == (4, 4, 30)
    text = gfvl_logistic.EXPERIMENT.report(cfg, config_json["points"], results).text
    assert "unlearning within 1.5× the retrained asymptote" in text and "**Reading.**" in text


@pytest.mark.parametrize(
    "estimator", [pytest.param("leave-one-out", marks=pytest.mark.slow), "control-variate", "reparameterisation"]
)
def test_gradient_estimators_are_unbiased(estimator):
    """Mean of 4,000 estimates of ∇_η E_q[L] within 5 standard errors of the exact gradient
    FIM(η) ∇_μ E_q[L] (Gauss–Hermite expectations, float64), at a q away from the optimum."""
    _, _, data = _problem()
    with enable_x64(True):
        agent = jax.tree.map(lambda a: jnp.asarray(np.asarray(a[0]), jnp.float64), data)
        family = expfam.mean_field_normal(4)
        m, v = jnp.array([-0.5, 1.0, 0.3, 0.2]), jnp.array([0.04, 0.1, 0.02, 0.05])
        eta = expfam.mean_field_natural(m, v)
        pooled = logistic.likelihood().pool(jax.tree.map(lambda a: a[None], agent))
        g_m, g_v = jax.grad(logistic.expected_loss, argnums=(1, 2))(pooled, m, v)
        exact = family.fisher(eta) @ jnp.stack([g_m - 2 * m * g_v, g_v], -1).reshape(-1)

        def one(key):
            return natgrad.estimate_gradient(
                key, family, eta, lambda t: logistic.likelihood().loss(agent, t), 10, estimator
            )

        est = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(3), 4000)))
    se = est.std(0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(0) - np.asarray(exact)) < 5 * se + 1e-9), (est.mean(0), exact, se)


def test_reparameterisation_is_refused_for_families_without_it():
    with pytest.raises(
        ValueError,
        match=r"family must be a Gaussian family with a reparameterisation \(ExpFamily.reparameterisation one of "
        r"\('normal', 'mean_field_normal'\)\) for baseline='reparameterisation', got 'beta'",
    ):
        gfvl.natgrad_solver(expfam.BETA, logistic.likelihood(), None, 1.0, 0.1, 1, 4, "reparameterisation")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_softplus_matches_jax_nn_softplus(dtype):
    """The loss's softplus (no NaN branch) vs jax.nn.softplus: values and gradients on ±0, subnormals,
    the float range's ends, ±inf and NaN."""
    with enable_x64(dtype == jnp.float64):
        info = np.finfo(dtype)
        a = np.concatenate(
            [
                [
                    0.0,
                    -0.0,
                    info.tiny,
                    -info.tiny,
                    info.smallest_subnormal,
                    info.max,
                    -info.max,
                    np.inf,
                    -np.inf,
                    np.nan,
                ],
                np.geomspace(1e-30, 1e30, 121),
                -np.geomspace(1e-30, 1e30, 121),
                np.linspace(-50, 50, 1001),
            ]
        ).astype(dtype)
        x = jnp.asarray(a)
        got, want = np.asarray(logistic._softplus(x)), np.asarray(jax.nn.softplus(x))
        np.testing.assert_allclose(got, want, rtol=4 * info.eps, atol=0)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(a)
        g = np.asarray(jax.vmap(jax.grad(logistic._softplus))(x[finite]))
        np.testing.assert_allclose(g, np.asarray(jax.nn.sigmoid(x[finite])), rtol=4 * info.eps, atol=4 * info.tiny)


# slow (20 s): centralised optima run to convergence (4,000 float64 iterations) for each split
@pytest.mark.slow
def test_mean_loss_weights_points_by_one_over_n_k_and_tempers_the_target():
    """loss_normalisation="mean": every real point of agent k weighs 1/N_k (padding 0), for both splits and
    for the data without u; q* is the optimum of that loss (a fixed point of its own iteration, wider
    than the sum's); the report says which target."""
    overrides = {"n_features": "3", "n_agents": "4", "forget_agent": "3", "topologies": "complete", "splits": "iid"}
    sums = gfvl_logistic.prepare(make_config(gfvl_logistic.Config, overrides))
    cfg = make_config(gfvl_logistic.Config, {**overrides, "loss_normalisation": "mean"})
    means = gfvl_logistic.prepare(cfg)
    for split in ("iid", "label-skew", "rest"):
        w_sum, w_mean = np.asarray(sums["data"][split].weight), np.asarray(means["data"][split].weight)
        counts = w_sum.sum(1)
        expected = w_sum / np.where(counts > 0, counts, 1.0)[:, None]
        np.testing.assert_allclose(w_mean, expected, rtol=1e-12)
        np.testing.assert_allclose(w_mean.sum(1), (counts > 0).astype(float), rtol=1e-12)
        assert means["converged"][split] < 1e-6
        v_sum = np.asarray(expfam.mean_field_moments(jnp.asarray(sums["target"][split]))[1])
        v_mean = np.asarray(expfam.mean_field_moments(jnp.asarray(means["target"][split]))[1])
        assert np.all(v_mean > v_sum)  # far less data weight: close to the prior's variance 1
    with enable_x64(True):
        lik = logistic.likelihood()
        pooled = lik.pool(jax.tree.map(jnp.asarray, means["data"]["iid"]))
        eta, change = logistic.centralised_optimum(pooled, jnp.asarray(means["prior"]), cfg.alpha, n_iters=4000)
        np.testing.assert_allclose(np.asarray(eta), means["target"]["iid"], rtol=1e-9, atol=1e-12)
    trial = gfvl_logistic.make_trial(
        make_config(gfvl_logistic.Config, {**overrides, "loss_normalisation": "mean", "n_slots": "8"}), means
    )
    out = trial(jax.random.key(0), {"mode": "learn", "adjacency": jnp.asarray(graphs.complete(4)), "split": "iid"})
    assert np.all(np.isfinite(np.asarray(out["kl"])))


@pytest.mark.parametrize(
    "normalisation, phrase", [("sum", "sum loss (L_k = Σ_n"), ("mean", "mean loss (L_k = (1/N_k)")]
)
def test_report_names_the_loss(normalisation, phrase):
    cfg = make_config(
        gfvl_logistic.Config,
        {"n_slots": "8", "topologies": "complete", "splits": "iid", "loss_normalisation": normalisation},
    )
    labels, _ = gfvl_logistic._points(cfg)
    rng = np.random.default_rng(0)
    results = {m: rng.uniform(0.1, 1.0, (len(labels), 6, 8)) for m in ("kl", "log_lik", "accuracy", "grad_var")}
    results["hit"] = rng.integers(0, 8, (len(labels), 6))
    results["target_shift"] = np.full((len(labels), 6), 0.5)
    text = gfvl_logistic.report(cfg, labels, results).text
    assert phrase in text and "**Reading.**" in text


# --------------------------------------------------------------------------- Gaussian expectations vs mpmath
def _mp_cvz(terms):
    """Σ_j (−1)^j a_j by Cohen–Rodriguez Villegas–Zagier acceleration in mpmath (60 terms: 1e-46 relative)."""
    n = len(terms)
    d = (3 + mp.sqrt(8)) ** n
    d = (d + 1 / d) / 2
    b, c, total = mp.mpf(-1), -d, mp.mpf(0)
    for j in range(n):
        c = b - c
        total += c * terms[j]
        b = (j + n) * (j - n) * b / ((j + mp.mpf(1) / 2) * (j + 1))
    return total / d


def _mp_tail(mu, s, k, side):
    """E[e^(−ka); a > 0] (side 1) or E[e^(ka); a < 0] (side −1) for a ~ N(μ, s²), at 30 digits."""
    m = side * mu
    return mp.exp(-k * m + k * k * s * s / 2) * mp.ncdf(m / s - k * s)


@functools.cache
def _mp_reference(mu: float, s: float) -> tuple[float, float, float]:
    """(E[softplus(a)], E[σ(a)], E[σ′(a)]) at 30 digits: the closed form of E[max(a, 0)] plus the series of
    log1p(e^(−|a|)) and σ(±|a|) summed to 60 terms (checked against mp.quad below); E[σ′(a)] = ∂E[σ(a)]/∂μ
    by mp.diff at −|μ| (σ′ is even, and there E[σ] is not within 1e-30 of 1)."""
    mp.mp.dps = 30
    m, sd = mp.mpf(mu), mp.mpf(s)

    def tails(m_, side):
        return [_mp_tail(m_, sd, j + 1, side) for j in range(60)]

    def sigmoid(m_):
        return mp.ncdf(m_ / sd) - _mp_cvz(tails(m_, 1)) + _mp_cvz(tails(m_, -1))

    log1p_part = sum(_mp_cvz([t / (j + 1) for j, t in enumerate(tails(m, side))]) for side in (1, -1))
    softplus = m * mp.ncdf(m / sd) + sd * mp.npdf(m / sd) + log1p_part
    return float(softplus), float(sigmoid(m)), float(mp.diff(sigmoid, -abs(m)))


def test_mpmath_reference_matches_quadrature():
    """The series reference against mp.quad of softplus(a) and σ(a) times the density (pieces of width
    min(s, 1) over μ ± 10s), at points with narrow and wide densities."""
    mp.mp.dps = 30
    for mu, s in [(0.5, 2.0), (-3.0, 1.0), (4.0, 0.25), (-1.0, 5.0)]:
        m, sd = mp.mpf(mu), mp.mpf(s)
        step = min(sd, 1)
        cuts = [m - 10 * sd + j * step for j in range(int(20 * sd / step) + 1)]

        def mean(f):
            return mp.quad(lambda a: f(a) * mp.npdf((a - m) / sd) / sd, cuts)

        softplus, sigmoid, _ = _mp_reference(mu, s)
        assert float(mean(lambda a: mp.log1p(mp.exp(a)))) == pytest.approx(softplus, rel=1e-14)
        assert float(mean(lambda a: 1 / (1 + mp.exp(-a)))) == pytest.approx(sigmoid, rel=1e-14)


# Values exact in float32 (the references hold for both dtypes); the grid spans the experiments' reach
# (|μ| <= 337, 0.15 <= s <= 20) with margin, the default run a coarse subset.
_MUS = (0.0, 0.125, 0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0, 200.0, 400.0)
_SS = (
    1 / 64,
    1 / 16,
    1 / 8,
    1 / 4,
    3 / 8,
    1 / 2,
    3 / 4,
    1,
    1.25,
    1.5,
    2,
    2.5,
    3,
    4,
    5,
    6.5,
    8,
    10,
    12,
    15,
    20,
    25,
    30,
    40,
    50,
)
_FULL_GRID = [(sign * mu, s) for mu in _MUS for sign in ((1,) if mu == 0 else (1, -1)) for s in _SS]
_COARSE_GRID = [(mu, s) for mu in (-100.0, -20.0, -3.0, -0.5, 0.0, 0.5, 3.0, 20.0) for s in (1 / 16, 0.5, 2, 8, 30)]
# Relative error bounds stated in jaxfed.gfvl.logistic (E[softplus], E[σ(±a)]; E[σ′], i.e. the s-derivative), and the
# smallest reference values they cover (below, float32 results are subnormal or 0).
_BOUNDS = {"float32": (5e-6, 1e-5, 1e-30), "float64": (3e-14, 1e-13, 1e-280)}


def _check_gaussian_means(grid, dtype):
    mu_np, s_np = (np.array(v) for v in zip(*grid))
    ref = np.array([_mp_reference(mu, s) for mu, s in grid])
    ref_minus = np.array([_mp_reference(-mu, s)[1] for mu, s in grid])  # E[σ(−a)] = E[σ(a′)], a′ ~ N(−μ, s²)
    bound, derivative_bound, floor = _BOUNDS[jnp.dtype(dtype).name]
    with enable_x64(dtype == jnp.float64):
        mu, s = jnp.asarray(mu_np, dtype), jnp.asarray(s_np, dtype)
        softplus = jax.jit(logistic.normal_softplus_mean)(mu, s)
        right, wrong = jax.jit(logistic.normal_sigmoid_means)(mu, s)
        d_mu, d_s = jax.jit(jax.vmap(jax.grad(logistic.normal_softplus_mean, argnums=(0, 1))))(mu, s)
    assert softplus.dtype == right.dtype == d_s.dtype == dtype
    for name, got, want, rtol in [
        ("E softplus", softplus, ref[:, 0], bound),
        ("E sigma(a)", right, ref[:, 1], bound),
        ("E sigma(-a)", wrong, ref_minus, bound),
        ("d/dmu", d_mu, ref[:, 1], bound),
        ("d/ds", d_s, s_np * ref[:, 2], derivative_bound),
    ]:
        got = np.asarray(got, np.float64)
        covered = np.abs(want) > floor
        error = np.abs(got[covered] - want[covered]) / np.abs(want[covered])
        worst = int(np.argmax(error))
        where = np.flatnonzero(covered)[worst]
        assert error[worst] < rtol, (name, error[worst], (mu_np[where], s_np[where]))
        assert np.all(np.isfinite(got)) and np.all(got >= 0), name


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gaussian_means_match_mpmath_on_a_coarse_grid(dtype):
    """E[softplus(a)], E[σ(±a)] and the derivatives ∂/∂μ = E[σ(a)], ∂/∂s = s E[σ′(a)] (jit, vmap) within the
    bounds stated in jaxfed.gfvl.logistic on 40 points from the full grid."""
    _check_gaussian_means(_COARSE_GRID, dtype)


# long (82 s for float32 in the CI's slow suite, beyond its 90 minutes): 775 points
@pytest.mark.long
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gaussian_means_match_mpmath_on_the_full_grid(dtype):
    """The bounds on |μ| <= 400, 1/64 <= s <= 50 (measured worst: 2.0e-6 / 1.1e-14 for E softplus, 2.5e-6 /
    1.3e-14 for E σ(±a), 2.4e-6 / 3.3e-14 for the s-derivative, float32 / float64)."""
    _check_gaussian_means(_FULL_GRID, dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gaussian_means_limits_are_finite(dtype):
    """s → 0 gives softplus(μ) and σ(μ); extreme arguments give finite values, no NaN (also in the gradient)."""
    with enable_x64(dtype == jnp.float64):
        mu = jnp.asarray([-3.0, 0.0, 2.0, -1e3, 1e3, 0.0, 30.0], dtype)
        s = jnp.asarray([1e-20, 1e-20, 1e-20, 1.0, 1.0, 1e4, 1e-3], dtype)

        @jax.jit
        def means(mu, s):
            grads = jax.vmap(jax.grad(logistic.normal_softplus_mean, argnums=(0, 1)))(mu, s)
            return logistic.normal_softplus_mean(mu, s), *logistic.normal_sigmoid_means(mu, s), *grads

        value, right, wrong, *grads = means(mu, s)
        for v in (value, right, wrong, *grads):
            assert np.all(np.isfinite(np.asarray(v)))
        np.testing.assert_allclose(value[:3], jax.nn.softplus(mu[:3]), rtol=4 * jnp.finfo(dtype).eps)
        np.testing.assert_allclose(right[:3], jax.nn.sigmoid(mu[:3]), rtol=4 * jnp.finfo(dtype).eps)
        np.testing.assert_allclose(value[4], 1e3, rtol=4 * jnp.finfo(dtype).eps)
        assert float(value[3]) >= 0 and float(right[3]) >= 0  # e^(−1000 + ½) underflows to 0 (or a subnormal)


@pytest.mark.parametrize("dtype, ulps", [(jnp.float32, 16), (jnp.float64, 64)])
def test_mills_complement_matches_mpmath(dtype, ulps):
    """ψ(y) = 1 − y Φ(−y)/φ(y) (the factor of E[max(a, 0)] below μ = 0) within the ulps stated in
    jaxfed.gfvl.logistic on both sides of the switch to the continued fraction (measured 10 / 34)."""
    mp.mp.dps = 40
    with enable_x64(dtype == jnp.float64):
        y = jnp.asarray(np.concatenate([np.linspace(0, 10, 401), np.geomspace(10, 1e4, 30)]), dtype)
        got = np.asarray(jax.jit(logistic._mills_complement)(y), np.float64)
    y = np.asarray(y, np.float64)  # the values the dtype holds
    want = np.array([float(1 - mp.mpf(v) * mp.ncdf(-mp.mpf(v)) / mp.npdf(mp.mpf(v))) for v in y])
    np.testing.assert_allclose(got, want, rtol=ulps * float(jnp.finfo(dtype).eps))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_erfcx_asymptotic_series_matches_mpmath(dtype):
    """The asymptotic erfcx used past 9 (float32) / 26 (float64) within 2 ulps of mpmath (the first omitted
    term is 5e-13 and 2e-21 relative there)."""
    start = logistic._ERFCX_ASYMPTOTIC_FROM[jnp.dtype(dtype).itemsize]
    with enable_x64(dtype == jnp.float64):
        x = jnp.asarray(np.geomspace(start * (1 + 1e-6), 1e6, 60), dtype)
        got = np.asarray(jax.jit(logistic._erfcx_large)(x), np.float64)
    with mp.workdps(30):
        want = np.array([float(mp.erfc(mp.mpf(v)) * mp.exp(mp.mpf(v) ** 2)) for v in np.asarray(x, np.float64)])
    np.testing.assert_allclose(got, want, rtol=2 * float(jnp.finfo(dtype).eps))


def _trapezoid_gradient(pooled, eta):
    """∇_μ E_q[L] for the pooled data by the trapezoidal rule in t (a = μ + st) on 19,001 nodes of step 0.004
    over [−38, 38], in float64: geometrically convergent for these integrands (analytic in a strip of half-width
    π/s, s <= 8 here), independent of normal_softplus_mean, and within 3e-16 of mpmath at s <= 7."""
    precision = -2.0 * eta[1::2]
    m, v = eta[0::2] / precision, 1.0 / precision
    x, y, w = np.asarray(pooled.z[:, :-1]), np.asarray(pooled.z[:, -1]), np.asarray(pooled.weight)
    x, y, w = x[w > 0], y[w > 0], w[w > 0]
    sign = 2.0 * y - 1.0
    beta, s = -sign * (x @ m), np.sqrt((x * x) @ v)  # the loss's argument b = −(2y − 1)xᵀθ ~ N(β, s²)
    h = 0.004
    t = h * np.arange(-9500, 9501)  # integer steps: np.arange(-38, 38, h) drifts by 2e-11
    weight = h * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    sig = expit(beta[:, None] + s[:, None] * t)
    e_sig, e_dsig = sig @ weight, (sig * (1.0 - sig)) @ weight
    g_m = -(w * e_sig * sign) @ x  # ∂/∂m E[softplus(b)] = E[σ(b)] ∂β/∂m
    g_v = 0.5 * (w * e_dsig) @ (x * x)  # ∂/∂v_j = ½ E[σ′(b)] x_j²
    return np.stack([g_m - 2.0 * m * g_v, g_v], axis=-1).reshape(-1)


def test_trapezoid_reference_matches_mpmath():
    h = 0.004
    t = h * np.arange(-9500, 9501)
    weight = h * np.exp(-0.5 * t * t) / np.sqrt(2.0 * np.pi)
    for mu, s in [(-2.0, 3.0), (1.0, 0.5), (0.25, 7.0)]:
        assert float(expit(mu + s * t) @ weight) == pytest.approx(_mp_reference(mu, s)[1], rel=5e-16)


@pytest.mark.parametrize("normalisation", ["mean", "sum"])
def test_centralised_optimum_is_stationary_for_the_exact_objective(normalisation):
    """q* of the default configuration (10 features, K = 10, i.i.d. split, α = 1) satisfies η* = η₀ − ∇_μ E_q[L]/α
    with ∇_μ from an independent quadrature to float64 precision (measured 1.0e-15 / 1.6e-15 of max |η*| for the
    mean / sum loss; with 32-node Gauss–Hermite expectations it was 7e-4 / 1.6e-8, the mean loss's q* then off
    by up to 1.8e-3 relative in a mean)."""
    x, y = logistic.load_breast_cancer()
    train, _ = logistic.train_test_split(x, y, 0.2, 0, 10)
    owner = logistic.split_iid(len(train.y), 10, 0)
    data = logistic.to_padded(train, owner, 10)
    with enable_x64(True):
        data = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), data)
        if normalisation == "mean":
            weight = likelihoods.loss_weight("mean", np.bincount(owner, minlength=10))
            data = data._replace(weight=data.weight * jnp.asarray(weight)[:, None])
        pooled = logistic.likelihood().pool(data)
        prior = expfam.mean_field_natural(jnp.zeros(11), jnp.ones(11))
        eta, change = jax.jit(logistic.centralised_optimum, static_argnums=(2,))(pooled, prior, 1.0)
        eta = np.asarray(eta)
    assert float(change) < 1e-13
    residual = eta - (np.asarray(prior) - _trapezoid_gradient(pooled, eta))
    assert np.max(np.abs(residual)) < 1e-13 * np.max(np.abs(eta)), np.max(np.abs(residual)) / np.max(np.abs(eta))
