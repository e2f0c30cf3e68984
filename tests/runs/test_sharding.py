"""Shards and merge (issue "Beyond one machine"): a run cut into M shards, computed separately and
merged in any order, is the one-process run byte for byte, raw and summary; every refusal of the
merge is one line naming what is wrong."""

import json
import os
import random
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import SMALL, one_line_error

from jaxfed import cli, engine, store
from jaxfed.experiment import make_config
from jaxfed.runs import find, run_experiment, sharding
from jaxfed.runs.sharding import Shard, parse_shard, shard_range
from jaxfed.stats import summary

NAME = "gfvl-topologies"
SETS = [arg for k, v in SMALL[NAME].items() for arg in ("--set", f"{k}={v}")]
N = 700  # 11 sum blocks: shards of uneven sizes, the last with a tail of 60 trials


def _run(*argv) -> None:
    assert cli.main(["run", NAME, "--trials", str(N), "--quiet", *SETS, *argv]) == 0


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process runs, raw and summary."""
    base = tmp_path_factory.mktemp("one")
    for keep in ("raw", "summary"):
        _run("--keep", keep, "--out", str(base / keep))
    return base


# --------------------------------------------------------------------------- ranges
@pytest.mark.parametrize("n_trials", [1, 64, 65, 700, 10_000, 2**32])
@pytest.mark.parametrize("count", [1, 2, 3, 7, 1000])
def test_shard_ranges_cover_every_trial_once_on_whole_blocks(n_trials, count):
    blocks = -(-n_trials // 64)
    if count > blocks:
        with pytest.raises(ValueError, match=f"M at most {blocks}"):
            shard_range(n_trials, Shard(0, count))
        return
    spans = [shard_range(n_trials, Shard(i, count)) for i in range(count)]
    assert spans[0][0] == 0 and spans[-1][1] == n_trials
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert all(start % 64 == 0 and start < stop for start, stop in spans)
    sizes = [-(-(stop - start) // 64) for start, stop in spans]
    assert max(sizes) - min(sizes) <= 1


def test_shard_from_the_environment_of_a_slurm_array_or_a_kubernetes_indexed_job():
    slurm = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "8"}
    assert parse_shard("auto", slurm) == Shard(4, 8)
    # auto/M: the task ids are the shard indices (a rerun of shards 17 and 42 of 100: --array=17,42)
    rerun = {"SLURM_ARRAY_TASK_ID": "42", "SLURM_ARRAY_TASK_MIN": "17", "SLURM_ARRAY_TASK_COUNT": "2"}
    assert parse_shard("auto/100", rerun) == Shard(42, 100)
    assert parse_shard("auto/8", slurm) == Shard(5, 8)
    assert parse_shard("auto/12", {"JOB_COMPLETION_INDEX": "11"}) == Shard(11, 12)
    with pytest.raises(ValueError, match="--shard auto/M"):
        parse_shard("auto", {"JOB_COMPLETION_INDEX": "3"})
    with pytest.raises(ValueError, match="neither SLURM_ARRAY_TASK_ID"):
        parse_shard("auto", {})
    with pytest.raises(ValueError, match="expected I/M"):
        parse_shard("1/x", {})
    assert parse_shard("2/3", {}) == Shard(2, 3)


# --------------------------------------------------------------------------- summaries
def test_joined_shard_summaries_are_the_one_fold_bit_for_bit():
    """Random cuts into shards, random chunks inside each: the joined state is the one-process one."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        n_blocks = int(rng.integers(1, 80))
        values = rng.standard_normal((2, n_blocks * 64, 3)).astype(np.float32)

        def folded(first, stop):
            state, pos = summary.range_state((2, 3), first), first
            while pos < stop:
                size = int(rng.integers(1, stop - pos + 1))
                part = summary.chunk_summary(values[:, pos * 64 : (pos + size) * 64], size * 64, np, first_block=pos)
                state, pos = summary.fold(state, part, size), pos + size
            return state

        whole = folded(0, n_blocks)
        cuts = sorted({0, n_blocks, *rng.integers(1, n_blocks, int(rng.integers(0, 6))).tolist()})
        joined = None
        for a, b in zip(cuts, cuts[1:]):
            part = folded(a, b)
            joined = part if joined is None else summary.joined(joined, part)
        assert joined.first is None
        for field in ("total", "total_sq", "count", "nan_count", "hist", "blocks"):
            np.testing.assert_array_equal(getattr(joined, field), getattr(whole, field), err_msg=field)


