"""A run's programs compiled before the run (jaxfed.engine.ahead.compile_ahead, what ``jaxfed
reproduce`` does for its next experiment): the run finds them compiled and computes the same values."""

import dataclasses
import fcntl
import os
import subprocess
import sys
import threading

import numpy as np
from support import POINTS, trial

from jaxfed import engine
from jaxfed.engine import cache as engine_cache
from jaxfed.engine import compiled
from jaxfed.engine.ahead import compile_ahead


def test_a_run_finds_its_programs_compiled_ahead_and_computes_the_same_values(tmp_path):
    options = engine.RunOptions(seed=5, keep="raw", progress=False, out_dir=str(tmp_path / "run"), identity={"t": 1})
    compiled._KEPT.clear()
    foreground = engine.run(trial, POINTS, 64, options=dataclasses.replace(options, out_dir=str(tmp_path / "a")))
    assert all(g.compile_s > 0 for g in foreground.info.groups)
    compiled._KEPT.clear()
    groups = compile_ahead(trial, POINTS, 64, options)
    assert groups == len(foreground.info.groups) and not (tmp_path / "run").exists()  # (nothing written but the cache)
    ahead = engine.run(trial, POINTS, 64, options=options)
    assert [g.compile_s for g in ahead.info.groups] == [0.0] * groups  # (every program kept, compiled ahead)
    for name in foreground:
        np.testing.assert_array_equal(ahead[name], foreground[name])
    compiled._KEPT.clear()
    assert compile_ahead(trial, POINTS, 64, options, stopped=lambda: True) == 0 and not compiled._KEPT  # (stopped)


def test_a_wait_on_a_compile_of_this_process_says_it_is_this_process(tmp_path):
    """The lock of a program that another thread of this process compiles (``jaxfed reproduce``'s
    compile ahead) is waited for like another process's, and the note says whose it is."""
    held = engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", 1)
    assert held is not None
    notes: list[str] = []
    try:
        waiter = threading.Thread(
            target=lambda: notes.append(
                engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", 0.3, notes.append)
            )
        )
        waiter.start()
        waiter.join()
    finally:
        engine_cache._release(held)
    assert notes[-1] is None and notes[0].startswith("waiting for another thread's compile in this process"), notes
    fd = os.open(tmp_path / engine_cache.LOCKS_DIR / "jit_on_device-abc", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # (another process's lock: the note as before)
    try:
        notes.clear()
        assert engine_cache._program_lock(str(tmp_path), "jit_on_device-abc", 0.1, notes.append) is None
    finally:
        os.close(fd)
    assert notes[0].startswith("waiting for another process's compile"), notes


ENDING_RUN = """
import threading, time
import jax, jax.numpy as jnp
from jaxfed import engine
from jaxfed.engine import compiled, core

def trial(key, point):
    x = jax.random.normal(key, (8,))
    for _ in range(point["loops"]):  # (static: group 2's program is long, its compile takes a while)
        x = jnp.sin(x) * point["scale"] + jnp.cos(x)
    return {{"x": x}}

points = [{{"scale": jnp.float32(1.0), "loops": loops}} for loops in (1, 1000)]
inside, this = threading.Event(), threading.local()
real_compile, real_run, real_xla = core._compile_group, core._run_group, compiled.timed_compile

def compile_group(plan, gp, *rest):
    this.number = gp.number
    return real_compile(plan, gp, *rest)

def timed_compile(lowered):
    if getattr(this, "number", None) == 1:  # (group 2's thread enters XLA's compile)
        inside.set()
    return real_xla(lowered)

core._compile_group, compiled.timed_compile = compile_group, timed_compile

def run_group(plan, gp, *rest):
    if gp.number == 0:  # Ctrl-C in group 1 while group 2 compiles in its thread
        inside.wait()
        time.sleep(0.05)
        raise KeyboardInterrupt
    return real_run(plan, gp, *rest)

core._run_group = run_group
try:
    engine.run(trial, points, 64, progress=False, compilation_cache="off")
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_a_run_interrupted_while_a_later_group_compiles_exits_cleanly():
    """The groups' compile threads are not daemons: the process waits for a compile under way at
    its end instead of aborting ("terminate called …", status 134) when XLA returns into a
    finalising interpreter."""
    done = subprocess.run([sys.executable, "-c", ENDING_RUN.format()], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "interrupted", (done.returncode, done.stderr[-2000:])
