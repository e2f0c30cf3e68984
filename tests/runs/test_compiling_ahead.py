"""``jaxfed reproduce`` compiles the next experiment while one runs (:class:`jaxfed.runs.ahead.CompilingAhead`):
the next experiment finds its programs compiled, its values byte for byte those compiled when it
starts; a failure ahead only means compiling in the foreground."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from jaxfed import engine
from jaxfed.engine import compiled
from jaxfed.experiment import Experiment, Sweep
from jaxfed.runs import ahead, reproduce

ONLY = "gfvl-topologies,gfvl-graphs"


def _reproduce(out: str, on: bool, lines: list) -> dict:
    compiled._KEPT.clear()  # (nothing kept from an earlier run in this process)
    reproduce.reproduce(out, scale=0.01, only=ONLY, ahead=on, say=lines.append)
    return {name: json.load(open(os.path.join(out, name, "config.json")))["engine"] for name in ONLY.split(",")}


@pytest.mark.slow  # two reproduces of two experiments (~40 s); the failure path below stays in the default suite
def test_the_next_experiment_runs_the_programs_compiled_ahead_with_the_same_values(tmp_path, monkeypatch):
    real_take = ahead.CompilingAhead.take

    def take_once_compiled(self, name):  # (deterministic: the compile ahead ends before its run starts)
        job = self.jobs.get(name)
        if job is not None:
            job.compiled.result()
        return real_take(self, name)

    monkeypatch.setattr(ahead.CompilingAhead, "take", take_once_compiled)
    ahead_lines: list[str] = []
    with_ahead = _reproduce(str(tmp_path / "ahead"), True, ahead_lines)
    without = _reproduce(str(tmp_path / "foreground"), False, [])
    for name in ONLY.split(","):
        a, b = (tmp_path / "ahead" / name / "metrics.npz"), (tmp_path / "foreground" / name / "metrics.npz")
        assert a.read_bytes() == b.read_bytes(), name
    # The first compiles when it starts; the second finds every program compiled (0 s, kept in the process).
    assert with_ahead["gfvl-topologies"]["compile_s"][0] > 0
    assert with_ahead["gfvl-graphs"]["compile_s"] == [0.0] * len(with_ahead["gfvl-graphs"]["compile_s"])
    assert without["gfvl-graphs"]["compile_s"][0] > 0  # (without: compiled, or loaded from the cache, when it starts)
    said = [line for line in ahead_lines if "compiled ahead" in line]
    assert len(said) == 1 and "gfvl-graphs: 1 group program(s) built and compiled ahead in" in said[0], ahead_lines

    def broken(*args):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(ahead, "compile_ahead", broken)  # a failure ahead: compiled in the foreground, same values
    broken_lines: list[str] = []
    _reproduce(str(tmp_path / "broken"), True, broken_lines)
    for name in ONLY.split(","):
        a, b = (tmp_path / "broken" / name / "metrics.npz"), (tmp_path / "foreground" / name / "metrics.npz")
        assert a.read_bytes() == b.read_bytes(), name
    assert any("gfvl-graphs: compiling ahead failed (RuntimeError: no compiler today)" in x for x in broken_lines)


def _tiny(name: str, build) -> Experiment:
    @dataclasses.dataclass(frozen=True)
    class Config:
        n: int = 2

    return Experiment(name=name, description="a tiny test experiment", config_cls=Config, build=build, default_trials=4)


def _sweep(cfg) -> Sweep:
    return Sweep(
        trial=lambda key, point: {"x": jnp.zeros(cfg.n)}, points=[{}], labels=[{}], metric_axes={"x": ("cell",)}
    )


def test_a_failure_ahead_is_recorded_and_the_run_builds_and_compiles_as_before(tmp_path, monkeypatch):
    def broken_build(cfg):
        raise RuntimeError("no data here")

    def broken_compile(*args):
        raise MemoryError

    monkeypatch.setattr(ahead, "compile_ahead", broken_compile)
    options = engine.RunOptions.for_experiments(progress=False)
    compiling = ahead.CompilingAhead(options)
    builds, compiles = _tiny("broken-build", broken_build), _tiny("broken-compile", _sweep)
    for exp in (builds, compiles):
        assert compiling.start(exp, 4, dataclasses.replace(options, out_dir=str(tmp_path / exp.name)))
    for job in compiling.jobs.values():
        job.compiled.result()
    assert compiling.take("broken-build") is None  # (its run builds it, and says what fails)
    assert compiling.outcome("broken-build").error == "RuntimeError: no data here"
    config, built = compiling.take("broken-compile")  # (built: the run uses it, and compiles its programs)
    assert config == compiles.config_cls() and isinstance(built, Sweep) and built.trial(None, {})["x"].shape == (2,)
    assert compiling.outcome("broken-compile").error == "MemoryError"
    compiling.close()


def test_user_code_a_stored_run_and_several_processes_are_not_compiled_ahead(tmp_path):
    options = engine.RunOptions.for_experiments(progress=False)
    exp = _tiny("tiny", _sweep)
    user = dataclasses.replace(exp, source="tiny.py:EXP")
    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / "config.json").write_text("{}")
    compiling = ahead.CompilingAhead(options)
    assert not compiling.start(user, 4, dataclasses.replace(options, out_dir=str(tmp_path / "u")))
    assert not compiling.start(exp, 4, dataclasses.replace(options, out_dir=str(stored)))
    assert compiling.take("tiny") is None and compiling.outcome("tiny") is None
    assert not ahead.CompilingAhead(options, imports={"channel.py": "0" * 64}).enabled
    assert not ahead.CompilingAhead(options, enabled=False).enabled
    assert not ahead.CompilingAhead(dataclasses.replace(options, use_jit=False)).enabled
    compiling.close()


ENDING = """
import dataclasses, sys, threading, time
from jaxfed import engine
from jaxfed.engine import ahead as engine_ahead
from jaxfed.runs import ahead, reproduce
inside = threading.Event()
real = engine_ahead._compile_group
engine_ahead._compile_group = lambda *args: inside.set() or real(*args)
exp = reproduce.reproduced("gfvl-topologies")[0]
options = engine.RunOptions.for_experiments(progress=False, compilation_cache="off")
compiling = ahead.CompilingAhead(options)
assert compiling.start(exp, 10, dataclasses.replace(options, out_dir=sys.argv[1]))
inside.wait()
time.sleep(0.5)  # (inside XLA's compile)
compiling.close()
print("closed", flush=True)
"""


def test_a_process_that_ends_during_a_compile_ahead_waits_for_it_and_exits_cleanly(tmp_path):
    """An interrupted ``jaxfed reproduce`` ends while the next experiment compiles: the process
    waits for that compile and exits with its own status (a daemon thread returning from XLA into
    the finalising interpreter was ended by force: "terminate called …", the process aborted)."""
    done = subprocess.run(
        [sys.executable, "-c", ENDING, str(tmp_path / "out")], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "closed", (done.returncode, done.stderr[-2000:])
    assert "terminate called" not in done.stderr and not (tmp_path / "out").exists()
