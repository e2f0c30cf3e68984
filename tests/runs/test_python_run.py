"""``jaxfed.run``: the Python twin of ``jaxfed run`` writes the same result directory through the
one writer (:func:`jaxfed.runs.writer.write_run`): report.md, verdicts.json and report.html beside
metrics.npz, which is byte for byte the command's."""

import json

import pytest

import jaxfed
from jaxfed import cli, engine
from jaxfed.runs import launch


def test_jaxfed_run_writes_what_the_command_writes(tmp_path, capsys):
    out, command = tmp_path / "python", tmp_path / "command"
    assert jaxfed.run("gfvl-topologies", trials=128, out=str(out), n_slots=20) == str(out)
    for name in ("metrics.npz", "config.json", "gfvl-topologies.png", "report.md", "verdicts.json", "report.html"):
        assert (out / name).is_file(), name
    argv = ["run", "gfvl-topologies", "--trials", "128", "--set", "n_slots=20", "--out", str(command), "--quiet"]
    assert cli.main(argv) == 0
    assert (out / "metrics.npz").read_bytes() == (command / "metrics.npz").read_bytes()
    python_verdicts = json.loads((out / "verdicts.json").read_text())
    command_verdicts = json.loads((command / "verdicts.json").read_text())
    assert python_verdicts["verdicts"] == command_verdicts["verdicts"]
    table = jaxfed.verdicts(str(out))
    assert len(table) == len(python_verdicts["verdicts"]) > 0


def test_jaxfed_run_takes_parameters_as_set_does_and_its_options(tmp_path):
    assert launch.set_texts({"n_slots": 20, "rho": 0.5, "name": "star", "sizes": (1, 2), "on": True}) == {
        "n_slots": "20",
        "rho": "0.5",
        "name": "star",
        "sizes": "1,2",
        "on": "True",
    }
    out = jaxfed.run(
        "gfvl-topologies", 8, out=str(tmp_path / "a"), seed=3, options=engine.RunOptions.for_experiments(progress=False), n_slots=5
    )  # fmt: skip
    record = json.loads((tmp_path / "a" / "config.json").read_text())
    assert out == str(tmp_path / "a") and record["seed"] == 3 and record["n_trials"] == 8
    assert record["parameters"]["n_slots"] == 5
    with pytest.raises(ValueError, match="unknown parameter 'nope'"):
        jaxfed.run("gfvl-topologies", 8, out=str(tmp_path / "b"), nope=1)
    with pytest.raises(ValueError, match="options must be a jaxfed.engine.RunOptions"):
        jaxfed.run("gfvl-topologies", 8, out=str(tmp_path / "b"), options=3)  # type: ignore[arg-type]


def test_a_run_bands_its_raw_trials_once_for_the_figure_and_the_report(tmp_path, monkeypatch):
    """The figure and the report of a raw run band ``kl`` over the same trials: the quantiles are
    taken once (issue 58, part 6: ``np.quantile`` over every trial was the longest part of a large
    run's writing, done twice)."""
    from jaxfed.stats import quantiles

    banded: list = []
    real = quantiles._band
    monkeypatch.setattr(quantiles, "_band", lambda values, *a: banded.append(values.shape) or real(values, *a))
    jaxfed.run("gfvl-topologies", trials=128, out=str(tmp_path / "run"), n_slots=20)  # (raw: keep="auto" at this size)
    assert (tmp_path / "run" / "report.md").is_file() and (tmp_path / "run" / "gfvl-topologies.png").is_file()
    assert banded and len(banded) == len(set(banded)), banded  # (each raw array banded once)
