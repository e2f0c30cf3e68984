"""Issue 22, parts 4-6: everything checkable is checked before any work (one line, exit status 2),
user code fails in one line naming its file and line (the traceback behind --debug), bounds come
before resources, a cached figure cannot poison a run, and all-NaN results never crash after the
work."""

import dataclasses
import functools
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import one_line_error

from jaxfed import cli, engine, plotting, stats, store
from jaxfed.engine.options import MAX_DEVICES
from jaxfed.experiment import Experiment, Sweep, check_representable, make_config
from jaxfed.results import report
from jaxfed.runs import find
from jaxfed.store.rundir import load_results

# A user experiment file; the fields below are replaced per case.
USER_FILE = """
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed.experiment import Experiment, Sweep
{top}

@dataclasses.dataclass(frozen=True)
class Config:
    scale: float = 1.0
{fields}

def build(cfg):
    {build}
    def trial(key, point):
        x = cfg.scale * jax.random.normal(key, (3,)) + point["offset"]
        return {metrics}

    points = [{{"offset": jnp.float32(0.0)}}, {{"offset": jnp.float32(1.0)}}]
    return Sweep(trial, points, {labels}, {axes})


EXPERIMENT = Experiment("round3", "a user experiment", Config, build, lambda *a: None, lambda *a: "")
"""


def user_file(tmp_path, top="", fields="", build="pass", metrics='{"x": x}', labels=None, axes=None) -> str:
    """Writes a user experiment file with the given parts; returns its ``path:EXPERIMENT``."""
    labels = labels or '[{"o": 0}, {"o": 1}]'
    axes = axes or '{"x": ("i",)}'
    path = tmp_path / "round3.py"
    path.write_text(USER_FILE.format(top=top, fields=fields, build=build, metrics=metrics, labels=labels, axes=axes))
    return f"{path}:EXPERIMENT"


def line_of(spec: str, text: str) -> int:
    """The line number of the first line of the file in ``spec`` that contains ``text``."""
    lines = pathlib.Path(spec.rpartition(":")[0]).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def refused_before_work(capsys, tmp_path, spec, *extra) -> str:
    """The one-line error of running ``spec``; nothing was written under --out."""
    out = tmp_path / "out"
    err = one_line_error(capsys, ["run", spec, "--trials", "4", "--out", str(out), "--quiet", *extra])
    assert not out.exists() or not (out / "chunks").exists(), sorted(os.listdir(out))
    return err


# --------------------------------------------------------------------------- part 4: before work
@pytest.mark.parametrize(
    "parts, extra, message",
    [
        ({"axes": '{"x": ()}'}, [], "metric_axes['x'] must be 1 axis name(s), one per axis of the metric's cells"),
        ({"axes": "{}"}, [], "metric_axes must name the axes of exactly the metrics the trial returns (x), got []"),
        ({"axes": '{"x": ("i",), "y": ()}'}, [], "'y' not returned"),
        ({"labels": '[{"o": 0}]'}, [], "labels must be a list of one label per point: 2 points, got 1 labels"),
        ({"labels": '[{"o": np.arange(2)}, {"o": 1}]'}, [], "labels[0]['o'] must be JSON"),
        ({"labels": '["a", "b"]'}, [], "labels[0] must be a dict"),
        (
            {"metrics": '{"x": x.astype(jnp.complex64)}'},
            ["--keep", "summary"],
            "metric 'x' is complex64: summaries (keep='summary'",
        ),
        ({"fields": "    d: dict = None"}, [], "parameter d of Config has type dict; a parameter must be bool, int"),
        ({}, ["--target-se", "0.1", "--target-metric", "x@", "--max-trials", "8"], "has an empty index after '@'"),
    ],
)
def test_bad_sweeps_and_settings_are_one_line_before_any_work(parts, extra, message, capsys, tmp_path):
    spec = user_file(tmp_path, **parts)
    if "--target-se" in extra:
        out = tmp_path / "out"
        err = one_line_error(capsys, ["run", spec, "--out", str(out), "--quiet", *extra])
    else:
        err = refused_before_work(capsys, tmp_path, spec, *extra)
    assert message in err, err


