"""Conjugate data models are values in a registry: a model defined in a user's file runs through the
plain CLI (gfvl-heterogeneity's family=NAME), is swept over the spread, grows and replots."""

import json
import os

import numpy as np
import pytest

from jaxfed import cli, scenarios
from jaxfed.gfvl import expfam, models

USER_FILE = os.path.join(os.path.dirname(__file__), "..", "data", "user_family.py")


def test_the_built_in_models_are_registered_values():
    assert models.names()[:4] == ("beta", "normal", "gamma", "dirichlet")
    assert models.get("beta").family is expfam.BETA
    with pytest.raises(ValueError, match="^unknown conjugate model 'weibull'; choose one of: beta, normal, gamma"):
        models.get("weibull")
    with pytest.raises(ValueError, match="model must be a ConjugateModel"):
        models.register("beta")


def test_a_user_model_runs_through_the_plain_cli_is_swept_grows_and_replots(tmp_path, capsys):
    spec = f"{USER_FILE}:EXPERIMENT"
    out = str(tmp_path / "exp")
    common = ["--out", out, "--quiet", "--set", "family=gamma-exponential", "--set", "topologies=complete"]
    common += ["--set", "spreads=0,1", "--set", "n_slots=150", "--set", "n_per_agent=20"]
    assert cli.main(["run", spec, "--trials", "4", *common]) == 0
    assert cli.main(["run", spec, "--trials", "8", *common]) == 0  # grown
    config = json.loads((tmp_path / "exp" / "config.json").read_text())
    assert config["parameters"]["family"] == "gamma-exponential" and config["n_trials"] == 8
    kl = np.load(tmp_path / "exp" / "metrics.npz")["kl"]
    assert kl.shape == (2, 8, 150) and np.all(kl[:, :, -1] == 0.0)  # exact once every agent is visited
    assert np.all(kl[:, :, 0] > 0)
    assert cli.main(["plot", out, "--experiment", spec]) == 0


def test_a_user_model_is_used_through_the_data_generators():
    import jax

    from jaxfed.runs import catalog

    catalog.from_file(USER_FILE, "EXPERIMENT")  # registers "gamma-exponential"
    model = models.get("gamma-exponential")
    rates = scenarios.agent_thetas(jax.random.key(0), model, model.theta, 3, 0.0)
    stats = np.asarray(
        scenarios.conjugate_stats(jax.random.key(1), "gamma-exponential", rates, np.array([5.0, 0.0, 7.0]))
    )
    assert np.all(np.asarray(rates) == np.float32(0.5))
    assert stats[1].tolist() == [0.0, 0.0] and stats[0, 0] == 5.0 and stats[0, 1] < 0  # (N_k, −Σz)


@pytest.mark.slow  # ~9 s; the default suite runs a user model through the plain CLI (above)
def test_a_model_loaded_with_import_runs_the_built_in_experiment_and_must_be_given_to_read_it(tmp_path, capsys):
    """`jaxfed run gfvl-heterogeneity --import FILE --set family=NAME`: the plain command, no wrapper;
    the file's digest is in the identity and record, and report/plot need the same file again."""
    model_file = tmp_path / "my_model.py"
    model_file.write_text(open(USER_FILE).read().replace("gamma-exponential", "imported-exponential"))
    out = str(tmp_path / "run")
    args = ["run", "gfvl-heterogeneity", "--import", str(model_file), "--out", out, "--quiet", "--trials", "4"]
    args += ["--set", "family=imported-exponential", "--set", "topologies=complete", "--set", "n_slots=20"]
    assert cli.main(args) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert list(config["imports"]) == ["my_model.py"] and (tmp_path / "run" / "report.md").exists()
    capsys.readouterr()
    assert cli.main(["report", out]) == 2
    assert "was run with --import my_model.py" in capsys.readouterr().err
    assert cli.main(["report", out, "--import", str(model_file)]) == 0
    assert cli.main(["plot", out, "--import", str(model_file)]) == 0
    grown = [("8" if a == "4" else a) for a in args]
    assert cli.main(grown) == 0  # grown with the same file
    model_file.write_text(model_file.read_text() + "# edited\n")
    capsys.readouterr()
    assert cli.main(args) == 2  # growth or resume with an edited file is refused
    assert "imports.my_model.py: stored sha256" in capsys.readouterr().err
