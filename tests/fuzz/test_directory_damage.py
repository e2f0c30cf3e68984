"""A fuzz harness for result directories (Trust V, part 4): random damage to a finished run, raw and
summary, drawn by a seeded generator. Whatever is damaged (a byte flipped, a file truncated,
deleted, swapped with another, grown, replaced by a link or a FIFO), reading the directory back
(``rundir.load_results``, what ``open_results``, ``plot``, ``report`` and ``export`` read) and
exporting it must give a clear one-line error, or results byte-identical to the undamaged run:
never a traceback, a hang (each case has a time limit), a silent change or a lost run. A rerun of
the same command on a damaged directory (slow budget) refuses in one line or gives the undamaged
metrics again. A small budget runs in the default suite, at least 500 cases in the slow suite; a
failing case prints its seed and damage, and ``JAXFED_FUZZ_SEED`` replays a budget."""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import threading

import numpy as np
import pytest

from jaxfed import cli
from jaxfed.store import rundir

SEED = int(os.environ.get("JAXFED_FUZZ_SEED", "20261206"))
CASE_SECONDS = 30  # a case that takes longer has hung (a FIFO waited on, a lock never released)
KINDS = ("flip", "truncate", "delete", "swap", "append", "link", "fifo", "empty", "huge")
OUTCOMES = {
    "refused": 0,
    "identical": 0,
}  # how the cases so far ended (a harness whose cases all end one way tests little)


def _command(*args) -> tuple[int, str]:
    """``jaxfed ARGS`` in this process: (exit status, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(list(map(str, args)))
    return code, err.getvalue().strip()


RUN = ["run", "gfvl-topologies", "--trials", "70", "--set", "n_slots=12", "--set", "n_agents=4", "--quiet"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """Two finished runs of the same small sweep, raw and summary, and their metrics read back."""
    root = tmp_path_factory.mktemp("fuzz")
    runs = {}
    for keep in ("raw", "summary"):
        out = root / keep
        assert _command(*RUN, "--keep", keep, "--chunk-size", "32", "--out", out)[0] == 0
        runs[keep] = (out, _metrics(rundir.load_results(str(out))[1]))
    return runs


def _metrics(results: dict) -> dict:
    """Every array of the results as bytes (a Summary field by field)."""
    out = {}
    for name, value in results.items():
        for field, array in value._asdict().items() if hasattr(value, "_asdict") else [("", value)]:
            a = np.asarray(array)
            out[f"{name}/{field}"] = (a.dtype.str, a.shape, a.tobytes())
    return out


def _files(run) -> list:
    return sorted(p for p in run.rglob("*") if p.is_file() and not p.is_symlink() and p.name != ".lock")


def damage(run, rng: random.Random) -> str:
    """Damages one file of ``run`` in place; says what it did."""
    files = _files(run)
    target = rng.choice(files)
    kind = rng.choice(KINDS)
    name = target.relative_to(run)
    data = target.read_bytes()
    if kind == "flip" and data:
        i = rng.randrange(len(data))
        target.write_bytes(data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :])
        return f"flip a bit of byte {i} of {name}"
    if kind == "truncate" and data:
        n = rng.randrange(len(data))
        target.write_bytes(data[:n])
        return f"truncate {name} to {n} bytes"
    if kind == "delete":
        target.unlink()
        return f"delete {name}"
    if kind == "swap" and len(files) > 1:
        other = rng.choice([f for f in files if f != target])
        other_data = other.read_bytes()
        target.write_bytes(other_data)
        other.write_bytes(data)
        return f"swap {name} and {other.relative_to(run)}"
    if kind == "append":
        target.write_bytes(data + rng.randbytes(rng.randrange(1, 64)))
        return f"append bytes to {name}"
    if kind == "link" and len(files) > 1:
        other = rng.choice([f for f in files if f != target])
        target.unlink()
        target.symlink_to(other)
        return f"replace {name} by a link to {other.relative_to(run)}"
    if kind == "fifo":
        target.unlink()
        os.mkfifo(target)
        return f"replace {name} by a FIFO"
    if kind == "huge":
        with open(target, "r+b") as f:
            f.truncate((1 << 34) + 1)  # sparse: more than any file a result directory is read up to
        return f"grow {name} to 16 GiB + 1 (sparse)"
    target.write_bytes(b"")
    return f"empty {name}"


def _within(seconds: float, fn):
    """``fn()``'s value or exception, or ``TimeoutError`` when it has not returned in ``seconds``."""
    box: list = []

    def call():
        try:
            box.append(("value", fn()))
        except BaseException as err:  # noqa: BLE001 - the case's outcome, whatever it is
            box.append(("error", err))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    if not box:
        raise TimeoutError(f"no answer in {seconds} s")
    return box[0]


