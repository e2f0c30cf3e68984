"""Compiled once: the persistent compilation cache, the cached memory probe, and reruns of a
finished run that compile nothing."""

import os

import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine
from jaxfed.engine import compiled, sizing


@pytest.fixture(autouse=True)
def fresh_process():
    """Each test compiles as a new process would: no chunk function kept from an earlier run."""
    compiled._KEPT.clear()


@pytest.fixture
def probed(monkeypatch):
    """Chunks sized from the memory probe: these runs are small enough to compile once without it."""
    monkeypatch.setattr(sizing, "WHOLE_RUN_FRACTION", 0.0)


def run(cache, **kwargs):
    out = engine.run(trial, POINTS, 23, seed=4, compilation_cache=cache, **kwargs)
    return out, out.info


@pytest.mark.slow
def test_a_second_run_takes_the_executable_and_the_memory_probe_from_the_cache(tmp_path, probed):
    cache = str(tmp_path / "cache")
    first, info1 = run(cache)
    second, info2 = run(cache)
    assert info1["compilation_cache"] == cache and info1["compile_cached"] == [False]
    assert info1["memory_probe_cached"] == [False] and info1["compile_s"][0] > 0
    assert info2["compile_cached"] == [True] and info2["memory_probe_cached"] == [True]
    np.testing.assert_array_equal(first["walk"], second["walk"])


def test_the_cached_memory_probe_is_keyed_by_the_trials_program_and_the_batch(tmp_path, probed):
    """A rerun finds the probe's figures from the trial's jaxpr, without lowering the probe; any
    change of the program or of what batching adds (points, mode, common keys) misses."""
    cache = str(tmp_path / "cache")

    def probe_cached(trial_fn=trial, points=POINTS, **kwargs):
        return engine.run(trial_fn, points, 23, compilation_cache=cache, **kwargs).info["memory_probe_cached"]

    def longer(key, point):
        return trial(key, dict(point, steps=7))

    def scaled(key, point):
        return {name: 2 * value for name, value in trial(key, point).items()}

    assert probe_cached() == [False]
    assert probe_cached(seed=9) == [True]  # another seed: the same program
    assert probe_cached(longer) == [False]  # other shapes
    assert probe_cached(scaled) == [False]  # same shapes, another program
    assert probe_cached(points=POINTS[:2]) == [False]  # fewer points in the batched program
    assert probe_cached(keep="summary") == [False]
    assert probe_cached(common_random_numbers=True) == [False]


def test_a_small_run_compiles_once_without_the_probe_and_a_large_one_probes_first(monkeypatch):
    """Without a chunk size, a run whose metrics are a small part of a chunk's memory, of at most
    16 micro-batches, compiles its chunk function once, for the whole run; otherwise the probe
    (one micro-batch) is compiled and then the chunk it sizes. The values are the same either way."""
    batches: list = []
    real = compiled.make_chunk_fn

    def spy(trial, group, batch, *args):
        batches.append(batch)
        return real(trial, group, batch, *args)

    monkeypatch.setattr(compiled, "make_chunk_fn", spy)
    go = dict(micro_batch=64, compilation_cache="off", progress=False)
    once = engine.run(trial, POINTS, 300, **go)
    assert batches == [320] and once.info["memory_probe_cached"] == [None] and once.info["chunk_sizes"] == [300]
    batches.clear()
    compiled._KEPT.clear()  # as a new process: the probe, then the chunk the first run compiled
    monkeypatch.setattr(sizing, "WHOLE_RUN_FRACTION", 0.0)
    probed = engine.run(trial, POINTS, 300, **go)
    assert batches[0] == 64 and len(batches) == 2 and probed.info["memory_probe_cached"] == [False]
    np.testing.assert_array_equal(probed["walk"], once["walk"])
    monkeypatch.undo()
    monkeypatch.setattr(compiled, "make_chunk_fn", spy)
    batches.clear()
    compiled._KEPT.clear()
    longer = engine.run(trial, POINTS, 16 * 64 + 1, **go)  # more than 16 micro-batches: chunked from the probe
    assert batches[0] == 64 and longer.info["memory_probe_cached"] == [False]


