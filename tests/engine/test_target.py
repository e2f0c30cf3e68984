"""Precision-targeted runs: each point stops at the first chunk boundary where the standard error
of the target metric is at most the target, reproducibly, through a kill too."""

import json
import subprocess
import sys

import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine, stats, store

MAX, CHUNK, TARGET = 1000, 64, 0.1


def targeted(target_se=TARGET, target_metric="walk@4", **kwargs):
    out = engine.run(
        trial,
        POINTS,
        MAX,
        seed=1,
        chunk_size=CHUNK,
        keep="summary",
        target_se=target_se,
        target_metric=target_metric,
        compilation_cache="off",
        **kwargs,
    )
    return out, out.info["target"]


@pytest.fixture(scope="module")
def run_once():
    return targeted()


@pytest.mark.slow
def test_each_point_stops_at_the_first_chunk_boundary_where_the_target_holds(run_once):
    out, target = run_once
    counts = target["trials_per_point"]
    assert counts == out["walk"].count[:, 4].tolist() and len(set(counts)) > 1  # points stop on their own
    # The stored-chunk view: fixed-count runs up to each chunk boundary give the running summaries.
    for p, n in enumerate(counts):
        assert n % CHUNK == 0 or n == MAX
        at_stop = engine.run(trial, POINTS, n, seed=1, chunk_size=CHUNK, keep="summary")["walk"]
        assert at_stop.se[p, 4] <= TARGET or n == MAX
        assert target["se_reached"][p] == pytest.approx(at_stop.se[p, 4], rel=1e-12)
        if n > CHUNK:  # one chunk earlier the target did not hold
            before = engine.run(trial, POINTS, n - CHUNK, seed=1, chunk_size=CHUNK, keep="summary")["walk"]
            assert before.se[p, 4] > TARGET
        np.testing.assert_allclose(out["walk"].mean[p], at_stop.mean[p], rtol=1e-12)
        np.testing.assert_array_equal(out["walk"].hist[p], at_stop.hist[p])


@pytest.mark.slow
def test_reproducible_and_a_kill_resumes_identically(run_once, tmp_path, monkeypatch):
    out, target = run_once
    again, target_again = targeted()
    assert target_again == target
    real, saves = store.Store.save_summary, []

    def save_then_die(self, *args):
        real(self, *args)
        saves.append(args)
        if len(saves) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(store.Store, "save_summary", save_then_die)
    d = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):  # a state stored after every chunk, so the 3rd save comes mid-run
        targeted(out_dir=d, identity={}, checkpoint_every=0)
    monkeypatch.setattr(store.Store, "save_summary", real)
    resumed, target_resumed = targeted(out_dir=d, identity={})
    assert target_resumed == target
    for a, b in ((again, out), (resumed, out)):
        for name in out:
            for x, y in zip(a[name], b[name]):
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "metric, message",
    [
        ("nope", "target metric 'nope' does not exist; metrics: ari, "),
        ("loss@99", "target metric index '99' does not exist in 'loss'"),
    ],
)
def test_an_unknown_target_metric_or_index_is_one_line_and_status_2(metric, message, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxfed.cli",
            "run",
            "kmeans-snr",
            "--target-se",
            "0.01",
            "--target-metric",
            metric,
            "--out",
            str(tmp_path / "x"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"jaxfed: error: {message}")


@pytest.mark.slow
def test_config_json_records_the_trials_and_the_precision_of_each_point(tmp_path):
    out = tmp_path / "t"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxfed.cli",
            "run",
            "gfvl-topologies",
            "--set",
            "n_slots=20",
            "--target-se",
            "0.05",
            "--target-metric",
            "kl@19",
            "--max-trials",
            "640",
            "--chunk-size",
            "64",
            "--out",
            str(out),
            "--quiet",
            "--compilation-cache",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    target = json.loads((out / "config.json").read_text())["engine"]["target"]
    assert target["max_trials"] == 640 and len(target["trials_per_point"]) == 3
    assert all(se <= 0.05 or n == 640 for se, n in zip(target["se_reached"], target["trials_per_point"]))


@pytest.mark.slow  # ~13 s; the default suite checks the same stopping rule on the mean
def test_a_median_target_stops_each_point_where_the_histogram_median_se_first_holds():
    """``target_statistic="median"``: the same stopping rule on :func:`jaxfed.stats.median_se`,
    checked against fixed-count runs at each chunk boundary."""
    out, target = targeted(target_se=0.15, target_metric="last", target_statistic="median")
    counts = target["trials_per_point"]
    assert target["statistic"] == "median" and len(set(counts)) > 1
    for p, n in enumerate(counts):
        assert n % CHUNK == 0 or n == MAX
        at_stop = engine.run(trial, POINTS, n, seed=1, chunk_size=CHUNK, keep="summary")["last"]
        reached = stats.median_se(at_stop)[p]
        assert reached <= 0.15 or n == MAX
        assert target["se_reached"][p] == pytest.approx(reached, rel=1e-12)
        if n > CHUNK:
            before = engine.run(trial, POINTS, n - CHUNK, seed=1, chunk_size=CHUNK, keep="summary")["last"]
            assert stats.median_se(before)[p] > 0.15
    np.testing.assert_array_equal(out["last"].count, np.asarray(counts))


def test_an_unknown_target_statistic_is_refused():
    with pytest.raises(ValueError, match=r"target_statistic must be one of \('mean', 'median'\), got 'mode'"):
        engine.run(trial, POINTS, 64, keep="summary", target_se=0.1, target_metric="last", target_statistic="mode")
