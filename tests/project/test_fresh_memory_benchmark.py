"""benchmarks/fresh_memory.py runs end to end at a tiny size: each round in a fresh process, its
four timings recorded with the load, the medians over the rounds, the scratch file removed."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))

import fresh_memory as bench  # noqa: E402


def test_the_benchmark_times_fresh_and_held_memory_in_fresh_processes(tmp_path):
    out = tmp_path / "fresh.json"
    result = bench.main(["--mb", "4", "--rounds", "2", "--gap", "0", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["mb"] == 4 and len(result["rounds"]) == 2
    for figures in result["rounds"]:
        assert len(figures["load"]) == 3
        assert all(figures[name] > 0 for name in bench.FIGURES)
    assert set(result["median_s"]) == set(bench.FIGURES)
    assert os.listdir(tmp_path) == ["fresh.json"]  # the rounds' scratch folders and files are gone
