"""A fuzz harness for the command line (Trust V, part 4): random arguments, drawn by a seeded
generator, to every command — option values of the wrong type, out of range, empty, unicode, very
long, NaN and infinities, unknown options and parameters, random shard specs and directories —
must end with exit status 0 or 2 and, when 2, one line ``jaxfed: error: …`` on stderr: never a
traceback (exit status 1), a hang (each case has a time limit) or a second line. A run the
arguments leave valid is kept tiny (few trials, few slots). A small budget runs in the default
suite, 300 cases in the slow suite; a failing case prints its seed and arguments, and
``JAXFED_FUZZ_SEED`` replays a budget."""

from __future__ import annotations

import contextlib
import io
import os
import random
import threading

import pytest

from jaxfed import cli

SEED = int(os.environ.get("JAXFED_FUZZ_SEED", "20261207"))
CASE_SECONDS = 60
OUTCOMES = {0: 0, 2: 0}  # exit statuses so far (a harness whose cases all end one way tests little)

NASTY = [
    "", " ", "-1", "0", "1", "2", "3.5", "1e400", "-1e400", "nan", "inf", "-inf", "2**32", "9007199254740993",
    "99999999999999999999999", "x", "é", "名前", "\u202e", "a" * 5000, "../..", "/dev/null", "0/0", "1/0",
    "auto", "auto/0", "2/1", "-1/3", "1/3", "all", "30m", "1h30m", "5x", "NAME=1", "=", "key=", "a,b,,c",
]  # fmt: skip
EXPERIMENTS = ["gfvl-topologies", "kmeans-convergence", "nope", "x.py:NAME", "", "名前"]
SETS = ["n_slots=12", "n_slots=0", "n_slots=-3", "n_slots=x", "topologies=star", "topologies=", "nope=1", "=3"]


def _value(rng: random.Random) -> str:
    roll = rng.random()
    return (
        rng.choice(NASTY)
        if roll < 0.6
        else str(rng.randint(0, 300))
        if roll < 0.85
        else str(rng.randint(-(10**12), 10**12))
    )


def _run_args(rng: random.Random, tmp) -> list[str]:
    args = ["run", rng.choice(EXPERIMENTS)]
    args += ["--trials", rng.choice(["3", "64", "129"]) if rng.random() < 0.75 else rng.choice(NASTY)]
    for option in rng.sample(
        ["--seed", "--chunk-size", "--keep", "--max-memory", "--devices", "--checkpoint-every", "--shard",
         "--budget", "--target-se", "--target-metric", "--max-trials", "--compilation-cache", "--tasks"],
        rng.randint(0, 4),
    ):  # fmt: skip
        args += [option, _value(rng)]
    args += [arg for s in rng.sample(SETS, rng.randint(0, 2)) for arg in ("--set", s)]
    if rng.random() < 0.3:
        args.append(rng.choice(["--decide", "--overwrite", "--bogus", "--quiet"]))
    # valid runs stay tiny: few slots, and an --out of the case's own
    return [*args, "--set", "n_slots=12", "--out", str(tmp / f"out{rng.randint(0, 3)}"), "--quiet"]


def _reader_args(rng: random.Random, tmp) -> list[str]:
    command = rng.choice(["plot", "report", "verify", "export", "merge", "show", "cache", "list"])
    if command in ("show",):
        return [command, rng.choice(EXPERIMENTS + NASTY[:6])]
    if command == "cache":
        return [command, rng.choice(["info", "clear", "nope", ""]), "--compilation-cache", str(tmp / "cache")]
    if command == "list":
        return [command, *rng.sample(["--bogus", "x"], rng.randint(0, 1))]
    dirs = [str(tmp / f"out{rng.randint(0, 3)}"), rng.choice(NASTY), str(tmp / "missing")]
    args = [command, *rng.sample(dirs, rng.randint(0 if command == "merge" else 1, 2))]
    if command == "verify":
        args += ["--sample", _value(rng), "--seed", _value(rng)]
    if command == "export":
        args += ["--format", rng.choice(["csv", "netcdf", "parquet", "xml", ""]), "--out", str(tmp / "e" / _value(rng)[:50])]  # fmt: skip
    if command == "merge":
        args += ["--out", rng.choice([str(tmp / "merged"), *NASTY[:3]])]
    return args


def _case(rng: random.Random, tmp) -> list[str]:
    return _run_args(rng, tmp) if rng.random() < 0.5 else _reader_args(rng, tmp)


def _command(argv: list[str]) -> tuple[int, str]:
    """``jaxfed ARGV`` in this process: (exit status, stderr). The environment is put back after it:
    the command sets ``XLA_FLAGS`` for ``--devices N`` (for its own process), which would reach the
    subprocesses that later tests of this worker start (a notebook's kernel with 9 host devices)."""
    err, environ = io.StringIO(), dict(os.environ)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse's exits
            code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.environ.clear()
            os.environ.update(environ)
    return code, err.getvalue().strip()


def _check(seed: int, tmp) -> None:
    rng = random.Random(seed)
    argv = _case(rng, tmp)
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(result=_command(argv)), daemon=True)
    worker.start()
    worker.join(CASE_SECONDS)
    shown = " ".join(a if len(a) < 60 else a[:20] + f"…({len(a)} chars)" for a in argv)
    assert "result" in done, f"seed {seed}: `jaxfed {shown}` still running after {CASE_SECONDS} s"
    code, err = done["result"]
    assert code in (0, 2), f"seed {seed}: `jaxfed {shown}` exit status {code}:\n{err[-3000:]}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.startswith("jaxfed: error:")]
        assert len(lines) == 1 and "Traceback" not in err, f"seed {seed}: `jaxfed {shown}`:\n{err[-3000:]}"
    OUTCOMES[code] += 1


def test_random_arguments_small_budget(tmp_path):
    for case in range(25):
        _check(SEED + case, tmp_path)


@pytest.mark.slow
def test_random_arguments_large_budget(tmp_path):
    for case in range(300):
        _check(SEED + 1000 + case, tmp_path)
    assert OUTCOMES[0] and OUTCOMES[2], OUTCOMES  # both ways out were taken