def test_a_config_class_that_is_not_a_dataclass_is_one_line(capsys, tmp_path):
    class Plain:
        scale = 1.0

    with pytest.raises(ValueError, match="config_cls must be a dataclass of parameters .*, got .*Plain"):
        make_config(Plain)
    spec = user_file(tmp_path, top="")
    path = spec.rpartition(":")[0]
    text = pathlib.Path(path).read_text().replace("@dataclasses.dataclass(frozen=True)\n", "")
    pathlib.Path(path).write_text(text)
    for command in (["show", spec], ["run", spec, "--out", str(tmp_path / "o"), "--quiet"]):
        assert "config_cls must be a dataclass of parameters" in one_line_error(capsys, command)


def test_parameters_that_underflow_or_overflow_in_the_runs_dtype_are_refused(capsys, tmp_path):
    err = one_line_error(
        capsys, ["run", "gfvl-heterogeneity", "--set", "variance=1e-45", "--out", str(tmp_path), "--quiet"]
    )
    assert "variance must be 0 or of magnitude in [1.175e-38, 3.403e+38] (a normal float32" in err
    assert "got 1e-45; JAX_ENABLE_X64=1 runs in float64" in err
    from jaxfed.experiments.gfvl import heterogeneity as gfvl_heterogeneity

    config = gfvl_heterogeneity.Config(spreads=(0.0, 1e39))
    with pytest.raises(ValueError, match=r"spreads must be 0 or of magnitude .* got 1e\+39"):
        check_representable(config, "float32")
    check_representable(config, "float64")  # a normal float64
    check_representable(gfvl_heterogeneity.Config(variance=1e-45), "float64")


def test_split_seed_is_validated_with_its_name(capsys, tmp_path):
    err = one_line_error(capsys, ["run", "gfvl-logistic", "--set", "split_seed=-1", "--out", str(tmp_path), "--quiet"])
    assert err == "jaxfed: error: split_seed must be an integer in [0, 2**32), got -1"


@pytest.mark.parametrize(
    "top, message",
    [
        (
            "import sys\nsys.exit(0)",
            "failed to import: SystemExit: 0 (the file is imported: it must define experiments",
        ),
        ("import sys\nsys.exit(3)", "failed to import: SystemExit: 3"),
        ("raise KeyboardInterrupt", "failed to import: KeyboardInterrupt"),
        ("undefined_at_import + 1", "failed to import: NameError: name 'undefined_at_import' is not defined"),
    ],
)
def test_a_user_file_that_exits_interrupts_or_fails_at_import_is_an_error_naming_file_and_line(
    top, message, capsys, tmp_path
):
    spec = user_file(tmp_path, top=top)
    err = one_line_error(capsys, ["run", spec, "--out", str(tmp_path / "o"), "--quiet"])
    where = f"{spec.rpartition(':')[0]}:{line_of(spec, top.splitlines()[-1])}"
    assert f"user experiment file {where} {message}" in err, err


def test_a_directory_or_none_given_as_the_experiment_are_clear(capsys, tmp_path):
    folder = tmp_path / "folder.py"
    folder.mkdir()
    assert "is a directory; give a Python file as path/to/file.py:NAME" in one_line_error(
        capsys, ["show", f"{folder}:EXPERIMENT"]
    )
    spec = user_file(tmp_path, top="")
    path = spec.rpartition(":")[0]
    pathlib.Path(path).write_text(pathlib.Path(path).read_text() + "\nNOTHING = None\n")
    assert "'NOTHING' in " + path + " is None, not an Experiment" in one_line_error(capsys, ["show", f"{path}:NOTHING"])


