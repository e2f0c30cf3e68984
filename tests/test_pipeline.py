"""Chunks in flight: chunk i + 1 is dispatched before the host handles chunk i, writes run on a
background thread, and the results are those of the one-chunk run, through kills too."""

import numpy as np
import pytest
from test_engine import POINTS, trial

from jaxfed import engine, store
from jaxfed.engine import core


def test_the_next_chunk_is_dispatched_before_the_previous_one_is_handled(monkeypatch):
    events = []
    real_pipelined = core.pipelined

    def spy(chunks, dispatch, handle, writer):
        def logged_dispatch(chunk):
            events.append(("dispatch", int(chunk[0])))
            return dispatch(chunk)

        def logged_handle(chunk, out):
            events.append(("handle", int(chunk[0])))
            return handle(chunk, out)

        return real_pipelined(chunks, logged_dispatch, logged_handle, writer)

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
