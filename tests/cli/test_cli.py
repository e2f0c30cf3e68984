import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from support import run_cli

from jaxfed import cli
from jaxfed.experiments import REGISTRY

SMALL = ["--set", "n_slots=40", "--quiet"]


def test_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in REGISTRY:
        assert name in out


def test_run_writes_config_metrics_and_plot(tmp_path, capsys):
    out = tmp_path / "topo"
    assert cli.main(["run", "gfvl-topologies", "--trials", "12", "--seed", "3", "--out", str(out), *SMALL]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["points"] == [{"topology": "star"}, {"topology": "ring"}, {"topology": "complete"}]
    assert config["metrics"]["kl"]["axes"] == ["point", "trial", "slot"]
    assert config["parameters"]["n_slots"] == 40 and config["seed"] == 3 and config["n_trials"] == 12
    with np.load(out / "metrics.npz") as z:
        kl = z["kl"]
    assert kl.shape == (3, 12, 40) and np.isfinite(kl).all() and (kl >= 0).all()
    assert (out / "gfvl-topologies.png").stat().st_size > 10_000
    # Fig. 3 reading: by the last slot the complete graph has converged in more trials than the star.
    assert (kl[2, :, -1] == 0).mean() >= (kl[0, :, -1] == 0).mean()
    assert cli.main(["plot", str(out)]) == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "no-such-experiment"], "unknown experiment"),
        (["run", "gfvl-topologies", "--set", "alpha=-1"], "alpha must be finite and > 0, got -1.0"),
        (["run", "gfvl-topologies", "--set", "alpah=1"], "unknown parameter 'alpah'"),
        (["run", "gfvl-topologies", "--set", "n_slots=many"], "cannot parse 'many' as int"),
        (["run", "gfvl-topologies", "--set", "topologies=star,torus"], "unknown graph 'torus'"),
        (["run", "gfvl-topologies", "--set", "alpha"], "key=value"),
        (["run", "gfvl-topologies", "--trials", "0"], "--trials: trials must be an integer in [1, 2**53]"),
        (["run", "gfvl-topologies", "--seed", "-1"], "--seed: seed must be an integer in [0, 2**32), got -1"),
        (["reproduce", "--scale", "0"], "--scale: scale must be finite and > 0, got 0.0"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main([*args, "--out", str(tmp_path / "x")] if args[0] == "run" else args))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jaxfed: error:") and message in err, err


def test_a_different_config_in_the_same_directory_is_refused(tmp_path, capsys):
    out = str(tmp_path / "d")
    assert cli.main(["run", "gfvl-topologies", "--trials", "4", "--out", out, *SMALL]) == 0
    assert cli.main(["run", "gfvl-topologies", "--trials", "4", "--seed", "1", "--out", out, *SMALL]) == 2
    err = capsys.readouterr().err
    assert "different configuration (differs in seed: stored 0, given 1)" in err and len(err.splitlines()) == 1
    assert (
        cli.main(["run", "gfvl-topologies", "--trials", "4", "--seed", "1", "--out", out, "--overwrite", *SMALL]) == 0
    )


@pytest.mark.slow  # real SIGKILL of a subprocess; tests/store/test_store.py injects kills in-process
def test_killed_run_resumes_to_identical_arrays(tmp_path):
    """A run killed (SIGKILL) after some chunks resumes, computing only what is missing."""
    args = ["run", "gfvl-topologies", "--trials", "4000", "--chunk-size", "100", "--set", "n_slots=300", "--quiet"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "jaxfed.cli", *args, "--out", str(killed)])
    chunk_dir = killed / "chunks"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if chunk_dir.exists() and len([f for f in os.listdir(chunk_dir) if f.endswith(".npz")]) >= 2:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = sorted(f for f in os.listdir(chunk_dir) if f.endswith(".npz"))
    assert 2 <= len(finished) < 40, finished  # killed mid-way
    assert not (killed / "metrics.npz").exists()

    assert run_cli(*args, "--out", str(killed)).returncode == 0
    whole = tmp_path / "whole"
    assert run_cli(*args, "--out", str(whole)).returncode == 0
    with np.load(killed / "metrics.npz") as a, np.load(whole / "metrics.npz") as b:
        np.testing.assert_array_equal(a["kl"], b["kl"])


# One experiment of each paper and a study: every built-in experiment through `jaxfed reproduce`
# compiled 41 groups at the default settings and took 17 minutes of the CI's slow suite (each
# experiment's run, figure and report are checked at small settings in test_results_xarray,
# test_checks_before_work and test_kmeans_experiments).
REPRODUCED_HERE = ("gfvl-topologies", "kmeans-convergence", "kmeans-digits1")


@pytest.mark.slow  # compiles three experiments' groups at their default settings (~2 min)
def test_reproduce_writes_each_experiment_and_the_report(tmp_path):
    only = ",".join(REPRODUCED_HERE)
    # The timeout guards against a hang, not the speed.
    result = run_cli("reproduce", "--scale", "0.01", "--only", only, "--out", str(tmp_path), "--quiet", timeout=1800)
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "report.md").read_text()
    for name in REPRODUCED_HERE:
        assert (tmp_path / name / "metrics.npz").exists()
        assert (tmp_path / name / f"{name}.png").exists()
        assert f"## {name}" in report and f"({name}/{name}.png)" in report
    assert report.count("**Reading.**") == len(REPRODUCED_HERE)