@pytest.mark.parametrize(
    "parts, extra, where, message",
    [
        (
            {"fields": "\n    def __post_init__(self):\n        assert self.scale < 5, 'scale too big'"},
            ["--set", "scale=9"],
            "assert self.scale",
            "AssertionError: scale too big",
        ),
        ({"build": "1 / 0"}, [], "1 / 0", "ZeroDivisionError: division by zero"),
        ({"metrics": '{"x": x / not_defined}'}, [], "not_defined}", "NameError: name 'not_defined' is not defined"),
    ],
)
def test_errors_in_user_code_are_one_line_naming_file_and_line_with_the_traceback_behind_debug(
    parts, extra, where, message, capsys, tmp_path, monkeypatch
):
    spec = user_file(tmp_path, **parts)
    argv = ["run", spec, "--trials", "4", "--out", str(tmp_path / "o"), "--quiet", *extra]
    err = one_line_error(capsys, argv)
    location = f"{spec.rpartition(':')[0]}:{line_of(spec, where)}"
    assert err == f"jaxfed: error: {location}: {message} (the full traceback: --debug or JAXFED_DEBUG=1)"
    name = message.partition(":")[0]  # --debug and JAXFED_DEBUG=1: the user's exception itself, raised
    with pytest.raises(Exception) as raised:
        cli.main([*argv, "--debug"])
    assert type(raised.value).__name__ == name
    monkeypatch.setenv("JAXFED_DEBUG", "1")
    with pytest.raises(Exception) as raised:
        cli.main(argv)
    assert type(raised.value).__name__ == name


def test_the_configuration_mismatch_names_the_differing_entry_with_whole_values(tmp_path):
    stored = {"points": [{"topology": "line", "spread": 0.0}, {"topology": "ring", "spread": 0.0}]}
    given = {"points": [{"topology": "line", "spread": 0.0}, {"topology": "complete", "spread": 0.0}]}
    assert store.describe_differences(stored, given) == ['points[1].topology: stored "ring", given "complete"']
    longer = {"points": stored["points"] + [{"topology": "star", "spread": 0.0}]}
    assert store.describe_differences(stored, longer) == ["points: stored 2 entries, given 3"]
    long_name = "a-topology-name-" * 8
    run = functools.partial(engine.run, lambda key, point: {"x": point["s"] * jnp.ones(2)}, use_jit=False)
    points = [{"s": jnp.float32(1.0)}]
    run(points, 2, out_dir=str(tmp_path), identity={"points": [{"topology": long_name}]})
    with pytest.raises(engine.ConfigMismatch) as exc:
        run(points, 2, out_dir=str(tmp_path), identity={"points": [{"topology": "complete"}]})
    assert f'points[0].topology: stored "{long_name}", given "complete"' in str(exc.value)


