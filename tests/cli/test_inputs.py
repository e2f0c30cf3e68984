"""Inputs are bounded before any work starts: each bad input is one line (exit status 2 from the
CLI, a ValueError from the Python API) naming the problem, never a traceback, a hang or a wrong
result."""

import dataclasses
import functools
import json
import os
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import one_line_error, run_cli

from jaxfed import cli, engine, stats, store
from jaxfed.experiment import Experiment, Sweep, make_config
from jaxfed.runs import run_experiment

SMALL = ["--set", "n_slots=10", "--quiet"]


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--trials", "9007199254740993"],
            "trials must be an integer in [1, 2**53] (trial counts and indices are exact up to 2**53 in a float64), got 9007199254740993",
        ),
        (
            ["--trials", "1e20"],
            "trials must be an integer in [1, 2**53] (trial counts and indices are exact up to 2**53 in a float64), got '1e20'",
        ),
        (["--max-memory", "infG"], "expected a finite positive size such as 512M or 2G, got 'infG'"),
        (["--max-memory", "nanG"], "expected a finite positive size such as 512M or 2G, got 'nanG'"),
        (["--set", "prior_a=inf"], "prior_a must be a finite number, got inf"),
        (["--set", "alpha=inf"], "alpha must be a finite number, got inf"),
        (["--set", "theta_true=nan"], "theta_true must be a finite number, got nan"),
        (["--set", "topologies=star,,ring"], "parameter topologies: empty entry in 'star,,ring'"),
        (["--set", "topologies=star,"], "parameter topologies: empty entry in 'star,'"),
        (["--set", "n_slots=100000000"], "keep='summary': the results would need"),
        (["--set", "n_slots=100000000", "--keep", "raw", "--trials", "2"], "would need"),
        (["--set", "n_slots=100000000", "--keep", "raw"], "keep='raw': the results would need"),
    ],
)
def test_bad_run_input_is_one_line_before_any_work(args, message, capsys, tmp_path):
    out = tmp_path / "x"
    err = one_line_error(capsys, ["run", "gfvl-topologies", *args, "--out", str(out), "--quiet"])
    assert message in err, err
    assert not (out / "chunks").exists()  # refused before the store was even created


def test_non_finite_float_parameters_of_every_experiment_are_refused(capsys, tmp_path):
    from jaxfed.experiments import REGISTRY

    assert "spread must be a finite number, got inf" in one_line_error(
        capsys, ["run", "kmeans-convergence", "--set", "spread=inf", "--out", str(tmp_path)]
    )
    assert "snrs_db must be a finite number, got nan" in one_line_error(
        capsys, ["run", "kmeans-snr", "--set", "snrs_db=0,nan", "--out", str(tmp_path)]
    )
    # The Python API is checked too, whichever float field it is.
    for exp in REGISTRY.values():
        floats = [f.name for f in dataclasses.fields(exp.config_cls) if f.type in (float, "float")]
        for name in floats:
            with pytest.raises(ValueError, match=f"{name} must be a finite number"):
                make_config(exp.config_cls, {name: "inf"})


@pytest.mark.parametrize("scale", ["inf", "nan", "-1", "0", "lots"])
def test_bad_scale_is_one_line(scale, capsys):
    assert "--scale: scale must be finite and > 0, got" in one_line_error(capsys, ["reproduce", "--scale", scale])


