"""The Fig. 4 and Fig. 5 experiments: shapes, readings, validation, and (slow) 1,000-trial runs."""

from dataclasses import asdict

import numpy as np
import pytest

from jaxfed import cli, stats
from jaxfed.experiments import gfvl_local_iters, gfvl_topologies, gfvl_unlearning, make_config, run_experiment


def _run(exp, overrides, n_trials):
    cfg = make_config(exp.config_cls, overrides)
    config_json, results = run_experiment(exp, cfg, n_trials=n_trials, quiet=True)
    return cfg, config_json, results


@pytest.mark.slow  # a full-size experiment (~20 s)
def test_nonconjugate_unlearning_reaches_the_asymptote_before_retraining():
    """64 trials (150 learning slots, 150 recorded): per trial, unlearning comes within 1.5× of the
    retrain-from-scratch asymptote in fewer slots than retraining (paired), and the report says so."""
    exp = gfvl_unlearning.EXPERIMENT
    cfg, config_json, results = _run(exp, {"learn_slots": "150", "n_slots": "150"}, 64)
    assert [p["method"] for p in config_json["points"]] == list(gfvl_unlearning.METHODS)
    kl, hit = results["kl"], results["hit"]
    assert kl.shape == (2, 64, 150) and np.all(np.isfinite(kl)) and np.all(kl >= 0)
    assert hit.shape == (2, 64) and np.array_equal(hit[0], hit[1])  # one walk per trial, shared by the points
    level = gfvl_unlearning.ASYMPTOTE_TOLERANCE * gfvl_unlearning.asymptote(stats.band(kl).median[1])
    faster = gfvl_unlearning.verdicts(cfg, config_json["points"], results, level, "near")[0]
    assert faster.verdict == stats.REPRODUCED and faster.estimate > 0, faster
    assert "unlearning within 1.5× of the retrained asymptote" in exp.report(cfg, config_json["points"], results)


@pytest.mark.slow  # ~7 s of the default suite's 7 minutes
def test_conjugate_unlearning_experiment():
    """Exact unlearning happens at the slot at which u is scheduled, in every trial."""
    exp = gfvl_unlearning.EXPERIMENT_CONJUGATE
    cfg, config_json, results = _run(exp, {"learn_slots": "60", "n_slots": "60"}, 32)
    kl = results["kl"]
    assert kl.shape == (2, 32, 60) and np.all(np.isfinite(kl))
    # every trial is exact by the end (u scheduled; every other agent visited by the retraining walk)
    assert np.all(kl[:, :, -1] < gfvl_unlearning.EXACT)
    faster, at_hit = gfvl_unlearning.verdicts(cfg, config_json["points"], results, gfvl_unlearning.EXACT, "exact")
    assert at_hit.verdict == stats.REPRODUCED and at_hit.lower == at_hit.upper == 0.0
    assert "**reproduced**" in exp.report(cfg, config_json["points"], results)


@pytest.mark.slow  # ~6 s of the default suite's 7 minutes
def test_local_iterations_experiment_shapes_and_reading():
    exp = gfvl_local_iters.EXPERIMENT
    overrides = {"local_iters": "4", "total_iters": "80", "record_every": "8"}  # one engine group: one compile
    cfg, config_json, results = _run(exp, overrides, 16)
    assert [p["local_iters"] for p in config_json["points"]] == [4]
    assert config_json["metrics"]["kl"]["axes"] == ["point", "trial", "local_iteration"]
    kl = results["kl"]
    assert kl.shape == (1, 16, 10) and np.all(np.isfinite(kl)) and np.all(kl >= 0)
    assert "Median KL(q ‖ q*)" in exp.report(cfg, config_json["points"], results)


def test_local_iterations_paired_ratio_verdicts():
    """The Fig. 4 verdicts on synthetic KL: L = 5 twice as large in every trial is reproduced (ratio 2),
    the same distribution drawn independently is inconclusive (its interval straddles the 5% margin),
    1% larger in every trial is not reproduced (under the margin), and a pair with KL = 0 is dropped."""
    cfg = make_config(gfvl_local_iters.Config, {"local_iters": "1,5,10,20", "total_iters": "100"})
    labels = [{"local_iters": n} for n in cfg.local_iters]
    rng = np.random.default_rng(0)
    base = rng.lognormal(size=(1, 200, 5))
    kl = np.concatenate([base, 2 * base, rng.lognormal(size=(1, 200, 5)), 1.01 * base])
    kl[1, 0, :] = 0.0
    out = gfvl_local_iters.verdicts(cfg, labels, kl)
    assert len(out) == 3 * len(gfvl_local_iters.checkpoints(cfg))
    doubled = [v for v in out if v.claim.startswith("L = 5")]
    assert all(v.verdict == stats.REPRODUCED and abs(v.estimate - 2) < 1e-9 and v.n_dropped == 1 for v in doubled)
    assert all(v.verdict == stats.INCONCLUSIVE for v in out if v.claim.startswith("L = 10"))
    assert all(v.verdict == stats.NOT_REPRODUCED for v in out if v.claim.startswith("L = 20"))


