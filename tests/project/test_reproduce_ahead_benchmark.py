"""benchmarks/reproduce_ahead.py times what it says: ``jaxfed reproduce`` cold with the next experiment
compiled ahead and without, each on an emptied cache of its own, and compares their metrics.npz."""

import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks")


@pytest.mark.slow  # two cold `jaxfed reproduce` of three experiments at --scale 0.01: ~90 s
def test_both_arms_run_cold_and_write_the_same_metrics(tmp_path):
    out = tmp_path / "reproduce_ahead.json"
    script = os.path.join(BENCHMARKS, "reproduce_ahead.py")
    done = subprocess.run(
        [sys.executable, script, "--quick", "--out", str(out)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    (runs,) = json.loads(out.read_text())["rounds"]
    assert set(runs["same_metrics"]) == {"gfvl-topologies", "kmeans-digits1", "gfvl-graphs"}
    assert all(runs["same_metrics"].values())
    for kind in ("ahead", "foreground"):  # cold: each run waited for the compiler
        run = runs[kind]
        assert 0 < run["compile_wait_s"] < run["engine_s"] < run["seconds"] and 0 < run["compile_share"] < 1
        assert set(run["experiments"]) == set(runs["same_metrics"])
