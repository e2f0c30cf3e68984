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

from jaxfed import cli, store
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
    if forgery == "one value changed":  # (issue 59: the value that differs, not the trial's first three)
        stored, recomputed = kl[1, 599, 5].item(), np.array(real["kl"])[1, 599, 5].item()
        assert f"point 1, trial 599, value at flat index 5 of the trial's {kl.shape[2]}" in err
        assert f"stored as {stored!r}, recomputed as {recomputed!r}" in err and repr(stored) != repr(recomputed)


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify-summary")
    for seed in (0, 1):
        run = [*RUN[:3], "700", *RUN[4:], "--keep", "summary", "--seed", seed, "--chunk-size", "128"]
        assert _command(*run, "--out", root / f"seed{seed}")[0] == 0
    return root


@pytest.mark.parametrize("sample", ["2", "all"])
def test_a_true_summary_run_verifies_bit_for_bit(summaries, sample):
    code, out, err = _command("verify", summaries / "seed0", "--sample", sample)
    assert code == 0, err
    assert "summary run" in out and "recomputed bit for bit" in out
    assert ("every stored sum, histogram and count" in out) == (sample == "all")


def test_a_summary_forged_consistently_is_caught(summaries, tmp_path):
    """seed 1's summary state re-signed as seed 0's chunk, metrics.npz and config.json rewritten
    from it: the directory opens as seed 0; verify recomputes its smallest sums and catches it."""
    forged = tmp_path / "forged"
    shutil.copytree(summaries / "seed0", forged)
    config_json, _ = rundir.load_results(str(forged), read_metrics=False)
    path = store.summary_path(str(forged), 0)
    meta, arrays, _ = store._unpack(store.summary_path(str(summaries / "seed1"), 0))
    digest = store._unpack(path)[0]["identity"]
    meta = {k: v for k, v in meta.items() if k not in ("sha256", "arrays")} | {"identity": digest}
    store.atomic_write_bytes(path, store._pack(meta, arrays))
    values = rundir.load_results(str(summaries / "seed1"))[1]
    rundir.write_results(str(forged), dict(config_json), values, time.perf_counter())
    rundir.load_results(str(forged))  # it opens
    code, _, err = _command("verify", forged, "--sample", "1")
    assert code == 2 and err.count("\n") == 0, err
    assert "metric 'kl' of point 0" in err and "is not what the run's seed and code compute" in err


def test_python_verify(runs, summaries):
    import jaxfed

    assert "recomputed bit for bit" in jaxfed.verify(str(runs / "seed0"), sample=2)
    assert "summary run" in jaxfed.verify(str(summaries / "seed0"), sample=1)
    with pytest.raises(ValueError, match="sample must be"):
        jaxfed.verify(str(runs / "seed0"), sample=0)
