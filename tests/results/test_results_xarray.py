"""Results as labelled data (jaxfed.results): a result directory or an in-memory run as an xarray
Dataset whose values are metrics.npz's bit for bit and whose dims and coordinates are config.json's;
bands and verdicts as tables; `jaxfed export`; the layout table of docs/results.md; the optional
packages imported only when used.

The default suite runs gfvl-topologies (raw and summary) and the user-facing mechanics on
synthetic results; the slow suite runs every built-in experiment raw and in summary mode."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from support import SMALL

import jaxfed
from jaxfed import cli, engine, results, stats
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.results.export import _integers_kept
from jaxfed.runs import run_experiment

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRIALS = 3
FAST = ("gfvl-topologies",)


def _run(tmp_path_factory, name: str, keep: str, overrides: dict | None = None) -> str:
    exp = REGISTRY[name]
    out = str(tmp_path_factory.mktemp(f"{name}-{keep}"))
    cfg = make_config(exp.config_cls, overrides if overrides is not None else SMALL[name])
    run_experiment(exp, cfg, TRIALS, engine.RunOptions.for_experiments(out_dir=out, keep=keep), quiet=True)
    return out


@pytest.fixture(scope="module")
def topologies(tmp_path_factory):
    return {keep: _run(tmp_path_factory, "gfvl-topologies", keep) for keep in ("raw", "summary")}


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_directory(out: str) -> None:
    """open_results(out) against the directory's own files: dims, coordinates, labels, values
    bit for bit, non-finite counts and attributes."""
    with open(os.path.join(out, "config.json")) as f:
        record = json.load(f)
    with np.load(os.path.join(out, "metrics.npz")) as z:
        stored = {k: z[k] for k in z.files}
    ds = jaxfed.open_results(out)
    axes_of = {}
    for name, doc in record["metrics"].items():
        if doc["kept"] == "raw":
            assert ds[name].dims == tuple(doc["axes"])
            assert _same_bits(ds[name].values, stored[name]), name
            axes_of[name] = doc["axes"][2:]
            assert list(ds.trial.values) == list(range(record["n_trials"]))
        else:
            for field, dims in doc["arrays"].items():
                var = ds[f"{name}_{field}"]
                assert var.dims == tuple(dims), (name, field)
                assert _same_bits(var.values, stored[f"{name}/{field}"]), (name, field)
            summary = stats.Summary(**{f: stored[f"{name}/{f}"] for f in stats.Summary._fields})
            quantiles = np.stack([stats.summary_quantile(summary, q) for q in results.QUANTILES], -1)
            assert _same_bits(ds[f"{name}_quantile"].values, quantiles)
            axes_of[name] = doc["arrays"]["mean"][1:]
        assert list(ds[f"{name}_nonfinite_trials"].values) == record["nonfinite_trials"][name]
    # every axis of a built-in experiment has its coordinate values, those config.json records
    for axis in {a for axes in axes_of.values() for a in axes}:
        assert axis in record["coords"], f"config.json records no coordinates for {axis!r}"
        assert list(ds[axis].values) == record["coords"][axis]
        if axis in ("slot", "round"):
            assert record["coords"][axis] == list(range(1, ds.sizes[axis] + 1))
    index = ds.indexes["point"]
    assert len(index) == len(record["points"])
    keys = list(dict.fromkeys(k for label in record["points"] for k in label))
    for p, label in enumerate(record["points"]):
        for key, value in label.items():  # a label key may be renamed (results.coordinate_name)
            got = index.get_level_values(results.coordinate_name(key, keys))[p]
            assert got == value or (isinstance(value, float) and np.isnan(value) and np.isnan(got)), (p, key)
    assert ds.attrs["experiment"] == record["experiment"] and ds.attrs["seed"] == record["seed"]
    assert json.loads(ds.attrs["parameters"]) == record["parameters"]
    assert json.loads(ds.attrs["engine"]) == record["engine"]
    assert json.loads(ds.attrs["versions"]) == record["versions"]
    # netCDF round-trips (values, coordinates, attributes)
    path = results.export(out, "netcdf", out=os.path.join(out, "round-trip.nc"))
    with xr.open_dataset(path) as back:
        xr.testing.assert_identical(results.for_netcdf(ds), back.load())
    # unstacked: every point in its own cell, with its values
    unstacked = results.unstack(ds)
    assert "point" not in unstacked.dims
    where = unstacked.point_index.values
    assert sorted(where[where >= 0].tolist()) == list(range(len(record["points"])))
    for p in range(len(record["points"])):
        cell = tuple(int(i[0]) for i in np.nonzero(where == p))
        for name, var in ds.data_vars.items():
            want = var.values[p]
            got = unstacked[name].values[cell]
            assert np.array_equal(got, want.astype(got.dtype), equal_nan=True), (name, p)


def test_gfvl_topologies_raw_and_summary_open_as_their_files(topologies):
    for out in topologies.values():
        check_directory(out)


# The slow suite opens one experiment of each layout (several metrics, a k-means SNR sweep, counts
# per point, stacked labels); the others are marked long (-m long): every built-in experiment, raw
# and summary, compiles twice each and took ~15 minutes of the CI's slow suite.
OPENED_IN_CI = ("gfvl-local-iters", "gfvl-unlearning", "kmeans-snr", "kmeans-oac-counts")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow if n in OPENED_IN_CI else pytest.mark.long)
        for n in REGISTRY
        if n not in FAST
    ],
)
@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_every_experiment_opens_as_its_files(tmp_path_factory, name, keep):
    check_directory(_run(tmp_path_factory, name, keep))


def test_every_experiment_has_small_settings_here():
    assert set(SMALL) == set(REGISTRY)


def test_sel_on_gfvl_topologies_and_the_in_memory_run(topologies):
    ds = jaxfed.open_results(topologies["raw"])
    star = ds.kl.sel(topology="star")
    assert star.dims == ("trial", "slot")
    with np.load(os.path.join(topologies["raw"], "metrics.npz")) as z:
        assert _same_bits(star.values, z["kl"][0])
    # the same run in memory (jaxfed.to_xarray with its sweep) gives the same dataset's data
    exp = REGISTRY["gfvl-topologies"]
    sweep = exp.build(make_config(exp.config_cls, SMALL["gfvl-topologies"]))
    run = engine.run(sweep.trial, sweep.points, TRIALS, seed=0, common_random_numbers=True, progress=False)
    memory = jaxfed.to_xarray(run, sweep)
    assert _same_bits(memory.kl.values, ds.kl.values)
    xr.testing.assert_identical(memory.kl.coords.to_dataset(), ds.kl.coords.to_dataset())


def _snr_like():
    """kmeans-snr's sweep (digits 2, 4; 10 and 30 dB) with made-up results: no run."""
    exp = REGISTRY["kmeans-snr"]
    sweep = exp.build(make_config(exp.config_cls, {"digits_list": "2,4", "snrs_db": "10,30", "n_rounds": "3"}))
    rng = np.random.default_rng(0)
    n = len(sweep.labels)
    fake = {
        "loss": rng.random((n, 5, 3)).astype(np.float32),
        "reinits": rng.integers(0, 3, (n, 5, 3)).astype(np.int32),
    }
    axes = {"loss": ("round",), "reinits": ("round",)}
    return sweep, fake, results.to_xarray(fake, labels=sweep.labels, metric_axes=axes, coords={"round": [1, 2, 3]})


