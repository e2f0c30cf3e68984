"""Issue 49's six extension tasks, end to end as a user runs them, from the files under tests/data/users/:
per-ED gains in kmeans-snr and a digital aggregation method in kmeans-convergence taken by name (no user
Experiment), a helper module beside a user file, a memory refusal and the rerun after it, the NaN notes, a
user graph file in gfvl-graphs, a user family in gfvl-heterogeneity, growing and exporting a run, and the
small traps (a deprecated name, a table column, a description)."""

import json
import os

import jax
import numpy as np
import pandas as pd
import pytest
from support import one_line_error

from jaxfed import cli, plotting
from jaxfed.experiment import make_config
from jaxfed.experiments.kmeans import mall as kmeans_mall
from jaxfed.experiments.kmeans import trials as kmeans_trials
from jaxfed.runs import catalog, find, identity
from jaxfed.store.rundir import load_results

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "users")
GAINS, DIGITAL, RING = (os.path.join(DATA, name) for name in ("gains.py", "digital.py", "ring12.txt"))
TINY_MALL = ["--set", "rows=2", "--set", "cols=2", "--set", "n_points=60", "--set", "n_rounds=3"]
TINY_MALL += ["--set", "n_clusters=3", "--set", "n_components=3", "--set", "n_starts=1", "--trials", "4"]


def _run(capsys, argv) -> str:
    assert cli.main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().err


# --------------------------------------------------------------------------- task 1: per-ED gains, by name
def test_a_per_trial_channel_draws_its_per_ed_state_from_the_trials_own_stream():
    catalog.import_extensions([GAINS])
    cfg = kmeans_mall.SnrConfig(rows=2, cols=3, channel="residual-gains", channel_sweep="spread_db=0,4")
    point = {"rows": 2, "cols": 3}
    model = kmeans_trials.point_channel(cfg, point).with_params(spread_db=4.0)
    drawn = kmeans_trials._with_trial_state(model, jax.random.key(7), point)
    assert np.shape(drawn.params["gain"]) == (6,) and np.ptp(np.asarray(drawn.params["gain"])) > 0
    plain = kmeans_trials.point_channel(kmeans_mall.SnrConfig(), point)
    assert kmeans_trials._with_trial_state(plain, jax.random.key(7), point) is plain  # built-ins: unchanged


@pytest.mark.slow
def test_kmeans_snr_takes_a_per_trial_channel_by_name_bit_identical_at_zero_spread(tmp_path, capsys):
    snr = ["--set", "digits_list=2", "--set", "snrs_db=20", *TINY_MALL]
    gains = ["run", "kmeans-snr", "--import", GAINS, "--set", "channel=residual-gains"]
    err = _run(capsys, [*gains, "--set", "channel_sweep=spread_db=0,4,8", *snr, "--out", str(tmp_path / "g")])
    notes = [line for line in err.splitlines() if "NaN" in line]
    assert len(notes) == 2 and all(line.startswith("jaxfed: note: kmeans-snr: centroid_noise_") for line in notes)
    _run(capsys, ["run", "kmeans-snr", "--set", "channel=aggregate", *snr, "--out", str(tmp_path / "a")])
    config, gained = load_results(str(tmp_path / "g"))
    _, plain = load_results(str(tmp_path / "a"))
    labels = config["points"]
    at = {(lab.get("spread_db"), lab.get("noise_free", False)): p for p, lab in enumerate(labels) if "spread_db" in lab}
    assert np.array_equal(gained["loss"][at[0.0, False]], plain["loss"][3])  # σ = 0: the built-in channel's bits
    assert np.array_equal(gained["loss"][at[0.0, True]], plain["loss"][4])
    assert not np.array_equal(gained["loss"][at[8.0, False]], plain["loss"][3])  # the gains are drawn
    # the noise-free column of the sweep: three points in the data, three markers in the figure
    assert sorted(s for s, free in at if free) == [0.0, 4.0, 8.0]
    assert (tmp_path / "g" / "kmeans-snr.png").stat().st_size > 0
    _run(capsys, [*gains, "--set", "channel_sweep=spread_db=0,4,8", *snr, "--out", str(tmp_path / "q"), "--quiet"])
    assert "NaN" not in capsys.readouterr().err  # (said above; nothing under --quiet)


