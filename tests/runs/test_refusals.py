"""Refusals that say what and how (issue 59, "Trust VI", part 4): the damaged input named with
"damaged"/"truncated" and advice a command has; a shard called a shard; a verify mismatch shows the
first differing value; options that need another option refused alone."""

import os
import pathlib

import pytest
from support import SMALL, one_line_error

from jaxfed import cli

NAME = "gfvl-topologies"
SETS = [arg for k, v in SMALL[NAME].items() for arg in ("--set", f"{k}={v}")]
EXAMPLE = str(pathlib.Path(__file__).parents[2] / "docs" / "examples" / "grid_gossip.py")


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("two")
    for i in (0, 1):
        argv = ["run", NAME, "--trials", "128", *SETS, "--shard", f"{i}/2", "--out", str(root / str(i)), "--quiet"]
        assert cli.main(argv) == 0
    return [str(root / "0"), str(root / "1")]


def _damaged_copy(tmp_path, shards, damage) -> tuple[list[str], str]:
    """The two shards, shard 1's chunk damaged by ``damage(path)`` in a copy: (shard dirs, the chunk)."""
    import shutil

    copy = str(tmp_path / "1")
    shutil.copytree(shards[1], copy)
    chunks = os.path.join(copy, "chunks")
    chunk = os.path.join(chunks, sorted(os.listdir(chunks))[0])
    damage(chunk)
    return [shards[0], copy], chunk


def _flip_a_bit(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 1
    open(path, "wb").write(bytes(data))


def _truncate(path: str) -> None:
    os.truncate(path, os.path.getsize(path) // 3)


@pytest.mark.parametrize("damage", [_flip_a_bit, _truncate], ids=["bit-flipped", "truncated"])
def test_merge_names_the_damaged_shard_file_and_a_fix_merge_can_take(capsys, tmp_path, two_shards, damage):
    """A damaged chunk of a shard is named where it is (not under the merge's --out), said damaged
    (or truncated), with advice naming the shard's own command, which has --overwrite (merge has not)."""
    shards, chunk = _damaged_copy(tmp_path, two_shards, damage)
    out = str(tmp_path / "merged")
    err = one_line_error(capsys, ["merge", *shards, "--out", out])
    assert err.startswith(f"jaxfed: error: merge: {chunk}: ") and out not in err
    assert "damaged" in err and (damage is _flip_a_bit or "truncated" in err)
    assert "overwrite=True" not in err and f"--shard 1/2 --out {shards[1]} --overwrite" in err
    # the advice works: the shard's command with --overwrite recomputes it, and the merge goes through
    assert cli.main(["run", NAME, "--trials", "128", *SETS, "--shard", "1/2", "--out", shards[1], "--overwrite", "--quiet"]) == 0  # fmt: skip
    assert cli.main(["merge", *shards, "--out", out, "--quiet"]) == 0


@pytest.mark.parametrize("command", [["export", "--format", "csv", "--metric", "kl"], ["verify"], ["report"], ["plot"]])
def test_a_shard_is_called_a_shard(capsys, two_shards, command):
    err = one_line_error(capsys, [command[0], two_shards[1], *command[1:]])
    assert f"{two_shards[1]}: is shard 1/2 of a run (trials [64, 128) of 128 per point)" in err
    assert "merge the shards first" in err and "metrics_sha256" not in err


def test_verify_of_a_user_experiment_run_speaks_of_the_run(capsys, tmp_path):
    out = str(tmp_path / "grid")
    argv = ["run", f"{EXAMPLE}:EXPERIMENT", "--trials", "4", "--set", "sides=2", "--set", "n_slots=10"]
    assert cli.main([*argv, "--out", out, "--quiet"]) == 0
    err = one_line_error(capsys, ["verify", out])
    assert "the run came from the experiment" in err and "--experiment" in err and "shard" not in err


@pytest.mark.parametrize(
    "options, says",
    [
        (["--budget", "3s"], "--budget is the time --decide spends growing undecided runs: give --decide too"),
        (["--tasks", "3"], "--tasks is the number of shards of a Dask run: give --executor dask://HOST:PORT too"),
        (["--executor", "dask://127.0.0.1:8786", "--shard", "0/1"], "it does not go with --shard I/M"),
    ],
)
def test_an_option_that_needs_another_is_refused_alone(capsys, tmp_path, options, says):
    """Before this, each was silently ignored (the run ran as if it were not given)."""
    out = tmp_path / "run"
    err = one_line_error(capsys, ["run", NAME, "--trials", "8", *SETS, *options, "--out", str(out)])
    assert says in err and not out.exists()
    if options[0] == "--budget":
        assert says in one_line_error(capsys, ["reproduce", "--budget", "1s", "--out", str(out)])


def test_a_directory_holding_only_jaxfeds_build_record_takes_a_run(tmp_path, two_shards):
    """build.json is one of the files jaxfed writes (the store's own names): a directory left with
    it and no identity.json is not refused as someone else's."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "build.json").write_bytes(open(os.path.join(two_shards[0], "build.json"), "rb").read())
    assert cli.main(["run", NAME, "--trials", "8", *SETS, "--out", str(out), "--quiet"]) == 0
