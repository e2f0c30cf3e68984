"""benchmarks/accelerator.sh, the benchmark run on a lent GPU, runs on a CPU at tiny sizes with one
device (every step, then the targets table), so that a crash is found before a GPU's minutes are
spent on it; and the table's verdicts follow the figures."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import scaling  # noqa: E402
import targets  # noqa: E402

TARGETS = 7  # issue 35's list for one H200


@pytest.mark.slow  # ~1 minute on a 2-core CPU: three JAX processes and five CLI runs
def test_every_step_of_the_accelerator_script_runs_on_one_cpu_device(tmp_path):
    env = dict(os.environ, SIZE="tiny", OUT=str(tmp_path), PYTHON=sys.executable)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"  # one device: where the raw part crashed
    done = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "accelerator.sh")], env=env, capture_output=True)
    log = (tmp_path / "log.txt").read_text()
    assert done.returncode == 0, log[-3000:]
    assert "failed steps" not in log
    for name in ("gfvl_conjugate.json", "fig3_kernel.json", "summary_parts.json", "engine.json", "targets.md"):
        assert (tmp_path / name).exists(), name
    engine = json.loads((tmp_path / "engine.json").read_text())
    assert {"summary_sweep", "raw_no_out", "million_summary"} <= set(engine)
    assert engine["raw_no_out"]["device_to_host"]["bytes_per_s"] > 0
    rows = json.loads((tmp_path / "targets.json").read_text())["rows"]
    assert len(rows) == TARGETS
    # tiny sizes: the size-bound targets are not measured, the others have a figure and a verdict
    verdicts = {row["target"].split(",")[0]: row["verdict"] for row in rows}
    assert verdicts["10^8 Fig. 3 trials"] == "not measured"
    assert all(row["figure"] != "-" for row in rows)


def test_chunk_arguments_at_a_first_trial_keep_the_trip_count():
    """On one device engine.testing.chunk_function's arguments end with the micro-batch loop's trip count,
    after the first trial: moving the first trial must keep it (it was dropped: a crash on a GPU)."""
    import numpy as np

    one_device = ("seed", "points", "traced", 0, "steps")
    moved = scaling.at_first_trial(one_device, 4096)
    assert moved[:3] == ("seed", "points", "traced") and moved[4:] == ("steps",)
    # the first trial as the engine's (high, low) uint32 halves: trial 4096, and one past 2^32
    assert moved[3].tolist() == [0, 4096] and scaling.at_first_trial(one_device, 2**32 + 7)[3].tolist() == [1, 7]
    assert moved[3].dtype == np.uint32 and len(scaling.at_first_trial(one_device[:4], 7)) == 4


def _write(directory, engine=None, conjugate=None):
    for name, payload in (("engine.json", engine), ("gfvl_conjugate.json", conjugate)):
        if payload is not None:
            (directory / name).write_text(json.dumps(payload))


def _engine(seconds, trials, rss_mib, sweep_ratio, sweep_trials, raw_fraction):
    return {
        "million_summary": {"seconds": seconds, "trials": trials, "peak_rss_mib": rss_mib},
        "summary_sweep": {"ratio_to_kernel": sweep_ratio, "trials": sweep_trials},
        "raw_no_out": {
            "fraction_of_device_to_host": raw_fraction,
            "bytes_per_s": raw_fraction * 5e10,
            "device_to_host": {"bytes_per_s": 5e10},
        },
    }


def _conjugate(vs_plain, vs_rng, rate):
    return {
        "kernel_over_plain_vmap": vs_plain,
        "fraction_of_rng_limit": vs_rng,
        "throughput_trial_slots_per_s": rate,
        "sizes": {"trials": 100000},
        "machine": {"device": "gpu:NVIDIA H200"},
    }


def test_targets_table_verdicts(tmp_path):
    _write(tmp_path, _engine(9.9, 10**8, 1900, 0.85, 2**24, 0.5), _conjugate(0.9, 0.25, 1.28e10))
    assert [row["verdict"] for row in targets.main([str(tmp_path)])] == ["met"] * TARGETS
    _write(tmp_path, _engine(10.0, 10**8, 1908, 0.84, 2**24, 0.49), _conjugate(0.89, 0.24, 1.27e10))
    assert [row["verdict"] for row in targets.main([str(tmp_path)])] == ["not met"] * TARGETS
    # below a target's size: not measured, whatever the figure
    _write(tmp_path, _engine(1.0, 10**7, 100, 0.99, 10**7 - 1, 0.9))
    verdicts = [row["verdict"] for row in targets.main([str(tmp_path)])]
    assert verdicts[0] == verdicts[2] == verdicts[5] == "not measured"
    assert "| 10^8 Fig. 3 trials" in (tmp_path / "targets.md").read_text()


def test_targets_table_without_figures(tmp_path):
    rows = targets.main([str(tmp_path)])
    assert len(rows) == TARGETS and all(row["verdict"] == "not measured" for row in rows)