def check_case(run, reference: dict, rng: random.Random, scratch, rerun: bool, harm=damage) -> str:
    """One case: a copy of ``run`` damaged (``harm``), read back and exported (and rerun); returns
    the damage done, or raises AssertionError saying what broke the property."""
    copy = scratch / "case"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy, symlinks=True)
    what = harm(copy, rng)
    try:
        return _check(copy, run, reference, what, rerun)
    except TimeoutError as err:
        raise AssertionError(f"{what}: hung ({err})") from None


def _check(copy, run, reference: dict, what: str, rerun: bool) -> str:
    kind, got = _within(CASE_SECONDS, lambda: rundir.load_results(str(copy)))
    if kind == "error":
        assert isinstance(got, ValueError), f"{what}: {type(got).__name__}: {got}"  # (StoreError is one)
        assert "\n" not in str(got).strip(), f"{what}: the error is not one line: {got}"
        OUTCOMES["refused"] += 1
    else:
        assert _metrics(got[1]) == reference, f"{what}: read back without an error, but the values changed"
        OUTCOMES["identical"] += 1
    export = copy.parent / "export.csv"
    kind, got = _within(CASE_SECONDS, lambda: _command("export", copy, "--format", "csv", "--bands", "--out", export))
    assert kind == "value", f"{what}: export raised {got!r}"
    code, err = got
    assert code in (0, 2) and (code == 0 or err.count("\n") == 0), f"{what}: export exit {code}: {err}"
    if rerun:
        kind, got = _within(120, lambda: _command(*RUN, "--keep", run.name, "--chunk-size", "32", "--out", copy))
        assert kind == "value", f"{what}: the rerun raised {got!r}"
        code, err = got
        assert code in (0, 2), f"{what}: rerun exit {code}: {err}"
        if code == 0:
            assert _metrics(rundir.load_results(str(copy))[1]) == reference, f"{what}: the rerun changed the values"
        else:
            assert err.count("\n") == 0, f"{what}: the rerun's error is not one line: {err}"
    return what


def _budget(finished, tmp_path, n_cases: int, rerun_every: int) -> None:
    OUTCOMES.update(refused=0, identical=0)
    rng = random.Random(SEED + n_cases)
    for case in range(n_cases):
        keep = ("raw", "summary")[case % 2]
        run, reference = finished[keep]
        seed = rng.randrange(1 << 30)
        try:
            check_case(run, reference, random.Random(seed), tmp_path, rerun=rerun_every and case % rerun_every == 0)
        except AssertionError as err:
            raise AssertionError(f"fuzz case {case} ({keep}, case seed {seed}, budget seed {SEED}): {err}") from None
    # Damage to a file the reader does not need (the figure, report.md) is harmless; most is refused.
    assert OUTCOMES["refused"] >= n_cases // 3 and OUTCOMES["identical"] >= 1, OUTCOMES
    print(f"{n_cases} damaged directories: {OUTCOMES}")


def test_damage_is_refused_in_one_line_or_harmless(finished, tmp_path):
    _budget(finished, tmp_path, n_cases=24, rerun_every=0)


@pytest.mark.slow
def test_damage_is_refused_in_one_line_or_harmless_many_cases(finished, tmp_path):
    _budget(finished, tmp_path, n_cases=500, rerun_every=10)


def test_the_harness_catches_a_reader_that_lets_damage_through(finished, tmp_path, monkeypatch):
    """The property can fail: with a reader that returns metrics.npz unchecked, a value rewritten
    in it (a valid file, re-saved) is caught as a silent change."""
    run, reference = finished["raw"]

    def unchecked(out_dir):
        with np.load(os.path.join(out_dir, "metrics.npz")) as z:
            return {}, {k: z[k] for k in z.files}

    def forge(copy, rng):
        with np.load(copy / "metrics.npz") as z:
            arrays = {k: z[k] for k in z.files}
        arrays["kl"] = arrays["kl"] + 1
        with open(copy / "metrics.npz", "wb") as f:
            np.savez(f, **arrays)
        return "add 1 to every kl of metrics.npz"

    monkeypatch.setattr(rundir, "load_results", unchecked)
    with pytest.raises(AssertionError, match="add 1 to every kl of metrics.npz: read back without an error, but"):
        check_case(run, reference, random.Random(0), tmp_path, rerun=False, harm=forge)
    monkeypatch.undo()
    # The real reader refuses the forged file in one line: the property holds.
    assert check_case(run, reference, random.Random(0), tmp_path, rerun=False, harm=forge).startswith("add 1")
