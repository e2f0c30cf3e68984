import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine, stats
from jaxfed.engine import compiled, sizing


@pytest.fixture(scope="module")
def reference():
    return engine.run(trial, POINTS, 23, seed=4, chunk_size=23)


@pytest.mark.parametrize("chunk_size", [1, 7, None])
def test_bit_identical_for_any_chunk_size(reference, chunk_size):
    out = engine.run(trial, POINTS, 23, seed=4, chunk_size=chunk_size)
    for name in reference:
        np.testing.assert_array_equal(out[name], reference[name])
    assert out["walk"].shape == (3, 23, 5) and out["last"].shape == (3, 23)


def test_keys_are_fold_in_of_point_and_trial(reference):
    root = jax.random.key(4)
    key = jax.random.fold_in(jax.random.fold_in(root, 2), 11)
    np.testing.assert_array_equal(reference["walk"][2, 11], trial(key, POINTS[2])["walk"])


def test_different_seed_differs(reference):
    out = engine.run(trial, POINTS, 23, seed=5)
    assert not np.array_equal(out["walk"], reference["walk"])


def test_jit_and_no_jit_agree():
    a = engine.run(trial, POINTS[:2], 3, seed=1, chunk_size=2)
    b = engine.run(trial, POINTS[:2], 3, seed=1, chunk_size=2, use_jit=False)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-5)  # XLA may fuse differently


def test_the_op_by_op_summary_follows_a_patched_summary_block(monkeypatch):
    """The op-by-op engine summarises in one jitted program that reads ``stats.summary.SUMMARY_BLOCK`` while
    tracing: after a run at one block size, a run at another (the store's tests patch it) must be
    traced anew. Served the other's program, it summarised 0 of a chunk's 2 blocks and failed."""
    for block in (64, 8):
        monkeypatch.setattr(stats.summary, "SUMMARY_BLOCK", block)
        raw = engine.run(trial, POINTS, 20, seed=2, chunk_size=16, use_jit=False)
        summary = engine.run(trial, POINTS, 20, seed=2, chunk_size=16, use_jit=False, keep="summary")
        np.testing.assert_array_equal(summary["last"].count, np.full(3, 20))
        np.testing.assert_allclose(summary["last"].mean, raw["last"].mean(1, dtype=np.float64), rtol=1e-6)


def test_static_leaves_form_separate_groups_in_point_order():
    points = [
        {"scale": jnp.float32(1.0), "shift": jnp.float32(0.0), "steps": 4},
        {"scale": jnp.float32(1.0), "shift": jnp.float32(0.0), "steps": 3},
        {"scale": jnp.float32(3.0), "shift": jnp.float32(0.0), "steps": 4},
    ]

    def last_only(key, point):
        return {"last": trial(key, point)["last"], "n": jnp.int32(point["steps"])}

    out = engine.run(last_only, points, 6, seed=0, chunk_size=4)
    np.testing.assert_array_equal(out["n"][:, 0], [4, 3, 4])
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 1), 5)
    assert out["last"][1, 5] == last_only(key, points[1])["last"]


def test_store_and_resume_compute_only_missing_chunks(tmp_path, reference):
    identity = {"name": "walk"}
    full = tmp_path / "full"
    out = engine.run(trial, POINTS, 23, seed=4, chunk_size=5, out_dir=str(full), identity=identity)
    chunks = sorted(f for f in os.listdir(full / "chunks") if f.endswith(".npz"))
    assert len(chunks) == 5  # 5+5+5+5+3 trials
    # An interrupted run: two chunks committed, the others never renamed into place, and a
    # temporary file from a write cut short.
    part = tmp_path / "part"
    shutil.copytree(full, part)
    kept = chunks[1:3]
    for name in chunks:
        if name not in kept:
            os.remove(part / "chunks" / name)
    (part / "chunks" / f"{chunks[4]}.123.tmp").write_bytes(b"partial")
    before = {name: os.stat(part / "chunks" / name).st_mtime_ns for name in kept}
    resumed = engine.run(trial, POINTS, 23, seed=4, chunk_size=5, out_dir=str(part), identity=identity)
    for name in reference:
        np.testing.assert_array_equal(resumed[name], reference[name])
        np.testing.assert_array_equal(out[name], reference[name])
    assert sorted(os.listdir(part / "chunks")) == chunks  # the stray temporary file is gone
    assert {name: os.stat(part / "chunks" / name).st_mtime_ns for name in kept} == before