def test_out_on_a_file_under_a_file_or_unwritable(capsys, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        err = one_line_error(capsys, ["run", "gfvl-topologies", "--out", str(out), *SMALL])
        assert f"{out}: cannot be used as a result directory (Not a directory)" in err
    # A read-only directory (simulated: permissions do not bind root, who may run the tests).
    denied = PermissionError(13, "Permission denied")
    monkeypatch.setattr(store.files, "_makedirs", lambda path: (_ for _ in ()).throw(denied))
    assert "cannot be used as a result directory (Permission denied)" in one_line_error(
        capsys, ["run", "gfvl-topologies", "--out", str(tmp_path / "ro"), *SMALL]
    )
    monkeypatch.undo()
    monkeypatch.setattr(store.files, "_write_file", lambda path, data: (_ for _ in ()).throw(denied))
    assert "cannot write " + str(tmp_path / "ro2" / "identity.json") in one_line_error(
        capsys, ["run", "gfvl-topologies", "--out", str(tmp_path / "ro2"), *SMALL]
    )


def test_more_devices_than_present_are_refused(capsys, monkeypatch):
    # In this process JAX has started with one CPU device, as on a GPU host where the CPU flag
    # that --devices sets cannot create GPUs.
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    err = one_line_error(capsys, ["run", "gfvl-topologies", "--devices", str(len(jax.local_devices()) + 7), *SMALL])
    assert f"--devices {len(jax.local_devices()) + 7}: only {len(jax.local_devices())} cpu device(s) present" in err


def test_unreachable_coordinator_times_out_with_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    result = run_cli(
        "run", "gfvl-topologies", "--out", str(tmp_path), "--quiet", "--coordinator", f"127.0.0.1:{port}",
        "--num-processes", "2", "--process-id", "1", "--coordinator-timeout", "1",
        timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and f"coordinator 127.0.0.1:{port}" in err and "within 1 s" in err, err


def test_plot_of_a_directory_that_is_not_a_finished_run(capsys, tmp_path):
    assert "config.json: cannot be read (No such file or directory); is" in one_line_error(
        capsys, ["plot", str(tmp_path)]
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"experiment": "x", "parameters": [], "points": [], "metrics_sha256": ""})
    )
    assert (
        "config.json: not the config.json of a finished run (needs experiment (str), parameters (dict)"
        in one_line_error(capsys, ["plot", str(tmp_path)])
    )


def test_an_allocation_that_fails_while_building_is_one_line(capsys, tmp_path, monkeypatch):
    """E.g. --set n_agents=200000: the experiment builds a 200000² adjacency matrix."""
    from jaxfed.experiments import REGISTRY

    def build(cfg):
        raise MemoryError("Unable to allocate 149. GiB for an array with shape (200000, 200000) and data type int32")

    monkeypatch.setitem(REGISTRY, "nan", dataclasses.replace(NAN_EXPERIMENT, build=build))
    err = one_line_error(capsys, ["run", "nan", "--out", str(tmp_path), "--quiet"])
    assert "out of memory (Unable to allocate 149. GiB" in err


def test_damaged_chunk_through_the_cli_is_one_line_naming_it(capsys, tmp_path, monkeypatch):
    from jaxfed.experiments import REGISTRY

    monkeypatch.setitem(REGISTRY, "nan", NAN_EXPERIMENT)
    monkeypatch.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
    out = tmp_path / "run"
    argv = ["run", "nan", "--trials", "3", "--chunk-size", "3", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    capsys.readouterr()  # the non-finite warnings of the first run
    chunk = next((out / "chunks").glob("g000_*.npz"))
    chunk.write_bytes(chunk.read_bytes()[:100])
    err = one_line_error(capsys, argv)
    assert f"{chunk}: not a readable .npz file" in err and "--overwrite" in err
    assert cli.main([*argv, "--overwrite"]) == 0


# --------------------------------------------------------------------------- Python API
def walk(key, point):
    return {"x": jax.random.normal(key, (3,)) * point["scale"]}


POINTS = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(2.0)}]
run = functools.partial(engine.run, use_jit=False)


@pytest.mark.parametrize(
    "trial, points, message",
    [
        (lambda k, p: (p["scale"],), POINTS, "trial must return a dict of metric name -> array, got tuple"),
        (lambda k, p: p["scale"], POINTS, "trial must return a dict of metric name -> array, got ShapeDtypeStruct"),
        (lambda k, p: {"a": {"b": p["scale"]}}, POINTS, "metric 'a' must be an array, got dict"),
        (lambda k, p: {"a/b": p["scale"]}, POINTS, "metric name 'a/b'"),
        (
            lambda k, p: {"x": jnp.zeros(p["n"])},
            [{"n": 3}, {"n": 4}],
            "metric 'x' is <f4[3] for point 0 but <f4[4] for point 1: a metric's shape and dtype must not depend on the point",
        ),
        (
            lambda k, p: {"x": jnp.zeros(3)} if p["n"] == 3 else {"y": jnp.zeros(3)},
            [{"n": 3}, {"n": 4}],
            "trial returns metrics ['x'] for point 0 but ['y'] for point 1",
        ),
    ],
)
def test_bad_trial_outputs_name_the_metric_and_the_problem(trial, points, message):
    with pytest.raises(ValueError) as exc:
        run(trial, points, 2)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_trials": 2**53 + 1}, "n_trials must be an integer in [1, 2**53]"),
        ({"n_trials": 4, "max_memory": 10**20 * 1.0}, "max_memory must be an integer >= 1 (bytes)"),
        ({"n_trials": 4, "seed": True}, "seed must be an integer"),
    ],
)
def test_bad_engine_arguments(kwargs, message):
    with pytest.raises(ValueError) as exc:
        run(walk, POINTS, **kwargs)
    assert message in str(exc.value)


