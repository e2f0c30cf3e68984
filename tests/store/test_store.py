"""Fault injection: the result store gives the uninterrupted result bit for bit, or refuses.

A toy experiment (two point groups, a vector and a scalar metric, some NaN trials) runs through
``run_experiment`` and the engine unjitted (fast; the store does not depend on jit). Every write
of the store goes through ``jaxfed.store.files._write_file/_replace/_remove/_makedirs``; a "kill" at
instant k raises a BaseException at the k-th of these calls, before it runs, or halfway through a
file write (a torn write). These are all the on-disk states a SIGKILL can leave, since nothing
touches the disk between two of these calls. After each kill the run is repeated and must equal
an uninterrupted run, or be refused with one line naming the file.

Corruptions damage, replace, forge (with valid checksums, to test each check on its own) or
remove every kind of file of finished raw and summary runs. The default suite covers every kill
instant of three scenarios (fresh raw, fresh summary, growing summary) and every corruption kind;
``-m slow`` adds the growing raw scenario, four random sequences of repeated kills (``-m long`` eight more) with random chunk
sizes, byte flips over whole files and real SIGKILLs of the CLI.
"""

import contextlib
import dataclasses
import functools
import io
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, stats, store
from jaxfed.engine import core, sinks
from jaxfed.experiment import Experiment, Sweep
from jaxfed.runs import run_experiment
from jaxfed.store.rundir import load_results

N_TRIALS, CHUNK, SEED = 20, 6, 3
FS_OPS = ("_write_file", "_replace", "_remove", "_makedirs")


class Killed(BaseException):
    """A simulated SIGKILL: not an Exception, so nothing in the engine can catch it."""


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    scale: float = 1.0


def toy_trial(key, point):
    x = jax.random.normal(key, (3,)) * point["scale"]
    x = jnp.where(x > 2.0, jnp.nan, x)  # some non-finite trials, counted per point
    return {"x": x, "s": jnp.sum(x)}


def toy_build(cfg):
    points = [
        {"scale": jnp.float32(cfg.scale)},
        {"scale": jnp.float32(2 * cfg.scale)},
        {"scale": jnp.float32(3.0), "tag": 1},
    ]
    labels = [{"p": i} for i in range(3)]
    return Sweep(toy_trial, points, labels, {"x": ("i",), "s": ()})


TOY = Experiment("toy", "toy", ToyConfig, toy_build, plot=lambda *a: None, report=lambda *a: "")


def _fast(mp):
    """run_experiment always jits; these tests run the same engine unjitted (~50x faster), and
    without fsync (~8 ms a file here), which guards against power loss, not simulated here.
    Summary sum blocks of 8 trials instead of 64, so that 20 trials make several summary chunks
    and a partial last block."""
    mp.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
    mp.setattr(os, "fsync", lambda fd: None)
    mp.setattr(stats.summary, "SUMMARY_BLOCK", 8)


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    _fast(monkeypatch)


def run_toy(out_dir, n_trials=N_TRIALS, keep="raw", overwrite=False, seed=SEED, chunk_size=CHUNK, checkpoint_every=0):
    """The toy through ``run_experiment``; ``checkpoint_every`` in ticks of the clock :func:`ticking`
    installs (0: a summary is stored after every chunk)."""
    options = engine.RunOptions.for_experiments(
        seed=seed,
        out_dir=str(out_dir),
        chunk_size=chunk_size,
        keep=keep,
        overwrite=overwrite,
        checkpoint_every=checkpoint_every,
    )
    return run_experiment(TOY, ToyConfig(), n_trials, options, quiet=True)


@pytest.fixture(autouse=True)
def ticking(monkeypatch):
    """Each run's sinks read a clock that advances by one at every reading (a new one per run), so
    that when a time-based checkpoint falls is the same in a counted run and in the killed one."""
    real = sinks.open_sinks
    monkeypatch.setattr(core, "open_sinks", lambda *a, **kw: real(*a, **kw, clock=itertools.count().__next__))