def test_resume_refuses_a_different_config_unless_overwrite(tmp_path):
    d = str(tmp_path / "run")
    engine.run(trial, POINTS[:1], 4, out_dir=d, identity={"seed": 0})
    with pytest.raises(engine.ConfigMismatch, match="different configuration.*seed: stored 0, given 1"):
        engine.run(trial, POINTS[:1], 4, seed=1, out_dir=d, identity={"seed": 1})
    out = engine.run(trial, POINTS[:1], 4, seed=1, out_dir=d, identity={"seed": 1}, overwrite=True)
    fresh = engine.run(trial, POINTS[:1], 4, seed=1)
    np.testing.assert_array_equal(out["walk"], fresh["walk"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_trials": 0}, "n_trials"),
        ({"n_trials": 2, "chunk_size": 0}, "chunk_size"),
        ({"n_trials": 2, "out_dir": "x"}, "identity"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        engine.run(trial, POINTS, **kwargs)
    with pytest.raises(ValueError, match="points"):
        engine.run(trial, [], 2)


def test_common_random_numbers_share_the_trial_key_across_points():
    out = engine.run(trial, POINTS, 5, seed=2, common_random_numbers=True)
    key = jax.random.fold_in(jax.random.key(2), 3)
    for p in range(3):  # (the unbatched trial is another program: equal to rounding, not bit for bit)
        np.testing.assert_allclose(out["walk"][p, 3], trial(key, POINTS[p])["walk"], rtol=1e-5)


@pytest.mark.parametrize(
    "n_trials, fits, step, expected",
    [
        (262_144, 190_784, 64, 131_072),  # two equal chunks, not 190,784 + 71,360 (of which half is padding)
        (1000, 5000, 64, 1000),  # one chunk: never more than the trials
        (1000, 10, 64, 64),  # at least one step
        (1000, 333, 64, 256),  # 4 chunks of 256 (the last holds 232)
        (65, 64, 64, 64),  # first/last: 64 + 1
    ],
)
def test_balanced_chunk_size(n_trials, fits, step, expected):
    size = sizing.balanced_chunk(n_trials, fits, step)
    assert size == expected
    assert size % step == 0 or size == n_trials
    assert size <= max(step, fits // step * step)
    n_chunks = -(-n_trials // size)
    assert n_chunks == -(-n_trials // max(step, fits // step * step))  # no more chunks than the fitting size needs


WIDTH = 64  # a narrow micro-batch, so that chunk sizes can be resized finely


def _sorting_trial(key, point):
    """A trial whose temporaries (a sort buffer of 4,096 values) dominate its memory."""
    x = jnp.sort(jax.random.normal(key, (4096,)) * point["scale"])
    return {"median": x[2048]}


def _wide_trial(key, point):
    """A trial whose outputs (4,096 values, 16 KiB) dominate its memory: they grow with the chunk,
    while a micro-batch's temporaries do not."""
    return {"sorted": jnp.sort(jax.random.normal(key, (4096,)) * point["scale"])}


@pytest.mark.slow  # ~9 s of the default suite's 7 minutes
def test_a_chunk_that_compiles_larger_than_the_budget_is_resized(monkeypatch):
    """The estimate from the shapes can be short of what XLA allocates: the chunk is then resized
    from its own compilation's figures, and the run gives the same values as an explicitly
    chunked one."""
    points = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(3.0)}]
    monkeypatch.setattr(sizing, "estimated_chunk", lambda job: job.n_trials)  # (an estimate far too short)
    budget = 64 * 2**20
    out = engine.run(_wide_trial, points, 2048, max_memory=budget, compilation_cache="off", micro_batch=WIDTH)
    size = out.info["chunk_sizes"][0]
    assert WIDTH <= size < 2048  # the estimate alone would have taken all 2,048 trials in one chunk
    reference = engine.run(_wide_trial, points, 2048, chunk_size=100, compilation_cache="off", micro_batch=WIDTH)
    np.testing.assert_array_equal(out["sorted"], reference["sorted"])


def _refusing_compile(largest: int, message: str):
    """``cache.timed_compile`` as on a GPU whose memory admits chunks of at most ``largest``
    trials: compiling a larger one raises RESOURCE_EXHAUSTED (``message``)."""
    real = compiled.timed_compile

    def timed_compile(lowered):
        batch = max(leaf.shape[1] for leaf in jax.tree.leaves(lowered.out_info) if len(leaf.shape) > 1)
        if batch > largest:
            raise jax.errors.JaxRuntimeError(message.format(need=batch * 0.01))
        return real(lowered)

    return timed_compile


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(  # the default suite's time: the size-less message below takes the same path
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate {need:.2f}MiB with allocator GPU_0_bfc",
            marks=pytest.mark.slow,
        ),
        "RESOURCE_EXHAUSTED: out of memory",  # no size named: the chunk is halved
    ],
)
def test_a_chunk_the_device_refuses_while_compiling_is_shrunk(monkeypatch, message):
    """A GPU allocates while compiling: a chosen chunk it refuses is shrunk (from the refused size,
    or halved) until one compiles, and the values equal an explicitly chunked run's."""
    points = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(3.0)}]
    monkeypatch.setattr(compiled, "timed_compile", _refusing_compile(300, message))
    out = engine.run(_sorting_trial, points, 1024, compilation_cache="off", micro_batch=WIDTH)
    size = out.info["chunk_sizes"][0]
    assert WIDTH <= size <= 300
    monkeypatch.undo()
    reference = engine.run(_sorting_trial, points, 1024, chunk_size=1024, compilation_cache="off", micro_batch=WIDTH)
    np.testing.assert_array_equal(out["median"], reference["median"])


