"""A result directory is verified as a whole (issue 37 part 3): metrics.npz agrees with the chunks
beside it, every record read back as truth (coordinates, non-finite counts, verdicts.json) is under
a digest, and a rerun with nothing to compute verifies metrics.npz before it keeps it."""

import dataclasses
import hashlib
import json

import numpy as np
import pytest
from test_result_dirs import TOY, ToyConfig, run

from jaxfed import store
from jaxfed.engine import RunOptions
from jaxfed.runs import run_experiment
from jaxfed.store import rundir

pytestmark = pytest.mark.usefixtures("unjitted")  # tests/conftest.py: the engine op by op


def _forge_metrics(out, change):
    """Rewrites metrics.npz through ``change`` and recomputes every digest config.json holds (what
    a careless tool or a half-aware edit does)."""
    with np.load(out / "metrics.npz") as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    data = store.savez_bytes(arrays)
    (out / "metrics.npz").write_bytes(data)
    record = json.loads((out / "config.json").read_text())
    record["metrics_sha256"] = hashlib.sha256(data).hexdigest()
    record["record_sha256"] = rundir.record_digest(record)
    (out / "config.json").write_text(json.dumps(record))


def _edit_record(out, change):
    record = json.loads((out / "config.json").read_text())
    change(record)
    (out / "config.json").write_text(json.dumps(record))


def test_metrics_rewritten_with_their_checksum_are_refused_by_the_chunks(tmp_path):
    out = tmp_path / "run"
    run(out)
    _forge_metrics(out, lambda a: a.update(x=a["x"] * 2))
    with pytest.raises(ValueError, match=r"metrics\.npz: metric 'x' differs from .*chunks/g00\d_t"):
        rundir.load_results(str(out))


def test_a_rerun_with_nothing_to_compute_rewrites_forged_metrics(tmp_path):
    out = tmp_path / "run"
    _, results = run(out)
    _forge_metrics(out, lambda a: a.update(x=a["x"] * 2))
    run(out)  # nothing to compute: verified before it is kept
    _, again = rundir.load_results(str(out))
    np.testing.assert_array_equal(again["x"], results["x"])


def test_a_rerun_of_a_summary_run_rewrites_forged_summaries(tmp_path):
    out = tmp_path / "run"
    toy = dataclasses.replace(TOY, plot=lambda *a: None)  # (the toy's figure draws raw trials)
    _, results = run_experiment(
        toy, ToyConfig(), 6, RunOptions.for_experiments(out_dir=str(out), keep="summary"), quiet=True
    )
    _forge_metrics(out, lambda a: a.update({"x/mean": a["x/mean"] + 1}))
    with pytest.raises(ValueError, match=r"metric 'x' differs from .*chunks/summary_g000\.npz"):
        rundir.load_results(str(out))
    run_experiment(toy, ToyConfig(), 6, RunOptions.for_experiments(out_dir=str(out), keep="summary"), quiet=True)
    _, again = rundir.load_results(str(out))
    np.testing.assert_array_equal(again["x"].mean, results["x"].mean)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r["coords"].update(i=[v * 1000 for v in r["coords"].get("i", [1, 2, 3])]),  # slots ×1000
        lambda r: r["nonfinite_trials"].update(x=[1, 0]),
        lambda r: r.update(description="forged"),
    ],
    ids=["coords", "nonfinite_trials", "description"],
)
def test_an_edited_record_entry_is_refused(tmp_path, change):
    out = tmp_path / "run"
    run(out)
    _edit_record(out, change)
    with pytest.raises(ValueError, match=r"config\.json: does not match its own digest"):
        rundir.load_results(str(out))


def test_nonfinite_counts_forged_with_their_digest_are_refused(tmp_path):
    out = tmp_path / "run"
    run(out)

    def change(r):
        r["nonfinite_trials"]["x"] = [3, 0]
        r["record_sha256"] = rundir.record_digest(r)

    _edit_record(out, change)
    with pytest.raises(ValueError, match=r"nonfinite_trials of 'x' does not count"):
        rundir.load_results(str(out))


def test_a_chunk_set_other_than_the_recorded_one_is_refused(tmp_path):
    out = tmp_path / "run"
    run(out)
    run(tmp_path / "more", n_trials=9)
    chunk = sorted((out / "chunks").iterdir())[0]
    chunk.unlink()
    with pytest.raises(ValueError, match=r"chunks: is not the chunk set"):
        rundir.load_results(str(out))


def test_edited_verdicts_are_refused(tmp_path):
    out = tmp_path / "run"
    run(out)
    rundir.write_verdicts(str(out), [])
    rows = rundir.read_verdicts(str(out))
    assert rows == []
    records = json.loads((out / "verdicts.json").read_text())
    records["verdicts"] = [{"claim": "forged", "verdict": "supported"}]
    (out / "verdicts.json").write_text(json.dumps(records))
    with pytest.raises(ValueError, match=r"verdicts\.json: does not match its own digest"):
        rundir.read_verdicts(str(out))


def test_verdicts_of_another_record_are_refused(tmp_path):
    out = tmp_path / "run"
    run(out)
    rundir.write_verdicts(str(out), [])
    stale = (out / "verdicts.json").read_bytes()
    # the record is rewritten without a report (the writer removes the old report files first, but
    # a verdicts.json of the 6-trial record copied back stands for one left by an older jaxfed)
    run_experiment(TOY, ToyConfig(), 8, RunOptions.for_experiments(out_dir=str(out)), quiet=True, report=False)
    (out / "verdicts.json").write_bytes(stale)
    with pytest.raises(ValueError, match=r"verdicts\.json: was written from another record"):
        rundir.read_verdicts(str(out))


def test_the_checks_read_every_chunk_once(tmp_path, monkeypatch):
    """The cost of the whole-directory check: each raw chunk read once, beside metrics.npz."""
    out = tmp_path / "run"
    run(out, n_trials=6, chunk_size=2)
    reads = []
    for name in ("read_regular", "read_regular_writable"):  # (chunks are read by the second)
        real = getattr(store.files, name)
        monkeypatch.setattr(store.files, name, lambda path, *a, real=real: reads.append(path) or real(path, *a))
    rundir.load_results(str(out))
    chunks = [p for p in reads if "/chunks/" in p]
    assert len(chunks) == len(set(chunks)) == len(list((out / "chunks").iterdir())) == 6  # 2 groups × 3 chunks


def test_a_record_without_its_digest_is_refused_until_the_command_is_rerun(tmp_path):
    out = tmp_path / "run"
    run(out)
    _edit_record(out, lambda r: r.pop("record_sha256"))  # (as a run before record_sha256 wrote it)
    with pytest.raises(ValueError, match=r"written before config\.json carried its own digest .* rerun the command"):
        rundir.load_results(str(out))
    run(out)  # computes nothing, rewrites the record
    assert "record_sha256" in rundir.load_results(str(out))[0]


def test_an_interrupted_growth_leaves_the_finished_run_readable(tmp_path, monkeypatch):
    """Chunks of trials past the record's (a growth killed before its record) are not the run's."""
    out = tmp_path / "run"
    run(out, n_trials=6, chunk_size=3)
    monkeypatch.setattr(rundir, "write_results", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        run(out, n_trials=9, chunk_size=3)  # its chunks [6, 9) are written, its record is not
    assert any("t0000000006_0000000009" in p.name for p in (out / "chunks").iterdir())
    assert rundir.load_results(str(out))[0]["n_trials"] == 6