def test_the_cache_can_be_disabled_by_option_or_environment(tmp_path, monkeypatch):
    _, info = run("off")
    assert info["compilation_cache"] is None and info["compile_cached"] == [False]
    monkeypatch.setenv(engine.CACHE_ENV, "off")
    assert engine.compilation_cache_dir() is None
    monkeypatch.setenv(engine.CACHE_ENV, str(tmp_path / "env"))
    assert engine.compilation_cache_dir() == str(tmp_path / "env")
    assert engine.compilation_cache_dir(str(tmp_path / "opt")) == str(tmp_path / "opt")
    monkeypatch.delenv(engine.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert engine.compilation_cache_dir() == str(tmp_path / "xdg" / "jaxfed" / "xla")


@pytest.mark.filterwarnings("ignore:Error reading persistent compilation cache")  # JAX's note on each damaged entry
def test_a_corrupted_cache_directory_does_not_break_a_run(tmp_path, probed):
    reference, _ = run("off")
    cache = tmp_path / "cache"
    run(str(cache))
    for root, _, files in os.walk(cache):  # every entry, executables and probe figures, damaged
        for name in files:
            (tmp_path / root / name).write_bytes(b"\x00garbage")
    compiled._KEPT.clear()  # as a new process finds the directory
    damaged, info = run(str(cache))
    assert info["compile_cached"] == [False] and info["memory_probe_cached"] == [False]
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    blocked, info = run(str(not_a_dir))
    assert info["compilation_cache"] is None
    for out in (damaged, blocked):
        np.testing.assert_array_equal(out["walk"], reference["walk"])


@pytest.mark.slow
def test_a_rerun_of_a_finished_run_compiles_nothing(tmp_path):
    d = str(tmp_path / "run")
    for keep in ("raw", "summary"):
        first, _ = run("off", out_dir=f"{d}_{keep}", identity={}, keep=keep)
        again, info = run("off", out_dir=f"{d}_{keep}", identity={}, keep=keep)
        assert info["chunk_sizes"] == [None] and info["compile_s"] == [None]
        for name in first:
            pairs = zip(first[name], again[name]) if keep == "summary" else [(first[name], again[name])]
            for a, b in pairs:  # a Summary's fields, or the raw array
                np.testing.assert_array_equal(a, b)


def test_a_run_leaves_jax_cache_settings_as_it_found_them(tmp_path, monkeypatch):
    """The engine uses its cache only while it runs: other JAX code in the process (a notebook)
    keeps its own setting, also after a run that failed while compiling."""
    import jax

    from jaxfed.engine import core

    before = jax.config.jax_compilation_cache_dir
    run(str(tmp_path / "cache"))
    assert jax.config.jax_compilation_cache_dir == before

    def fail(*args, **kwargs):
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c2")  # in use while compiling
        raise RuntimeError("compilation failed")

    monkeypatch.setattr(core, "sized_chunk_fn", fail)
    with pytest.raises(RuntimeError, match="compilation failed"):
        run(str(tmp_path / "c2"))
    assert jax.config.jax_compilation_cache_dir == before


def test_a_rerun_in_the_same_process_reuses_the_compiled_chunk_function(monkeypatch):
    """The same trial run again (a notebook's rerun, more trials in the same chunks) neither
    traces nor compiles; another function, other shapes, another mode or x64 compile anew, and
    the kept functions are bounded."""
    import jax

    built: list = []
    real = compiled.make_chunk_fn
    monkeypatch.setattr(compiled, "make_chunk_fn", lambda *a, **k: built.append(a[2]) or real(*a, **k))
    go = dict(micro_batch=64, compilation_cache="off", progress=False, chunk_size=64)
    first = engine.run(trial, POINTS, 100, **go)
    assert len(built) == 1
    again = engine.run(trial, POINTS, 200, seed=1, **go)  # more trials, another seed: the same program
    assert len(built) == 1 and again.info["compile_s"] == [0.0] and again.info["compile_cached"] == [True]
    np.testing.assert_array_equal(engine.run(trial, POINTS, 100, **go)["walk"], first["walk"])

    def redefined(key, point):
        return trial(key, point)

    engine.run(redefined, POINTS, 100, **go)
    engine.run(trial, POINTS[:2], 100, **go)
    engine.run(trial, POINTS, 100, keep="summary", **go)
    with jax.enable_x64(True):
        engine.run(trial, POINTS, 100, **go)
    assert len(built) == 5
    # The bound, at 3 kept functions (the default's 8 would cost 8 more compiles, ~10 s here): the
    # first run's function is kept while it is used again, the least recently used is dropped.
    monkeypatch.setattr(compiled, "KEPT_CHUNK_FNS", 3)
    engine.run(trial, POINTS, 100, **go)
    for blocks in (2, 3):
        engine.run(trial, POINTS, 64 * blocks, **dict(go, chunk_size=64 * blocks))
    assert len(compiled._KEPT) == 3 and len(built) == 7
    engine.run(trial, POINTS, 100, **go)  # still kept: used more recently than the three others
    engine.run(trial, POINTS, 64 * 4, **dict(go, chunk_size=64 * 4))  # drops the 2-block one
    engine.run(trial, POINTS, 64 * 2, **dict(go, chunk_size=64 * 2))  # compiled again
    assert len(compiled._KEPT) == 3 and len(built) == 9
