"""Compiled once: one compile of a run's trial program (no probe, one executable for every host
device), the persistent compilation cache, and reruns of a finished run that compile nothing."""

import logging
import os
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine, jaxcompat
from jaxfed.engine import compiled, core


@pytest.fixture(autouse=True)
def fresh_process():
    """Each test compiles as a new process would: no chunk function kept from an earlier run."""
    compiled._KEPT.clear()


def run(cache, **kwargs):
    out = engine.run(trial, POINTS, 23, seed=4, compilation_cache=cache, **kwargs)
    return out, out.info


@pytest.mark.slow
def test_a_second_run_takes_the_executable_from_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    first, info1 = run(cache)
    second, info2 = run(cache)
    assert info1["compilation_cache"] == cache and info1["compile_cached"] == [False] and info1["compile_s"][0] > 0
    assert info2["compile_cached"] == [True]
    np.testing.assert_array_equal(first["walk"], second["walk"])


def trial_compiles(caplog, go) -> int:
    """XLA compilations of a trial program (the devices' ``on_device``) while ``go()`` runs: the
    persistent cache's misses (every engine run has a cache, its own scratch one when off)."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="jax._src.compiler"):
        go()
    return sum("CACHE MISS for 'jit_on_device'" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_a_run_compiles_its_trial_program_once(caplog, monkeypatch, keep):
    """Without a chunk size, a run whose metrics are a small part of a chunk's memory, of at most
    16 micro-batches, is one chunk of every trial; a longer one is chunked by the estimate of its
    shapes (sizing.estimated_chunk). Either compiles the trial program once: there is no memory
    probe of one micro-batch (which compiled the same trial a second time, 4 s of a 13 s cold
    gfvl-topologies run). The values are those of any other chunking."""
    batches: list = []
    real = compiled.make_chunk_fn
    monkeypatch.setattr(compiled, "make_chunk_fn", lambda *a, **k: batches.append(a[2]) or real(*a, **k))
    go = dict(micro_batch=64, compilation_cache="off", progress=False, keep=keep)
    whole: dict = {}
    assert trial_compiles(caplog, lambda: whole.update(engine.run(trial, POINTS, 300, **go))) == 1
    assert batches == [320]
    batches.clear()
    longer: dict = {}
    monkeypatch.setattr(engine.sizing, "CPU_CHUNK_BYTES", 2**16)  # (several chunks of this small trial)
    n = 16 * 64 + 1  # more than 16 micro-batches: chunked by the estimate
    assert trial_compiles(caplog, lambda: longer.update(engine.run(trial, POINTS, n, **go))) == 1
    assert len(batches) == 1 and 64 <= batches[0] < n
    reference = engine.run(trial, POINTS, n, **dict(go, chunk_size=64))
    for name in reference:
        for a, b in zip(longer[name], reference[name]) if keep == "summary" else [(longer[name], reference[name])]:
            np.testing.assert_array_equal(a, b)


TWO_HOST_DEVICES = """
import logging, sys, jax, numpy as np
sys.path[:0] = [{tests!r}]
from support import POINTS, trial
from jaxfed import engine
records = []
handler = logging.Handler()
handler.emit = records.append
logger = logging.getLogger("jax._src.compiler")
logger.addHandler(handler)
logger.setLevel(logging.DEBUG)
for cache in ("off", sys.argv[2]):
    records.clear()
    out = engine.run(trial, POINTS, 300, seed=4, devices=2, micro_batch=64, compilation_cache=cache, progress=False)
    compiles = sum("CACHE MISS for 'jit_on_device'" in r.getMessage() for r in records)
    loads = sum("cache hit for 'jit_on_device'" in r.getMessage() for r in records)
    assert (compiles, loads) == (1, 1), f"cache {{cache}}: the trial program compiled {{compiles}} times, loaded {{loads}}"
    engine.compiled._KEPT.clear()
