"""Progress on stderr: on a terminal a tqdm bar per point group, elsewhere (a log file) plain lines
with elapsed time, trials done, rate and ETA; one-line notes above either; silent when disabled.

:class:`Progress` is one run's (``engine.run``); ``jaxfed reproduce``'s over its experiments is
:class:`jaxfed.runs.reproduce.Overall`, above the engine.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

import tqdm

LOG_INTERVAL_S = 30.0
"""Off a terminal, the most seconds between two progress lines of a running group (a line is
written when a chunk finishes at least this long after the last line, and when the group ends)."""

INTERVAL_VARIABLE = "JAXFED_PROGRESS_INTERVAL"
"""Environment variable that overrides :data:`LOG_INTERVAL_S` (seconds, >= 0; 0: a line per chunk)."""


def log_interval(environ=os.environ) -> float:
    """Seconds between progress lines off a terminal: ``$JAXFED_PROGRESS_INTERVAL``, else
    :data:`LOG_INTERVAL_S`; ValueError naming the variable for a value that is not a number >= 0."""
    text = environ.get(INTERVAL_VARIABLE, "").strip()
    if not text:
        return LOG_INTERVAL_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{INTERVAL_VARIABLE} must be a number of seconds >= 0, got {text!r}")
    return value


def clock_text(seconds: float) -> str:
    """``h:mm:ss`` (``mm:ss`` under an hour), as tqdm shows times."""
    return tqdm.tqdm.format_interval(max(0.0, seconds))


def eta_seconds(elapsed: float, done: float, left: float) -> float | None:
    """Seconds still needed for ``left`` units of work when ``done`` units took ``elapsed`` seconds
    (the average rate so far); None before any unit is done."""
    return elapsed * left / done if done > 0 else None


def _rate_text(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (its ``isatty()``; False for a stream without one)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclasses.dataclass
class _Group:
    """A group's counts (point-trials) and times (the clock's seconds)."""

    description: str
    total: int
    stored: int  # done before the group opened (restored from the store)
    opened: float
    done: int = 0
    last_line: float = 0.0

    def computed(self) -> int:
        return self.done - self.stored


class Progress:
    """One run's progress on ``stream`` (default stderr), silent when not ``enabled``.

    On a terminal: a tqdm bar per group (trials done, rate, ETA), opened after the group is
    compiled at the fraction already stored, closed when the group is done. Elsewhere: a line
    ``[elapsed] LABEL DESCRIPTION: done/total point-trials (p%), rate point-trials/s, ETA t`` when
    a chunk finishes at least ``interval`` seconds (default :func:`log_interval`) after the last
    line. Both: a line when a group is done, and one-line notes (never written into a bar).
    ``elapsed`` counts from the object's creation; rates and ETAs count only the trials computed
    since the group opened, not the stored ones. ``clock`` (seconds) is for tests.
    """

    def __init__(
        self,
        enabled: bool,
        label: str = "",
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.enabled, self.label, self.clock = enabled, label, clock
        self.stream = sys.stderr if stream is None else stream
        self.on_terminal = enabled and is_terminal(self.stream)
        self.interval = (log_interval() if enabled else LOG_INTERVAL_S) if interval is None else interval
        self.started = clock()
        self.bar = None
        self.open: _Group | None = None

    def note(self, message: str) -> None:
        if self.enabled:
            self._write(f"{self.label}{message}")

    def group(self, description: str, total: int, stored: int = 0) -> None:
        """Opens a group of ``total`` point-trials, ``stored`` of them already done (closing an open one)."""
        self.close()
        if not self.enabled:
            return
        now = self.clock()
        self.open = _Group(description, total, stored, opened=now, done=stored, last_line=now)
        if self.on_terminal:
            self.bar = tqdm.tqdm(
                total=total,
                initial=stored,
                desc=f"{self.label}{description}",
                unit=" point-trials",
                unit_scale=True,
                file=self.stream,
                dynamic_ncols=True,
                leave=False,
            )

    def update(self, n: int) -> None:
        """``n`` more point-trials of the open group done."""
        g = self.open
        if g is None:
            return
        g.done += int(n)
        if self.bar is not None:
            self.bar.update(int(n))
        elif self.clock() - g.last_line >= self.interval:
            g.last_line = self.clock()
            self._write(self._running_line(g))

    def finish_group(self) -> None:
        """The open group is done: its bar closes (its clock stops) and one line says what it did."""
        if self.open is not None:
            line = self._done_line(self.open)
            self.close()
            self._write(line)

    def close(self) -> None:
        """Closes the open group without a line (after an error, or before the next group)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.open = None

    def _write(self, line: str) -> None:
        if self.on_terminal:
            tqdm.tqdm.write(line, file=self.stream)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()  # a log file shows each line as it is written

    def _prefix(self, g: _Group) -> str:
        return f"[{clock_text(self.clock() - self.started)}] {self.label}{g.description}"

    def _running_line(self, g: _Group) -> str:
        seconds = self.clock() - g.opened
        eta = eta_seconds(seconds, g.computed(), g.total - g.done)
        rate = g.computed() / seconds if seconds > 0 else 0.0
        return (
            f"{self._prefix(g)}: {g.done:,}/{g.total:,} point-trials ({100 * g.done // max(g.total, 1)}%), "
            f"{_rate_text(rate)} point-trials/s, ETA {'?' if eta is None else clock_text(eta)}"
        )

    def _done_line(self, g: _Group) -> str:
        seconds = self.clock() - g.opened
        if g.computed() == 0:
            return f"{self._prefix(g)}: done, {g.done:,} point-trials, all stored"
        stored = f" ({g.stored:,} stored)" if g.stored else ""
        rate = f", {_rate_text(g.computed() / seconds)} point-trials/s" if seconds > 0 else ""
        return f"{self._prefix(g)}: done, {g.done:,} point-trials{stored} in {clock_text(seconds)}{rate}"
