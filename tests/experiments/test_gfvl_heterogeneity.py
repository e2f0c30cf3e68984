"""The gfvl-heterogeneity experiment: every conjugate family on heterogeneous agents (N_k = 0
included), its report's verdicts, and one-line refusals of bad parameters."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import cli, gfvl, scenarios
from jaxfed.experiment import make_config
from jaxfed.experiments.gfvl import heterogeneity as gfvl_heterogeneity
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, models
from jaxfed.runs import run_experiment

EXP = gfvl_heterogeneity.EXPERIMENT


# gamma and dirichlet (the default family, also run by the slow reproduce test in test_cli) are slow tests.
@pytest.mark.parametrize(
    "family", ["normal", *(pytest.param(f, marks=pytest.mark.slow) for f in ("gamma", "dirichlet"))]
)
def test_every_family_runs_heterogeneous_and_is_exact_at_cover_time(family):
    sizes = "30,0,10,50,0,5"
    cfg = make_config(
        EXP.config_cls,
        {
            "family": family,
            "n_agents": "6",
            "sizes": sizes,
            "n_slots": "40",
            "topologies": "complete",
            "spreads": "0,2",
            "noise_spread": "0.5",
        },
    )
    config_json, results = run_experiment(EXP, cfg, n_trials=8, quiet=True)
    kl = np.asarray(results["kl"])
    assert kl.shape == (2, 8, 40) and np.all(np.isfinite(kl)) and np.all(kl >= 0)
    # once exact, exact for ever; the slot of KL = 0 depends on the walk only (same walk at every τ)
    exact = kl == 0
    assert np.all(exact[..., 1:] >= exact[..., :-1])
    np.testing.assert_array_equal(exact[0], exact[1])
    text = EXP.report(cfg, config_json["points"], results).text
    assert "KL at slot 10 larger at τ=2 than at τ=0" in text and "**" in text


@pytest.mark.parametrize(
    "overrides, message",
    [
        # (the registered models: the built-ins, and any a test file registered)
        ({"family": "poisson"}, "unknown conjugate model 'poisson'; choose one of: beta, normal, gamma, dirichlet{}"),
        ({"sizes": "1,2,3"}, "sizes must be a list of n_agents = 10 counts, got (1, 2, 3)"),
        ({"n_agents": "3", "sizes": "0,0,0"}, "sizes must be counts with at least one point in all, got (0, 0, 0)"),
        ({"spreads": "-1"}, "spreads must be a non-empty list of values >= 0, got (-1.0,)"),
        ({"loss_normalisation": "avg"}, "loss_normalisation must be one of ('sum', 'mean'), got 'avg'"),
    ],
)
def test_bad_parameters_give_one_line_errors(overrides, message, capsys, tmp_path):
    pattern = message.replace("(", r"\(").replace(")", r"\)").replace("{}", "(, [^,]+)*")
    with pytest.raises(ValueError, match="^" + pattern + "$"):
        make_config(EXP.config_cls, overrides)
    args = ["run", "gfvl-heterogeneity", "--out", str(tmp_path), "--quiet"]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    assert cli.main(args) == 2
    assert re.fullmatch(f"jaxfed: error: {pattern}\n", capsys.readouterr().err)


@pytest.mark.parametrize("normalisation", ["sum", "mean"])
@pytest.mark.parametrize("family", ["beta", "normal"])
def test_loss_normalisation_weights_each_agents_statistics(family, normalisation):
    """The trial's KL equals the conjugate trajectory computed by hand from the same draws with agent k's
    statistics × w_k (1 for "sum", 1/N_k for "mean", 0 for an agent without points): the KL is to the
    posterior tempered by 1/N_k under "mean"."""
    sizes = (30, 0, 10, 50, 0, 5)
    cfg = make_config(
        EXP.config_cls,
        {
            "family": family,
            "n_agents": "6",
            "sizes": ",".join(map(str, sizes)),
            "n_slots": "30",
            "alpha": "0.7",
            "loss_normalisation": normalisation,
        },
    )
    point = {"adjacency": jnp.asarray(graphs.complete(6)), "spread": jnp.asarray(0.5)}
    key = jax.random.key(4)
    got = np.asarray(gfvl_heterogeneity.make_trial(cfg)(key, point)["kl"])

    key_theta, key_noise, key_data, key_walk = jax.random.split(key, 4)
    thetas = scenarios.agent_thetas(key_theta, family, models.get(family).theta, 6, point["spread"])
    variance = cfg.variance * jnp.exp(cfg.noise_spread * jax.random.normal(key_noise, (6,)))
    stats_k = scenarios.conjugate_stats(key_data, family, thetas, jnp.asarray(sizes, thetas.dtype), variance)
    weight = np.array([1.0 if normalisation == "sum" else (1.0 / n if n else 0.0) for n in sizes])
    walk = gossip.mh_walk(key_walk, point["adjacency"], cfg.n_slots)
    want = gfvl.conjugate_kl_trajectory(
        expfam.get(family),
        models.get(family).prior(),
        stats_k * jnp.asarray(weight, stats_k.dtype)[:, None],
        cfg.alpha,
        walk.schedule,
        walk.n_visited,
    )
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=0)
    assert np.all(got[-1:] == 0)  # exact once every agent with data has been visited
    np.testing.assert_allclose(
        np.asarray(likelihoods.loss_weight(normalisation, np.asarray(sizes, float))), weight, rtol=1e-7
    )


@pytest.mark.slow  # ~10 s of the default suite's 7 minutes
def test_report_names_the_target_of_the_mean_loss():
    cfg = make_config(EXP.config_cls, {"family": "beta", "n_slots": "12", "loss_normalisation": "mean"})
    config_json, results = run_experiment(EXP, cfg, n_trials=4, quiet=True)
    text = EXP.report(cfg, config_json["points"], results).text
    assert "mean loss: KL is measured against the generalized posterior" in text and "tempered by 1/N_k" in text
    assert "Median KL(q^(i) ‖ q*)" in text
    cfg = make_config(EXP.config_cls, {"family": "beta", "n_slots": "12"})
    config_json, results = run_experiment(EXP, cfg, n_trials=4, quiet=True)
    assert (
        "sum loss: KL is measured against the Bayesian posterior p(θ|D)"
        in EXP.report(cfg, config_json["points"], results).text
    )
