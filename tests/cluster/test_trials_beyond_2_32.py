"""docs/clusters.md's plan of 10^11 Fig. 3 trials on 1,000 GPUs as jaxfed takes it: shards of a run
of 10^11 trials per point are planned (``--dry-run``) and computed (a shard of a handful of trials
near 10^11, whose indices are far past 2^32), bit for bit whatever the chunks and devices."""

import glob
import os
import pathlib
import shlex

import numpy as np
from support import one_line_error

from jaxfed import cli

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "clusters.md"
PLAN = ["run", "gfvl-topologies", "--trials", "100000000000", "--keep", "summary"]


def _documented_command() -> list[str]:
    """The shard command of docs/clusters.md's 10^11 plan, as written there."""
    section = DOC.read_text().split("### At scale: 10^11")[1].split("\n## ")[0]
    (line,) = [line for line in section.splitlines() if line.startswith("jaxfed run gfvl-topologies")]
    return shlex.split(line.rstrip("\\"))[1:]


def test_the_documented_plan_s_shards_0_and_999_are_planned_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    """The plan's command as docs/clusters.md writes it, in SLURM array tasks 0 and 999 (``--dry-run``:
    a shard of 10^8 Fig. 3 trials is hours of this machine's CPU)."""
    monkeypatch.setenv("SCRATCH", str(tmp_path))
    for index, trials in ((0, "trials [0, 100,000,000)"), (999, "trials [99,900,000,000, 100,000,000,000)")):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(index))
        argv = [os.path.expandvars(arg) for arg in _documented_command()]
        assert argv[:5] == PLAN[:5] and "--shard" in argv
        assert cli.main([*argv, "--dry-run"]) == 0
        printed = capsys.readouterr().out
        assert trials in printed and "keep summary" in printed, printed
        assert "chunk(s) of at most" in printed and "per device" in printed, printed
    assert not any(tmp_path.iterdir())


def test_a_dry_run_refuses_what_it_cannot_plan_in_one_line(capsys):
    err = one_line_error(capsys, [*PLAN, "--dry-run", "--executor", "dask://127.0.0.1:1"])
    assert "--dry-run" in err and "--executor" in err


def _state(out):
    (path,) = glob.glob(str(out / "chunks" / "summary_g*.npz"))
    with np.load(path) as stored:
        return {name: stored[name] for name in stored.files if name != "__meta__"}


def test_a_shard_past_2_32_computes_the_same_bits_whatever_its_chunks(tmp_path, capsys):
    """The last shard of 10^9 of the run (trials [99,999,999,872, 10^11), high halves 23) on two
    devices in one chunk, then one device in chunks of 64: the same summary state, a shard's range
    state (that such trials differ from trials below 2^32: tests/engine/test_trial_keys.py)."""
    states = []
    for name, shard, extra in (
        ("two", "999999999/1000000000", []),
        ("one", "999999999/1000000000", ["--chunk-size", "64", "--devices", "1"]),
    ):
        argv = [*PLAN, "--shard", shard, "--set", "n_slots=5", "--out", str(tmp_path / name), "--quiet", *extra]
        assert cli.main(argv) == 0
        states.append(_state(tmp_path / name))
    two, one = states
    assert two.keys() == one.keys() and all(np.array_equal(two[k], one[k]) for k in two)
    assert int(two["kl/first"][0]) * 64 == 99_999_999_872 and int(two["kl/count"].min()) == 128
