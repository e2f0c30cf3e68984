"""Chunks in flight: chunk i + 1 is dispatched before the host handles chunk i, writes run on a
background thread, and the results are those of the one-chunk run, through kills too."""

import numpy as np
import pytest
from support import POINTS, trial

from jaxfed import engine, store
from jaxfed.engine import core


def test_the_next_chunk_is_dispatched_before_the_previous_one_is_handled(monkeypatch):
    events = []
    real_pipelined = core.pipelined

    def spy(chunks, dispatch, handle, writer, *to_copy):
        def logged_dispatch(chunk):
            events.append(("dispatch", int(chunk[0])))
            return dispatch(chunk)

        def logged_handle(chunk, out):
            events.append(("handle", int(chunk[0])))
            return handle(chunk, out)

        return real_pipelined(chunks, logged_dispatch, logged_handle, writer, *to_copy)

    monkeypatch.setattr(core, "pipelined", spy)
    reference = engine.run(trial, POINTS, 23, seed=4, chunk_size=23)
    events.clear()
    out = engine.run(trial, POINTS, 23, seed=4, chunk_size=7)
    assert events == [
        ("dispatch", 0),
        ("dispatch", 7),
        ("handle", 0),
        ("dispatch", 14),
        ("handle", 7),
        ("dispatch", 21),
        ("handle", 14),
        ("handle", 21),
    ]
    for name in reference:
        np.testing.assert_array_equal(out[name], reference[name])


@pytest.mark.slow
def test_a_kill_in_the_writer_thread_during_a_pipelined_run_resumes_identically(tmp_path, monkeypatch):
    reference = engine.run(trial, POINTS, 23, seed=4, chunk_size=23)
    real, saved = store.Store.save_raw, []

    def save_then_die(self, spec, start, stop, arrays):
        if len(saved) == 2:
            raise KeyboardInterrupt  # raised on the writer thread, re-raised on the main one
        real(self, spec, start, stop, arrays)
        saved.append(start)

    monkeypatch.setattr(store.Store, "save_raw", save_then_die)
    d = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        engine.run(trial, POINTS, 23, seed=4, chunk_size=7, out_dir=d, identity={})
    assert saved == [0, 7]
    monkeypatch.setattr(store.Store, "save_raw", real)
    resumed = engine.run(trial, POINTS, 23, seed=4, chunk_size=7, out_dir=d, identity={})
    for name in reference:
        np.testing.assert_array_equal(resumed[name], reference[name])


TWO_DEVICES_RAW = """
import sys
sys.path[:0] = [{tests!r}, {tests!r} + '/..']  # the module's folder and tests/ (support.py)
import jax, numpy as np
from support import POINTS, trial
from jaxfed import engine
assert jax.device_count() == 2
out = engine.run(trial, POINTS, 23, seed=4, chunk_size=7, out_dir={out!r}, identity={{}}, progress=False)
again = engine.run(trial, POINTS, 23, seed=4, chunk_size=7, out_dir={out!r}, identity={{}}, progress=False)
np.savez({path!r}, **{{"run/" + k: v for k, v in out.items()}}, **{{"stored/" + k: v for k, v in again.items()}})
"""


@pytest.mark.slow  # a two-device subprocess (~3 s)
def test_raw_chunks_go_shard_by_shard_into_the_results_and_the_store(tmp_path):
    """On two devices each shard of a raw chunk (the last one padding only, in part) is copied
    into its slice of the results and stored from there: the values of one device, also as
    read back from the store."""
    import os
    import subprocess
    import sys

    path = str(tmp_path / "two.npz")
    script = TWO_DEVICES_RAW.format(tests=os.path.dirname(__file__), out=str(tmp_path / "run"), path=path)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    reference = engine.run(trial, POINTS, 23, seed=4, chunk_size=23)
    with np.load(path) as two:
        for name in reference:
            np.testing.assert_array_equal(two[f"run/{name}"], reference[name])
            np.testing.assert_array_equal(two[f"stored/{name}"], reference[name])


def test_keep_auto_chooses_summaries_where_raw_would_be_transfer_bound():
    """auto keeps raw up to 2 GiB of raw metrics on a CPU, 256 MiB on an accelerator, and says
    why when it chooses summaries."""
    specs = {"x": ((300,), "<f4")}  # 1.2 kB per trial and point
    notes: list = []
    options = engine.RunOptions(keep="auto")

    def keep(n_trials, where):
        return core._mode(options, specs, 3, n_trials, where, notes.append)[0]

    assert [keep(2**16, "cpu"), keep(2**16, "gpu"), keep(2**19, "cpu")] == ["raw"] * 3  # 236 MB, 1.9 GB
    assert notes == []
    assert keep(2**19, "gpu") == "summary"
    assert len(notes) == 1 and "copy of every value to the host" in notes[0] and "--keep raw" in notes[0]
    assert keep(2**20, "cpu") == "summary" and "kept in memory" in notes[1]  # 3.8 GB
