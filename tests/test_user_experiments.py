"""User experiments (a file's Experiment) go through the same CLI, store, resume and plot; `jaxfed show`."""

import json
import pathlib

import numpy as np
import pytest

from jaxfed import cli
from jaxfed.experiments import catalog, get, gfvl_local_iters

EXAMPLE = str(pathlib.Path(__file__).parent.parent / "docs" / "examples" / "grid_gossip.py")
SPEC = f"{EXAMPLE}:EXPERIMENT"


def test_the_documented_example_runs_resumes_grows_and_replots(tmp_path, capsys):
    out = str(tmp_path / "grid")
    args = ["run", SPEC, "--trials", "6", "--out", out, "--set", "sides=2,3", "--set", "n_slots=40", "--quiet"]
    assert cli.main(args) == 0
    config = json.loads((tmp_path / "grid" / "config.json").read_text())
    assert config["experiment"] == "grid-gossip" and config["source"] == SPEC
    first = np.load(tmp_path / "grid" / "metrics.npz")["kl"]
    assert first.shape == (2, 6, 40) and np.all(first[:, :, -1] >= 0)
    # The store serves the same run again and grows it, as for a built-in experiment.
    assert cli.main(args[:3] + ["9"] + args[4:]) == 0
    grown = np.load(tmp_path / "grid" / "metrics.npz")["kl"]
    np.testing.assert_array_equal(grown[:, :6], first)
    (tmp_path / "grid" / "grid-gossip.png").unlink()
    assert cli.main(["plot", out]) == 0
    assert (tmp_path / "grid" / "grid-gossip.png").exists()


def test_show_lists_every_parameter_with_default_and_meaning(capsys):
    assert cli.main(["show", "gfvl-local-iters"]) == 0
    text = capsys.readouterr().out
    for p in catalog.parameters(gfvl_local_iters.Config):
        assert f"  {p.name} " in text
    assert "learning rate ρ" in text and "presets" in text
    assert cli.main(["show", SPEC]) == 0
    assert "grid sides s" in capsys.readouterr().out


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope.py:EXPERIMENT", "does not exist"),
        (f"{EXAMPLE}:Config", "is a type, not an Experiment; Experiments defined there: EXPERIMENT"),
        (f"{EXAMPLE}:MISSING", "is not defined"),
        ("no-such-experiment", "unknown experiment 'no-such-experiment'"),
    ],
)
def test_bad_user_experiment_specs_are_one_line_errors(spec, message, capsys):
    assert cli.main(["show", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_file_that_fails_to_import_is_named(tmp_path, capsys):
    bad = tmp_path / "broken.py"
    bad.write_text("import not_a_module_anywhere\n")
    assert cli.main(["run", f"{bad}:EXPERIMENT"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "ModuleNotFoundError" in err


def test_get_returns_built_in_experiments_unchanged():
    assert get("gfvl-topologies").source == ""
    assert get(SPEC).source == SPEC


AGGREGATOR_EXAMPLE = pathlib.Path(__file__).parent.parent / "docs" / "examples" / "lossy_aggregator.py"


def test_a_user_aggregator_runs_end_to_end_through_the_cli(tmp_path):
    """docs/examples/lossy_aggregator.py defines an Aggregator outside the package and drives
    federated k-means with it through `jaxfed run`; its estimate is unbiased and exact at p = 0."""
    import importlib.util

    import jax
    import jax.numpy as jnp

    spec = importlib.util.spec_from_file_location("lossy_aggregator", AGGREGATOR_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = jnp.arange(12.0).reshape(6, 2)
    active = jnp.array([True, True, False, True, True, True])
    exact = values[active].sum(0)
    keys = jax.random.split(jax.random.key(3), 20_000)
    draws = jax.vmap(lambda k: module.lossy(0.3).aggregate(k, values, active, 0.0))(keys)
    np.testing.assert_allclose(draws.mean(0), exact, rtol=0.02)  # unbiased (s.e. ~0.6%)
    np.testing.assert_allclose(module.lossy(0.0).aggregate(keys[0], values, active, 0.0), exact)

    out = tmp_path / "lossy"
    sets = ["loss_probs=0,0.5", "n_devices=4", "points_per_device=5", "n_rounds=4"]
    args = ["run", f"{AGGREGATOR_EXAMPLE}:EXPERIMENT", "--trials", "8", "--out", str(out), "--quiet"]
    assert cli.main(args + [item for kv in sets for item in ("--set", kv)]) == 0
    loss = np.load(out / "metrics.npz")["loss"]
    assert loss.shape == (2, 8, 4) and np.isfinite(loss).all() and (loss > 0).all()
    assert not np.array_equal(loss[0], loss[1])  # the lost updates change the trajectories