# --------------------------------------------------------------------------- part 5: bounds, caches
def test_devices_are_bounded_when_parsed_before_any_device_is_created(capsys, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--unchanged")
    for count in ("10000", "100000"):
        err = one_line_error(capsys, ["run", "gfvl-topologies", "--devices", count, "--quiet"])
        assert f"devices must be an integer in [1, {MAX_DEVICES}]" in err and f"got {count}" in err
        assert os.environ["XLA_FLAGS"] == "--unchanged"  # no host devices were asked for
    assert MAX_DEVICES == max(64, 4 * os.cpu_count())


# --------------------------------------------------------------------------- part 6: after the work
def test_a_run_whose_every_trial_is_nan_stores_its_record_figure_and_report(capsys, tmp_path):
    out = tmp_path / "nan"
    argv = ["run", "gfvl-heterogeneity", "--set", "family=normal", "--set", "noise_spread=100"]
    argv += ["--set", "n_slots=12", "--set", "topologies=ring", "--set", "spreads=0", "--trials", "4"]
    assert cli.main([*argv, "--out", str(out), "--quiet"]) == 0
    assert "kl: 4 of 4 trials of point topology=ring, spread=0.0 have NaN" in capsys.readouterr().err
    config_json, results = load_results(str(out))
    assert config_json["nonfinite_trials"] == {"kl": [4]}
    assert (out / "gfvl-heterogeneity.png").stat().st_size > 0
    exp = find("gfvl-heterogeneity")
    cfg = make_config(exp.config_cls, {"family": "normal", "noise_spread": "100", "n_slots": "12"})
    text = report.section(exp, cfg, config_json, results, 1.0).text
    assert "\n- kl: 4 of 4 trials of point spread=0.0, topology=ring have NaN" in text


def test_band_plot_names_the_points_it_cannot_draw(tmp_path):
    values = np.abs(np.random.default_rng(0).normal(size=(3, 5, 4))) + 0.1
    values[0] = np.nan  # no finite trial
    values[1, :, 2] = np.nan  # a gap
    values[2] = 0.0  # nothing positive on a log axis
    fig, ax = plotting.figure()
    plotting.band_plot(ax, np.arange(4), values, ["all-nan", "gap", "zero"], log_y=True)
    title = ax.get_legend().get_title().get_text()
    assert "not drawn, no finite trial: all-nan" in title and "gaps where no trial is finite: gap" in title
    assert "not drawn, no positive value (log axis): zero" in title
    fig, ax = plotting.figure()
    plotting.band_plot(ax, np.arange(4), np.full((1, 5, 4), np.nan), ["only"], log_y=True)
    ax.set_yscale("log")  # as an experiment's own plot may: save falls back to linear and says why
    plotting.save(fig, str(tmp_path / "empty.png"))
    assert ax.get_yscale() == "linear" and "nothing to draw: no finite value" in [t.get_text() for t in ax.texts]


@functools.cache  # both cases below: building gfvl-logistic (~30 s loaded) and the traces once per process
def _default_sweep_and_shapes(name: str):
    """The experiment's default config, its sweep and one trial's output shapes (eval_shape)."""
    from jaxfed.engine.points import group_points, rebuild
    from jaxfed.experiments import REGISTRY

    cfg = make_config(REGISTRY[name].config_cls)
    sweep = REGISTRY[name].build(cfg)
    group, traced = group_points(sweep.points)[0]
    shapes = jax.eval_shape(lambda k, x: sweep.trial(k, rebuild(group, x)), jax.random.key(0), [x[0] for x in traced])
    return cfg, sweep, shapes


@pytest.mark.slow  # ~25 s: building gfvl-logistic and drawing kmeans-convergence dominate
@pytest.mark.parametrize("nan_points", ["first", "every"])
def test_every_experiments_figure_and_report_survive_non_finite_points(nan_points, tmp_path):
    """Results in which every float metric is NaN for the first point, or for every point, raw and
    summarised, through each built-in experiment's plot and report (shapes from one trial's
    eval_shape)."""
    from jaxfed.experiments import REGISTRY

    rng = np.random.default_rng(0)
    for name, exp in REGISTRY.items():
        cfg, sweep, shapes = _default_sweep_and_shapes(name)
        raw = {}
        for metric, s in shapes.items():
            shape, dtype = (len(sweep.points), 12) + s.shape, np.dtype(s.dtype)
            raw[metric] = rng.uniform(0.01, 1.0, shape).astype(dtype) if dtype.kind == "f" else np.ones(shape, dtype)
            if dtype.kind == "f":
                raw[metric][0 if nan_points == "first" else slice(None)] = np.nan
        summary = {metric: _summarised(values) for metric, values in raw.items()}
        for mode, results in (("raw", raw), ("summary", summary)):
            path = tmp_path / f"{name}-{mode}.png"
            exp.plot(cfg, sweep.labels, results, str(path))
            exp.report(cfg, sweep.labels, results)
            assert path.stat().st_size > 0, (name, mode)


def _summarised(values: np.ndarray) -> stats.Summary:
    accumulator = stats.summary.SummaryAccumulator((values.shape[0],) + values.shape[2:])
    accumulator.add(values)
    return accumulator.result()


def test_a_full_disk_while_plotting_is_one_line_naming_the_figure(capsys, tmp_path, monkeypatch):
    from jaxfed.experiments import REGISTRY

    def plot(cfg, labels, results, path):
        fig, ax = plotting.figure()
        ax.plot([0, 1], [0, 1])
        plotting.save(fig, path)

    exp = Experiment(
        "tiny-plot",
        "a figure on a full disk",
        NoConfig,
        lambda cfg: Sweep(lambda k, p: {"x": jax.random.normal(k)}, [{}], [{"p": 0}], {"x": ()}),
        plot=plot,
        report=lambda *a: "",
    )
    monkeypatch.setitem(REGISTRY, exp.name, exp)
    monkeypatch.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
    real = store.files._write_file

    def full_disk(path, data):
        if ".png" in path:
            raise OSError(28, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(store.files, "_write_file", full_disk)
    out = tmp_path / "full"
    err = one_line_error(capsys, ["run", exp.name, "--trials", "2", "--out", str(out), "--quiet"])
    assert err == f"jaxfed: error: cannot write {out / 'tiny-plot.png'}: No space left on device"


@dataclasses.dataclass(frozen=True)
class NoConfig:
    pass
