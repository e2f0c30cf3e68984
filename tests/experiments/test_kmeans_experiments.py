"""The k-means experiments' configs, points, reports and figures (on synthetic results: no
simulation runs here; `-m slow` runs each at a tiny size end to end)."""

import numpy as np
import pytest
from support import SMALL

from jaxfed import runs
from jaxfed.engine import RunOptions
from jaxfed.experiment import make_config
from jaxfed.experiments.kmeans import ablation as kmeans_ablation
from jaxfed.experiments.kmeans import mall as kmeans_mall
from jaxfed.experiments.kmeans import studies as kmeans_studies
from jaxfed.oac import kmeans
from jaxfed.runs import run_experiment

KMEANS = ["kmeans-convergence", "kmeans-snr", "kmeans-ablation", "kmeans-devices", "kmeans-digits1"]


def test_registered_and_server_side_start_by_default():
    for name in KMEANS:
        cfg = runs.find(name).config_cls()
        assert cfg.init == "uniform" and cfg.vmax_rule == "abs" and cfg.symbol_energy == "beta"


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("init", "random", "init must be one of"),
        ("vmax_rule", "max", "vmax_rule must be one of"),
        ("symbol_energy", "1", "symbol_energy must be one of"),
        ("vmax_fixed", "inf", "vmax_fixed must be (a )?finite"),
        ("inits", "forgy,best", "inits from"),
        ("grid_sides", "0", "grid_sides must be"),
    ],
)
def test_bad_config_values_name_the_parameter(key, value, match):
    exp = runs.find("kmeans-devices" if key == "grid_sides" else "kmeans-ablation")
    with pytest.raises(ValueError, match=match):
        make_config(exp.config_cls, {key: value})


def test_ablation_points_cover_each_init_and_reading():
    cfg = kmeans_ablation.AblationConfig()
    labels = kmeans_ablation._labels(cfg)
    for init in kmeans.INITS:
        variants = {lab["variant"] for lab in labels if lab.get("init") == init and lab["split"] == "tiles"}
        assert set(kmeans_ablation.VARIANTS) | {"ideal federated", "centralized"} <= variants, init
    readings = {lab.get("vmax_rule") for lab in labels} | {lab.get("symbol_energy") for lab in labels}
    assert set(kmeans.VMAX_RULES[1:]) | {"sqrt-beta"} <= readings
    assert {lab["variant"] for lab in labels if lab["split"] == "iid"} == set(kmeans_ablation.VARIANTS)
    assert [lab["symbol_energy"] for lab in labels if "symbol_energy" in lab] == ["sqrt-beta"]


def test_resources_independent_of_k_for_oac_only():
    cfg = kmeans_studies.DevicesConfig()
    oac_res, digital = zip(*(kmeans_studies.resources(cfg, n * n) for n in cfg.grid_sides))
    assert set(oac_res) == {2 * 10 * 3 * 4}
    assert digital == tuple(2 * 10 * n * n * 7 / 2 for n in cfg.grid_sides)


def synthetic(sweep, n_rounds, n_trials=40, seed=0):
    """Results shaped as the engine returns them, with positive losses."""
    rng = np.random.default_rng(seed)
    n = len(sweep.points)
    out = {}
    for name, axes in sweep.metric_axes.items():
        shape = (n, n_trials) + ((n_rounds,) if axes else ())
        out[name] = rng.uniform(40, 60, shape).astype(np.float32)
    return out