def test_kmeans_snr_labels_select_stacked_and_unstacked():
    sweep, fake, ds = _snr_like()
    row = next(
        p
        for p, lab in enumerate(sweep.labels)
        if lab.get("digits") == 4 and lab.get("snr_db") == 30 and lab["method"] == "oac"
    )
    assert _same_bits(ds.loss.sel(digits=4, snr_db=30).squeeze("point").values, fake["loss"][row])
    # the sweep's key `method` is the coordinate `algorithm`: `.sel(method=…)` is xarray's fill method
    # (it returned the whole array without a word), `.sel(algorithm=…)` selects
    assert "method" not in ds.coords and "algorithm" in ds.coords
    oac = [p for p, lab in enumerate(sweep.labels) if lab["method"] == "oac"]
    assert _same_bits(ds.loss.sel(algorithm="oac").values, fake["loss"][oac])
    grid = results.unstack(ds)
    assert set(grid.loss.dims) == {"algorithm", "digits", "snr_db", "trial", "round"}
    cell = grid.loss.sel(digits=4, snr_db=30)
    assert _same_bits(cell.sel(algorithm="oac").values, fake["loss"][row])
    assert np.isnan(cell.sel(algorithm="quantized").values).all()
    # every point is in the grid once, with its values (integers as float64 for the NaN)
    for p, lab in enumerate(sweep.labels):
        where = {"algorithm": lab["method"], **{k: lab.get(k, np.nan) for k in ("digits", "snr_db")}}
        assert int(grid.point_index.sel(where).item()) == p
        assert np.array_equal(grid.reinits.sel(where).values, fake["reinits"][p].astype(np.float64))
    assert bool(grid.noise_free.sel(algorithm="oac", digits=4, snr_db=100.0)) is True
    # xarray's own unstack would drop centralized and ideal (no digits): ours keeps them
    assert int(grid.point_index.isel(algorithm=0, digits=0, snr_db=0)) == 0


