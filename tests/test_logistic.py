"""Bayesian logistic regression with G-FVL: the shipped data, the mean-field Gaussian family, the
float64 centralised optimum, G-FVL reaching it, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import cli, expfam, gfvl, gossip, graphs, logistic, natgrad
from jaxfed.experiments import gfvl_logistic, make_config


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
    with jax.enable_x64(True):
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
    with jax.enable_x64(True):
        pooled = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), pooled)
        m, v = jnp.array([-0.5, 1.0, 0.3, 0.2]), jnp.array([0.04, 0.1, 0.02, 0.05])
        exact = float(logistic.expected_loss(pooled, m, v))
        theta = m + jnp.sqrt(v) * jax.random.normal(jax.random.key(1), (20_000, 4), jnp.float64)
        losses = np.asarray(logistic.likelihood().loss(pooled, theta))
    assert abs(losses.mean() - exact) < 4 * losses.std() / np.sqrt(len(losses))


def test_centralised_optimum_is_a_converged_fixed_point():
    _, _, data = _problem()
    with jax.enable_x64(True):
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
    with jax.enable_x64(True):
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
    from jaxfed.experiments import run_experiment

    cfg = make_config(
        gfvl_logistic.Config, {"n_slots": "30", "learn_slots": "30", "n_features": "3", "topologies": "complete"}
    )
    config_json, results = run_experiment(gfvl_logistic.EXPERIMENT, cfg, n_trials=4, quiet=True)
    assert np.asarray(results["kl"]).shape == (4, 4, 30)
    text = gfvl_logistic.EXPERIMENT.report(cfg, config_json["points"], results)
    assert "unlearning within 1.5× the retrained asymptote" in text and "**Reading.**" in text


@pytest.mark.parametrize(
    "estimator", [pytest.param("leave-one-out", marks=pytest.mark.slow), "control-variate", "reparameterisation"]
)
def test_gradient_estimators_are_unbiased(estimator):
    """Mean of 4,000 estimates of ∇_η E_q[L] within 5 standard errors of the exact gradient
    FIM(η) ∇_μ E_q[L] (Gauss–Hermite expectations, float64), at a q away from the optimum."""
    _, _, data = _problem()
    with jax.enable_x64(True):
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
        match=r"family must be one of \('normal', 'mean_field_normal'\) for baseline='reparameterisation', got 'beta'",
    ):
        gfvl.natgrad_solver(expfam.BETA, logistic.likelihood(), None, 1.0, 0.1, 1, 4, "reparameterisation")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_softplus_matches_jax_nn_softplus(dtype):
    """The loss's softplus (no NaN branch) vs jax.nn.softplus: values and gradients on ±0, subnormals,
    the float range's ends, ±inf and NaN."""
    with jax.enable_x64(dtype == jnp.float64):
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
    with jax.enable_x64(True):
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
    text = gfvl_logistic.report(cfg, labels, results)
    assert phrase in text and "**Reading.**" in text