@pytest.mark.parametrize("name", KMEANS)
def test_report_ends_with_verdicts_and_figure_draws(name, tmp_path, monkeypatch):
    # The mall picture runs a simulation of its own; a stub keeps this test to drawing and reporting.
    monkeypatch.setattr(kmeans_mall, "_scenario_panel", lambda ax, cfg: None)
    exp = runs.find(name)
    cfg = make_config(exp.config_cls, {"n_rounds": "3"})
    sweep = exp.build(cfg)
    results = synthetic(sweep, cfg.n_rounds)
    report = exp.report(cfg, sweep.labels, results).text
    assert "**Verdicts**" in report
    assert any(v in report for v in ("**reproduced**", "**not reproduced**", "**inconclusive**"))
    exp.plot(cfg, sweep.labels, results, str(tmp_path / "figure.png"))
    assert (tmp_path / "figure.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize("name", KMEANS)
def test_tiny_run_end_to_end(name, tmp_path):
    exp = runs.find(name)
    # test_determinism's small settings: its matrix compiles the same one-micro-batch programs (the
    # session's compilation cache then serves them)
    cfg = make_config(exp.config_cls, SMALL[name])
    cj, results = run_experiment(exp, cfg, 4, RunOptions.for_experiments(out_dir=str(tmp_path)), quiet=True)
    assert all(np.isfinite(np.asarray(v)).all() for v in results.values())
    assert "**Verdicts**" in exp.report(cfg, cj["points"], results).text


def drawn(name, monkeypatch, tmp_path, edit=None):
    """The figure of ``name`` drawn from :func:`synthetic` results (3 rounds), after ``edit(labels, results)``."""
    from jaxfed import plotting

    monkeypatch.setattr(kmeans_mall, "_scenario_panel", lambda ax, cfg: None)
    saved = []
    monkeypatch.setattr(plotting, "save", lambda fig, path: saved.append(fig))
    exp = runs.find(name)
    cfg = make_config(exp.config_cls, {"n_rounds": "3"})
    sweep = exp.build(cfg)
    results = synthetic(sweep, cfg.n_rounds)
    if edit is not None:
        edit(sweep.labels, results)
    exp.plot(cfg, sweep.labels, results, str(tmp_path / "figure.png"))
    (fig,) = saved
    fig.canvas.draw()
    return fig


@pytest.mark.parametrize("name", [*KMEANS, "kmeans-channels", "kmeans-oac-counts"])
def test_figure_titles_say_what_is_shown_without_twin_axes(name, monkeypatch, tmp_path):
    """Issue 39: no panel titled by what coincides, and no twin y-axis (two axes in one place)."""
    fig = drawn(name, monkeypatch, tmp_path)
    assert not [ax.get_title() for ax in fig.axes if "coincide" in ax.get_title()]
    places = [tuple(np.round(ax.get_position().bounds, 4)) for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(places) == len(set(places)), f"{name}: two axes in one place (a twin axis)"


def test_a_count_of_zero_is_a_point_in_view_not_a_missing_bar(monkeypatch, tmp_path):
    """kmeans-oac-counts: exact counts never move a populated cluster; that 0 is drawn as a marker inside the
    re-initialisation panel (a bar of height 0 could not be told from a missing one)."""

    def zero_spurious(labels, results):
        for i, lab in enumerate(labels):
            if lab["counts"] == "exact":
                results["spurious_reinits"][i] = 0

    fig = drawn("kmeans-oac-counts", monkeypatch, tmp_path, zero_spurious)
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith("re-initialisations per run")]
    assert not ax.patches  # no bars
    low, high = ax.get_ylim()
    at_zero = [
        xy
        for line in ax.get_lines()
        if line.get_marker() not in ("", "None", None)
        for xy in line.get_xydata()
        if xy[1] == 0
    ]
    assert at_zero and low < 0 < high


def test_digits1_draws_an_interval_for_every_estimate(monkeypatch, tmp_path):
    """kmeans-digits1: each panel shades a band around its lines (issue 39: it had no uncertainty)."""
    from matplotlib.collections import PolyCollection

    fig = drawn("kmeans-digits1", monkeypatch, tmp_path)
    for ax in fig.axes:
        assert any(isinstance(c, PolyCollection) for c in ax.collections), ax.get_title()


def test_kmeans_snr_reports_a_method_list_without_oac_digits(tmp_path):
    """`--set methods=oac,ideal` (a documented choice) used to end in a KeyError from the report after
    metrics.npz was written: a method over no channel has no digits label."""
    from jaxfed import cli

    out = tmp_path / "snr"
    argv = ["run", "kmeans-snr", "--trials", "8", "--set", "methods=oac,ideal", "--set", "snrs_db=10"]
    # one D and a small data set: the report's path is the same, and four D compile four programs
    tiny = ["--set", "n_rounds=3", "--set", "digits_list=2", "--set", "n_points=300"]
    assert cli.main([*argv, *tiny, "--out", str(out), "--quiet"]) == 0
    assert (out / "report.md").is_file() and (out / "verdicts.json").is_file()