def test_a_given_chunk_the_device_refuses_is_a_one_line_error(monkeypatch):
    points = [{"scale": jnp.float32(1.0)}]
    message = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate {need:.2f}GiB"
    monkeypatch.setattr(compiled, "timed_compile", _refusing_compile(100, message))
    with pytest.raises(ValueError, match=r"a chunk of 1024 trials does not fit in the device's memory.*GiB"):
        engine.run(_sorting_trial, points, 2048, chunk_size=1024, compilation_cache="off", micro_batch=WIDTH)


def test_refused_bytes_reads_the_size_a_device_names():
    err = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 299.02GiB with")
    assert sizing.refused_bytes(err) == pytest.approx(299.02 * 2**30)
    assert sizing.refused_bytes(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: 12 B allocate")) is None


@pytest.mark.parametrize("keep", [pytest.param("raw", marks=pytest.mark.slow), "summary"])
def test_a_chosen_chunk_on_a_cpu_is_sized_from_the_trials_own_memory(monkeypatch, keep):
    """The estimate's per-trial memory survives the summary's fixed outputs (subtracted twice, it
    came out as nothing and a whole run became one chunk, with the memory probe of before), and a
    CPU chunk takes at most ``CPU_CHUNK_BYTES``: here 4 MiB, a few hundred trials of 16 KiB sort
    buffers."""
    monkeypatch.setattr(sizing, "CPU_CHUNK_BYTES", 4 * 2**20)
    points = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(2.0)}]
    out = engine.run(_sorting_trial, points, 1024, keep=keep, compilation_cache="off", micro_batch=WIDTH)
    size = out.info["chunk_sizes"][0]
    assert WIDTH <= size <= 512
    reference = engine.run(
        _sorting_trial, points, 1024, keep=keep, chunk_size=1024, compilation_cache="off", micro_batch=WIDTH
    )
    if keep == "raw":
        np.testing.assert_array_equal(out["median"], reference["median"])
    else:
        for field in ("count", "mean", "se", "hist"):
            np.testing.assert_array_equal(getattr(out["median"], field), getattr(reference["median"], field))


# --------------------------------------------------------------------------- out of memory at execution
def _exhausted(batch: int) -> jax.errors.JaxRuntimeError:
    return jax.errors.JaxRuntimeError(
        f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {batch * 0.01:.2f}MiB with allocator GPU_0_bfc"
    )


def _failing_executions(monkeypatch, largest: int, where: str) -> list:
    """Chunks of more than ``largest`` trials run out of memory as on a full GPU: at dispatch (the
    chunk function raises) or when their outputs are awaited (raised as the sink takes them, before
    it changes anything, as an asynchronous execution's error surfaces). Returns the batches that
    failed."""
    from jaxfed.engine import sinks

    failed: list = []
    real_call = compiled.ChunkFn.__call__

    def call(self, *args):
        batch = self.local * (self.mesh.size if self.mesh is not None else 1)
        if where == "dispatch" and batch > largest:
            failed.append(batch)
            raise _exhausted(batch)
        return batch, real_call(self, *args)  # (the batch travels with the outputs to the sink)

    def awaited(real_handle):
        def handle(self, chunk, tagged, *rest):
            batch, outputs = tagged
            if batch > largest:
                failed.append(batch)
                raise _exhausted(batch)
            return real_handle(self, chunk, outputs, *rest)

        return handle

    monkeypatch.setattr(compiled.ChunkFn, "__call__", call)
    for sink in (sinks.RawSink, sinks.SummarySink):
        monkeypatch.setattr(sink, "handle", awaited(sink.handle))
    return failed