@contextlib.contextmanager
def faults(kill_at=None, torn=False):
    """Counts the store's filesystem calls (yields their names); raises Killed at call ``kill_at``
    (1-based), before it runs, or with ``torn`` (if it is a file write) after writing half the bytes."""
    calls = []
    originals = {name: getattr(store.files, name) for name in FS_OPS}

    def wrap(name):
        real = originals[name]

        def call(*args):
            calls.append(name)
            if len(calls) == kill_at:
                if torn and name == "_write_file":
                    data = b"".join(bytes(part) for part in args[1])
                    real(args[0], [data[: len(data) // 2]])
                raise Killed(f"{name} #{kill_at}")
            return real(*args)

        return call

    for name in FS_OPS:
        setattr(store.files, name, wrap(name))
    try:
        yield calls
    finally:
        for name, real in originals.items():
            setattr(store.files, name, real)


def assert_same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], stats.Summary):
            for field in stats.Summary._fields:
                np.testing.assert_array_equal(
                    getattr(a[name], field), getattr(b[name], field), err_msg=f"{name}/{field}"
                )
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """keep -> (results, config_json) of uninterrupted runs of N_TRIALS and 8 trials, unjitted."""
    with pytest.MonkeyPatch.context() as mp:
        _fast(mp)
        out = {}
        for keep in ("raw", "summary"):
            for n in (N_TRIALS, 8):
                cfg, res = run_toy(tmp_path_factory.mktemp(f"ref_{keep}_{n}"), n, keep)
                out[keep, n] = (res, cfg)
        return out


def check_identical_or_refused(out_dir, reference, keep, n_trials=N_TRIALS, **kwargs) -> str:
    """Reruns on ``out_dir``: 'identical' (results, counts and the written metrics.npz equal the
    reference) or 'refused' (a one-line StoreError naming a file)."""
    try:
        cfg, res = run_toy(out_dir, n_trials, keep, **kwargs)
    except store.StoreError as err:
        message = str(err)
        assert "\n" not in message and str(out_dir) in message, message
        return "refused"
    ref_res, ref_cfg = reference
    assert_same(res, ref_res)
    assert cfg["nonfinite_trials"] == ref_cfg["nonfinite_trials"]
    loaded_cfg, loaded = load_results(str(out_dir))
    assert_same(loaded, ref_res)
    assert loaded_cfg["n_trials"] == n_trials
    return "identical"


def count_calls(tmp_path, keep, n_trials, start_from=None, chunk_size=CHUNK, checkpoint_every=0):
    d = tmp_path / "count"
    if start_from is not None:
        shutil.copytree(start_from, d)
    with faults() as calls:
        run_toy(d, n_trials, keep, chunk_size=chunk_size, checkpoint_every=checkpoint_every)
    shutil.rmtree(d)
    return list(calls)


# --------------------------------------------------------------------------- kills
SCENARIOS = [
    ("raw", None, 0),  # fresh run
    ("summary", None, 2),  # every 2 ticks of the clock: after the 2nd of 3 chunks and at the end of each group
    pytest.param(
        "summary", None, 0, marks=pytest.mark.slow
    ),  # a summary stored after every chunk (as the growth below)
    pytest.param("summary", 8, 0, marks=pytest.mark.slow),  # growing a finished 8-trial run to N_TRIALS
    pytest.param("summary", 8, 2, marks=pytest.mark.slow),
    pytest.param("raw", 8, 0, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("keep, grown_from, checkpoint_every", SCENARIOS)
def test_a_kill_at_every_instant_resumes_identically(tmp_path, references, keep, grown_from, checkpoint_every):
    base_dir = None
    if grown_from is not None:
        base_dir = tmp_path / "base"
        run_toy(base_dir, grown_from, keep)
    calls = count_calls(tmp_path, keep, N_TRIALS, base_dir, checkpoint_every=checkpoint_every)
    instants = [(k, False) for k in range(1, len(calls) + 1)]
    instants += [(k, True) for k, name in enumerate(calls, 1) if name == "_write_file"]
    outcomes = []
    for i, (k, torn) in enumerate(instants):
        d = tmp_path / f"k{i}"
        if base_dir is not None:
            shutil.copytree(base_dir, d)
        with faults(kill_at=k, torn=torn), pytest.raises(Killed):
            run_toy(d, N_TRIALS, keep, checkpoint_every=checkpoint_every)
        # Before the rerun, the finished outputs are those of a complete run, or absent/refused.
        try:
            loaded_cfg, loaded = load_results(str(d))
        except ValueError:
            pass
        else:
            assert_same(loaded, references[keep, loaded_cfg["n_trials"]][0])
        outcomes.append(check_identical_or_refused(d, references[keep, N_TRIALS], keep))
        shutil.rmtree(d)
    print(
        f"{keep} grown_from={grown_from} every {checkpoint_every}: {len(instants)} kill instants, {outcomes.count('identical')} identical"
    )
    assert outcomes.count("identical") == len(instants)  # an atomic store never even needs to refuse


def test_a_slow_writer_stores_each_summary_state_as_it_was_when_submitted(tmp_path, references, monkeypatch):
    """The sink adds each chunk's histogram into its own in place; the writer thread, writing a
    state while the next chunks are folded, stores a copy: every stored histogram holds the
    trials its counts say (its finite values are ``count``), and the run ends identical."""
    real = store.Store.save_summary
    written = []

    def slow_save(self, spec, point_trials, chunk, states):
        time.sleep(0.05)  # the main thread folds the next chunks meanwhile
        for state in states.values():
            np.testing.assert_array_equal(state["hist"].sum(-1), state["count"])
        written.append(max(point_trials))
        real(self, spec, point_trials, chunk, states)

    monkeypatch.setattr(store.Store, "save_summary", slow_save)
    cfg, res = run_toy(tmp_path / "slow", N_TRIALS, "summary")
    assert len(written) > 2  # a state after every chunk of each group (checkpoint_every=0)
    assert_same(res, references["summary", N_TRIALS][0])


def test_summary_states_are_stored_by_time_and_at_the_end_of_each_group(tmp_path):
    """Per group (two here, 3 chunks each: 20 trials in chunks of 6, rounded up to 8, whole sum
    blocks), a summary state is stored after every chunk with ``checkpoint_every=0``; with 2 ticks
    of the clock (a tick when the chunks start and at each chunk handled), after the 2nd chunk and
    at the end; with 100, at the end only."""

    def summary_commits(every):
        calls = count_calls(tmp_path, "summary", N_TRIALS, checkpoint_every=every)
        # (identity.json, build.json, metrics.npz, config.json, report.md, verdicts.json, report.html)
        return sum(1 for name in calls if name == "_replace") - 7

    assert [summary_commits(every) for every in (0, 2, 100)] == [6, 4, 2]


def test_a_summary_killed_between_chunks_never_counts_a_trial_twice(tmp_path, references):
    """The reported bug: a kill in summary mode made the rerun count some trials twice."""
    calls = count_calls(tmp_path, "summary", N_TRIALS)
    commits = [k for k, name in enumerate(calls, 1) if name == "_replace"]
    for k in commits[2:-1]:  # killed right after each summary commit
        d = tmp_path / f"s{k}"
        with faults(kill_at=k + 1), pytest.raises(Killed):
            run_toy(d, N_TRIALS, "summary")
        _, res = run_toy(d, N_TRIALS, "summary")
        for summary in res.values():
            np.testing.assert_array_equal(summary.count + summary.nan_count, N_TRIALS)


# --------------------------------------------------------------------------- growth
@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_a_finished_run_grows_computing_only_the_new_trials(tmp_path, references, keep, monkeypatch):
    d = tmp_path / "grow"
    run_toy(d, 8, keep)
    computed = []
    real = core.make_chunk_fn

    def spy(*args, **kwargs):
        fn = real(*args, **kwargs)
        return lambda seed, ids, traced, first, *rest: (
            computed.append(int(first)) or fn(seed, ids, traced, first, *rest)
        )

    monkeypatch.setattr(core, "make_chunk_fn", spy)
    assert check_identical_or_refused(d, references[keep, N_TRIALS], keep) == "identical"
    assert min(computed) == 8  # trials 0..7 came from the store
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["n_trials"] == N_TRIALS and cfg["nonfinite_trials"] == references[keep, N_TRIALS][1]["nonfinite_trials"]


def test_fewer_trials_are_served_from_a_raw_store_and_refused_from_a_summary(tmp_path, references):
    raw = tmp_path / "raw"
    run_toy(raw, N_TRIALS, "raw")
    record = {name: (raw / name).read_bytes() for name in ("config.json", "metrics.npz")}
    cfg, res = run_toy(raw, 8, "raw")
    assert_same(res, references["raw", 8][0])
    assert cfg["n_trials"] == 8 and cfg["stored_trials"] == N_TRIALS
    # served, not recorded: the directory still describes the 20-trial run it holds
    assert {name: (raw / name).read_bytes() for name in record} == record
    assert check_identical_or_refused(raw, references["raw", N_TRIALS], "raw") == "identical"  # chunks kept
    summary = tmp_path / "summary"
    run_toy(summary, N_TRIALS, "summary")
    with pytest.raises(store.StoreError, match=r"summary_g000\.npz: summarises 20 trials, more than the 8 asked for"):
        run_toy(summary, 8, "summary")
    assert (
        check_identical_or_refused(summary, references["summary", 8], "summary", n_trials=8, overwrite=True)
        == "identical"
    )


# --------------------------------------------------------------------------- corruption
def _flip(path, position):
    data = bytearray(path.read_bytes())
    data[position % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))


def _truncate(path, keep_bytes):
    data = path.read_bytes()
    path.write_bytes(data[: keep_bytes if keep_bytes >= 0 else len(data) + keep_bytes])


def _read(path):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(arrays.pop("__meta__").tobytes()), arrays


def _forge(path, edit):
    """Rewrites a stored file through ``edit(meta, arrays)`` with a *valid* header checksum, so only
    the store's other checks can catch it."""
    meta, arrays = _read(path)
    meta = {k: v for k, v in meta.items() if k not in ("arrays", "sha256")}
    edit(meta, arrays)
    path.write_bytes(b"".join(bytes(part) for part in store._pack(meta, arrays)))


def _first(d, pattern):
    return sorted((d / "chunks").glob(pattern))[0]


def _other_config_dir(tmp_path, keep):
    d = tmp_path / f"other_{keep}"
    if not d.exists():
        run_toy(d, N_TRIALS, keep, seed=SEED + 1)
    return d


def corruptions(keep):
    """(name, function(run_dir, tmp_path)) for every kind of damage, for a finished run."""
    pattern = "g000_*.npz" if keep == "raw" else "summary_g000.npz"
    other = "g001_*.npz" if keep == "raw" else "summary_g001.npz"
    main = lambda d: _first(d, pattern)  # noqa: E731
    cases = {
        "chunk: emptied": lambda d, t: main(d).write_bytes(b""),
        "chunk: truncated to half": lambda d, t: _truncate(main(d), len(main(d).read_bytes()) // 2),
        "chunk: last byte cut": lambda d, t: _truncate(main(d), -1),
        "chunk: garbage appended": lambda d, t: main(d).write_bytes(main(d).read_bytes() + b"\0junk"),
        "chunk: not a zip at all": lambda d, t: main(d).write_bytes(b"{}"),
        "chunk: deleted": lambda d, t: main(d).unlink(),
        "chunk: a directory in its place": lambda d, t: _replace_by_directory(main(d)),
        "chunk: another group's file under its name": lambda d, t: main(d).write_bytes(_first(d, other).read_bytes()),
        "chunk: same name from another configuration": lambda d, t: main(d).write_bytes(
            _first(_other_config_dir(t, keep), pattern).read_bytes()
        ),
        "chunk: symbolic link to a valid copy": lambda d, t: _symlink_to_copy(main(d), t),
        "chunk: header removed": lambda d, t: _rewrite_plain(main(d), drop_header=True),
        "chunk: header not JSON": lambda d, t: _rewrite_plain(main(d), header=b"\xff\xfe{"),
        "chunk: header a JSON list": lambda d, t: _rewrite_plain(main(d), header=b"[1, 2]"),
        "chunk: header trial range edited": lambda d, t: _edit_header(main(d), trials=[0, 1]),
        "chunk: header identity edited": lambda d, t: _edit_header(main(d), identity="0" * 64),
        "chunk: data edited, checksum kept": lambda d, t: _rewrite_plain(main(d), scale_data=2.0),
        "forged: arrays are scalars": lambda d, t: _forge(
            main(d), lambda m, a: a.update({k: np.float32(1) for k in a})
        ),
        "forged: dtype float64": lambda d, t: _forge(
            main(d), lambda m, a: a.update({k: v.astype(np.float64) for k, v in a.items()})
        ),
        "forged: a metric missing": lambda d, t: _forge(main(d), lambda m, a: a.pop(sorted(a)[0])),
        "forged: an extra array": lambda d, t: _forge(main(d), lambda m, a: a.update(extra=np.zeros(3))),
        "forged: other point ids": lambda d, t: _forge(main(d), lambda m, a: m.update(point_ids=[1, 0])),
        "forged: other format": lambda d, t: _forge(main(d), lambda m, a: m.update(format=1)),
        "identity.json: truncated": lambda d, t: _truncate(d / "identity.json", 10),
        "identity.json: a JSON list": lambda d, t: (d / "identity.json").write_text("[]"),
        "identity.json: seed edited": lambda d, t: _edit_json(d / "identity.json", seed=SEED + 1),
        "identity.json: deleted": lambda d, t: (d / "identity.json").unlink(),
        "identity.json: another configuration's": lambda d, t: shutil.copy(
            _other_config_dir(t, keep) / "identity.json", d / "identity.json"
        ),
        "config.json: truncated": lambda d, t: _truncate(d / "config.json", 30),
        "config.json: deleted": lambda d, t: (d / "config.json").unlink(),
        "metrics.npz: byte flipped": lambda d, t: _flip(d / "metrics.npz", 200),
        "metrics.npz: another configuration's": lambda d, t: shutil.copy(
            _other_config_dir(t, keep) / "metrics.npz", d / "metrics.npz"
        ),
        "stray files: temporaries, foreign names, a format-1 manifest": lambda d, t: _strays(d),
    }
    if keep == "raw":
        cases.update(
            {
                "chunk: renamed to another trial range": lambda d, t: main(d).rename(
                    main(d).with_name("g000_t0000000001_0000000007.npz")
                ),
                "chunk: content of another trial range": lambda d, t: main(d).write_bytes(
                    sorted((d / "chunks").glob(pattern))[1].read_bytes()
                ),
                "forged: fewer trials than its range": lambda d, t: _forge(
                    main(d), lambda m, a: a.update({k: v[:, :2] for k, v in a.items()})
                ),
                "forged: range and data of trials 0-1 under the name of 0-6": lambda d, t: _forge(
                    main(d), lambda m, a: (m.update(trials=[0, 2]), a.update({k: v[:, :2] for k, v in a.items()}))
                ),
            }
        )
    else:
        cases.update(
            {
                "forged: one trial counted twice (count + 1)": lambda d, t: _forge(
                    main(d), lambda m, a: a.update({"x/count": a["x/count"] + np.eye(2, 3, dtype=np.int64)})
                ),
                "forged: trial range says 21": lambda d, t: _forge(main(d), lambda m, a: m.update(trials=[0, 21])),
                "forged: histogram does not sum to count": lambda d, t: _forge(
                    main(d), lambda m, a: a["s/hist"].__setitem__((0, 0), a["s/hist"][0, 0] + 1)
                ),
                "forged: non-finite trial count above the trial count": lambda d, t: _forge(
                    main(d), lambda m, a: a["s/nonfinite_trials"].__setitem__(0, 999)
                ),
            }
        )
    return cases


def _replace_by_directory(path):
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


def _symlink_to_copy(path, tmp_path):
    copy = tmp_path / f"linked_{path.name}"
    shutil.copy(path, copy)
    path.unlink()
    path.symlink_to(copy)


def _rewrite_plain(path, drop_header=False, header=None, scale_data=None):
    """Rewrites a stored file with plain np.savez, optionally without or with another header, or
    with its data changed under the unchanged header."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    if drop_header:
        arrays.pop("__meta__")
    if header is not None:
        arrays["__meta__"] = np.frombuffer(header, np.uint8)
    if scale_data is not None:
        arrays = {k: (v * scale_data).astype(v.dtype) if k != "__meta__" else v for k, v in arrays.items()}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def _edit_header(path, **changes):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    meta.update(changes)
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.write_bytes(buffer.getvalue())


def _edit_json(path, **changes):
    obj = json.loads(path.read_text())
    obj.update(changes)
    path.write_text(json.dumps(obj))


def _strays(d):
    (d / "chunks" / "g000_t0000000000_0000000006.npz.999.tmp").write_bytes(b"torn")
    (d / "identity.json.999.tmp").write_bytes(b"torn")
    (d / "chunks" / "notes.txt").write_text("not ours")
    (d / "chunks" / "g000_t1_2.npz").write_bytes(b"a name this engine never builds")
    (d / "manifest.json").write_text(json.dumps({"chunks": [[0, 0, 20, "/etc/passwd"]], "summaries": {}}))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """keep -> a finished N_TRIALS run directory (copied before each corruption)."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        _fast(mp)
        for keep in ("raw", "summary"):
            out[keep] = tmp_path_factory.mktemp(f"finished_{keep}") / "run"
            run_toy(out[keep], N_TRIALS, keep)
    return out


def _corrupt_and_check(tmp_path, finished, references, keep, damage, overwrite=True):
    """Applies ``damage`` to a copy of a finished run; the rerun must be identical or refused, a
    rerun with overwrite (if ``overwrite``) identical. Returns the first outcome."""
    d = tmp_path / "case"
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(finished[keep], d, symlinks=True)
    damage(d)
    try:  # the finished outputs: correct, or refused
        _, loaded = load_results(str(d))
    except ValueError as err:
        assert "\n" not in str(err)
    else:
        assert_same(loaded, references[keep, N_TRIALS][0])
    outcome = check_identical_or_refused(d, references[keep, N_TRIALS], keep)
    if overwrite:
        assert check_identical_or_refused(d, references[keep, N_TRIALS], keep, overwrite=True) == "identical"
    return outcome


@pytest.mark.parametrize("keep", ["raw", pytest.param("summary", marks=pytest.mark.slow)])  # (suite's time: 5 s)
def test_every_kind_of_corruption_is_refused_or_harmless(tmp_path, finished, references, keep):
    outcomes = {}
    for name, damage in corruptions(keep).items():
        outcomes[name] = _corrupt_and_check(tmp_path, finished, references, keep, lambda d, f=damage: f(d, tmp_path))
    print(f"{keep}: {len(outcomes)} corruption kinds: " + ", ".join(f"{k} -> {v}" for k, v in outcomes.items()))
    # Damage that changes what a file says must be refused, never silently recomputed around.
    for name, outcome in outcomes.items():
        if name.startswith(
            ("forged", "chunk: header", "chunk: data", "chunk: another", "chunk: same name", "chunk: content")
        ):
            assert outcome == "refused", name


@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_byte_flips_in_a_stored_file_are_refused_or_harmless(tmp_path, finished, references, keep):
    path = _first(finished[keep], "g000_*.npz" if keep == "raw" else "summary_g000.npz")
    size = path.stat().st_size
    positions = list(range(0, size, max(1, size // 6)))[:6]
    rel = path.relative_to(finished[keep])
    outcomes = [
        _corrupt_and_check(tmp_path, finished, references, keep, lambda d, p=p: _flip(d / rel, p)) for p in positions
    ]
    assert len(outcomes) == len(positions)


# --------------------------------------------------------------------------- slow, randomized
# Four random sequences in the slow suite; eight more with -m long (the CI's time limit).
@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=pytest.mark.slow if s < 4 else pytest.mark.long) for s in range(12)]
)
def test_random_sequences_of_kills_end_identical(tmp_path, references, seed):
    """Kill, rerun killed again at a random instant, … (with random chunk sizes, growth from a
    random stored size, and torn writes), then finish: identical to an uninterrupted run."""
    rng = random.Random(seed)
    kills = 0
    for keep in ("raw", "summary"):
        d = tmp_path / keep
        if rng.random() < 0.5:
            run_toy(d, rng.choice([4, 8, 13]), keep, chunk_size=rng.choice([1, 5, 7]))
        for _ in range(rng.randint(1, 6)):
            chunk = rng.choice([1, 3, 6, 20])
            calls = count_calls(tmp_path, keep, N_TRIALS, d if d.exists() else None, chunk)
            with faults(kill_at=rng.randint(1, len(calls)), torn=rng.random() < 0.3), pytest.raises(Killed):
                run_toy(d, N_TRIALS, keep, chunk_size=chunk)  # same state and chunk as counted: killed
            kills += 1
        assert (
            check_identical_or_refused(d, references[keep, N_TRIALS], keep, chunk_size=rng.choice([2, 6]))
            == "identical"
        )
    print(f"seed {seed}: {kills} kills")


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_byte_flips_over_whole_files(tmp_path, finished, references, keep):
    """Every byte of a raw chunk; of a summary state (~200 kB), the first and last 400 bytes (zip
    headers, array headers, the store's header, zip directory) and 200 random positions. The rerun
    with overwrite, the same code whatever the flip, after every 10th flip (the whole summary case
    took 13 minutes of the CI's slow suite, alone at its end, with it after each)."""
    path = _first(finished[keep], "g000_*.npz" if keep == "raw" else "summary_g000.npz")
    size = path.stat().st_size
    rng = random.Random(0)
    ends = set(range(400)) | set(range(size - 400, size))
    positions = range(size) if keep == "raw" else sorted(ends | set(rng.sample(range(size), 200)))
    rel = path.relative_to(finished[keep])
    outcomes = [
        _corrupt_and_check(
            tmp_path, finished, references, keep, lambda d, p=p: _flip(d / rel, p), overwrite=i % 10 == 0
        )
        for i, p in enumerate(positions)
    ]
    print(
        f"{keep}: {len(outcomes)} byte flips, {outcomes.count('refused')} refused, {outcomes.count('identical')} identical"
    )


@pytest.mark.slow
@pytest.mark.parametrize("keep, seed", [("raw", 0), ("summary", 0), ("summary", 1)])
def test_real_sigkill_of_the_cli_resumes_identically(tmp_path, keep, seed):
    """SIGKILL of `jaxfed run` at a random moment while chunks are committed, then resume."""
    args = [
        sys.executable,
        "-m",
        "jaxfed.cli",
        "run",
        "gfvl-topologies",
        "--trials",
        "2000",
        "--chunk-size",
        "64",
        "--set",
        "n_slots=100",
        "--quiet",
        "--keep",
        keep,
        "--checkpoint-every",
        "0",  # a summary state after every chunk: a kill at any moment finds one to resume from
    ]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    proc = subprocess.Popen([*args, "--out", str(killed)])
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        chunks = killed / "chunks"
        if chunks.exists() and any(chunks.iterdir()):
            break
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.0, 1.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for out in (killed, whole):
        result = subprocess.run([*args, "--out", str(out)], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
    with np.load(killed / "metrics.npz") as a, np.load(whole / "metrics.npz") as b:
        assert a.files == b.files
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.slow
@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_a_refusal_by_process_0_stops_every_process(tmp_path, keep):
    """Only process 0 reads the store; when it refuses, process 1 must not wait for it forever (a
    damaged summary too: process 1 once waited in the summary's resume broadcast until JAX's timeout)."""
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "jaxfed.cli",
        "run",
        "gfvl-topologies",
        "--trials",
        "128",
        "--chunk-size",
        "64",
        "--set",
        "n_slots=20",
        "--quiet",
        "--keep",
        keep,
        "--out",
        str(out),
    ]
    assert subprocess.run(args, capture_output=True, timeout=600).returncode == 0
    chunk = next((out / "chunks").glob("g000_*.npz" if keep == "raw" else "summary_g000.npz"))
    chunk.write_bytes(chunk.read_bytes()[:-10])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [*args, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    if any("collective" in e.lower() and "not" in e.lower() for e in errors):
        pytest.skip("this jaxlib cannot run CPU collectives across processes")
    assert [p.returncode for p in procs] == [2, 2], errors
    assert f"{chunk}: not a readable .npz file" in errors[0]
    assert "process 0 refused the result directory" in errors[1]


def test_a_directory_another_run_is_writing_is_refused_until_it_is_released(tmp_path):
    """Two runs on one directory would compute the same chunks twice or discard each other's: the
    second is refused with one line naming the holder; the lock goes with the run (or its process)."""
    d = str(tmp_path / "locked")
    os.makedirs(d)
    holder = store.files._lock_directory(d)
    with pytest.raises(store.StoreError, match=rf"another jaxfed run \(pid {os.getpid()}\) is writing"):
        engine.run(toy_trial, [{"scale": jnp.float32(1.0)}], 4, out_dir=d, identity={"x": 1}, use_jit=False)
    holder.close()
    out = engine.run(toy_trial, [{"scale": jnp.float32(1.0)}], 4, out_dir=d, identity={"x": 1}, use_jit=False)
    again = engine.run(
        toy_trial, [{"scale": jnp.float32(1.0)}], 4, out_dir=d, identity={"x": 1}, use_jit=False
    )  # released after a run
    for name in out:
        np.testing.assert_array_equal(out[name], again[name])
