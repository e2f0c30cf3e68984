"""benchmarks/report_statistics.py runs end to end at a tiny size: CLI runs in fresh processes with
timers around the report's statistics, the engine's time from config.json, the NumPy loop scaled."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))

import report_statistics as bench  # noqa: E402


@pytest.mark.slow
def test_the_benchmark_times_statistics_engine_and_loop(tmp_path):
    out = tmp_path / "r.json"
    result = bench.main(["--trials", "64", "--repeats", "1", "--loop-trials", "1", "--out", str(out)])
    run = result["codes"]["this code"]["runs"][0]
    assert run["compile_cached"] == [True]  # the warm-up run filled the cache
    assert 0 < run["statistics_s"] < run["wall_s"] and 0 < run["band_s"] < run["wall_s"]
    assert 0 < run["engine_s"] < run["wall_s"] and result["numpy_loop_s"][0] > 0
    assert out.exists()
