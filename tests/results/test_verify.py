"""``jaxfed verify DIR`` (Trust V, part 1): checksums prove a directory is what was written, not that
it is true. A directory forged consistently (chunks removed, metrics.npz rewritten with other
values and every digest recomputed) opens without a word; verify recomputes sampled trials from the
run's seed and code and catches it in one line."""

import contextlib
import io
import shutil
import time

import numpy as np
import pytest

from jaxfed import cli
from jaxfed.store import rundir

RUN = ["run", "gfvl-topologies", "--trials", "600", "--set", "n_slots=12", "--quiet"]


def _command(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(map(str, args)))
    return code, out.getvalue().strip(), err.getvalue().strip()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    for seed in (0, 1):
        assert _command(*RUN, "--seed", seed, "--out", root / f"seed{seed}")[0] == 0
    return root


def test_a_true_run_verifies_bit_for_bit(runs):
    code, out, err = _command("verify", runs / "seed0", "--sample", "4", "--seed", "3")
    assert code == 0, err
    assert "recomputed bit for bit" in out and "(point, trial) values of 1 metric(s)" in out


def _forge(runs, tmp_path, values) -> str:
    """seed0's directory with its chunks removed and its metrics.npz replaced by ``values``, every
    digest rewritten consistently: it opens as a run of seed 0."""
    forged = tmp_path / "forged"
    shutil.copytree(runs / "seed0", forged)
    shutil.rmtree(forged / "chunks")
    config_json, _ = rundir.load_results(str(forged), read_metrics=False)
    rundir.write_results(str(forged), dict(config_json), values, time.perf_counter())
    rundir.load_results(str(forged))  # the forgery opens: checksums prove integrity, not truth
    return str(forged)


@pytest.mark.parametrize("forgery", ["another seed's values", "one value changed"])
def test_a_consistently_forged_directory_is_caught_in_one_line(runs, tmp_path, forgery):
    real = rundir.load_results(str(runs / "seed0"))[1]
    if forgery == "another seed's values":
        values = rundir.load_results(str(runs / "seed1"))[1]
    else:
        kl = np.array(real["kl"])
        kl[1, 599, 5] = np.nextafter(kl[1, 599, 5], np.float32(np.inf))  # one ulp, in the last trial
        values = {"kl": kl}
    forged = _forge(runs, tmp_path, values)
    code, _, err = _command("verify", forged, "--sample", "600" if forgery == "one value changed" else "2")
    assert code == 2 and err.count("\n") == 0, err
    assert "metric 'kl' of point" in err and "not what the run's seed and code compute" in err
    if forgery == "one value changed":
        assert "point 1, trial 599" in err


def test_a_summary_run_is_refused_with_the_reason(tmp_path):
    out = tmp_path / "summary"
    assert _command(*RUN[:3], "100", *RUN[4:], "--keep", "summary", "--out", out)[0] == 0
    code, _, err = _command("verify", out)
    assert code == 2 and "keeps summaries" in err and err.count("\n") == 0
