"""The Fig. 4 and Fig. 5 experiments: shapes, readings, validation, and (slow) 1,000-trial runs."""

from dataclasses import asdict

import numpy as np
import pytest

from jaxfed import cli, stats
from jaxfed.experiment import make_config
from jaxfed.experiments.gfvl import local_iters as gfvl_local_iters
from jaxfed.experiments.gfvl import topologies as gfvl_topologies
from jaxfed.experiments.gfvl import trials as gfvl_trials
from jaxfed.experiments.gfvl import unlearning as gfvl_unlearning
from jaxfed.runs import run_experiment


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
    level = gfvl_trials.ASYMPTOTE_TOLERANCE * gfvl_trials.asymptote(stats.band(kl).median[1])
    faster = gfvl_unlearning.verdicts(cfg, config_json["points"], results, level, "near")[0]
    assert faster.verdict == stats.REPRODUCED and faster.estimate > 0, faster
    assert "unlearning within 1.5× of the retrained asymptote" in exp.report(cfg, config_json["points"], results).text


@pytest.mark.slow  # ~7 s of the default suite's 7 minutes
def test_conjugate_unlearning_experiment():
    """Exact unlearning happens at the slot at which u is scheduled, in every trial (too few trials
    here to call the share of such trials above 90%)."""
    exp = gfvl_unlearning.EXPERIMENT_CONJUGATE
    cfg, config_json, results = _run(exp, {"learn_slots": "60", "n_slots": "60"}, 32)
    kl = results["kl"]
    assert kl.shape == (2, 32, 60) and np.all(np.isfinite(kl))
    # every trial is exact by the end (u scheduled; every other agent visited by the retraining walk)
    assert np.all(kl[:, :, -1] < gfvl_unlearning.EXACT)
    faster, at_hit = gfvl_unlearning.verdicts(cfg, config_json["points"], results, gfvl_unlearning.EXACT, "exact")
    # a claim about each trial is judged on the share of trials that meet it (issue 38): every one of
    # the 32 does, but 32 trials cannot put the share's 95% interval above 90% (Wilson: 0.89)
    assert at_hit.estimate == 1.0 and at_hit.verdict == stats.INCONCLUSIVE, at_hit
    assert "**reproduced**" in exp.report(cfg, config_json["points"], results).text


@pytest.mark.slow  # ~6 s of the default suite's 7 minutes
def test_local_iterations_experiment_shapes_and_reading():
    exp = gfvl_local_iters.EXPERIMENT
    overrides = {"local_iters": "4", "total_iters": "80", "record_every": "8"}  # one engine group: one compile
    cfg, config_json, results = _run(exp, overrides, 16)
    assert [p["local_iters"] for p in config_json["points"]] == [4]
    assert config_json["metrics"]["kl"]["axes"] == ["point", "trial", "local_iteration"]
    kl = results["kl"]
    assert kl.shape == (1, 16, 10) and np.all(np.isfinite(kl)) and np.all(kl >= 0)
    assert "Median KL(q ‖ q*)" in exp.report(cfg, config_json["points"], results).text


def test_local_iterations_paired_ratio_verdicts():
    """The Fig. 4 verdicts on synthetic KL: L = 5 twice as large in every trial is reproduced (ratio 2),
    the same distribution drawn independently is inconclusive (its interval straddles 1), 1% smaller in every
    trial is not reproduced, and a pair with KL = 0 is dropped. A directional claim takes no margin: 1% larger
    in every trial is a slowdown the interval and the sign test agree on."""
    cfg = make_config(gfvl_local_iters.Config, {"local_iters": "1,5,10,20", "total_iters": "100"})
    labels = [{"local_iters": n} for n in cfg.local_iters]
    rng = np.random.default_rng(0)
    base = rng.lognormal(size=(1, 200, 5))
    kl = np.concatenate([base, 2 * base, rng.lognormal(size=(1, 200, 5)), 0.99 * base])
    kl[1, 0, :] = 0.0
    out = gfvl_local_iters.verdicts(cfg, labels, kl)
    assert len(out) == 3 * len(gfvl_local_iters.checkpoints(cfg))
    doubled = [v for v in out if v.claim.startswith("L = 5")]
    assert all(v.verdict == stats.REPRODUCED and abs(v.estimate - 2) < 1e-9 and v.n_dropped == 1 for v in doubled)
    assert all(v.verdict == stats.INCONCLUSIVE for v in out if v.claim.startswith("L = 10"))
    assert all(v.verdict == stats.NOT_REPRODUCED for v in out if v.claim.startswith("L = 20"))
    slightly = gfvl_local_iters.verdicts(cfg, labels[:2], np.concatenate([base, 1.01 * base]))
    # a 1% effect the trials agree on is not the figure's visible degradation (issue 38)
    assert all(v.verdict == stats.DIRECTION_ONLY and abs(v.estimate - 1.01) < 1e-9 for v in slightly)
    assert all("effect 1.0% < visible 5.0%" in v.reason for v in slightly)


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


