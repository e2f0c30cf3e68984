"""The private JAX seams (jaxfed.jaxcompat, used by jaxfed.engine.cache): each is wrapped only
while a run holds it and put back after; a changed private signature or an exception inside a
seam leaves the run to JAX's own path (same values, one note); two runs in two threads of one
process both complete with their solo values; a program JAX compiles although the cache holds it
is said once and counted by ``cache info``."""

import importlib
import inspect
import threading

import jax
import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import cli, engine, jaxcompat
from jaxfed.engine import cache as engine_cache
from jaxfed.engine import compiled

compiler = importlib.import_module("jax._src.compiler")  # (the private module the seams wrap)
cache_key = importlib.import_module("jax._src.cache_key")


def fresh(monkeypatch, name: str) -> jaxcompat.Seam:
    """A new, unchecked copy of seam ``name`` in place of the process's (checked once, at first use)."""
    seam = getattr(jaxcompat, name)
    new = jaxcompat.Seam(seam.module_name, seam.name, seam.needs, seam.offers, wrapper=seam.offers is None)
    monkeypatch.setattr(jaxcompat, name, new)
    return new


def solo(seed: int, n: int = 23):
    return engine.run(trial, POINTS, n, seed=seed, micro_batch=64, compilation_cache="off", progress=False)["walk"]


def test_every_seam_is_usable_on_this_jax():
    """Each private function jaxfed uses is present with the parameters it knows, on every JAX the
    CI legs test (a new JAX that changes one fails here, and runs degrade instead of failing)."""
    assert [seam.given_up for seam in jaxcompat.seams()] == [None] * len(jaxcompat.seams())


def test_the_seams_hold_only_during_a_run(tmp_path, monkeypatch):
    originals = (compiler._compile_and_write_cache, cache_key._hash_serialized_compile_options)
    seen = []
    real = compiled.make_chunk_fn

    def spy(*args, **kwargs):
        seen.append((compiler._compile_and_write_cache, cache_key._hash_serialized_compile_options))
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled, "make_chunk_fn", spy)
    compiled._KEPT.clear()
    engine.run(trial, POINTS, 23, micro_batch=64, compilation_cache=str(tmp_path / "c"), progress=False)
    assert len(seen) == 1 and all(a is not b for a, b in zip(seen[0], originals))
    assert (compiler._compile_and_write_cache, cache_key._hash_serialized_compile_options) == originals


def renamed(function, old: str, new: str):
    """``function`` as a JAX whose private function renamed its parameter ``old`` to ``new`` would
    have it: JAX's own calls still work, jaxfed cannot pass or read ``old``."""
    signature = inspect.signature(function)
    parameters = [p.replace(name=new) if p.name == old else p for p in signature.parameters.values()]

    def changed(*args, **kwargs):
        if new in kwargs:
            kwargs[old] = kwargs.pop(new)
        return function(*args, **kwargs)

    changed.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return changed


@pytest.mark.parametrize(
    "name, old",
    [("COMPILE_ON_MISS", "cache_key"), ("CACHE_READ", "cache_key"), ("CACHE_KEY_OPTIONS", "strip_device_assignment")],
)
def test_a_changed_private_signature_leaves_the_run_to_jax(tmp_path, monkeypatch, name, old):
    """Another JAX whose private function takes other parameters: the seam is not used (nothing of
    JAX's is replaced) and the run completes with the values it has without it."""
    seam = fresh(monkeypatch, name)
    module = importlib.import_module(seam.module_name)
    changed = renamed(getattr(module, seam.name), old, "renamed_in_a_new_jax")
    monkeypatch.setattr(module, seam.name, changed)
    seen = []
    real = compiled.make_chunk_fn

    def spy(*args, **kwargs):
        seen.append(getattr(module, seam.name))
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled, "make_chunk_fn", spy)
    compiled._KEPT.clear()
    out = engine.run(trial, POINTS, 23, seed=5, micro_batch=64, compilation_cache=str(tmp_path / "c"), progress=False)
    assert seam.given_up is not None and f"no {old}" in seam.given_up, seam.given_up
    assert seen == [changed] and getattr(module, seam.name) is changed
    np.testing.assert_array_equal(out["walk"], solo(5))


