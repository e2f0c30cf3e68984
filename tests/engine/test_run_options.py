"""One value describes a run (issue 23, parts 1 and 2): RunOptions is checked once and declares
every option once (run_experiment's options and config.json follow from its fields; the command
line's arguments: tests/cli/test_option_arguments.py); a run is plan then execute; RunInfo keeps the keys config.json's "engine" always had."""

import dataclasses
import functools
import json
import re
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, plotting
from jaxfed.engine import core
from jaxfed.experiment import Experiment, Sweep
from jaxfed.runs import run_experiment


def walk(key, point):
    return {"x": jnp.cumsum(jax.random.normal(key, (3,)) * point["scale"])}


POINTS = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(2.0)}]


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    scale: float = 1.0


def toy_build(cfg):
    points = [{"scale": np.float32(cfg.scale)}, {"scale": np.float32(2 * cfg.scale)}]
    return Sweep(walk, points, [{"p": 0}, {"p": 1}], {"x": ("i",)})


def toy_plot(cfg, labels, results, path):
    fig, ax = plotting.figure(1, 1)
    ax.plot(np.asarray(results["x"])[0, :, 0])
    plotting.save(fig, path)


TOY = Experiment("toy", "toy", ToyConfig, toy_build, toy_plot, lambda *a: "")


# --------------------------------------------------------------------------- checked once
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seed": -1}, "seed must be an integer in [0, 2**32), got -1"),
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1, got 0"),
        ({"max_memory": 1.5}, "max_memory must be an integer >= 1 (bytes), got 1.5"),
        ({"keep": "all"}, "keep must be one of ('raw', 'summary', 'auto'), got 'all'"),
        ({"devices": 0}, "devices must be an integer >= 1, got 0"),
        ({"micro_batch": 100}, "micro_batch must be a positive multiple of"),
        ({"target_se": -1.0, "keep": "summary"}, "target_se must be finite and > 0, got -1.0"),
        ({"target_se": 0.1}, "a precision target (target_se) needs keep='summary'"),
        ({"target_statistic": "mode"}, "target_statistic must be one of ('mean', 'median'), got 'mode'"),
        ({"overwrite": "yes"}, "overwrite must be True or False, got 'yes'"),
        ({"compilation_cache": 3}, "compilation_cache must be a directory or 'off', got 3"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_field_when_made(kwargs, message):
    with pytest.raises(ValueError) as exc:
        engine.RunOptions(**kwargs)
    assert message in str(exc.value) and len(str(exc.value).splitlines()) == 1
    with pytest.raises(ValueError, match=re.escape(message)):
        dataclasses.replace(engine.RunOptions(), **kwargs)  # checked again


def test_options_are_frozen_and_every_field_is_documented():
    options = engine.RunOptions(seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 4  # type: ignore[misc]
    for f in dataclasses.fields(engine.RunOptions):
        assert isinstance(f.metadata.get("help"), str) and len(f.metadata["help"]) > 20, f.name
    assert engine.RunOptions.for_experiments().keep == "auto" and engine.RunOptions().keep == "raw"


def test_run_experiment_takes_options_and_refuses_what_is_not_an_option(tmp_path, monkeypatch):
    """run_experiment takes its options as one RunOptions (no keyword arguments for its fields)."""
    monkeypatch.setattr(engine, "run", functools.partial(engine.run, use_jit=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # options= warns of nothing
        a, ra = run_experiment(TOY, ToyConfig(), 6, engine.RunOptions.for_experiments(seed=3, progress=False))
    b, rb = run_experiment(TOY, ToyConfig(), 6, engine.RunOptions.for_experiments(seed=3), quiet=True)
    np.testing.assert_array_equal(ra["x"], rb["x"])
    assert a["options"] == b["options"] and a["options"]["seed"] == 3 and a["keep"] == "auto"
    with pytest.raises(TypeError, match="unexpected keyword argument 'seed'"):
        run_experiment(TOY, ToyConfig(), 6, seed=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="options must be a jaxfed.engine.RunOptions"):
        run_experiment(TOY, ToyConfig(), 6, 3)


# --------------------------------------------------------------------------- plan, then execute
def test_run_is_plan_then_execute():
    kw = dict(seed=5, chunk_size=7, keep="summary", use_jit=False)
    direct = engine.run(walk, POINTS, 30, **kw)
    planned = engine.execute(engine.plan(walk, POINTS, 30, engine.RunOptions(**kw)))
    assert direct.info == planned.info
    for field in ("mean", "count", "hist"):
        np.testing.assert_array_equal(getattr(direct["x"], field), getattr(planned["x"], field))
    again = engine.run(walk, POINTS, 30, options=engine.RunOptions(seed=5), chunk_size=7, keep="summary", use_jit=False)
    assert again.info == direct.info


def test_a_plan_restores_the_store_before_any_work(tmp_path, monkeypatch):
    d = str(tmp_path / "run")
    options = engine.RunOptions(seed=1, chunk_size=4, out_dir=d, identity={"toy": 1}, use_jit=False, progress=False)
    first = engine.execute(engine.plan(walk, POINTS, 8, options))
    monkeypatch.setattr(core, "make_chunk_fn", lambda *a, **k: pytest.fail("compiled while planning"))
    with engine.plan(walk, POINTS, 12, options) as plan:
        (group,) = plan.groups
        assert group.sink.resume() == (False, 2 * 8, None) and plan.keep == "raw"
        np.testing.assert_array_equal(plan.results["x"][:, :8], first["x"])  # restored
    with engine.plan(walk, POINTS, 8, options) as plan:
        assert plan.groups[0].sink.resume().complete
        done = engine.execute(plan)  # nothing compiled: the store holds every trial
    np.testing.assert_array_equal(done["x"], first["x"])
    assert done.info["chunk_sizes"] == [None]


def test_run_info_is_typed_and_reads_as_the_engine_record():
    out = engine.run(walk, POINTS, 10, keep="summary", target_se=0.5, target_metric="x@2", chunk_size=8, use_jit=False)
    info = out.info
    assert isinstance(info, engine.RunInfo) and info.keep == "summary" and info.target is not None
    record = info.record()
    assert list(record) == [
        "devices", "processes", "chunk_sizes", "budget_bytes", "compile_s", "compile_cached",
        "compile_wait_s", "target", "keep", "compilation_cache", "nonfinite_trials",
    ]  # fmt: skip
    assert record["chunk_sizes"] == [g.chunk_size for g in info.groups] == info["chunk_sizes"]
    assert sorted(record["target"]) == ["max_trials", "metric", "se", "se_reached", "statistic", "trials_per_point"]
    assert record["target"]["metric"] == "x@2" and dict(info) == record
    json.dumps(record)  # config.json's "engine" entry


def test_engine_functions_are_short():
    """No function of the engine is longer than 60 lines (docstrings included)."""
    import ast
    import pathlib

    root = pathlib.Path(core.__file__).parent
    long = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name}")
    assert not long, long


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