def test_chunk_size_is_capped_at_the_trial_count_and_memory_is_checked_first():
    out = engine.run(walk, POINTS, 5, chunk_size=10**11)
    assert out.info["chunk_sizes"] == [5] and out["x"].shape == (2, 5, 3)
    with pytest.raises(
        ValueError,
        match=rf"the smallest chunk \({engine.testing.MICRO_BATCH['cpu']} trials\), padded to a whole micro-batch .* would need .* more than the memory budget of 1 KiB",
    ):
        engine.run(walk, POINTS, 5, max_memory=1024)
    with pytest.raises(
        ValueError, match=r"a chunk of 5000 trials would need .* more than the memory budget of 100 KiB"
    ):
        engine.run(walk, POINTS, 10**6, chunk_size=5000, max_memory=100 * 1024)


def test_a_refused_rerun_names_every_differing_key_with_both_values(tmp_path):
    d = str(tmp_path / "d")
    run(walk, POINTS, 2, out_dir=d, identity={"parameters": {"a": 1, "b": [1, 2]}, "name": "w"})
    with pytest.raises(engine.ConfigMismatch) as exc:
        run(walk, POINTS, 2, seed=5, out_dir=d, identity={"parameters": {"a": 2, "b": [1, 2], "c": 0}, "name": "w"})
    message = str(exc.value)
    for part in (
        "parameters.a: stored 1, given 2",
        "parameters.c: stored (absent), given 0",
        "seed: stored 0, given 5",
    ):
        assert part in message, message
    assert "\n" not in message and "name" not in message.split("differs in")[1]


def nan_trial(key, point):
    x = jax.random.normal(key, (4,)) * point["scale"]
    return {"x": jnp.where(x > 1.5, jnp.nan, jnp.where(x < -2.5, -jnp.inf, x))}


def test_non_finite_metrics_are_handled_and_counted_alike_in_raw_and_summary():
    raw_run = run(nan_trial, POINTS, 300, seed=1, chunk_size=64)
    summary_run = run(nan_trial, POINTS, 300, seed=1, chunk_size=50, keep="summary")
    raw, summary, raw_info, summary_info = raw_run["x"], summary_run["x"], raw_run.info, summary_run.info
    counts = [int((~np.isfinite(raw[p])).any(-1).sum()) for p in range(2)]
    assert raw_info["nonfinite_trials"] == summary_info["nonfinite_trials"] == {"x": counts}
    assert 0 < counts[0] < counts[1] < 300
    np.testing.assert_array_equal(summary.nan_count, (~np.isfinite(raw)).sum(1))
    # Bands leave non-finite trials out in both modes (the summary's within one histogram bin).
    finite_only = np.where(np.isfinite(raw), raw, np.nan)
    raw_band, summary_band = stats.band(raw), stats.band(summary)
    ratio = 10 ** (1 / stats.summary.HIST_PER_DECADE)
    for q, a, b in zip((0.5, 0.125, 0.875), raw_band[:3], summary_band[:3]):
        np.testing.assert_allclose(a, np.nanquantile(finite_only, q, axis=1), rtol=1e-6)
        exact = np.nanquantile(finite_only, q, axis=1, method="inverted_cdf")
        assert np.all(np.abs(b - exact) <= (ratio - 1) * np.abs(exact))


