"""A fuzz harness for what is the user's (issue 59, "Trust VI", part 7), in the style of the other
harnesses: seeded random cases of a cache folder holding the user's files (``cache clear`` and
``cache info`` on it), shards computed over shards and runs, merges over runs, shards and the
user's folders, ``--decide`` stopped at random budgets, and every way user code can end its
process (``posix._exit`` and the other aliases, at import or in build). Each must end in exit status
0 or 2 with one ``jaxfed: error:`` line, never delete or change a file of the user's or a finished
run or shard, and leave the four files of a run describing the same trials. A small budget runs in
the default suite, more in the slow suite; a failing case prints its seed, and ``JAXFED_FUZZ_SEED``
replays a budget."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from jaxfed import cli
from jaxfed.engine import cache as engine_cache

SEED = int(os.environ.get("JAXFED_FUZZ_SEED", "20261209"))
HEX = "0123456789abcdef"


def _command(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(list(map(str, argv)))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue().strip()


def _one_way_out(seed: int, argv, code: int, err: str) -> None:
    shown = " ".join(map(str, argv))
    assert code in (0, 2), f"seed {seed}: `jaxfed {shown}` exit status {code}:\n{err[-3000:]}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.startswith("jaxfed: error:")]
        assert len(lines) == 1 and "Traceback" not in err, f"seed {seed}: `jaxfed {shown}`:\n{err[-3000:]}"


def _snapshot(root) -> dict:
    """Every file and link under ``root``: relative path -> bytes (a link: its target)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                found[rel] = open(path, "rb").read()
    return found


# --------------------------------------------------------------------------- cache folders
def _key(rng: random.Random) -> str:
    return f"jit_{rng.choice(['on_device', 'chunk', 'f'])}-{''.join(rng.choice(HEX) for _ in range(64))}"


def _cache_folder(rng: random.Random, root) -> tuple[str, set, set]:
    """A cache folder (maybe reached through a link) holding the user's files and JAX's entries:
    (the path to give, the user's files, the entries jaxfed may remove), relative to the folder."""
    folder = root / "cache"
    folder.mkdir()
    user, entries = set(), set()
    names = [
        "browser-cache", "last-atime", "notes.txt", "x-cache", f"{_key(rng)[:-1]}-cache", f"{_key(rng)}-cache.bak",
        f"sub/{_key(rng)}-cache", "sub/a-cache", f"{engine_cache.LOCKS_DIR}/mine.txt",
        f"{engine_cache.REJECTED_DIR}/README", "jaxfed-memory/x-atime", f"{_key(rng).upper()}-cache",
    ]  # fmt: skip
    for name in rng.sample(names, rng.randint(1, len(names))):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(0, 64)))
        user.add(name)
    for _ in range(rng.randint(0, 3)):
        key = _key(rng)
        where = rng.choice(["", f"{engine_cache.LOCKS_DIR}/", f"{engine_cache.REJECTED_DIR}/"])
        name = where + (key if where else f"{key}-{rng.choice(['cache', 'atime'])}")
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"" if where else rng.randbytes(32))
        entries.add(name)
    if rng.random() < 0.3:  # a link named like an entry, to a file of the user's elsewhere
        outside = root / "precious"
        outside.write_bytes(b"keep me")
        os.symlink(outside, folder / f"{_key(rng)}-cache")
    given = folder
    if rng.random() < 0.3:
        given = root / "link-to-cache"
        os.symlink(folder, given)
    return str(given), user, entries


def _check_cache_case(seed: int, tmp) -> None:
    rng = random.Random(seed)
    root = tmp / f"case{seed}"
    root.mkdir()
    given, user, entries = _cache_folder(rng, root)
    folder = root / "cache"
    before = _snapshot(folder)
    precious = (root / "precious").read_bytes() if (root / "precious").exists() else None
    for action in rng.sample(["info", "clear"], 2):
        argv = ["cache", action, "--compilation-cache", given]
        code, err = _command(argv)
        _one_way_out(seed, argv, code, err)
        after = _snapshot(folder)
        lost = [n for n in user if before.get(n) != after.get(n)]
        assert not lost, f"seed {seed}: `jaxfed {' '.join(argv)}` changed or removed the user's {lost}"
        if action == "clear" and code == 0:
            assert not [n for n in entries if n in after], f"seed {seed}: entries left after clear"
        if precious is not None:
            assert (root / "precious").read_bytes() == precious, f"seed {seed}: a file behind a link changed"
    a_file = root / "a-file"
    a_file.write_text("mine")
    code, err = _command(["cache", rng.choice(["info", "clear"]), "--compilation-cache", a_file])
    assert code == 2 and "is a file, not a cache folder" in err and a_file.read_text() == "mine", (seed, err)


