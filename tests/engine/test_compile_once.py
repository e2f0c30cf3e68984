"""One compile of a program for every process that shares a compilation cache
(jaxfed.engine.cache.one_compile_for_every_process): of processes that miss the same program at
once, one compiles it and the others wait for it and load it."""

import errno
import fcntl
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine
from jaxfed.engine import cache as engine_cache
from jaxfed.engine import compiled

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A process that waits for its sibling (a file each), then runs with the shared cache, XLA's
# compile of the trial program slowed so that the two misses overlap; it prints how often it
# compiled the trial program and how often JAX missed it in the cache.
SIBLING = """
import json, logging, os, sys, time
sys.path[:0] = [{tests!r}]
from support import POINTS, trial
from jaxfed import engine
from jax._src import compiler
me, other, cache, out = sys.argv[1:5]
compiles = []
real = compiler.backend_compile_and_load

def slow(backend, computation, *args, **kwargs):
    name = str(computation.operation.attributes["sym_name"])
    if "on_device" in name:
        compiles.append(name)
        time.sleep(1.5)
    return real(backend, computation, *args, **kwargs)

compiler.backend_compile_and_load = slow
misses = []
handler = logging.Handler()
handler.emit = lambda r: misses.append(r) if "CACHE MISS for 'jit_on_device'" in r.getMessage() else None
logging.getLogger("jax._src.compiler").addHandler(handler)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
open(me, "w").close()
deadline = time.monotonic() + 120
while not os.path.exists(other) and time.monotonic() < deadline:
    time.sleep(0.005)
result = engine.run(trial, POINTS, 100, seed=4, micro_batch=64, compilation_cache=cache, progress=False)
import numpy as np
np.save(out, result["walk"])
print(json.dumps({{"compiles": len(compiles), "misses": len(misses), "cached": result.info["compile_cached"]}}))
"""


def test_processes_that_miss_one_program_at_once_compile_it_once(tmp_path):
    """Two processes start the same run on one cache at the same moment: both miss the trial
    program in the cache (JAX logs two misses), one compiles it and the other waits for it and
    loads it (one compile in all, and that run records its program as cached); the values are
    those of a run alone."""
    script = SIBLING.format(tests=TESTS)
    cache = str(tmp_path / "cache")
    ready = [str(tmp_path / f"ready-{i}") for i in range(2)]
    outs = [str(tmp_path / f"walk-{i}.npy") for i in range(2)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, ready[i], ready[1 - i], cache, outs[i]],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    reports = [json.loads(child.communicate(timeout=300)[0].strip().splitlines()[-1]) for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert sum(r["misses"] for r in reports) == 2, reports  # (both missed it: their compiles overlapped)
    assert sorted(r["compiles"] for r in reports) == [0, 1], reports
    assert sorted(r["cached"] for r in reports) == [[False], [True]], reports
    alone = engine.run(trial, POINTS, 100, seed=4, micro_batch=64, compilation_cache="off", progress=False)
    for out in outs:
        np.testing.assert_array_equal(np.load(out), alone["walk"])
    assert os.listdir(os.path.join(cache, engine_cache.LOCKS_DIR))  # (the lock files, one per program)


def test_a_held_lock_is_waited_for_at_most_the_wait_then_the_process_compiles(tmp_path):
    """Whoever holds a program's lock past the wait (a hung process) delays the others by the
    wait only: they then compile it themselves."""
    folder = tmp_path / engine_cache.LOCKS_DIR
    folder.mkdir()
    fd = os.open(folder / "jit_on_device-abc", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        start = time.monotonic()
        assert engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", wait_s=0.3) is None
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        os.close(fd)
    held = engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", wait_s=0.3)
    assert held is not None
    engine_cache._release(held)


def test_a_file_system_without_locks_compiles_as_before(tmp_path, monkeypatch):
    """Where the file system takes no lock (ENOLCK, as NFS without its lock daemon answers), or
    there is no cache directory, no lock is held and the run compiles and caches as before."""

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(engine_cache.fcntl, "flock", no_locks)
    start = time.monotonic()
    assert engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", wait_s=60) is None
    assert time.monotonic() - start < 5
    assert engine_cache._program_lock(None, "jit_on_device-abc", wait_s=60) is None
    compiled._KEPT.clear()
    cache = str(tmp_path / "cache")
    out = engine.run(trial, POINTS, 23, seed=4, micro_batch=64, compilation_cache=cache, progress=False)
    assert out.info["compile_cached"] == [False]
    compiled._KEPT.clear()
    again = engine.run(trial, POINTS, 23, seed=4, micro_batch=64, compilation_cache=cache, progress=False)
    assert again.info["compile_cached"] == [True]
    np.testing.assert_array_equal(out["walk"], again["walk"])


def test_clearing_the_cache_removes_the_lock_files(tmp_path):
    cache = str(tmp_path / "cache")
    compiled._KEPT.clear()
    engine.run(trial, POINTS, 23, micro_batch=64, compilation_cache=cache, progress=False)
    assert os.listdir(os.path.join(cache, engine_cache.LOCKS_DIR))
    engine_cache.clear_cache(cache)
    assert not os.path.exists(os.path.join(cache, engine_cache.LOCKS_DIR))


@pytest.mark.parametrize("key", ["", "a/b"])
def test_a_key_that_is_no_file_name_takes_no_lock(tmp_path, key):
    assert engine_cache._program_lock(str(tmp_path), key, wait_s=60) is None


def test_a_process_waiting_on_another_compile_says_so_and_for_how_long(tmp_path, monkeypatch):
    """Issue 59, part 4: a run waiting on another process's compile lock (up to 10 minutes) says
    at once that it waits for another process's compile, then again every WAIT_NOTE_EVERY_S, each
    time with the seconds waited so far and the longest wait."""
    monkeypatch.setattr(engine_cache, "WAIT_NOTE_EVERY_S", 0.2)
    folder = tmp_path / engine_cache.LOCKS_DIR
    folder.mkdir()
    fd = os.open(folder / "jit_on_device-abc", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    notes = []
    try:
        assert engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", 0.7, notes.append) is None
    finally:
        os.close(fd)
    assert 3 <= len(notes) <= 5, notes
    assert all("waiting for another process's compile" in line and "at most 1 s" in line for line in notes)
    assert str(folder / "jit_on_device-abc") in notes[0] and "0 s so far" in notes[0]
    seconds = [float(line.split(": ")[1].split(" s so far")[0]) for line in notes]
    assert seconds == sorted(seconds)
    free = engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", 0.7, notes.append)
    assert free is not None and len(notes) <= 5  # (a free lock is taken without a word)
    engine_cache._release(free)
