"""One compiled program per sweep where a choice only selects code (issue 24 part 8).

The k-means experiments' method, split and init are traced indices
(:func:`jaxfed.experiments.kmeans.trials.trace_choices`), so the engine groups a sweep's points by
their shapes alone. The values must be bit-identical to the trial with the choices given by
name, which traces the named code only (the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxfed import engine
from jaxfed.engine.points import group_points
from jaxfed.experiments.kmeans import ablation as kmeans_ablation
from jaxfed.experiments.kmeans import mall as kmeans_mall
from jaxfed.experiments.kmeans import studies as kmeans_studies
from jaxfed.experiments.kmeans import trials as kmeans_trials
from jaxfed.oac import kmeans

TINY = dict(rows=2, cols=2, n_points=60, n_components=3, n_clusters=3, n_rounds=3)


def _by_name(cfg, labels: list[dict]) -> list[dict]:
    """The labels' points with the choices as names (static leaves): the reference trial."""
    return [kmeans_trials.label_point(cfg, lab) for lab in labels]


def _groups(sweep) -> int:
    return len(group_points(sweep.points))


def test_default_sweeps_compile_one_program_per_shape():
    # convergence: 4 methods; digits1: quantised and OAC, with and without re-initialisation
    for experiment in (kmeans_mall.CONVERGENCE, kmeans_studies.DIGITS1):
        assert _groups(experiment.build(experiment.config_cls())) == 1, experiment.name
    # ablation: 3 inits x 6 variants, the E_s reading and the i.i.d. split in one; each other v_max reading
    assert _groups(kmeans_ablation.EXPERIMENT.build(kmeans_ablation.AblationConfig())) == len(kmeans.VMAX_RULES)
    # kmeans-snr: the methods (and their last-round figures) in one program per D
    snr = kmeans_mall.SNR.build(kmeans_mall.SNR.config_cls())
    assert _groups(snr) == len(kmeans_mall.SnrConfig().digits_list)


def _values(trial, points, n_trials=3):
    out = engine.run(trial, points, n_trials, seed=3, chunk_size=n_trials, compilation_cache="off")
    return {name: np.asarray(v) for name, v in out.items()}


def _assert_traced_equal_named(cfg, labels, n_groups: int = 1, **diagnostics):
    sweep = kmeans_trials.mall_sweep(cfg, labels, **diagnostics)
    assert _groups(sweep) == n_groups
    traced = _values(sweep.trial, sweep.points)
    named_points = _by_name(cfg, labels)
    assert len(group_points(named_points)) > n_groups
    named = _values(sweep.trial, named_points)
    assert traced.keys() == named.keys()
    for name in traced:
        np.testing.assert_array_equal(traced[name], named[name], err_msg=name)


@pytest.mark.slow
def test_traced_choices_are_bit_identical_to_the_named_code():
    """Every method, split and init once, on a tiny mall."""
    labels = [
        {"method": "centralized", "split": "iid", "init": "kmeans++"},
        {"method": "ideal", "init": "forgy"},
        {"method": "quantized", "init": "kmeans++"},
        {"method": "oac", "snr_db": 0.0, "split": "iid", "adaptive": False, "symbol_energy": "sqrt-beta"},
    ]
    _assert_traced_equal_named(kmeans_mall.ConvergenceConfig(**TINY), labels)


@pytest.mark.slow
def test_traced_methods_are_bit_identical_with_the_last_round_figures():
    """kmeans-snr's labels (every method, two D, two SNRs and the noise-free points): one program
    per D, each method's last-round noise figures a branch of their own."""
    cfg = kmeans_mall.SnrConfig(**TINY, digits_list=(2, 4), snrs_db=(0.0, 20.0))
    _assert_traced_equal_named(cfg, kmeans_mall._snr_labels(cfg), 2, last_round_diagnostics=True)


def _covering(labels: list[dict]) -> list[dict]:
    """The labels, in order, that each bring a (key, value) pair no earlier kept label has: every
    init, variant, reading and split of the ablation once, not every combination of them."""
    seen: set = set()
    kept = []
    for lab in labels:
        pairs = set(lab.items())
        if not pairs <= seen:
            kept.append(lab)
            seen |= pairs
    return kept


@pytest.mark.slow  # the whole ablation took 254 s and 342 s (2026-12-03); each choice once fits the slow suite
@pytest.mark.parametrize("diagnostics", [dict(round_diagnostics=True), dict(count_diagnostics=True)])
def test_traced_choices_are_bit_identical_with_every_diagnostic(diagnostics):
    """Each of the ablation's choices once (every init, variant, v_max and E_s reading, the i.i.d.
    split) and a quantised point."""
    cfg = kmeans_ablation.AblationConfig(**TINY, snr_db=10.0)
    labels = _covering(kmeans_ablation._labels(cfg)) + [{"method": "quantized", "init": "kmeans++"}]
    if "count_diagnostics" in diagnostics:  # a count back-end of its own (static), on every method
        labels = [{**lab, "count_digits": 2} for lab in labels]
    _assert_traced_equal_named(cfg, labels, len(kmeans.VMAX_RULES), **diagnostics)


def test_choice_indices_validate_like_the_names():
    cfg = kmeans_mall.ConvergenceConfig(**TINY)
    for key, bad in (("method", "lloyd"), ("split", "random"), ("init", "k-means++")):
        lab = {"method": "oac", key: bad}
        with pytest.raises(ValueError, match=f"^{key} must be one of"):
            kmeans_trials.label_point(cfg, lab)