np.save(sys.argv[1], out["walk"])
"""


def test_two_host_devices_share_one_compiled_trial_program(tmp_path):
    """On two host devices the trial program is compiled once, for the first, and the second
    loads it from the cache (one entry for every host device), with the cache off (a scratch
    cache of the run's own) or on; the values are those of one device."""
    path = str(tmp_path / "walk.npy")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    script = TWO_HOST_DEVICES.format(tests=os.path.dirname(os.path.dirname(__file__)))
    subprocess.run([sys.executable, "-c", script, path, str(tmp_path / "cache")], check=True, env=env, timeout=300)
    one = engine.run(trial, POINTS, 300, seed=4, micro_batch=64, compilation_cache="off", progress=False)
    np.testing.assert_array_equal(np.load(path), one["walk"])


def test_the_cache_can_be_disabled_by_option_or_environment(tmp_path, monkeypatch):
    _, info = run("off")
    assert info["compilation_cache"] is None and info["compile_cached"] == [False]
    monkeypatch.setenv(engine.CACHE_ENV, "off")
    assert engine.testing.compilation_cache_dir() is None
    monkeypatch.setenv(engine.CACHE_ENV, str(tmp_path / "env"))
    assert engine.testing.compilation_cache_dir() == str(tmp_path / "env")
    assert engine.testing.compilation_cache_dir(str(tmp_path / "opt")) == str(tmp_path / "opt")
    monkeypatch.delenv(engine.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert engine.testing.compilation_cache_dir() == str(tmp_path / "xdg" / "jaxfed" / "xla")


@pytest.mark.filterwarnings("ignore:Error reading persistent compilation cache")  # JAX's note on each damaged entry
def test_a_corrupted_cache_directory_does_not_break_a_run(tmp_path):
    reference, _ = run("off")
    cache = tmp_path / "cache"
    run(str(cache))
    for root, _, files in os.walk(cache):  # every entry damaged
        for name in files:
            (tmp_path / root / name).write_bytes(b"\x00garbage")
    compiled._KEPT.clear()  # as a new process finds the directory
    damaged, info = run(str(cache))
    assert info["compile_cached"] == [False]
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
    with jaxcompat.enable_x64(True):
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


def powered(key, point):
    """A trial whose static leaf ``power`` makes a group of its own (same shapes, another program)."""
    x = jax.random.normal(key, (4,)) * point["scale"]
    return {"y": x ** point["power"]}


def test_groups_compile_side_by_side_with_the_values_of_one_after_another(monkeypatch):
    """Every group's chunk function is compiled in threads from the start (later groups compile
    while earlier ones compile or run); the values are those of groups compiled one at a time."""
    points = [{"scale": jnp.float32(1.0 + p), "power": p + 1} for p in range(3)]  # three groups
    names: list = []
    real = compiled.compile_chunk_fn
    monkeypatch.setattr(
        compiled, "compile_chunk_fn", lambda *a: names.append(threading.current_thread().name) or real(*a)
    )
    go = dict(micro_batch=64, compilation_cache="off", progress=False)
    side_by_side = engine.run(powered, points, 100, **go)
    assert len(names) == 3 and all(name.startswith("jaxfed-compile-group") for name in names)
    compiled._KEPT.clear()
    monkeypatch.setattr(core, "COMPILE_THREADS", 1)
    one_at_a_time = engine.run(powered, points, 100, **go)
    np.testing.assert_array_equal(side_by_side["y"], one_at_a_time["y"])


def test_a_group_that_cannot_compile_fails_the_run_with_its_own_error(monkeypatch):
    points = [{"scale": jnp.float32(1.0 + p), "power": p + 1} for p in range(3)]
    real = core._compile_group

    def second_fails(plan, gp, cache_dir):
        if gp.number == 1:
            raise ValueError("group 2 refused")
        return real(plan, gp, cache_dir)

    monkeypatch.setattr(core, "_compile_group", second_fails)
    with pytest.raises(ValueError, match="group 2 refused"):
        engine.run(powered, points, 100, micro_batch=64, compilation_cache="off", progress=False)


def test_the_groups_after_one_that_failed_are_not_compiled(monkeypatch):
    """Compiles not yet started when the run ends (an error, an interrupt) are cancelled."""
    points = [{"scale": jnp.float32(1.0 + p), "power": p + 1} for p in range(3)]
    asked: list = []

    def first_fails(plan, gp, cache_dir):
        asked.append(gp.number)
        if gp.number:  # (a compile under way when the run ends: it is left to its thread)
            time.sleep(1.0)
        raise ValueError(f"group {gp.number + 1} refused")

    monkeypatch.setattr(core, "COMPILE_THREADS", 1)
    monkeypatch.setattr(core, "_compile_group", first_fails)
    with pytest.raises(ValueError, match="group 1 refused"):
        engine.run(powered, points, 100, micro_batch=64, compilation_cache="off", progress=False)
    time.sleep(1.5)  # (the thread, done with the second group if it took it, finds the third cancelled)
    assert asked in ([0], [0, 1])