# The non-conjugate four took 70-138 s each in the CI's slow suite: `long`, beyond its 90 minutes.
@pytest.mark.parametrize(
    "exp",
    [
        pytest.param(gfvl_local_iters.EXPERIMENT, marks=pytest.mark.long),
        pytest.param(gfvl_local_iters.EXPERIMENT_PAPER, marks=pytest.mark.long),
        pytest.param(gfvl_unlearning.EXPERIMENT, marks=pytest.mark.long),
        pytest.param(gfvl_unlearning.EXPERIMENT_PAPER, marks=pytest.mark.long),
        pytest.param(gfvl_unlearning.EXPERIMENT_CONJUGATE, marks=pytest.mark.slow),
    ],
)
def test_no_nan_or_inf_in_1000_trials_at_default_settings(exp):
    _, _, results = _run(exp, {}, 1000)
    assert np.all(np.isfinite(results["kl"])) and np.all(results["kl"] >= 0)


# --------------------------------------------------------------------------- unlearning verdicts: detectability
def _unlearning_case(n_trials=40, n_slots=60, seed=0):
    """Retraining falls from 10 to 1 over the slots; unlearning holds KL 5 until u's visit at slot h_t,
    then sits at 1 (the exact-forgetting picture)."""
    rng = np.random.default_rng(seed)
    hit = rng.integers(2, 15, n_trials)
    slots = np.arange(1, n_slots + 1)
    retrain = np.tile(1.0 + 9.0 * np.exp(-slots / 10.0), (n_trials, 1))
    unlearn = np.where(slots[None, :] >= hit[:, None], 1.0, 5.0)
    return unlearn, retrain, hit


def test_unlearning_verdicts_count_from_us_visit_and_are_real_when_detectable():
    unlearn, retrain, hit = _unlearning_case()
    unlearn[:, 0] = 0.5  # a dip below the level before u is forgotten is not unlearning
    faster, at_hit = gfvl_trials.unlearning_verdicts(unlearn, retrain, hit, 1.5, "at the level", shift=3.0)
    assert faster.verdict == stats.REPRODUCED and at_hit.verdict == stats.REPRODUCED
    assert at_hit.estimate == 1.0 and at_hit.kind == "share"  # every trial's slot is u's hitting time, not slot 1


def test_unlearning_verdicts_are_not_testable_when_nothing_is_left_to_unlearn():
    """The vacuous case of gfvl-logistic: the learnt model is within the level before u is ever scheduled."""
    unlearn, retrain, hit = _unlearning_case()
    unlearn = np.minimum(unlearn, 1.2)
    verdicts = gfvl_trials.unlearning_verdicts(unlearn, retrain, hit, 1.5, "at the level")
    assert [v.verdict for v in verdicts] == [stats.NOT_TESTABLE] * 2
    assert "just before u is forgotten the median KL to the target without u is 1.2" in verdicts[0].reason
    unlearn, retrain, hit = _unlearning_case()
    small_shift = gfvl_trials.unlearning_verdicts(unlearn, retrain, hit, 1.5, "at the level", shift=0.17)
    assert small_shift[0].verdict == stats.NOT_TESTABLE and "move the target by KL 0.17" in small_shift[0].reason


def test_unlearning_that_lags_us_visit_is_not_reproduced_at_the_visit():
    unlearn, retrain, hit = _unlearning_case()
    slots = np.arange(1, unlearn.shape[1] + 1)
    unlearn = np.where(slots[None, :] >= hit[:, None] + 8, 1.0, 5.0)  # gets there 8 slots after the visit
    faster, at_hit = gfvl_trials.unlearning_verdicts(unlearn, retrain, hit, 1.5, "at the level", shift=3.0)
    assert at_hit.verdict == stats.NOT_REPRODUCED and at_hit.estimate == 0.0  # no trial within ±1 slot


def test_first_passage_verdicts_know_the_censored_trials():
    """A comparison of two topologies that never reach the level within n_slots is not testable
    (censored), not a verdict on the censoring value; one whose censored side can only be later keeps
    its verdict and says how many pairs were censored (issue 38 part 4)."""
    cfg = gfvl_topologies.Config(n_slots=40)
    rng = np.random.default_rng(0)
    n_trials, slots = 60, np.arange(1, 41)
    reach = rng.integers(3, 8, n_trials)  # complete: reaches KL = 0 by slot 3..7
    complete = np.where(slots[None, :] >= reach[:, None], 0.0, 1.0)
    never = np.ones((n_trials, 40))  # ring and star never reach even KL <= 0.01
    out = gfvl_topologies.verdicts(cfg, ["complete", "ring", "star"], np.stack([complete, never, never]))
    by_claim = {v.claim: v for v in out}
    ring_star = by_claim["KL <= 0.01: ring before star (slots of star − ring)"]
    assert (
        ring_star.verdict == stats.NOT_TESTABLE and "censored: 100% of pairs not reached within 40" in ring_star.reason
    )
    complete_ring = by_claim["KL <= 0.01: complete before ring (slots of ring − complete)"]
    assert complete_ring.verdict == stats.REPRODUCED and "censored: 100%" in complete_ring.reason
