"""The gfvl-heterogeneity experiment: every conjugate family on heterogeneous agents (N_k = 0
included), its report's verdicts, and one-line refusals of bad parameters."""

import numpy as np
import pytest

from jaxfed import cli
from jaxfed.experiments import gfvl_heterogeneity, make_config, run_experiment

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
    text = EXP.report(cfg, config_json["points"], results)
    assert "KL at slot 10 larger at τ=2 than at τ=0" in text and "**" in text


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"family": "poisson"}, "family must be one of ('beta', 'normal', 'gamma', 'dirichlet'), got 'poisson'"),
        ({"sizes": "1,2,3"}, "sizes must be a list of n_agents = 10 counts, got (1, 2, 3)"),
        ({"n_agents": "3", "sizes": "0,0,0"}, "sizes must be counts with at least one point in all, got (0, 0, 0)"),
        ({"spreads": "-1"}, "spreads must be a non-empty list of values >= 0, got (-1.0,)"),
    ],
)
def test_bad_parameters_give_one_line_errors(overrides, message, capsys, tmp_path):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        make_config(EXP.config_cls, overrides)
    args = ["run", "gfvl-heterogeneity", "--out", str(tmp_path), "--quiet"]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    assert cli.main(args) == 2
    assert capsys.readouterr().err == f"jaxfed: error: {message}\n"
