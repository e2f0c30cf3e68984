"""Engine at scale: devices, processes, memory budget, streaming summaries."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from jaxfed import engine, stats
from jaxfed.experiments.gfvl import topologies as gfvl_topologies

SMALL = ["--set", "n_slots=60", "--quiet"]


def cli(*args, env=None, **kwargs):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "jaxfed.cli", *args], capture_output=True, text=True, timeout=600, env=full_env, **kwargs
    )


def load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "run"
    result = cli("run", "gfvl-topologies", "--trials", "300", "--chunk-size", "128", "--out", str(out), *SMALL)
    assert result.returncode == 0, result.stderr
    return load(out / "metrics.npz")


@pytest.mark.slow  # ~22 s; the default suite folds four devices' summary shares (test_device_summary)
def test_four_forced_cpu_devices_give_identical_metrics(single, tmp_path):
    out = tmp_path / "four"
    result = cli(
        "run", "gfvl-topologies", "--trials", "300", "--devices", "4", "--chunk-size", "100", "--out", str(out), *SMALL
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["engine"]["devices"] == 4
    np.testing.assert_array_equal(load(out / "metrics.npz")["kl"], single["kl"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(run_args: list, out) -> dict:
    """Runs ``jaxfed run`` as two processes joined by jax.distributed; config.json's engine record."""
    port = _free_port()
    args = [*run_args, "--out", str(out), *SMALL, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "jaxfed.cli", *args, "--process-id", str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0 and "collective" in err.lower() and "not" in err.lower():
            pytest.skip(f"this jaxlib cannot run CPU collectives across processes: {err.strip().splitlines()[-1]}")
        assert p.returncode == 0, err
    engine_record = json.loads((out / "config.json").read_text())["engine"]
    assert engine_record["processes"] == 2 and engine_record["devices"] == 2
    return engine_record


@pytest.mark.slow  # ~7 s of the default suite's 7 minutes
def test_two_processes_with_jax_distributed_give_identical_metrics(single, tmp_path):
    out = tmp_path / "two"
    _two_processes(["run", "gfvl-topologies", "--trials", "300", "--chunk-size", "128"], out)
    np.testing.assert_array_equal(load(out / "metrics.npz")["kl"], single["kl"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        ["--trials", "300", "--keep", "summary"],
        ["--target-se", "0.004", "--target-metric", "kl@59", "--max-trials", "640"],
    ],
    ids=["summary", "target"],
)
def test_two_processes_give_identical_summaries_and_targeted_stops(mode, tmp_path):
    """Summary and precision-targeted runs over two processes equal the one-process run: the same
    histogram counts, bit-identical float64 sums, and (targeted) the same stop per point."""
    run_args = ["run", "gfvl-topologies", "--chunk-size", "128", *mode]
    one = tmp_path / "one"
    result = cli(*run_args, "--out", str(one), *SMALL)
    assert result.returncode == 0, result.stderr
    two_record = _two_processes(run_args, tmp_path / "two")
    one_record = json.loads((one / "config.json").read_text())["engine"]
    assert two_record.get("target") == one_record.get("target")
    if "--target-se" in mode:
        assert len(set(one_record["target"]["trials_per_point"])) > 1  # the points stopped on their own
    a, b = load(one / "metrics.npz"), load(tmp_path / "two" / "metrics.npz")
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.slow  # ~8 s of the default suite's 7 minutes
def test_small_memory_budget_gives_smaller_chunks_and_the_same_metrics(single, tmp_path):
    sweep = gfvl_topologies.build(gfvl_topologies.Config(n_slots=60))
    # The experiment shares each trial's key across topologies, as `jaxfed run` does.
    crn = gfvl_topologies.EXPERIMENT.common_random_numbers
    # More trials than one micro-batch (512 on a CPU), so that the small budget can split them, and
    # metrics (3.5 MB) above the share of 12 MiB that a run may take to be compiled whole.
    a = engine.run(sweep.trial, sweep.points, 4800, max_memory=2**30, common_random_numbers=crn)
    b = engine.run(sweep.trial, sweep.points, 4800, max_memory=12 * 2**20, common_random_numbers=crn)
    big, small = a.info, b.info
    assert small["chunk_sizes"][0] < big["chunk_sizes"][0]
    assert small["chunk_sizes"][0] % engine.testing.MICRO_BATCH["cpu"] == 0
    np.testing.assert_array_equal(a["kl"], b["kl"])
    np.testing.assert_array_equal(a["kl"][:, :300], single["kl"])  # the first 300 trials of the same keys
    result = cli(
        "run", "gfvl-topologies", "--trials", "4800", "--max-memory", "12M", "--out", str(tmp_path / "m"), *SMALL
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["engine"]["chunk_sizes"] == small["chunk_sizes"]


# ~13 s; the default suite checks a quantile within one bin on small data (test_summary_of_signed_values_and_nans).
@pytest.mark.slow
def test_summary_bands_match_raw_quantiles_within_the_sketch_error():
    """Same 10,000 trials kept raw and summarised: quantiles agree within one histogram bin."""
    sweep = gfvl_topologies.build(gfvl_topologies.Config(n_slots=80))
    raw = engine.run(sweep.trial, sweep.points, 10_000, seed=7, chunk_size=3000)["kl"]
    summary = engine.run(sweep.trial, sweep.points, 10_000, seed=7, chunk_size=2048, keep="summary")["kl"]
    assert isinstance(summary, stats.Summary) and summary.mean.shape == (3, 80)
    np.testing.assert_array_equal(summary.count, 10_000)
    np.testing.assert_allclose(summary.mean, raw.mean(1, dtype=np.float64), rtol=1e-9)
    np.testing.assert_allclose(summary.se, raw.std(1, ddof=1, dtype=np.float64) / 100, rtol=1e-6)
    ratio = 10 ** (1 / stats.summary.HIST_PER_DECADE)
    for q in (0.125, 0.5, 0.875):
        exact = np.quantile(raw, q, axis=1, method="inverted_cdf").astype(np.float64)
        sketch = stats.summary_quantile(summary, q)
        small = np.abs(exact) < 10.0**stats.summary.HIST_LOG_MIN
        assert np.all(sketch[small] == 0)
        rel = sketch[~small] / exact[~small]
        assert np.all((rel <= ratio) & (rel >= 1 / ratio)), (rel.min(), rel.max())


# ~14 s: the default suite checks summaries across chunk sizes and growth on a smaller trial
# (test_device_summary, test_determinism's user trial); the slow suite every experiment's.
@pytest.mark.slow
def test_summary_sums_do_not_depend_on_chunking_or_resume(tmp_path):
    sweep = gfvl_topologies.build(gfvl_topologies.Config(n_slots=30))
    a = engine.run(sweep.trial, sweep.points, 700, chunk_size=700, keep="summary")["kl"]
    identity = {"x": 1}
    d = str(tmp_path / "s")
    b = engine.run(sweep.trial, sweep.points, 700, chunk_size=130, keep="summary", out_dir=d, identity=identity)["kl"]
    resumed = engine.run(sweep.trial, sweep.points, 700, chunk_size=130, keep="summary", out_dir=d, identity=identity)[
        "kl"
    ]
    for field in stats.Summary._fields:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        np.testing.assert_array_equal(getattr(b, field), getattr(resumed, field))


def test_summary_of_signed_values_and_nans():
    acc = stats.summary.SummaryAccumulator((1, 1))
    values = np.array([-3.0, -1e-3, 0.0, 2e-14, 5.0, 7.0, np.nan], np.float32).reshape(1, -1, 1)
    acc.add(values)
    s = acc.result()
    assert s.count[0, 0] == 6 and s.nan_count[0, 0] == 1
    assert s.mean[0, 0] == pytest.approx(np.mean([-3.0, -1e-3, 0.0, 2e-14, 5.0, 7.0]), rel=1e-6)
    ratio = 10 ** (1 / stats.summary.HIST_PER_DECADE)
    for q, exact in [(0.1, -3.0), (0.3, -1e-3), (0.5, 0.0), (0.9, 7.0)]:
        got = stats.summary_quantile(s, q)[0, 0]
        assert (got == exact == 0) or (exact != 0 and 1 / ratio <= got / exact <= ratio), (q, got)