def _assert_same_results(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        if isinstance(a[name], np.ndarray):
            np.testing.assert_array_equal(a[name], b[name])
        else:
            for field in a[name]._fields:
                np.testing.assert_array_equal(getattr(a[name], field), getattr(b[name], field), err_msg=field)


@pytest.mark.parametrize(
    ("keep", "where", "chunk_size", "failed"),
    [("raw", "dispatch", 256, [256, 128]), ("summary", "outputs", 128, [128])],
)
def test_a_chunk_that_runs_out_of_memory_is_halved_and_rerun_with_the_same_results(
    monkeypatch, tmp_path, keep, where, chunk_size, failed
):
    """Chunks of more than 64 trials fail, at dispatch or when their outputs are awaited: the chunk
    and those after it are computed in chunks half as large, down to 64 (the same trial indices),
    and the results equal an uninjected run's bit for bit; the store holds the same results (a
    rerun computes nothing)."""
    go = dict(keep=keep, micro_batch=WIDTH, seed=2)  # (the session's compilation cache: 64 compiles once)
    reference = engine.run(trial, POINTS, 300, chunk_size=WIDTH, **go)
    failures = _failing_executions(monkeypatch, WIDTH, where)
    notes: list = []
    progress = engine.progress.Progress(False)
    progress.note = notes.append  # type: ignore[method-assign]
    out_dir = str(tmp_path / "run")
    out = engine.run(trial, POINTS, 300, chunk_size=chunk_size, out_dir=out_dir, identity={}, progress=progress, **go)
    assert failures == failed and out.info["chunk_sizes"] == [WIDTH]
    line = f"out of device memory in a chunk of {chunk_size} trials; chunks of {chunk_size // 2} from trial 0"
    assert any(line in n for n in notes), notes
    _assert_same_results(dict(out), dict(reference))
    monkeypatch.undo()
    again = engine.run(trial, POINTS, 300, chunk_size=chunk_size, out_dir=out_dir, identity={}, **go)
    assert again.info["chunk_sizes"] == [None]  # every trial was stored
    _assert_same_results(dict(again), dict(reference))


def test_a_chunk_out_of_memory_at_the_smallest_size_is_one_line(monkeypatch):
    _failing_executions(monkeypatch, 0, "dispatch")
    with pytest.raises(ValueError) as exc:
        engine.run(trial, POINTS, 300, chunk_size=WIDTH, compilation_cache="off", micro_batch=WIDTH)
    message = str(exc.value)
    assert len(message.splitlines()) == 1
    assert "the cpu device ran out of memory running a chunk of 64 trials" in message
    assert "the smallest chunk, one micro-batch per device" in message and "RESOURCE_EXHAUSTED" in message
    assert "--chunk-size" in message and "--max-memory" in message


def test_other_runtime_errors_are_not_taken_for_memory(monkeypatch):
    def call(self, *args):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(compiled.ChunkFn, "__call__", call)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        engine.run(trial, POINTS, 100, compilation_cache="off", micro_batch=WIDTH)


@pytest.mark.slow  # ~3 s (the default suite's time); the halving itself is tested above
def test_the_command_line_reports_an_out_of_memory_chunk_in_one_line(monkeypatch, capsys, tmp_path):
    """At the smallest chunk (one micro-batch on the one device) `jaxfed run` prints one line and
    exits with status 2."""
    from jaxfed import cli

    _failing_executions(monkeypatch, 0, "dispatch")
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # (restored after --devices adds to it)
    argv = ["run", "gfvl-topologies", "--trials", "64", "--chunk-size", "64", "--set", "n_slots=5"]
    assert cli.main([*argv, "--devices", "1", "--quiet", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jaxfed: error: the cpu device ran out of memory"), err
    assert "a chunk of 64 trials (512 per micro-batch x 1 device(s)" in err and "--max-memory" in err
