"""A result directory is data (issue: reliability III): reading one never runs code named in it,
never follows a link out of it, and never believes an edited record; a run touches nothing outside
its directory, nor files there it did not write; a rerun that computes nothing leaves the record
as it was."""

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

from jaxfed import cli, plotting, store
from jaxfed.engine import RunOptions
from jaxfed.experiment import Experiment, Sweep
from jaxfed.runs import run_experiment
from jaxfed.store import rundir


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    scale: float = 1.0


def toy_build(cfg):
    points = [{"scale": np.float32(cfg.scale)}, {"scale": np.float32(2 * cfg.scale)}]
    trial = lambda key, point: {"x": jax.random.normal(key, (3,)) * point["scale"]}  # noqa: E731
    return Sweep(trial, points, [{"p": 0}, {"p": 1}], {"x": ("i",)})


def toy_plot(cfg, labels, results, path):
    fig, ax = plotting.figure(1, 1)
    ax.plot(np.asarray(results["x"])[0, :, 0])
    plotting.save(fig, path)


TOY = Experiment("toy", "toy", ToyConfig, toy_build, toy_plot, lambda *a: "")


pytestmark = pytest.mark.usefixtures("unjitted")  # tests/conftest.py: the engine op by op


def run(out, n_trials=6, **options):
    """The toy through ``run_experiment`` into ``out``, with these fields of :class:`RunOptions`."""
    return run_experiment(
        TOY, ToyConfig(), n_trials, RunOptions.for_experiments(out_dir=str(out), **options), quiet=True
    )


@pytest.fixture
def outside(tmp_path):
    """A file outside every result directory, which nothing may change."""
    path = tmp_path / "precious.txt"
    path.write_text("the user's own data")
    return path


# --------------------------------------------------------------------------- links out of --out
@pytest.mark.parametrize("name", [".lock", "toy.png", "config.json", "metrics.npz"])
def test_a_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, outside, name):
    out = tmp_path / "run"
    run(out)
    (out / name).unlink()
    (out / name).symlink_to(outside)
    with pytest.raises(store.StoreError, match=rf"{name}: is a symbolic link"):
        run(out, n_trials=12)  # would write every file again
    assert outside.read_text() == "the user's own data"
    if name in ("config.json", "metrics.npz"):  # what reading a directory opens
        with pytest.raises(ValueError, match=rf"{name}: is a symbolic link"):
            rundir.load_results(str(out))


def test_chunks_as_a_link_is_refused_and_the_other_directory_untouched(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "g000_t0000000000_0000000006.npz").write_bytes(b"not the engine's")
    out = tmp_path / "run"
    run(out)
    shutil.rmtree(out / "chunks")
    (out / "chunks").symlink_to(elsewhere, target_is_directory=True)
    for overwrite in (False, True):
        with pytest.raises(store.StoreError, match=r"chunks: is a symbolic link"):
            run(out, n_trials=12, overwrite=overwrite)
    assert sorted(os.listdir(elsewhere)) == ["g000_t0000000000_0000000006.npz"]
    with pytest.raises(ValueError, match="chunks: is a symbolic link"):
        rundir.load_results(str(out))


@pytest.mark.parametrize("name", ["config.json", "verdicts.json"])
def test_a_stale_temporary_that_is_a_link_is_removed_not_followed(tmp_path, outside, name):
    out = tmp_path / "run"
    run(out)
    (out / f"{name}.{os.getpid()}.tmp").symlink_to(outside)
    run(out, n_trials=12)
    assert outside.read_text() == "the user's own data"
    assert not os.path.lexists(out / f"{name}.{os.getpid()}.tmp")


# --------------------------------------------------------------------------- files the run did not write
def test_a_directory_of_someone_elses_files_is_refused_unless_overwrite(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "config.json").write_text('{"mine": true}')
    (proj / "metrics.npz").write_bytes(b"my own data")
    with pytest.raises(
        store.StoreError, match=r"proj: holds files that are not a jaxfed run \(config\.json, metrics\.npz\)"
    ):
        run(proj)
    assert (proj / "config.json").read_text() == '{"mine": true}' and sorted(os.listdir(proj)) == [
        "config.json",
        "metrics.npz",
    ]
    run(proj, overwrite=True)
    assert rundir.load_results(str(proj))[0]["n_trials"] == 6


def test_an_experiment_name_cannot_climb_out_of_the_directory():
    for name in ("../../escaped-name", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="name must be letters, digits"):
            dataclasses.replace(TOY, name=name)


# --------------------------------------------------------------------------- the record is verified
def _edit(path, change):
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


@pytest.mark.parametrize(
    "what, change",
    [
        ("points", lambda c: c.update(points=c["points"][::-1])),  # labels swapped
        ("parameters", lambda c: c["parameters"].update(scale=3.0)),
        ("seed", lambda c: c.update(seed=1)),
    ],
)
def test_an_edited_config_json_is_refused_naming_it(tmp_path, what, change):
    out = tmp_path / "run"
    run(out)
    _edit(out / "config.json", change)
    with pytest.raises(store.StoreError, match=rf"config\.json: {what} differ\(s\) from .*identity\.json"):
        rundir.load_results(str(out))


