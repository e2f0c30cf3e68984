"""What a run's files say of how it was made (issue "Beyond one machine II", parts 4 and 5):
verdicts.json signs the results alone, so two runs of one command, a grown run, a merge of shards
and a run on Dask write it byte for byte; a merged run's config.json and report state the shards'
own work (their seconds, compile seconds, devices and chunk sizes) and the merge's time apart."""

import json
import os
import shutil

import pytest
from support import SMALL

from jaxfed import cli
from jaxfed.store import rundir

NAME = "gfvl-topologies"
SETS = [arg for k, v in SMALL[NAME].items() for arg in ("--set", f"{k}={v}")]
N = 320  # 5 sum blocks: two shards of 128 and 192 trials


def _run(n: int, out, *argv) -> str:
    assert cli.main(["run", NAME, "--trials", str(n), "--quiet", *SETS, "--out", str(out), *argv]) == 0
    return str(out)


def _bytes(directory, name: str) -> bytes:
    with open(os.path.join(directory, name), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two plain runs of one command, a run grown to it, and a merge of its two shards."""
    base = tmp_path_factory.mktemp("records")
    made = {"plain": _run(N, base / "plain"), "again": _run(N, base / "again")}
    _run(128, base / "grown")
    made["grown"] = _run(N, base / "grown")
    shards = [_run(N, base / f"s{i}", "--shard", f"{i}/2") for i in range(2)]
    assert cli.main(["merge", *shards[::-1], "--out", str(base / "merged"), "--quiet"]) == 0
    made["merged"], made["shards"] = str(base / "merged"), shards
    return made


def test_verdicts_json_is_the_same_bytes_for_plain_grown_merged_and_dask_runs(runs, tmp_path):
    distributed = pytest.importorskip("distributed")
    from jaxfed.runs import distributed as on_dask

    dask_out = str(tmp_path / "dask")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as c:
        with distributed.Client(c) as client:
            on_dask.run_on_dask(client, NAME, N, dask_out, sets=SMALL[NAME], tasks=2, quiet=True)
    made = [runs["plain"], runs["again"], runs["grown"], runs["merged"], dask_out]
    for directory in made[1:]:
        assert _bytes(directory, "metrics.npz") == _bytes(runs["plain"], "metrics.npz")
        assert _bytes(directory, "verdicts.json") == _bytes(runs["plain"], "verdicts.json"), directory
        assert rundir.read_verdicts(directory) == rundir.read_verdicts(runs["plain"])
    # … while their records differ in when and how they were made (what verdicts.json does not sign)
    records = [rundir.load_results(d, False)[0] for d in made]
    assert len({r["record_sha256"] for r in records}) == len(made)
    assert len({rundir.results_digest(r) for r in records}) == 1


def test_verdicts_of_other_results_are_refused_those_of_the_same_results_read(runs, tmp_path):
    fewer = _run(128, tmp_path / "fewer")
    forged = tmp_path / "forged"
    shutil.copytree(fewer, forged)
    shutil.copy(os.path.join(runs["plain"], "verdicts.json"), forged / "verdicts.json")  # another run's claims
    with pytest.raises(ValueError, match=r"verdicts\.json: was written from another record"):
        rundir.read_verdicts(str(forged))
    same = tmp_path / "same"
    shutil.copytree(runs["again"], same)
    shutil.copy(os.path.join(runs["plain"], "verdicts.json"), same / "verdicts.json")  # the same results' claims
    assert rundir.read_verdicts(str(same)) == rundir.read_verdicts(runs["again"])
    # a verdicts.json written before results_sha256 named the whole record, and is still checked by it
    for digest, refused in ((rundir.load_results(fewer, False)[0]["record_sha256"], False), ("0" * 64, True)):
        records = json.loads(_bytes(fewer, "verdicts.json"))
        records.pop("results_sha256")
        records["config_record_sha256"] = digest
        records["record_sha256"] = rundir.record_digest(records)
        (forged / "verdicts.json").write_text(json.dumps(records))
        shutil.copy(os.path.join(fewer, "config.json"), forged / "config.json")
        if refused:
            with pytest.raises(ValueError, match="was written from another record"):
                rundir.read_verdicts(str(forged))
        else:
            assert rundir.read_verdicts(str(forged)) == records["verdicts"]


def test_a_merged_run_states_its_shards_work_and_its_own_time_apart(runs):
    merged = rundir.load_results(runs["merged"], False)[0]
    shards = [json.loads(_bytes(s, "config.json")) for s in runs["shards"]]
    assert all(s["wall_s"] > 0 for s in shards)
    account = merged["shards"]
    assert [a["index"] for a in account] == [0, 1] and [a["trials"] for a in account] == [[0, 128], [128, N]]
    for a, s in zip(account, shards):
        assert a["wall_s"] == s["wall_s"] and a["chunk_sizes"] == s["engine"]["chunk_sizes"]
        assert a["compile_s"] == round(sum(x for x in s["engine"]["compile_s"] if x is not None), 3)
        assert (a["devices"], a["device"]) == (s["engine"]["devices"], s["device"])
    assert merged["engine"]["chunk_sizes"] == [None]  # the merge computed nothing itself
    report = _bytes(runs["merged"], "report.md").decode()
    line = next(x for x in report.splitlines() if x.startswith(f"{N} trials per point"))
    assert "merged from 2 shard(s)" in line and "chunk size(s) [128, 192]" in line
    assert f"the shards took {sum(s['wall_s'] for s in shards):.1f} s in all to compute (as recorded)" in line
    compiled = sum(a["compile_s"] for a in account)  # (each shard's to the ms, as the report sums them)
    assert f", {compiled:.1f} s of it compiling;" in line
    assert f"merging and writing took {merged['wall_s']:.1f} s" in line
    assert f"{shards[0]['engine']['devices']} device(s) ({shards[0]['device']})" in line
    assert "chunk size(s) [None]" not in report
    assert "<td>shards</td>" in _bytes(runs["merged"], "report.html").decode()


def test_a_shard_rerun_that_computes_nothing_keeps_its_record(runs):
    before = _bytes(runs["shards"][0], "config.json")
    _run(N, runs["shards"][0], "--shard", "0/2")
    assert _bytes(runs["shards"][0], "config.json") == before


def test_the_account_of_shards_says_which_recorded_no_time():
    from jaxfed.results import report

    shard = {"wall_s": 2.25, "compile_s": 1.0, "devices": 1, "device": "cpu:0", "chunk_sizes": [64, None]}
    old = {"wall_s": None, "compile_s": 0.5, "devices": 4, "device": "cuda:0", "chunk_sizes": [128]}
    record = {"shards": [shard, old], "engine": {"keep": "raw"}, "wall_s": 0.75}
    line = report.merged_settings(record, 9.0)
    assert "merged from 2 shard(s) computed on 1 device(s) (cpu:0), 4 device(s) (cuda:0)" in line
    assert "chunk size(s) [64, 128]" in line and "merging and writing took 0.8 s" in line
    assert "took 2.2 s in all to compute (as recorded), not counting 1 shard(s) that recorded no time" in line
    assert ", 1.5 s of it compiling;" in line
    assert report.compute_seconds(record) == 2.25 and report.compute_seconds({"wall_s": 3.0}) == 3.0