def test_the_noise_free_column_draws_every_value_of_a_channel_sweep(monkeypatch):
    cfg = kmeans_mall.SnrConfig(
        digits_list=(2,), snrs_db=(20.0,), channel_sweep="k_factor=0,3,30", channel="rician-fading"
    )
    labels = find("kmeans-snr").labels(cfg)
    wheres = kmeans_mall._series(cfg)
    rows = [kmeans_mall._noise_free_row(labels, 2, where) for where in wheres]
    assert len(set(rows)) == 3 and all(labels[r]["noise_free"] for r in rows)


# --------------------------------------------------------------------------- task 2: a method by name, a helper
def test_kmeans_convergence_takes_a_registered_method_from_a_file_with_a_helper_beside_it(capsys):
    assert cli.main(["show", "kmeans-convergence", "--import", DIGITAL]) == 0  # `import quantizers` resolves
    capsys.readouterr()
    exp = find("kmeans-convergence")
    cfg = make_config(exp.config_cls, {"methods": "oac,digital-2bit", "snrs_db": "0,20"})
    methods = [lab["method"] for lab in exp.labels(cfg)]
    assert methods.count("digital-2bit") == 2 and methods.count("oac") == 2
    code = identity.code_identity(exp, cfg)["code"]  # the method's file and its helper are the run's code
    assert {os.path.basename(path) for path in code} == {"digital.py", "quantizers.py"}
    err = one_line_error(capsys, ["run", "kmeans-convergence", "--set", "methods=oac,nope", "--quiet"])
    assert "unknown aggregation method 'nope'" in err


def test_a_helper_elsewhere_is_a_one_line_error_naming_the_remedy(tmp_path, capsys):
    (tmp_path / "exp.py").write_text("import not_beside_me  # noqa\n")
    err = one_line_error(capsys, ["show", f"{tmp_path / 'exp.py'}:EXPERIMENT"])
    assert "ModuleNotFoundError" in err and "PYTHONPATH" in err


@pytest.mark.slow
def test_digital_method_runs_against_oac_in_kmeans_convergence(tmp_path, capsys):
    out = tmp_path / "c"
    argv = ["run", "kmeans-convergence", "--import", DIGITAL, "--set", "methods=oac,digital-2bit"]
    _run(capsys, [*argv, "--set", "snrs_db=0,20", *TINY_MALL, "--out", str(out)])
    config, results = load_results(str(out))
    rows = [p for p, lab in enumerate(config["points"]) if lab["method"] == "digital-2bit"]
    assert len(rows) == 2 and np.isfinite(results["loss"][rows]).all()
    assert "digital-2bit" in json.dumps(config)


# --------------------------------------------------------------------------- task 3: memory refusal, rerun
EXPERIMENT_FILE = """
import dataclasses
import jax, jax.numpy as jnp
from jaxfed.experiment import Experiment, Sweep

@dataclasses.dataclass(frozen=True)
class Config:
    size: int = 64

def trial(key, point):
    return {"x": jax.random.normal(key, (point["size"],))}

EXPERIMENT = Experiment("wide", "a metric of SIZE values", Config,
    lambda cfg: Sweep(trial, [{"size": cfg.size}], [{"size": cfg.size}], {"x": ("i",)}),
    plot=lambda *a: None, report=lambda *a: "", micro_batch=MICRO)
"""


def test_a_memory_refusal_names_the_micro_batch_and_leaves_no_directory_behind(tmp_path, capsys):
    path = tmp_path / "wide.py"
    path.write_text("MICRO = {'cpu': 512}\n" + EXPERIMENT_FILE)
    out = tmp_path / "out"
    argv = ["run", f"{path}:EXPERIMENT", "--trials", "8", "--chunk-size", "8", "--out", str(out), "--quiet"]
    err = one_line_error(capsys, [*argv, "--max-memory", "300000"])
    assert "padded to a whole micro-batch of 512 trials" in err and "multiple of 64" in err
    assert not out.exists()  # nothing to block the rerun with another configuration
    path.write_text("MICRO = {'cpu': 64}\n" + EXPERIMENT_FILE)  # the advice taken: a narrower micro-batch
    _run(capsys, [*argv, "--max-memory", "300000"])
    assert load_results(str(out))[1]["x"].shape == (1, 8, 64)


