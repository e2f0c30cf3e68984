"""benchmarks/compile.py times what it says: the program a run compiles, and a cold run (an empty
cache of its own) beside a warm one (the cache the cold run filled)."""

import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks")
sys.path.insert(0, BENCHMARKS)

import compile as bench  # noqa: E402


def test_program_sizes_are_the_engines_device_program_per_group():
    sizes = bench.program_sizes("gfvl-topologies")
    assert sizes["groups"] == 1 and sizes["stablehlo_lines"][0] > 500 and sizes["compile_s"][0] > 0


@pytest.mark.slow  # two CLI runs of 2,000 trials and a few NumPy trials: ~40 s
def test_the_cold_run_compiles_and_the_warm_one_loads(tmp_path):
    out = tmp_path / "compile.json"
    script = os.path.join(BENCHMARKS, "compile.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--skip-experiments", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    case = json.loads(out.read_text())["gfvl_topologies_end_to_end"]
    cold, warm = case["cold"], case["warm"]
    assert cold["compile_s"] > 0.2 and warm["compile_s"] < cold["compile_s"] / 2  # the warm run loads it
    assert 0 < cold["compile_share"] < 1 and cold["compile_wait_s"] > warm["compile_wait_s"]
    assert case["numpy_loop_s"] > 0 and cold["speedup_over_numpy_loop"] > 0
