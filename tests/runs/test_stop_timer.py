"""The budget timer of ``--decide`` (:func:`jaxfed.runs.runner.stopped_after`) stops its block even
when its first stop lands where Python discards exceptions (a garbage-collection callback, which
JAX runs: it once let a step run to its end under load)."""

import signal
import sys
import time
import types

import pytest

from jaxfed.runs import runner


class Stop(BaseException):
    pass


def _discarded(err: BaseException) -> None:
    """What Python does with an exception raised in a callback it cannot propagate from."""
    sys.unraisablehook(
        types.SimpleNamespace(exc_type=type(err), exc_value=err, exc_traceback=None, err_msg=None, object=None)
    )


def test_a_stop_python_discarded_is_raised_again_at_the_next_step():
    handler, hook = signal.getsignal(signal.SIGALRM), sys.unraisablehook
    seen = []
    with pytest.raises(Stop):
        with runner.stopped_after(0.01, Stop):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    time.sleep(0.001)
                except Stop as err:
                    seen.append(err)
                    _discarded(err)  # (the stop lost in a callback: the block would run on to its end)
    assert len(seen) == 1  # (raised again at the step right after the callback that lost it)
    assert signal.getsignal(signal.SIGALRM) is handler and sys.unraisablehook is hook


def test_another_unraisable_exception_goes_to_the_hook_that_was_there(monkeypatch):
    got = []
    monkeypatch.setattr(sys, "unraisablehook", got.append)
    with runner.stopped_after(60, Stop):
        _discarded(ValueError("someone else's"))
    assert [type(u.exc_value) for u in got] == [ValueError]


def _timer_threads(before=frozenset()) -> list:
    import threading

    return [t for t in threading.enumerate() if t.is_alive() and t.daemon and t.name != "hit" and t not in before]


def test_no_timer_thread_outlives_its_block_whatever_instant_a_ctrl_c_lands(monkeypatch):
    # A Ctrl-C lands at an arbitrary step of the main thread: on entry, inside the block, inside
    # the exit's Event.set() or join. Once an interrupt landed in a build()'s notice, its thread
    # printed "still running after N s" for the rest of the process (CI, 2026-12-07).
    monkeypatch.setattr(runner, "NOTICE_EVERY", 0.001)
    # Python's own Ctrl-C (an earlier test in this process may have imported dask_jobqueue, whose
    # import makes SIGINT a sys.exit())
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_at_random_instants()
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_at_random_instants() -> None:
    import _thread
    import random
    import threading

    before = frozenset(_timer_threads())  # (other tests' daemon threads in this process)
    rng = random.Random(0)
    for _ in range(300):
        hit = threading.Timer(rng.uniform(0, 3e-4), _thread.interrupt_main)
        hit.name = "hit"
        try:
            hit.start()
            with runner.notice_if_slow("x", after=1e-4):
                time.sleep(rng.uniform(0, 2e-4))
        except KeyboardInterrupt:
            pass
        finally:
            try:
                hit.join()
                time.sleep(1e-3)  # (an interrupt still pending lands here, outside the block)
            except KeyboardInterrupt:
                pass
        _no_timer_thread_left(before)


def test_a_budget_stop_lands_inside_its_block_or_not_at_all():
    # The stop fires at every instant around the block's end: it is raised in the block (its body
    # or on entry) or never, and never leaves the timer's thread behind.
    import random

    before = frozenset(_timer_threads())
    rng = random.Random(1)
    for _ in range(300):
        try:
            with runner.stopped_after(rng.uniform(1e-4, 4e-4), Stop):
                time.sleep(rng.uniform(0, 3e-4))
        except Stop:
            pass
        time.sleep(1e-3)  # (a stop that fired late would be raised here, outside any handler)
        _no_timer_thread_left(before)


def _no_timer_thread_left(before: frozenset) -> None:
    deadline = time.monotonic() + 2
    while _timer_threads(before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _timer_threads(before)