def test_an_exception_inside_a_seam_falls_back_to_jax_with_one_note(tmp_path, monkeypatch, capfd):
    """JAX's cache read raising inside jaxfed's miss path (a JAX whose internals changed in
    behaviour, not in signature): the run compiles through JAX's own path, says so once, and
    computes its solo values; later runs of the process do not use the seam."""
    seam = fresh(monkeypatch, "CACHE_READ")
    calls = []
    original = compiler._cache_read

    def broken(*args, **kwargs):  # (JAX's own calls pass arguments by position; jaxfed's by name)
        if args:
            return original(*args, **kwargs)
        calls.append(kwargs["cache_key"])
        raise RuntimeError("internals changed")

    broken.__signature__ = inspect.signature(original)  # type: ignore[attr-defined]
    monkeypatch.setattr(compiler, "_cache_read", broken)
    compiled._KEPT.clear()
    out = engine.run(trial, POINTS, 23, seed=6, micro_batch=64, compilation_cache=str(tmp_path / "c"), progress=True)
    err = capfd.readouterr().err
    assert len(calls) >= 1 and seam.given_up is not None
    assert err.count("internals changed") == 1 and "stopped using it" in err, err
    np.testing.assert_array_equal(out["walk"], solo(6))
    compiled._KEPT.clear()
    engine.run(trial, POINTS, 23, seed=7, micro_batch=64, compilation_cache=str(tmp_path / "c2"), progress=False)
    assert len(calls) == 1  # (given up for the process: not called again)


def test_two_runs_in_two_threads_complete_with_their_solo_values(tmp_path, monkeypatch):
    """Two ``engine.run`` calls in two threads of one process (a Dask worker of two threads), both
    inside their compilation-cache block at once and both missing the same program: both
    complete, with the values each has alone, and JAX's functions and cache setting are as they
    were before. (Before the seams were installed once per process, the second run wrapped the
    first's wrapper, and one compile waited on its own lock for ten minutes.)"""
    before = (compiler._compile_and_write_cache, cache_key._hash_serialized_compile_options)
    setting = jax.config.jax_compilation_cache_dir
    both_inside = threading.Barrier(2, timeout=60)
    real = compiled.make_chunk_fn

    def meet(*args, **kwargs):  # (called inside the run's cache block, before it compiles)
        both_inside.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled, "make_chunk_fn", meet)
    monkeypatch.setattr(engine_cache, "COMPILE_WAIT_S", 60.0)
    compiled._KEPT.clear()
    out: dict = {}
    errors: list = []

    def run(seed: int, cache: str):
        try:
            out[seed] = engine.run(
                trial, POINTS, 23, seed=seed, micro_batch=64, compilation_cache=cache, progress=False
            )
        except BaseException as err:  # (reported below, with the thread's seed)
            errors.append((seed, err))

    threads = [
        threading.Thread(target=run, args=(seed, str(tmp_path / name)), daemon=True)
        for seed, name in ((1, "a"), (2, "b"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a run in a thread hangs"
    assert not errors, errors
    monkeypatch.undo()
    for seed in (1, 2):
        np.testing.assert_array_equal(out[seed]["walk"], solo(seed))
    assert (compiler._compile_and_write_cache, cache_key._hash_serialized_compile_options) == before
    assert jax.config.jax_compilation_cache_dir == setting


def test_a_program_the_cache_holds_but_jax_compiles_again_is_said_once(tmp_path, monkeypatch, capfd):
    """JAX rejecting its own cache entries (jax-ml/jax#38445; here: entries damaged on disk) makes
    every process compile again in silence: the run says so in one line and ``cache info``
    counts the programs; ``cache clear`` forgets them."""
    monkeypatch.setitem(engine_cache._rejected, "noted", False)
    cache = tmp_path / "cache"
    compiled._KEPT.clear()
    first = engine.run(trial, POINTS, 23, seed=8, micro_batch=64, compilation_cache=str(cache), progress=False)
    assert engine_cache.cache_info(str(cache)).rejected == 0
    for entry in cache.glob("*-cache"):
        entry.write_bytes(b"not an executable")
    compiled._KEPT.clear()
    with pytest.warns(UserWarning, match="persistent compilation cache"):  # (JAX's own note per damaged entry)
        again = engine.run(trial, POINTS, 23, seed=8, micro_batch=64, compilation_cache=str(cache), progress=True)
    err = capfd.readouterr().err
    assert err.count("compiled it again instead of loading it") == 1, err
    assert "jax-ml/jax#38445" in err
    assert engine_cache.cache_info(str(cache)).rejected >= 1
    np.testing.assert_array_equal(first["walk"], again["walk"])
    assert cli.main(["cache", "info", "--compilation-cache", str(cache)]) == 0
    assert "not loaded: " in capfd.readouterr().out
    engine_cache.clear_cache(str(cache))
    assert engine_cache.cache_info(str(cache)).rejected == 0