def test_presets_bundle_settings_and_explicit_values_win():
    cfg = make_config(gfvl_local_iters.Config, {"preset": "paper", "rho": "0.01"})
    assert (cfg.preset, cfg.rho, cfg.loss_normalisation, cfg.baseline) == ("paper", 0.01, "mean", "constant")
    paper = gfvl_unlearning.EXPERIMENT_PAPER.config_cls()
    assert asdict(paper) == asdict(make_config(gfvl_unlearning.Config, {"preset": "paper"}))
    back = make_config(gfvl_unlearning.EXPERIMENT_PAPER.config_cls, {"preset": "default"})
    assert asdict(back) == asdict(gfvl_unlearning.Config())


@pytest.mark.parametrize(
    "exp, overrides, name",
    [
        (gfvl_local_iters.EXPERIMENT, {"epsilon": "0.5"}, "epsilon"),
        (gfvl_local_iters.EXPERIMENT, {"rho": "0"}, "rho"),
        (gfvl_local_iters.EXPERIMENT, {"n_samples": "0"}, "n_samples"),
        (gfvl_local_iters.EXPERIMENT, {"local_iters": "0,5"}, "local_iters"),
        (gfvl_local_iters.EXPERIMENT, {"local_iters": "3", "record_every": "20"}, "record_every"),
        (gfvl_local_iters.EXPERIMENT, {"total_iters": "30"}, "total_iters"),
        (gfvl_local_iters.EXPERIMENT, {"loss_normalisation": "median"}, "loss_normalisation"),
        (gfvl_unlearning.EXPERIMENT, {"forget_agent": "10"}, "forget_agent"),
        (gfvl_unlearning.EXPERIMENT, {"baseline": "leave-one-out", "n_samples": "1"}, "n_samples"),
        (gfvl_unlearning.EXPERIMENT, {"local_iters": "0"}, "local_iters"),
        (gfvl_unlearning.EXPERIMENT_CONJUGATE, {"forget_agent": "-1"}, "forget_agent"),
        (gfvl_unlearning.EXPERIMENT_CONJUGATE, {"loss_normalisation": "avg"}, "loss_normalisation"),
        (gfvl_topologies.EXPERIMENT, {"loss_normalisation": "avg"}, "loss_normalisation"),
        (gfvl_local_iters.EXPERIMENT, {"preset": "bogus"}, "preset"),
        (gfvl_unlearning.EXPERIMENT, {"preset": "bogus"}, "preset"),
        (gfvl_local_iters.EXPERIMENT, {"rho_schedule": "linear"}, "rho_schedule"),
        (gfvl_unlearning.EXPERIMENT, {"rho_schedule": "inverse:-3"}, "rho_schedule"),
    ],
)
def test_bad_parameters_are_refused(exp, overrides, name):
    with pytest.raises(ValueError, match=name):
        make_config(exp.config_cls, overrides)


@pytest.mark.parametrize(
    "setting, message",
    [
        ("preset=bogus", "preset must be one of ('default', 'paper'), got 'bogus'"),
        ("loss_normalisation=avg", "loss_normalisation must be one of ('sum', 'mean'), got 'avg'"),
        ("rho_schedule=linear", "rho_schedule must be one of constant, cosine, inverse:<t0> (t0 > 0), got 'linear'"),
    ],
)
def test_cli_refuses_bad_new_parameters_in_one_line(setting, message, capsys, tmp_path):
    assert cli.main(["run", "gfvl-local-iters", "--set", setting, "--out", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"jaxfed: error: {message}\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "exp",
    [
        gfvl_local_iters.EXPERIMENT,
        gfvl_local_iters.EXPERIMENT_PAPER,
        gfvl_unlearning.EXPERIMENT,
        gfvl_unlearning.EXPERIMENT_PAPER,
        gfvl_unlearning.EXPERIMENT_CONJUGATE,
    ],
)
def test_no_nan_or_inf_in_1000_trials_at_default_settings(exp):
    _, _, results = _run(exp, {}, 1000)
    assert np.all(np.isfinite(results["kl"])) and np.all(results["kl"] >= 0)