def test_label_keys_named_like_sel_arguments_are_renamed():
    """Every argument of `.sel` as a label key becomes a coordinate `.sel` can select by keyword;
    `algorithm` already a key: `method` is `label_method`."""
    labels = [{"method": "a", "tolerance": 1, "drop": True, "indexers": "x", "algorithm": "z"}]
    ds = results.to_xarray({"m": np.zeros((1, 2))}, labels=labels)
    names = set(ds.indexes["point"].names)
    assert names == {"label_method", "label_tolerance", "label_drop", "label_indexers", "algorithm"}
    assert ds.m.sel(label_tolerance=1).shape == (1, 2)


def test_integer_coordinates_stay_integers_in_tables():
    """kmeans-snr's digits (missing for centralized and ideal: NaN in the dataset) and round, also
    where a --bands table holds a metric without the axis: written 4 and 1, not 4.0 and 1.0."""
    sweep, fake, ds = _snr_like()
    final = (("point", "trial"), fake["loss"][:, :, -1], {"metric": "final", "kept": "raw"})
    ds = ds.assign(final=final)  # a metric without `round`
    frame = _integers_kept(results.table(ds, "loss"), ds, sweep.labels)
    text = frame.to_csv(index=False).splitlines()
    assert text[0] == "algorithm,digits,snr_db,noise_free,trial,round,loss"
    assert text[1].startswith("centralized,,,False,0,1,")
    assert any(line.startswith("quantized,4,,False,0,1,") for line in text)
    both = pd.concat([results.bands(ds, m).assign(metric=m) for m in ("loss", "final")], ignore_index=True)
    assert both["round"].dtype.kind == "f"  # NaN for `final`: what pandas makes of it
    kept = _integers_kept(both, ds, sweep.labels)
    assert str(kept["round"].dtype) == "Int64" and str(kept["digits"].dtype) == "Int64"
    assert str(kept["snr_db"].dtype) == "float64"  # a float label key stays a float
    assert ",1," in kept.to_csv(index=False).splitlines()[1] and ".0,1.0," not in kept.to_csv(index=False)


def test_export_of_a_reproduce_directory_writes_every_run(topologies, tmp_path, capsys):
    import shutil

    reproduced = tmp_path / "results"
    for keep, out in topologies.items():
        shutil.copytree(out, reproduced / f"topologies-{keep}", symlinks=True)
    (reproduced / "report.md").write_text("# a report\n")
    assert cli.main(["export", str(reproduced), "--format", "csv", "--bands"]) == 0
    written = capsys.readouterr().out.split()
    assert written == [str(reproduced / f"topologies-{k}" / "gfvl-topologies.bands.csv") for k in ("raw", "summary")]
    assert all(pd.read_csv(path).metric.unique().tolist() == ["kl"] for path in written)
    into = tmp_path / "exports"
    into.mkdir()
    assert cli.main(["export", str(reproduced), "--format", "netcdf", "--out", str(into)]) == 0
    assert sorted(os.listdir(into)) == ["topologies-raw.nc", "topologies-summary.nc"]
    assert "holds 2 runs" in _one_line_error(capsys, ["export", str(reproduced), "--format", "csv"])
    assert "--out must be a directory" in _one_line_error(
        capsys, ["export", str(reproduced), "--format", "netcdf", "--out", str(into / "x.nc")]
    )