# --------------------------------------------------------------------------- task 4: a user family
@pytest.mark.slow
def test_a_user_family_on_a_12_ring_reaches_its_closed_form_posterior(tmp_path, capsys):
    out = tmp_path / "f"
    argv = ["run", os.path.join(os.path.dirname(DATA), "user_family.py") + ":EXPERIMENT"]
    argv += ["--set", "family=gamma-exponential", "--set", "topologies=ring", "--set", "n_agents=12"]
    _run(capsys, [*argv, "--set", "spreads=0", "--trials", "8", "--out", str(out)])
    _, results = load_results(str(out))
    assert np.nanmax(results["kl"][..., -1]) < 1.5e-7  # after cover: the conjugate closed form, within 1.5e-7


def test_the_heterogeneity_description_names_no_fixed_family(capsys):
    assert cli.main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "gfvl-heterogeneity" in x)
    assert "beta/normal/gamma/dirichlet" not in line and "family=NAME" in line


# --------------------------------------------------------------------------- task 5: a graph file
@pytest.mark.slow
def test_a_graph_file_cover_time_and_the_spearman_note_with_two_graphs(tmp_path, capsys):
    out = tmp_path / "graphs"
    argv = ["run", "gfvl-graphs", "--set", f"graph={RING}", "--set", "graphs=complete", "--set", "n_agents=12"]
    _run(capsys, [*argv, "--set", "n_slots=400", "--trials", "200", "--out", str(out)])
    text = (out / "report.md").read_text()
    assert "2 graphs; a rank correlation needs 3" in text and "K > exact_max_agents" not in text
    verdicts = json.loads((out / "verdicts.json").read_text())
    cover = [v for v in verdicts["verdicts"] if "cover time" in v["claim"] and "ring12" in v["claim"]]
    assert cover and cover[0]["verdict"] != "contradicted"


# --------------------------------------------------------------------------- task 6: grow, export, plot
@pytest.mark.slow
def test_grow_export_and_plot_a_run_with_an_imported_method(tmp_path, capsys):
    out = tmp_path / "grow"
    argv = ["run", "kmeans-convergence", "--import", DIGITAL, "--set", "methods=oac,digital-2bit"]
    argv += ["--set", "snrs_db=20", *TINY_MALL]
    _run(capsys, [*argv, "--out", str(out)])
    first = load_results(str(out))[1]["loss"]
    _run(capsys, [*argv[:-2], "--trials", "8", "--out", str(out)])  # grown: the first 4 trials kept
    grown = load_results(str(out))[1]["loss"]
    assert grown.shape[1] == 8 and np.array_equal(grown[:, :4], first)
    csv = tmp_path / "bands.csv"
    assert cli.main(["export", str(out), "--format", "csv", "--bands", "--out", str(csv)]) == 0
    table = pd.read_csv(csv)
    assert "q50" in table.columns and "median" not in table.columns
    assert cli.main(["plot", str(out), "--import", DIGITAL]) == 0


# --------------------------------------------------------------------------- the small traps
def test_a_bands_table_column_is_not_a_dataframe_method():
    assert not any(hasattr(pd.DataFrame, column) for column in ("q50", "lower", "upper"))
    assert hasattr(pd.DataFrame, "median")  # (why the column is not called that)


def test_a_wide_figure_legend_takes_fewer_columns_and_is_not_cut():
    fig, axes = plotting.figure(1, 1, figsize=(4, 3), squeeze=False)
    for i in range(6):
        axes[0, 0].plot([0, 1], [i, i], label=f"a rather long series label number {i}")
    legend = plotting.legend(fig, axes.ravel(), ncol=4)
    box = legend.get_window_extent(fig._get_renderer())
    assert legend._ncols < 4 and box.x0 >= 0 and box.x1 <= fig.bbox.width