def test_records_forged_together_are_refused_by_the_chunk_headers(tmp_path):
    out = tmp_path / "run"
    run(out)
    _edit(out / "identity.json", lambda i: i.update(points=i["points"][::-1]))
    identity = json.loads((out / "identity.json").read_text())
    _edit(
        out / "config.json",
        lambda c: c.update(points=identity["points"], identity_sha256=store.identity_digest(identity)),
    )
    with pytest.raises(store.StoreError, match=r"g000_t\d+_\d+\.npz: is not a chunk of the run"):
        rundir.load_results(str(out))
    other = tmp_path / "other"
    run_experiment(TOY, ToyConfig(scale=2.0), 6, RunOptions.for_experiments(out_dir=str(other)), quiet=True)
    shutil.copy(other / "identity.json", tmp_path / "run2_identity.json")
    run(tmp_path / "run2")
    shutil.copy(tmp_path / "run2_identity.json", tmp_path / "run2" / "identity.json")
    with pytest.raises(store.StoreError, match=r"config\.json: does not name .*identity\.json"):
        rundir.load_results(str(tmp_path / "run2"))


def test_metrics_that_do_not_fit_the_record_are_refused(tmp_path):
    out = tmp_path / "run"
    run(out)
    _edit(out / "config.json", lambda c: c.update(n_trials=7, record_sha256=rundir.record_digest(dict(c, n_trials=7))))
    with pytest.raises(ValueError, match=r"metric 'x' is \[2, 6, 3\] in metrics\.npz, which does not fit the record"):
        rundir.load_results(str(out))


# --------------------------------------------------------------------------- jaxfed plot runs no code
USER_FILE = """
import dataclasses
import jax
from jaxfed.experiment import Experiment, Sweep


@dataclasses.dataclass(frozen=True)
class Config:
    n: int = 2  # values per trial


def build(cfg):
    return Sweep(lambda key, point: {"x": jax.random.normal(key, (cfg.n,))}, [{}], [{"p": 0}], {"x": ("i",)})


EXPERIMENT = Experiment("mine", "mine", Config, build, plot=lambda *a: None, report=lambda *a: "")
"""


@pytest.mark.slow  # ~7 s (the default suite's time); the other refusals above stay in the default suite
def test_plot_never_imports_code_the_directory_names(tmp_path, capsys):
    out = tmp_path / "topologies"
    args = ["run", "gfvl-topologies", "--trials", "4", "--set", "n_slots=8", "--out", str(out), "--quiet"]
    assert cli.main(args) == 0
    evil = tmp_path / "evil.py"
    marker = tmp_path / "evil-ran"
    evil.write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nfrom jaxfed.experiments import REGISTRY\nEXPERIMENT = REGISTRY['gfvl-topologies']\n"
    )
    for key, value in (("source", f"{evil}:EXPERIMENT"), ("code", {"evil.py": "0" * 64})):
        # a deliberate edit, with the record's digest recomputed: only the code check is left to refuse it
        _edit(
            out / "config.json",
            lambda c: c.update({key: value}, record_sha256=rundir.record_digest(dict(c, **{key: value}))),
        )
        assert cli.main(["plot", str(out)]) == 2
        err = capsys.readouterr().err
        assert ("never runs the code it names" in err or "is not the code that wrote" in err) and err.count("\n") == 1
        assert not marker.exists()
        _edit(out / "config.json", lambda c: (c.pop(key), c.update(record_sha256=rundir.record_digest(c))))
    assert cli.main(["plot", str(out)]) == 0  # a built-in is redrawn from the package


def test_plot_with_a_named_file_whose_code_changed_is_refused(tmp_path, capsys):
    source = tmp_path / "mine.py"
    source.write_text(USER_FILE)
    spec = f"{source}:EXPERIMENT"
    out = tmp_path / "mine"
    assert cli.main(["run", spec, "--trials", "4", "--out", str(out), "--quiet"]) == 0
    assert cli.main(["plot", str(out), "--experiment", spec]) == 0
    source.write_text(source.read_text() + "# edited\n")
    capsys.readouterr()
    assert cli.main(["plot", str(out), "--experiment", spec]) == 2
    assert "is not the code that wrote" in capsys.readouterr().err


# --------------------------------------------------------------------------- reading does not rewrite
def test_a_rerun_that_computes_nothing_leaves_the_record_as_it_was(tmp_path):
    out = tmp_path / "run"
    first, _ = run(out)
    before = {name: (out / name).read_bytes() for name in ("config.json", "metrics.npz", "toy.png")}
    again, results = run(out)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert again == first and again["engine"]["chunk_sizes"] != [None]  # what produced the results
    assert results["x"].shape == (2, 6, 3)