def test_the_devices_per_trial_flags_are_the_hosts_count_on_adversarial_arrays():
    from jaxfed.engine.compiled import nonfinite_per_trial
    from jaxfed.engine.sinks import nonfinite_trials

    rng = np.random.default_rng(0)
    cases = []
    for shape in [(2, 5), (2, 5, 3), (2, 5, 2, 4), (2, 5, 0)]:  # scalar, vector, matrix, empty metrics
        x = rng.normal(size=shape).astype(np.float32)
        flat = x.reshape(2, 5, -1)
        if flat.shape[-1]:
            flat[0, 0, 0] = np.nan  # first trial, first cell
            flat[1, 4, -1] = np.inf  # last trial, last cell
            flat[1, 2, :] = -np.inf  # every cell of one trial
        cases.append(flat.reshape(shape))
    cases.append(rng.integers(0, 9, size=(2, 5, 3)).astype(np.int32))  # integers are always finite
    for x in cases:
        device = np.asarray(nonfinite_per_trial(jnp.asarray(x)))
        assert device.shape == x.shape[:2] and device.dtype == bool
        assert [int(device[p].sum()) for p in range(2)] == [nonfinite_trials(x[p]) for p in range(2)], x.shape


@pytest.mark.parametrize("chunk_size", [1, 7, 64, None])
def test_raw_nonfinite_counts_from_the_device_equal_the_host_count(chunk_size):
    """Counted per chunk on the device; the padding of the last chunk (trials past the count,
    with NaN of their own) must not count."""
    result = engine.run(nan_trial, POINTS, 150, seed=3, chunk_size=chunk_size, progress=False)
    counts = [int((~np.isfinite(result["x"][p])).any(-1).sum()) for p in range(2)]
    assert result.info["nonfinite_trials"] == {"x": counts} and 0 < counts[0] < counts[1]


def test_raw_nonfinite_counts_after_a_resume_from_overlapping_stored_chunks(tmp_path):
    """Restored trials are counted on the host once, however the stored chunks overlap; the new
    ones on the device."""
    identity = {"name": "nan"}
    a, b = tmp_path / "a", tmp_path / "b"
    engine.run(nan_trial, POINTS, 60, seed=3, chunk_size=24, out_dir=str(a), identity=identity, progress=False)
    engine.run(nan_trial, POINTS, 60, seed=3, chunk_size=10, out_dir=str(b), identity=identity, progress=False)
    for name in os.listdir(b / "chunks"):  # [0, 24), [24, 48), [48, 60) and [0, 10), [10, 20), …
        os.replace(b / "chunks" / name, a / "chunks" / name)
    resumed = engine.run(
        nan_trial, POINTS, 200, seed=3, chunk_size=32, out_dir=str(a), identity=identity, progress=False
    )
    fresh = engine.run(nan_trial, POINTS, 200, seed=3, chunk_size=32, progress=False)
    np.testing.assert_array_equal(resumed["x"], fresh["x"])
    counts = [int((~np.isfinite(fresh["x"][p])).any(-1).sum()) for p in range(2)]
    assert resumed.info["nonfinite_trials"] == fresh.info["nonfinite_trials"] == {"x": counts}


@dataclasses.dataclass(frozen=True)
class NanConfig:
    scale: float = 1.0


NAN_EXPERIMENT = Experiment(
    "nan",
    "non-finite toy",
    NanConfig,
    lambda cfg: Sweep(nan_trial, POINTS, [{"s": 1}, {"s": 2}], {"x": ("i",)}),
    plot=lambda *a: None,
    report=lambda *a: "",
)


def test_non_finite_counts_reach_config_json_and_stderr_in_both_modes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
    lines = {}
    for keep in ("raw", "summary"):
        options = engine.RunOptions.for_experiments(seed=1, out_dir=str(tmp_path / keep), chunk_size=30, keep=keep)
        run_experiment(NAN_EXPERIMENT, NanConfig(), 100, options, quiet=True)
        lines[keep] = capsys.readouterr().err.strip().splitlines()
        config = json.loads((tmp_path / keep / "config.json").read_text())
        assert config["nonfinite_trials"]["x"][1] > 0
    assert lines["raw"] == lines["summary"] and len(lines["raw"]) == 1  # once per metric (issue 49)
    assert (
        lines["raw"][0].startswith("jaxfed: warning: nan: x: ")
        and "of 100 trials of point s=1 have NaN" in lines["raw"][0]
        and lines["raw"][0].endswith("(and at 1 more point: config.json)")
    )


def test_python_api_configs_are_checked_for_non_finite_floats_too():
    with pytest.raises(ValueError, match="scale must be a finite number, got inf"):
        run_experiment(NAN_EXPERIMENT, NanConfig(scale=float("inf")), 2)