def test_random_cache_folders_small_budget(tmp_path):
    for case in range(20):
        _check_cache_case(SEED + case, tmp_path)


@pytest.mark.slow
def test_random_cache_folders_large_budget(tmp_path):
    for case in range(300):
        _check_cache_case(SEED + 1000 + case, tmp_path)


# --------------------------------------------------------------------------- shards and merges
RUN = ["run", "gfvl-topologies", "--trials", "128", "--set", "n_slots=12", "--chunk-size", "64", "--quiet"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Shards 0/2 and 1/2 of a run of 128 trials, the run itself, the run of 64 trials, a folder of the user's."""
    root = tmp_path_factory.mktemp("made")
    for i in (0, 1):
        assert _command([*RUN, "--shard", f"{i}/2", "--out", root / f"shard{i}"])[0] == 0
    assert _command([*RUN, "--out", root / "run128"])[0] == 0
    small = [a if a != "128" else "64" for a in RUN]
    assert _command([*small, "--out", root / "run64"])[0] == 0
    (root / "user").mkdir()
    (root / "user" / "thesis.tex").write_text("mine")
    return root


TARGETS = ["shard0", "shard1", "run128", "run64", "user", "new", "empty"]


def _check_shard_or_merge_case(seed: int, made, tmp) -> None:
    """A shard or a merge into a copy of something there: refused in one line with nothing changed,
    or done where nothing is lost (a shard's own rerun, a new or empty folder, the merged run's own
    record rewritten the same)."""
    rng = random.Random(seed)
    case = tmp / f"case{seed}"
    case.mkdir()
    inputs = [case / "in0", case / "in1"]
    for i, path in enumerate(inputs):
        shutil.copytree(made / f"shard{i}", path)
    target_kind = rng.choice(TARGETS + ["inside"])
    out = inputs[1] / "sub" if target_kind == "inside" else case / "out"
    if target_kind in TARGETS[:5]:
        shutil.copytree(made / target_kind, out)
    elif target_kind == "empty":
        out.mkdir()
    merge = rng.random() < 0.5
    index = rng.randint(0, 1)
    argv = ["merge", *map(str, inputs), "--out", out, "--quiet"] if merge else [*RUN, "--shard", f"{index}/2", "--out", out]  # fmt: skip
    kept_inputs, kept_out = [_snapshot(p) for p in inputs], _snapshot(out) if out.exists() else {}
    code, err = _command(argv)
    _one_way_out(seed, argv, code, err)
    assert [_snapshot(p) for p in inputs] == kept_inputs or (not merge and target_kind == "inside"), (
        f"seed {seed}: `jaxfed {' '.join(map(str, argv))}` changed an input"
    )
    fine = {"new", "empty"} | ({"run128"} if merge else {f"shard{index}"})
    if target_kind not in fine and not (not merge and target_kind == "inside"):
        assert code == 2, f"seed {seed}: `jaxfed {' '.join(map(str, argv))}` into a {target_kind} was not refused"
        assert _snapshot(out) == kept_out if out.exists() else not kept_out, f"seed {seed}: the refused --out changed"
    elif target_kind in fine:
        assert code == 0, f"seed {seed}: `jaxfed {' '.join(map(str, argv))}` into {target_kind}: {err}"
        if merge:
            assert (out / "metrics.npz").read_bytes() == (made / "run128" / "metrics.npz").read_bytes(), seed
        else:
            assert json.loads((out / "config.json").read_text())["shard"]["index"] == index, seed
            for name, data in kept_out.items():
                assert not name.startswith("chunks") or _snapshot(out).get(name) == data, (seed, name)


def test_random_shards_and_merges_small_budget(made, tmp_path):
    for case in range(6):
        _check_shard_or_merge_case(SEED + 2000 + case, made, tmp_path)


@pytest.mark.slow
def test_random_shards_and_merges_large_budget(made, tmp_path):
    for case in range(60):
        _check_shard_or_merge_case(SEED + 3000 + case, made, tmp_path)


# --------------------------------------------------------------------------- budget stops
@pytest.mark.slow
def test_random_budget_stops_leave_one_story(tmp_path, monkeypatch):
    """`--decide --budget B` at random budgets, each growth's record slow to write at random: the
    four files describe the same trials (report.md's trials per point, verdicts.json's record)."""
    from jaxfed.results import deciding
    from jaxfed.store import rundir

    monkeypatch.setattr(deciding, "next_look", lambda run, undecided, left: (run.look + 1, 0.0) if left > 0 else None)
    for case in range(4):
        rng = random.Random(SEED + 4000 + case)
        budget = f"{rng.uniform(0.1, 4.0):.2f}s"
        out = tmp_path / f"run{case}"
        argv = ["run", "gfvl-topologies", "--trials", "16", "--set", "n_slots=60", "--decide", "--budget", budget]
        code, err = _command([*argv, "--out", out, "--quiet"])
        _one_way_out(case, argv, code, err)
        record, _ = rundir.load_results(str(out))
        section = (out / "report.md").read_text().split("## gfvl-topologies", 1)[1]
        assert set(re.findall(r"([\d,]+) trials per point", section)) == {f"{record['n_trials']:,}"}, (case, budget)
        verdicts = json.loads((out / "verdicts.json").read_text())
        assert verdicts["results_sha256"] == rundir.results_digest(record), (case, budget)


# --------------------------------------------------------------------------- ways out of user code
EXITS = [
    ("os._exit({k})", "os._exit({k})"),
    ("posix._exit({k})", "os._exit({k})"),
    ("os.abort()", "os.abort()"),
    ("os.kill(os.getpid(), signal.SIGTERM)", "os.kill("),
    ("os.kill(os.getpid(), signal.SIGKILL)", "os.kill("),
    ("signal.raise_signal(signal.SIGTERM)", "signal.raise_signal(SIGTERM)"),
]
USER_FILE = """import dataclasses, os, posix, signal
import jax
from jaxfed.experiment import Experiment, Sweep
{at_import}

@dataclasses.dataclass(frozen=True)
class Config:
    n: int = 2  # values


def trial(key, point):
    return {{"x": jax.random.normal(key, (2,))}}


def build(cfg):
{in_build}
    return Sweep(trial, [{{}}], [{{"p": 0}}], {{"x": ("i",)}})


EXPERIMENT = Experiment("ends", "ends its process", Config, build, plot=lambda *a: None)
"""


def _check_exit_case(seed: int, tmp) -> None:
    rng = random.Random(seed)
    call, said = rng.choice(EXITS)
    k = rng.choice([0, 0, 1, 3])
    at_import = rng.random() < 0.5
    case = tmp / f"case{seed}"
    case.mkdir()
    code_line = call.format(k=k)
    text = USER_FILE.format(at_import=code_line if at_import else "", in_build=f"    {code_line}" if not at_import else "    pass")  # fmt: skip
    path = case / "ends.py"
    path.write_text(text)
    line = text.splitlines().index(code_line if at_import else f"    {code_line}") + 1
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out", "--quiet"]  # fmt: skip
    done = subprocess.run(command, cwd=case, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, f"seed {seed}: {code_line} ({'import' if at_import else 'build'}): {done.returncode} {done.stderr[-2000:]}"  # fmt: skip
    assert f"{path}:{line}" in done.stderr and said.format(k=k) in done.stderr, f"seed {seed}: {done.stderr[-2000:]}"
    assert not (case / "out" / "config.json").exists(), seed


def test_random_ways_out_of_user_code_small_budget(tmp_path):
    for case in range(2):
        _check_exit_case(SEED + 5000 + case, tmp_path)


@pytest.mark.slow
def test_random_ways_out_of_user_code_large_budget(tmp_path):
    for case in range(24):
        _check_exit_case(SEED + 6000 + case, tmp_path)
