"""The command line's run options come from RunOptions' fields (issue 23): each field the command
offers is an argument with its help, parsed, checked in one line, built into the options once
(:func:`jaxfed.cli.parser.run_options`) and given to the run."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, plotting, validation
from jaxfed.cli import parser as parser_module
from jaxfed.engine.options import option
from jaxfed.experiment import Experiment, Sweep
from jaxfed.runs import run_experiment


def walk(key, point):
    return {"x": jnp.cumsum(jax.random.normal(key, (3,)) * point["scale"])}


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


def subcommand(parser, name):
    return next(a for a in parser._actions if a.dest == "command").choices[name]


def flags(parser) -> dict:
    return {a.dest: a for a in parser._actions}


# --------------------------------------------------------------------------- declared once
def test_every_command_line_option_is_a_field_with_its_help():
    parser = parser_module.build_parser()
    for command in ("run", "reproduce"):
        actions = flags(subcommand(parser, command))
        for f in dataclasses.fields(engine.RunOptions):
            offered = f.metadata["cli"] and command in f.metadata["commands"]
            assert (f.name in actions) == offered, (command, f.name)
            if offered:
                assert actions[f.name].help == f.metadata["help"] and actions[f.name].default is None
    args = parser.parse_args(["run", "x", "--max-memory", "2G", "--seed", "7", "--quiet", "--keep", "summary"])
    options = parser_module.run_options(args)
    assert (options.max_memory, options.seed, options.progress, options.keep) == (2**31, 7, False, "summary")
    assert parser_module.run_options(parser.parse_args(["reproduce"])) == engine.RunOptions.for_experiments()


@dataclasses.dataclass(frozen=True)
class Extended(engine.RunOptions):
    """RunOptions with one more field, as a maintainer would add it."""

    fancy: int = option(3, "a new option of this test: a count of something", check=lambda v: validation.integer("fancy", v, 0))  # fmt: skip


def test_a_new_field_reaches_the_command_line_run_experiment_the_engine_and_config_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine, "RunOptions", Extended)
    monkeypatch.setattr(parser_module, "RunOptions", Extended)
    seen = []
    real_run = engine.run

    def spy(trial, points, n_trials, options=None, **kw):
        seen.append(options)
        return real_run(trial, points, n_trials, options=options, use_jit=False, **kw)

    monkeypatch.setattr(engine, "run", spy)
    parser = parser_module.build_parser()
    for command in ("run", "reproduce"):
        assert flags(subcommand(parser, command))["fancy"].help == "a new option of this test: a count of something"
    # run_experiment: in options=, to the engine and config.json
    config_json, _ = run_experiment(
        TOY, ToyConfig(), 4, Extended.for_experiments(out_dir=str(tmp_path / "a"), fancy=7), quiet=True
    )
    assert seen[-1].fancy == 7 and config_json["options"]["fancy"] == 7
    assert json.loads((tmp_path / "a" / "config.json").read_text())["options"]["fancy"] == 7
    config_json, _ = run_experiment(TOY, ToyConfig(), 4, Extended(fancy=2, progress=False))
    assert seen[-1].fancy == 2 and config_json["options"]["fancy"] == 2
    # the command line: parsed, checked in one line, given to the run
    args = parser.parse_args(["run", "toy", "--fancy", "5"])
    assert (
        parser_module.run_options(args).fancy == 5
        and parser_module.run_options(parser.parse_args(["run", "toy"])).fancy == 3
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "toy", "--fancy", "-1"])
    assert "jaxfed: error: argument --fancy: fancy must be an integer >= 0, got -1" in capsys.readouterr().err
