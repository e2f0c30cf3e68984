"""An experiment in ten lines (issue 60): ``plot`` and ``report`` are optional (the default figure
draws each metric's median and band over trials, the default report has no claims), so a config,
a trial and ``Experiment(name, description, config_cls, build)`` run through ``jaxfed run FILE:NAME``
with their figure and report."""

import json

from jaxfed import cli

SHORT = """
import dataclasses, jax, jax.numpy as jnp
from jaxfed import Experiment, Sweep

@dataclasses.dataclass(frozen=True)
class Config:
    scale: float = 1.0  # the noise's scale

def build(cfg):
    trial = lambda key, point: {"walk": jnp.cumsum(point["s"] * jax.random.normal(key, (20,))), "end": jax.random.normal(key)}
    return Sweep(trial, [{"s": cfg.scale}, {"s": 2 * cfg.scale}], [{"s": 1}, {"s": 2}], {"walk": ("step",), "end": ()})

EXPERIMENT = Experiment("walks", "two random walks", Config, build)
"""


def test_a_ten_line_experiment_runs_with_its_default_figure_and_report(tmp_path, capsys):
    path = tmp_path / "walks.py"
    path.write_text(SHORT)
    assert len([line for line in SHORT.splitlines() if line.strip()]) <= 12
    out = tmp_path / "out"
    assert cli.main(["run", f"{path}:EXPERIMENT", "--trials", "64", "--out", str(out), "--quiet"]) == 0
    assert (out / "walks.png").stat().st_size > 10_000  # (the default figure: two panels)
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert json.loads((out / "verdicts.json").read_text())["verdicts"] == []
