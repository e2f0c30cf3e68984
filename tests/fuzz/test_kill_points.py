"""A fuzz harness for kills (Trust V, part 4): ``jaxfed run``, a growth, ``jaxfed export`` and
``jaxfed merge`` SIGKILLed at a random moment (drawn by a seeded generator), then the same command
run again: the result must be byte-identical to an uninterrupted one (metrics.npz, the export
file), the inputs unchanged; never a refusal of the rerun, a lost run or a silent change. Real
processes, so the slow suite only; a failing case prints its seed, command and kill time, and
``JAXFED_FUZZ_SEED`` replays the budget."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("JAXFED_FUZZ_SEED", "20261208"))
RUN = ["run", "gfvl-topologies", "--set", "n_slots=40", "--chunk-size", "64", "--quiet"]
N = 1280


def _jaxfed(*args, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "jaxfed.cli", *map(str, args)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert not check or done.returncode == 0, done.stderr[-3000:]
    return done


def _killed(args, after: float) -> int:
    """``jaxfed ARGS`` SIGKILLed ``after`` seconds in (or finished before): its exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxfed.cli", *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        proc.wait(after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    return proc.returncode


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, its CSV export, a shorter run to grow, and 3 shards with their merge."""
    root = tmp_path_factory.mktemp("kills")
    _jaxfed(*RUN, "--trials", N, "--out", root / "full")
    _jaxfed("export", root / "full", "--format", "csv", "--metric", "kl", "--out", root / "full.csv")
    _jaxfed(*RUN, "--trials", 128, "--out", root / "short")
    for i in range(3):
        _jaxfed(*RUN, "--trials", N, "--shard", f"{i}/3", "--out", root / f"s{i}")
    return root


def _case(kind: str, reference, tmp, after: float) -> None:
    full = _bytes(reference / "full" / "metrics.npz")
    if kind == "run":
        args = [*RUN, "--trials", N, "--out", tmp / "run"]
        result = tmp / "run" / "metrics.npz"
    elif kind == "grow":
        shutil.copytree(reference / "short", tmp / "grow")
        args = [*RUN, "--trials", N, "--out", tmp / "grow"]
        result = tmp / "grow" / "metrics.npz"
    elif kind == "export":
        args = ["export", reference / "full", "--format", "csv", "--metric", "kl", "--out", tmp / "out.csv"]
        result = tmp / "out.csv"
    else:
        args = ["merge", *(reference / f"s{i}" for i in (2, 0, 1)), "--out", tmp / "merged", "--quiet"]
        result = tmp / "merged" / "metrics.npz"
    status = _killed(args, after)
    again = _jaxfed(*args, check=False)
    assert again.returncode == 0, (
        f"the rerun after a kill at {after:.2f} s (status {status}) failed: {again.stderr[-2000:]}"
    )
    expected = _bytes(reference / "full.csv") if kind == "export" else full
    assert _bytes(result) == expected
    assert _bytes(reference / "full" / "metrics.npz") == full  # the inputs are untouched


def test_commands_killed_at_random_moments_end_as_if_never_killed(reference, tmp_path):
    rng = random.Random(SEED)
    for case in range(12):
        kind = ("run", "grow", "export", "merge")[case % 4]
        after = rng.uniform(0.5, 9.0)
        tmp = tmp_path / f"case{case}"
        tmp.mkdir()
        started = time.perf_counter()
        try:
            _case(kind, reference, tmp, after)
        except AssertionError as err:
            raise AssertionError(f"seed {SEED}, case {case}: {kind} killed at {after:.2f} s: {err}") from None
        assert time.perf_counter() - started < 300