def test_a_stopped_summary_shard_resumes_to_the_same_state(tmp_path):
    def trial(key, point):
        return {"x": jax.random.normal(key, (2,)) * point["s"]}

    points = [{"s": jnp.float32(1.0)}, {"s": jnp.float32(3.0)}]
    kw = dict(keep="summary", identity={"t": 1}, progress=False, chunk_size=64)
    engine.run(trial, points, 1000, out_dir=str(tmp_path / "once"), trial_range=(320, 1000), **kw)
    # the same shard stopped after trial 500 (a partial block), then run again to its end
    engine.run(trial, points, 1000, out_dir=str(tmp_path / "twice"), trial_range=(320, 500), **kw)
    engine.run(trial, points, 1000, out_dir=str(tmp_path / "twice"), trial_range=(320, 1000), **kw)
    once, twice = (store.read_summary(store.summary_path(str(tmp_path / d), 0)) for d in ("once", "twice"))
    for field in ("total", "total_sq", "left", "left_sq", "hist", "count"):
        np.testing.assert_array_equal(getattr(once.states["x"], field), getattr(twice.states["x"], field))
    np.testing.assert_array_equal(once.tails["x"], twice.tails["x"])


# --------------------------------------------------------------------------- end to end
def _shards(base, keep: str, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = str(base / f"{keep}-{count}-s{i}")
        _run("--keep", keep, "--shard", f"{i}/{count}", "--out", path, "--chunk-size", "128")
        paths.append(path)
    return paths


def _masked_report(path: str) -> list[str]:
    """report.md without its lines of how and how long the run was computed (devices, chunks, seconds)."""
    return [line for line in open(path).read().splitlines() if "to compute (as recorded)" not in line]


@pytest.mark.parametrize("keep", ["raw", "summary"])
@pytest.mark.parametrize(
    "count", [pytest.param(1, marks=pytest.mark.slow), 2, 3, pytest.param(7, marks=pytest.mark.slow)]
)
def test_merged_shards_are_the_one_process_run_byte_for_byte(one_process, tmp_path, keep, count):
    paths = _shards(tmp_path, keep, count)
    random.Random(count).shuffle(paths)
    merged = str(tmp_path / "merged")
    assert cli.main(["merge", *paths, "--out", merged, "--quiet"]) == 0
    reference = str(one_process / keep)
    for name in ("metrics.npz", "verdicts.json"):
        assert open(os.path.join(merged, name), "rb").read() == open(os.path.join(reference, name), "rb").read()
    assert _masked_report(os.path.join(merged, "report.md")) == _masked_report(os.path.join(reference, "report.md"))
    # merge never changes its inputs and is safe to rerun
    before = {p: sorted(os.listdir(os.path.join(p, "chunks"))) for p in paths}
    assert cli.main(["merge", *paths, "--out", merged, "--quiet"]) == 0
    assert open(os.path.join(merged, "metrics.npz"), "rb").read() == open(os.path.join(reference, "metrics.npz"), "rb").read()  # fmt: skip
    assert before == {p: sorted(os.listdir(os.path.join(p, "chunks"))) for p in paths}


def test_a_killed_raw_shard_resumes_and_merges(one_process, tmp_path):
    paths = _shards(tmp_path, "raw", 2)
    chunks = os.path.join(paths[1], "chunks")
    os.remove(os.path.join(chunks, sorted(os.listdir(chunks))[-1]))  # killed before its last chunk …
    os.remove(os.path.join(paths[1], "config.json"))  # … and before its record
    _run("--keep", "raw", "--shard", "1/2", "--out", paths[1], "--chunk-size", "128")
    merged = str(tmp_path / "merged")
    assert cli.main(["merge", *paths, "--out", merged, "--quiet"]) == 0
    assert open(os.path.join(merged, "metrics.npz"), "rb").read() == open(one_process / "raw" / "metrics.npz", "rb").read()  # fmt: skip


def test_python_merge_writes_the_merged_run(one_process, tmp_path):
    paths = [
        sharding.run_shard(NAME, N, Shard(i, 2), str(tmp_path / f"s{i}"), sets=SMALL[NAME], keep="summary")
        for i in range(2)
    ]
    out = sharding.merge(paths[::-1], str(tmp_path / "merged"))
    assert open(os.path.join(out, "metrics.npz"), "rb").read() == open(one_process / "summary" / "metrics.npz", "rb").read()  # fmt: skip


@pytest.mark.parametrize("keep", ["raw", "summary"])
def test_shards_of_another_platform_merge_here(one_process, tmp_path, monkeypatch, keep):
    """Shards computed on GPUs merge on a CPU (a login node): the merge computes nothing, so it takes
    the stored run's platform and micro-batch width (``stored_only``). The shards' identity says
    "gpu" here (the machine's platform replaced while they run); the merged directory keeps that
    identity and the one-process run's bytes. Growing it here is refused: its trials are a GPU's."""
    from jaxfed.engine import core

    real = core._machine
    monkeypatch.setattr(core, "_machine", lambda *args: real(*args)._replace(platform="gpu"))
    paths = [
        sharding.run_shard(NAME, N, Shard(i, 2), str(tmp_path / f"s{i}"), sets=SMALL[NAME], keep=keep) for i in range(2)
    ]
    monkeypatch.undo()
    out = sharding.merge(paths, str(tmp_path / "merged"))
    assert json.load(open(os.path.join(out, "identity.json")))["platform"] == "gpu"
    assert open(os.path.join(out, "metrics.npz"), "rb").read() == open(one_process / keep / "metrics.npz", "rb").read()  # fmt: skip
    with pytest.raises(store.StoreError, match="platform"):
        run_experiment(
            find(NAME),
            make_config(find(NAME).config_cls, SMALL[NAME]),
            N + 64,
            engine.RunOptions.for_experiments(keep=keep, out_dir=out, progress=False),
        )


def test_shards_of_different_builds_merge_only_with_mix_builds(capsys, one_process, tmp_path, monkeypatch):
    """A shard computed by another build (simulated: its record names another processor) is refused
    in one line naming both shards and builds; with --mix-builds the merge goes on, the one-process
    run's bytes (the values are this machine's), and build.json lists both builds as mixed."""
    from jaxfed import builds

    real = builds.this_build
    paths = [sharding.run_shard(NAME, N, Shard(0, 2), str(tmp_path / "s0"), sets=SMALL[NAME], keep="raw")]
    monkeypatch.setattr(builds, "this_build", lambda backend=None: dict(real(backend), processor="Simulated CPU"))
    paths.append(sharding.run_shard(NAME, N, Shard(1, 2), str(tmp_path / "s1"), sets=SMALL[NAME], keep="raw"))
    monkeypatch.undo()
    assert json.load(open(os.path.join(paths[1], "build.json")))["builds"][0]["processor"] == "Simulated CPU"
    err = _merge_error(capsys, *paths, "--out", str(tmp_path / "m"))
    assert f"merge: {paths[1]} (shard 1/2) was computed by jax" in err and "cpu Simulated CPU" in err
    assert f"{paths[0]} (shard 0/2) by jax" in err and "the same seed gives other last bits on each" in err
    assert "or pass --mix-builds (mix_builds=True) to merge them and record the run as mixed" in err
    out = str(tmp_path / "mixed")
    assert cli.main(["merge", *paths, "--out", out, "--mix-builds", "--quiet"]) == 0
    record = json.load(open(os.path.join(out, "build.json")))
    assert record["mixed"] is True and [b["processor"] for b in record["builds"]] == [real()["processor"], "Simulated CPU"]  # fmt: skip
    assert open(os.path.join(out, "metrics.npz"), "rb").read() == open(one_process / "raw" / "metrics.npz", "rb").read()  # fmt: skip


def test_a_run_from_its_store_alone_refuses_what_it_lacks(tmp_path):
    """``stored_only`` computes nothing: a store that lacks trials, or no store, is one line."""
    from support import POINTS, trial

    out = str(tmp_path / "run")
    engine.run(trial, POINTS, 64, seed=4, micro_batch=64, out_dir=out, identity={}, progress=False)
    done = engine.run(trial, POINTS, 64, seed=4, out_dir=out, identity={}, progress=False, stored_only=True)
    assert done.info["chunk_sizes"] == [None]
    with pytest.raises(ValueError, match=r"holds 192 of its 384 point-trials; stored_only computes none"):
        engine.run(trial, POINTS, 128, seed=4, out_dir=out, identity={}, progress=False, stored_only=True)
    with pytest.raises(ValueError, match="holds no stored run"):
        engine.run(trial, POINTS, 64, out_dir=str(tmp_path / "none"), identity={}, progress=False, stored_only=True)
    with pytest.raises(ValueError, match="stored_only .* needs out_dir"):
        engine.RunOptions(stored_only=True)


# --------------------------------------------------------------------------- refusals
@pytest.fixture(scope="module")
def three_shards(tmp_path_factory):
    return _shards(tmp_path_factory.mktemp("three"), "raw", 3)


def _merge_error(capsys, *argv) -> str:
    return one_line_error(capsys, ["merge", *argv])


def test_merge_refuses_a_missing_or_duplicated_shard(capsys, tmp_path, three_shards):
    a, b, c = three_shards
    err = _merge_error(capsys, a, c, "--out", str(tmp_path / "m"))
    assert "shard(s) 1/3 (trials [192, 448)) missing" in err and "--partial" in err
    assert "shard 0/3 is given twice" in _merge_error(capsys, a, a, b, c, "--out", str(tmp_path / "m"))
    assert "shard 0/3 is missing" in _merge_error(capsys, b, c, "--partial", "--out", str(tmp_path / "m"))


def test_a_partial_merge_is_the_shorter_run_and_says_so(capsys, tmp_path, three_shards):
    a, b, c = three_shards
    out = str(tmp_path / "partial")
    assert cli.main(["merge", a, c, "--partial", "--out", out, "--quiet"]) == 0
    record = json.load(open(os.path.join(out, "config.json")))
    assert record["n_trials"] == 192
    assert (
        "**A partial merge**: shards 0–0 of 3 (192 of 700 trials per point); shard(s) 1/3, 2/3 left out"
        in open(os.path.join(out, "report.md")).read()
    )


def test_merge_refuses_shards_of_different_runs(capsys, tmp_path, three_shards):
    other = str(tmp_path / "seed1")
    _run("--keep", "raw", "--shard", "1/3", "--out", other, "--seed", "1", "--chunk-size", "128")
    err = _merge_error(capsys, three_shards[0], other, three_shards[2], "--out", str(tmp_path / "m"))
    assert "are not shards of one run (their identity_sha256 differ)" in err
    cut = str(tmp_path / "cut2")
    _run("--keep", "raw", "--shard", "1/2", "--out", cut, "--chunk-size", "128")
    assert "cut into different counts" in _merge_error(capsys, three_shards[0], cut, "--out", str(tmp_path / "m"))


def _as_if_traced_by_another_jax(path: str) -> None:
    """The shard in ``path`` as another JAX would have left it: other trial programs in its identity
    (every chunk header and the record re-signed to it) and that JAX's version in build.json."""
    from jaxfed.store import rundir

    identity = json.load(open(os.path.join(path, "identity.json")))
    identity["programs"] = ["0" * 64 for _ in identity["programs"]]
    store.atomic_write_json(os.path.join(path, "identity.json"), identity)
    digest = store.identity_digest(identity)
    for chunk in store.list_chunks(path):
        file = os.path.join(store.chunk_dir(path), chunk.name)
        meta, arrays, _ = store._unpack(file)
        meta = {k: v for k, v in meta.items() if k not in ("sha256", "arrays")} | {"identity": digest}
        store.atomic_write_bytes(file, store._pack(meta, arrays))
    record = json.load(open(os.path.join(path, "config.json")))
    record["identity_sha256"] = digest
    record["record_sha256"] = rundir.record_digest(record)
    store.atomic_write_json(os.path.join(path, "config.json"), record)
    builds = json.load(open(os.path.join(path, "build.json")))
    builds["builds"][0].update(jax="0.6.2", jaxlib="0.6.2")
    store.atomic_write_json(os.path.join(path, "build.json"), builds)


def test_merge_says_when_the_jax_version_is_why_shards_differ(capsys, tmp_path, three_shards):
    other = str(tmp_path / "jax-0.6.2")
    shutil.copytree(three_shards[1], other)
    _as_if_traced_by_another_jax(other)
    err = _merge_error(capsys, three_shards[0], other, three_shards[2], "--out", str(tmp_path / "m"))
    assert f"merge: {other} (shard 1/3) was computed by jax 0.6.2, {three_shards[0]} (shard 0/3) by jax " in err
    assert "which trace the trials to other programs (differs in programs[0]: " in err
    assert "the JAX version is the cause, and shards of two JAX versions cannot be merged" in err


def test_merge_refuses_what_is_not_a_finished_shard(capsys, tmp_path, one_process, three_shards):
    assert "is not a shard" in _merge_error(capsys, str(one_process / "raw"), "--out", str(tmp_path / "m"))
    broken = str(tmp_path / "broken")
    shutil.copytree(three_shards[1], broken)
    chunks = os.path.join(broken, "chunks")
    os.remove(os.path.join(chunks, sorted(os.listdir(chunks))[0]))
    err = _merge_error(capsys, three_shards[0], broken, three_shards[2], "--out", str(tmp_path / "m"))
    assert "not finished; rerun its command" in err
    edited = str(tmp_path / "edited")
    shutil.copytree(three_shards[1], edited)
    record = json.load(open(os.path.join(edited, "config.json")))
    record["shard"]["index"] = 2
    json.dump(record, open(os.path.join(edited, "config.json"), "w"))
    assert "was changed after it was written" in _merge_error(capsys, edited, "--out", str(tmp_path / "m"))


def test_merge_refuses_to_write_over_an_input_or_another_run(capsys, tmp_path, one_process, three_shards):
    assert "is one of the shards" in _merge_error(capsys, *three_shards, "--out", three_shards[0])
    other = str(tmp_path / "other")
    shutil.copytree(one_process / "raw", other)
    with open(os.path.join(other, "identity.json"), "w") as f:
        json.dump({"someone": "else"}, f)
    assert "holds another run" in _merge_error(capsys, *three_shards, "--out", other)


def test_a_shard_refuses_a_precision_target_and_a_bad_count(capsys, tmp_path):
    err = one_line_error(
        capsys,
        ["run", NAME, "--shard", "0/2", "--target-se", "0.1", "--target-metric", "error", "--out", str(tmp_path / "x")],
    )
    assert "cannot be sharded" in err or "cannot run as a shard" in err
    err = one_line_error(capsys, ["run", NAME, "--trials", "100", "--shard", "0/3", "--out", str(tmp_path / "y")])
    assert "M at most 2 for 100 trials" in err
    assert "expected I/M" in one_line_error(capsys, ["run", NAME, "--shard", "two", "--out", str(tmp_path / "z")])


# --------------------------------------------------------------------------- a finished run is never replaced
def _record_bytes(path: str) -> bytes:
    with open(os.path.join(path, "config.json"), "rb") as f:
        return f.read()


def test_a_shard_refuses_a_directory_holding_another_finished_shard_or_run(capsys, tmp_path, one_process, three_shards):
    """`--shard 1/3 --out DIR` where DIR holds the finished shard 0/3 (or a finished run) of the same run is
    refused in one line naming what is there; nothing of it changes. The same shard resumes."""
    shard0 = str(tmp_path / "s0")
    shutil.copytree(three_shards[0], shard0)
    before = _record_bytes(shard0)
    err = one_line_error(capsys, ["run", NAME, "--trials", str(N), *SETS, "--shard", "1/3", "--out", shard0])
    assert "holds shard 0/3 (finished)" in err and "would replace its record" in err and "its own --out" in err
    assert _record_bytes(shard0) == before
    _run("--keep", "raw", "--shard", "0/3", "--out", shard0, "--chunk-size", "128")  # the same shard: a rerun
    run = str(tmp_path / "run")
    shutil.copytree(one_process / "raw", run)
    before = _record_bytes(run)
    err = one_line_error(capsys, ["run", NAME, "--trials", str(N), *SETS, "--shard", "0/3", "--out", run])
    assert f"holds a finished run of {N:,} trials per point" in err
    assert _record_bytes(run) == before


def test_merge_never_shrinks_or_replaces_a_finished_run_or_shard(capsys, tmp_path, three_shards):
    """A merge into a finished run of the same identity with another trial count, or into a shard, is
    refused (the larger run's record, metrics and report stay); into an earlier merge of the same shards
    it runs again; into a folder inside an input it is refused."""
    merged = str(tmp_path / "merged")
    assert cli.main(["merge", *three_shards, "--out", merged, "--quiet"]) == 0
    assert cli.main(["merge", *three_shards, "--out", merged, "--quiet"]) == 0  # a rerun of the same merge
    larger = str(tmp_path / "larger")
    shutil.copytree(merged, larger)
    with open(os.path.join(larger, "config.json")) as f:
        record = json.load(f)
    record["n_trials"] = 2 * N
    store.atomic_write_json(os.path.join(larger, "config.json"), record)
    before = {name: open(os.path.join(larger, name), "rb").read() for name in ("config.json", "metrics.npz")}
    err = _merge_error(capsys, *three_shards, "--out", larger)
    assert f"holds a finished run of {2 * N:,} trials per point" in err and "would shrink it" in err
    assert before == {name: open(os.path.join(larger, name), "rb").read() for name in before}
    shard_copy = str(tmp_path / "shard-copy")
    shutil.copytree(three_shards[1], shard_copy)
    assert "holds shard 1/3 (finished)" in _merge_error(capsys, *three_shards, "--out", shard_copy)
    inside = os.path.join(three_shards[1], "sub")
    assert "is inside the shard" in _merge_error(capsys, *three_shards, "--out", inside)
    assert not os.path.exists(inside)


def test_a_merge_killed_before_its_identity_reruns(capsys, tmp_path, three_shards):
    """A merge killed right after it began leaves a temporary identity file and an empty chunk folder;
    the documented rerun (the same command) merges, where it used to be refused as "not a jaxfed run"."""
    out = tmp_path / "merged"
    (out / "chunks").mkdir(parents=True)
    (out / "identity.json.12345.tmp").write_text("{")
    assert cli.main(["merge", *three_shards, "--out", str(out), "--quiet"]) == 0
    assert not (out / "identity.json.12345.tmp").exists() and (out / "metrics.npz").is_file()
    capsys.readouterr()
    mine = tmp_path / "mine"
    (mine / "chunks").mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's")
    assert "holds files that are not a jaxfed run" in _merge_error(capsys, *three_shards, "--out", str(mine))
    assert (mine / "notes.txt").read_text() == "the user's"


# --------------------------------------------------------------------------- linked chunks (issue 58, part 6)
def test_a_merge_links_the_shards_raw_chunks_and_writes_them_where_it_cannot(one_process, tmp_path, monkeypatch):
    """Merged raw chunks are hard links of the shards' (the same inode: no bytes written again);
    where the filesystem refuses a link, they are written, and the merged run is the same bytes."""
    paths = _shards(tmp_path, "raw", 2)
    linked = str(tmp_path / "linked")
    assert cli.main(["merge", *paths, "--out", linked, "--quiet"]) == 0
    for name in os.listdir(os.path.join(linked, "chunks")):
        source = [os.path.join(p, "chunks", name) for p in paths if os.path.exists(os.path.join(p, "chunks", name))]
        assert len(source) == 1 and os.path.samefile(os.path.join(linked, "chunks", name), source[0])

    def no_links(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    written = str(tmp_path / "written")
    assert cli.main(["merge", *paths, "--out", written, "--quiet"]) == 0
    for name in os.listdir(os.path.join(written, "chunks")):
        assert os.stat(os.path.join(written, "chunks", name)).st_nlink == 1
    reference = open(one_process / "raw" / "metrics.npz", "rb").read()
    for merged in (linked, written):
        assert open(os.path.join(merged, "metrics.npz"), "rb").read() == reference
    assert not [n for n in os.listdir(os.path.join(written, "chunks")) if n.endswith(".tmp")]


def test_a_chunk_replaced_after_it_was_read_is_written_not_linked(tmp_path):
    """``atomic_link_or_write`` links only the file that was read: a source replaced in between
    (another inode) gets the bytes that were read and checked written instead."""
    source, out = tmp_path / "source.npz", tmp_path / "out.npz"
    source.write_bytes(b"checked bytes")
    read_stat = os.lstat(source)
    data = source.read_bytes()
    replacement = tmp_path / "new.npz"
    replacement.write_bytes(b"other bytes!!")
    os.replace(replacement, source)
    store.atomic_link_or_write(str(out), str(source), data, read_stat)
    assert out.read_bytes() == b"checked bytes" and not os.path.samefile(out, source)
    store.atomic_link_or_write(str(out), str(source), source.read_bytes(), os.lstat(source))
    assert os.path.samefile(out, source)
