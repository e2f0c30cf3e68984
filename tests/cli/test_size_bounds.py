"""Sizes are bounded before work (issue 37 part 5): every integer parameter that reaches an int32
is refused in one line naming it, its value and the allowed range, and a run whose figure will
take long says so before it starts."""

import dataclasses
import re
import typing

import jax
import numpy as np
import pytest

from jaxfed import cli
from jaxfed.engine import RunOptions
from jaxfed.experiment import Experiment, Sweep, make_config
from jaxfed.experiments import REGISTRY
from jaxfed.runs import run_experiment, runner

pytestmark = pytest.mark.usefixtures("unjitted")  # tests/conftest.py: the engine op by op


@pytest.mark.parametrize(
    "setting, message",
    [
        ("n_slots=2147483648", r"n_slots must be an integer in \[-2147483648, 2147483647\] \(a size reaches"),
        (
            "n_per_agent=10000000000000",
            r"n_per_agent must be an integer in \[-2147483648, 2147483647\].*got 10000000000000",
        ),
        ("n_per_agent=1073741824", r"n_per_agent must be at most 536,870,911 with n_agents = 4"),
    ],
)
def test_an_oversized_parameter_is_one_line_before_work(tmp_path, capsys, setting, message):
    code = cli.main(["run", "gfvl-topologies", "--trials", "2", "--set", setting, "--set", "n_agents=4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert re.search(message, err), err
    assert not (tmp_path / "results").exists()


def _int_fields(config_cls):
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        hint = hints[f.name]
        if hint is int or typing.get_args(hint)[:1] == (int,):
            yield f.name


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_integer_parameter_of_every_experiment_is_bounded(name):
    config_cls = REGISTRY[name].config_cls
    for field in _int_fields(config_cls):
        if field.endswith("seed"):
            continue
        with pytest.raises(ValueError, match=rf"^{field} must be an integer in .*2147483647.*got 2147483648"):
            make_config(config_cls, {field: "2147483648"})


@dataclasses.dataclass(frozen=True)
class ManyConfig:
    n_points: int = 120


def _many(cfg):
    points = [{"i": np.float32(i)} for i in range(cfg.n_points)]
    return Sweep(lambda key, p: {"x": jax.random.normal(key, ()) + p["i"]}, points, [{"i": i} for i in range(cfg.n_points)], {"x": ()})  # fmt: skip


def test_a_figure_of_many_points_is_announced_before_the_run(tmp_path, capsys, monkeypatch):
    events = []
    exp = Experiment("many", "many", ManyConfig, _many, lambda *a: events.append("plot"), lambda *a: "")
    real = runner.engine.run
    monkeypatch.setattr(runner.engine, "run", lambda *a, **k: events.append("run") or real(*a, **k))
    run_experiment(exp, ManyConfig(), 2, RunOptions.for_experiments(out_dir=str(tmp_path / "d")), quiet=True)
    err = capsys.readouterr().err
    assert "the figure will draw 120 point series after the run: about 10 s" in err
    assert "drawing the figure of 120 points" in err
    assert events == ["run", "plot"]
