"""benchmarks/dask_throughput.py times what it says: one `jaxfed run` and the same run through Dask
on a local cluster, cold (empty caches) or warm (one cache filled first), the same bytes."""

import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks")


@pytest.mark.slow  # two local clusters and CLI runs of 2,000 trials, cold and warm: ~60 s
@pytest.mark.parametrize("warm", [False, True])
def test_the_dask_benchmark_compares_the_same_run_both_ways(tmp_path, warm):
    out = tmp_path / "dask.json"
    command = [sys.executable, os.path.join(BENCHMARKS, "dask_throughput.py"), "--quick", "--out", str(out)]
    done = subprocess.run(command + (["--warm"] if warm else []), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert rows["warm"] is warm and rows["trials"] == 2_000 and rows["same_bytes"] is True
    assert rows["dask"]["tasks"] == 8 and rows["dask_one_task_per_worker"]["tasks"] == 2
    for key in ("dask", "dask_one_task_per_worker"):
        run = rows["runs"][key][0]
        assert 0 < run["first_task_s"] <= run["last_task_s"] < run["seconds"] and run["merge_s"] > 0
        assert rows[key]["ratio"] == pytest.approx(rows["one_process"]["seconds"] / rows[key]["seconds"])