def test_docs_examples_run_as_shown(topologies):
    """The code block of docs/results.md's "Labelled data" section runs on small runs of the same
    experiments (gfvl-topologies from the fixture, kmeans-snr's labels with made-up values)."""
    text = (ROOT / "docs" / "results.md").read_text()
    block = re.search(r"<!-- tested: .*? -->\n```python\n(.*?)```", text, flags=re.DOTALL).group(1)
    sweep, fake, ds = _snr_like()

    def open_results(directory, unstack=False):
        if directory == "results/kmeans-snr":
            return results.unstack(ds) if unstack else ds
        assert directory == "results/gfvl-topologies"
        return jaxfed.open_results(topologies["raw"], unstack=unstack)

    code = block.replace("import jaxfed\n", "").replace("jaxfed.open_results", "open_results")
    code = code.replace('jaxfed.bands("results/gfvl-topologies"', f"jaxfed.bands({topologies['raw']!r}")
    exec(
        compile(code, "docs/results.md", "exec"),
        {"__name__": "docs_example", "open_results": open_results, "jaxfed": jaxfed},
    )


def test_bands_equal_stats_band_and_csv_keeps_them(topologies, tmp_path):
    for keep, out in topologies.items():
        ds = jaxfed.open_results(out)
        table = jaxfed.bands(out, "kl")
        if keep == "raw":
            band, n = stats.band(ds.kl.values), np.isfinite(ds.kl.values).sum(1)
        else:
            summary = stats.Summary(**{f: ds[f"kl_{f}"].values for f in stats.Summary._fields})
            band, n = stats.band(summary), summary.count
        assert list(table.columns) == ["topology", "slot", "q50", "lower", "upper", "n"]
        assert table.topology.tolist() == [t for t in ("star", "ring", "complete") for _ in range(ds.sizes["slot"])]
        assert table.slot.tolist() == list(ds.slot.values) * 3
        for column, field in (("q50", "median"), ("lower", "lower"), ("upper", "upper")):
            assert np.array_equal(table[column].to_numpy(), getattr(band, field).ravel())
        assert np.array_equal(table.n.to_numpy(), n.ravel())
        assert cli.main(["export", out, "--format", "csv", "--bands", "--out", str(tmp_path / f"{keep}.csv")]) == 0
        written = pd.read_csv(tmp_path / f"{keep}.csv")
        assert written.metric.unique().tolist() == ["kl"]
        for column, field in (("q50", "median"), ("lower", "lower"), ("upper", "upper")):  # float repr: exact
            got = written[column].to_numpy().astype(getattr(band, field).dtype)
            assert np.array_equal(got, getattr(band, field).ravel())


def test_parquet_and_csv_tables_hold_the_values(topologies, tmp_path):
    out = topologies["raw"]
    path = results.export(out, "parquet", metric="kl", out=str(tmp_path / "kl.parquet"))
    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["topology", "trial", "slot", "kl"]
    ds = jaxfed.open_results(out)
    assert np.array_equal(frame.kl.to_numpy(), ds.kl.values.ravel())
    summary = results.table(jaxfed.open_results(topologies["summary"]), "kl")
    assert {"kl_count", "kl_mean", "kl_se", "kl_q12.5", "kl_q50", "kl_q87.5"} <= set(summary.columns)


