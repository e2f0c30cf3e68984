"""What several test modules share (tests/ is on sys.path: pytest puts the root conftest.py's
folder there): the CLI as a user runs it, the one-line error check, a toy trial and the small
settings of every built-in experiment."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from jaxfed import cli


def run_cli(*args, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    """``jaxfed ARGS`` in a subprocess, as a user runs it (text output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "jaxfed.cli", *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def one_line_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jaxfed: error:"), err
    return err


def trial(key, point):
    """A small trial with a scan, a static leaf and traced leaves."""
    steps = point["steps"]  # static
    x = jax.random.normal(key, (steps,)) * point["scale"] + point["shift"]
    return {"walk": jnp.cumsum(x), "last": x[-1]}


POINTS = [
    {"scale": jnp.float32(1.0), "shift": jnp.float32(0.0), "steps": 5},
    {"scale": jnp.float32(2.0), "shift": jnp.float32(1.0), "steps": 5},
    {"scale": jnp.float32(0.5), "shift": jnp.float32(-1.0), "steps": 5},
]


# Small settings of every built-in experiment (``--set`` values).
SMALL = {
    "gfvl-topologies": {"n_slots": "20"},
    "gfvl-local-iters": {"total_iters": "20", "local_iters": "1,5", "record_every": "10", "n_samples": "5"},
    "gfvl-local-iters-paper": {"total_iters": "20", "local_iters": "1,5", "record_every": "10", "n_samples": "5"},
    "gfvl-unlearning": {"learn_slots": "12", "n_slots": "12", "n_samples": "5", "local_iters": "2"},
    "gfvl-unlearning-paper": {"learn_slots": "12", "n_slots": "12", "n_samples": "5", "local_iters": "2"},
    "gfvl-unlearning-conjugate": {"learn_slots": "12", "n_slots": "12"},
    "gfvl-heterogeneity": {"n_slots": "20", "spreads": "0.0,2.0", "topologies": "ring,star"},
    "gfvl-logistic": {
        "n_slots": "6",
        "learn_slots": "6",
        "n_samples": "4",
        "local_iters": "2",
        "topologies": "ring",
        "splits": "iid,label-skew",
    },
    "gfvl-wallclock": {"local_iters": "1,5", "total_iters": "20", "record_every": "10", "n_samples": "4"},
    "gfvl-graphs": {"graphs": "ring,rgg:radius=0.55", "n_slots": "40", "records": "8"},
    "kmeans-convergence": {"n_points": "300", "n_rounds": "4", "snrs_db": "0,20"},
    "kmeans-snr": {"n_points": "300", "n_rounds": "4", "digits_list": "2", "snrs_db": "0,10,20"},
    "kmeans-ablation": {"n_points": "300", "n_rounds": "4", "inits": "uniform,forgy"},
    "kmeans-devices": {"n_points": "300", "n_rounds": "4", "grid_sides": "3,10"},
    "kmeans-digits1": {"n_points": "300", "n_rounds": "4", "snrs_db": "0,20"},
    "kmeans-oac-counts": {"n_points": "300", "n_rounds": "4", "snrs_db": "10,20"},
    "kmeans-channels": {"n_points": "300", "n_rounds": "4", "spreads_db": "0,3", "k_factors": "0,10"},
}
