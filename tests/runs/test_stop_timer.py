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