def test_verdicts_are_stored_with_the_report_and_read_as_a_table(topologies):
    out = topologies["raw"]
    assert cli.main(["report", out]) == 0
    table = jaxfed.verdicts(out)
    exp = REGISTRY["gfvl-topologies"]
    record, stored = jaxfed.store.rundir.load_results(out)
    reading = exp.report(make_config(exp.config_cls, SMALL["gfvl-topologies"]), record["points"], stored)
    assert list(table.columns) == list(results.VERDICT_COLUMNS)
    assert table.claim.tolist() == [v.claim for v in reading.verdicts]
    assert table.verdict.tolist() == [v.verdict for v in reading.verdicts]
    testable = [v for v in reading.verdicts if np.isfinite(v.estimate)]
    assert table.dropna(subset=["estimate"]).estimate.tolist() == [v.estimate for v in testable]
    # the interval as report.md prints it; none for a claim not testable here (its estimate may be finite)
    assert table.interval.tolist() == [
        v.interval_text() if v.verdict != stats.NOT_TESTABLE else "" for v in reading.verdicts
    ]


def _one_line_error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("jaxfed: error: ")
    return err


def test_export_bad_input_is_one_line_and_status_2(topologies, tmp_path, capsys, monkeypatch):
    out = topologies["raw"]
    assert "is not a directory" in _one_line_error(capsys, ["export", str(tmp_path / "none"), "--format", "csv"])
    assert "finished run" in _one_line_error(capsys, ["export", str(tmp_path), "--format", "csv"])
    assert "unknown metric 'nope'" in _one_line_error(capsys, ["export", out, "--format", "csv", "--metric", "nope"])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["export", out, "--format", "xml"])
    assert exit_.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown metric"):
        jaxfed.bands(out, "nope")
    with pytest.raises(ValueError, match="verdicts.json: does not exist"):
        jaxfed.verdicts(str(tmp_path))
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("h5netcdf", "pyarrow") else real(name, *a)
    )
    assert "jaxfed[netcdf]" in _one_line_error(capsys, ["export", out, "--format", "netcdf"])
    assert "jaxfed[parquet]" in _one_line_error(capsys, ["export", out, "--format", "parquet", "--metric", "kl"])


def test_a_record_without_coordinates_opens_by_position(topologies, tmp_path):
    """A directory written before config.json recorded "coords" opens, its axes without values."""
    import shutil

    from jaxfed import store

    old = tmp_path / "old"
    shutil.copytree(topologies["raw"], old)
    with open(old / "config.json") as f:
        record = json.load(f)
    del record["coords"]
    record["record_sha256"] = jaxfed.store.rundir.record_digest(
        record
    )  # (as a run before coords would have written it)
    os.remove(old / "config.json")
    store.atomic_write_json(str(old / "config.json"), record)
    ds = jaxfed.open_results(str(old))
    assert ds.kl.dims == ("point", "trial", "slot") and "slot" not in ds.coords


SLOW_BUILDS = ("gfvl-logistic",)  # its sweep prepares the data set's target (~12 s)


def _docs_layout_table() -> str:
    text = (ROOT / "docs" / "results.md").read_text()
    return re.search(r"<!-- layout: .*? -->\n\n(.*?)\n\n", text, flags=re.DOTALL).group(1)


def test_docs_layout_table_is_the_one_the_code_gives():
    """The rows of every experiment whose sweep builds in a moment; the slow suite checks all."""
    names = [n for n in REGISTRY if n not in SLOW_BUILDS]
    rows = _docs_layout_table().splitlines()
    kept = [r for r in rows[:2]] + [r for r in rows[2:] if r.split(" | ")[0].lstrip("| ") in names]
    assert "\n".join(kept) == results.layout_table(REGISTRY, names), REGENERATE


@pytest.mark.slow  # builds gfvl-logistic's sweep at its default size
def test_docs_layout_table_is_the_whole_table_the_code_gives():
    assert _docs_layout_table() == results.layout_table(REGISTRY), REGENERATE


REGENERATE = (
    "regenerate: python -c 'from jaxfed import experiments, results; print(results.layout_table(experiments.REGISTRY))'"
)


def test_import_and_list_do_not_load_xarray_or_pandas():
    code = (
        "import sys, jaxfed, jaxfed.cli; assert jaxfed.cli.main(['list']) == 0; "
        "loaded = [m for m in ('xarray', 'pandas', 'h5netcdf', 'pyarrow') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert done.returncode == 0, done.stderr[-2000:]
