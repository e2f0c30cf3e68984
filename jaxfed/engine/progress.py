"""Progress on stderr: on a terminal a tqdm bar per point group, elsewhere (a log file) plain lines
with elapsed time, trials done, rate and ETA, and a heartbeat line while a group compiles or a chunk
computes, so a log is never silent for longer than the interval; one-line notes above either;
silent when disabled. In a Jupyter notebook: tqdm's notebook bar (a plain bar on stdout without
ipywidgets), named by the run's label, without the sizing details unless ``verbose``.

:class:`Progress` is one run's (``engine.run``); ``jaxfed reproduce``'s over its experiments is
:class:`jaxfed.runs.reproduce.ReproduceProgress`, above the engine, whose clock the runs' lines share
(``started``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import TextIO

import tqdm

_tqdm_notebook: types.ModuleType | None = None  # tqdm's notebook bars: only in a Jupyter kernel (it imports IPython)
if "ipykernel" in sys.modules:
    try:
        import tqdm.notebook  # type: ignore[import-untyped]

        _tqdm_notebook = tqdm.notebook
    except ImportError:  # (an older or partial install: the plain bar)
        pass

LOG_INTERVAL_S = 30.0
"""Off a terminal, the most seconds between two progress lines of a running group (a line is
written when a chunk finishes at least this long after the last line, and when the group ends),
and between two heartbeat lines while a group compiles or a chunk computes."""

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


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's shell of an ``IPKernelApp``)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bar_class(notebook: bool) -> type[tqdm.tqdm]:
    """The tqdm bar to draw: in a notebook with ipywidgets, tqdm's notebook widget, else the plain
    bar (tqdm is a dependency; ipywidgets is optional: without it the plain bar, never a warning)."""
    if notebook and _tqdm_notebook is not None and getattr(_tqdm_notebook, "IProgress", None) is not None:
        return _tqdm_notebook.tqdm
    return tqdm.tqdm


@dataclasses.dataclass
class _Group:
    """A group's counts (point-trials) and times (the clock's seconds)."""

    description: str
    total: int
    stored: int  # done before the group opened (restored from the store)
    opened: float
    done: int = 0
    last_line: float = 0.0
    chunks: int | None = None  # the chunks left to compute when known (a fixed count), else None
    chunks_done: int = 0
    chunk_started: float = 0.0  # when the chunk now computing was waited for

    def computed(self) -> int:
        return self.done - self.stored


class Progress:
    """One run's progress on ``stream`` (default stderr; stdout in a notebook), silent when not
    ``enabled``.

    On a terminal or in a notebook: a tqdm bar per group (trials done, rate, ETA), opened after
    the group is compiled at the fraction already stored, closed when the group is done, and while
    a group compiles a bar "compiling" with its elapsed time (redrawn every second). Elsewhere (a
    log): a line ``[elapsed] LABEL DESCRIPTION: done/total point-trials (p%), rate point-trials/s,
    ETA t`` when a chunk finishes at least ``interval`` seconds (default :func:`log_interval`)
    after the last line, and a heartbeat line whenever ``interval`` seconds (the default's when 0)
    pass without one while a group compiles (``[elapsed] LABEL WHAT (45 s) …``, :meth:`waiting`)
    or a chunk computes (the progress line, then ``computing chunk i/n (s)``). Both: a line when a
    group is done, and one-line notes (never written into a bar); :meth:`detail` notes (chunk
    sizes, memory budget) only when ``verbose`` (default: everywhere but a notebook).

    ``elapsed`` counts from ``started`` (a reading of ``clock``; default the object's creation):
    ``jaxfed reproduce`` gives its own start, so that every line is on the command's clock. Rates
    and ETAs count only the trials computed since the group opened, not the stored ones.
    ``context`` (a callable returning text) is appended to heartbeat lines (``jaxfed reproduce``'s
    overall ETA). ``clock`` (seconds) and ``heartbeat`` (False: no thread; tests call
    :meth:`beat`) are for tests.
    """

    def __init__(
        self,
        enabled: bool,
        label: str = "",
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        started: float | None = None,
        context: Callable[[], str] | None = None,
        verbose: bool | None = None,
        heartbeat: bool = True,
    ):
        self.enabled, self.label, self.clock, self.context = enabled, label, clock, context
        notebook = enabled and stream is None and in_notebook()
        self.stream = (sys.stdout if notebook else sys.stderr) if stream is None else stream
        self.on_terminal = enabled and (notebook or is_terminal(self.stream))
        self.bar_cls = bar_class(notebook)
        self.verbose = not notebook if verbose is None else verbose
        self.interval = (log_interval() if enabled else LOG_INTERVAL_S) if interval is None else interval
        self.started = clock() if started is None else started
        self.bar = None
        self.open: _Group | None = None
        self.waited: tuple[str, float] | None = None  # (what, since when) while a group compiles
        self.last_line = self.clock()
        self._lock = threading.RLock()  # (the heartbeat thread writes too)
        self._heartbeat = heartbeat and enabled
        self._stop: threading.Event | None = None

    @property
    def beat_interval(self) -> float:
        """The most seconds without a line while waiting: ``interval``, or :data:`LOG_INTERVAL_S` when 0."""
        return self.interval if self.interval > 0 else LOG_INTERVAL_S

    def note(self, message: str) -> None:
        """A line above the bars."""
        if self.enabled:
            self._write(f"{self.label}{message}")

    def detail(self, message: str) -> None:
        """A note of internal detail (chunk sizes, memory budget): only when ``verbose``."""
        if self.verbose:
            self.note(message)

    def waiting(self, what: str) -> None:
        """The run waits for ``what`` (a group's compilation) until the next :meth:`group`: off a
        terminal the line ``LABEL WHAT …`` and a heartbeat line every interval, on one a bar with
        the elapsed time."""
        if not self.enabled:
            return
        with self._lock:
            self._close_group()
            self.waited = (what, self.clock())
            if not self.on_terminal:
                self._write(f"{self.label}{what} …")
            else:
                self.bar = self.bar_cls(
                    desc=f"{self.label}{what}", file=self.stream, leave=False, bar_format="{desc} … {elapsed}"
                )
        self._start_heartbeat()

    def group(self, description: str, total: int, stored: int = 0) -> None:
        """Opens a group of ``total`` point-trials, ``stored`` of them already done (closing an open one)."""
        with self._lock:
            self._close_group()
            if not self.enabled:
                return
            now = self.clock()
            self.open = _Group(description, total, stored, opened=now, done=stored, last_line=now, chunk_started=now)
            if self.on_terminal:
                self.bar = self.bar_cls(
                    total=total,
                    initial=stored,
                    desc=f"{self.label}{description}",
                    unit=" point-trials",
                    unit_scale=True,
                    file=self.stream,
                    dynamic_ncols=True,
                    leave=False,
                )
        self._start_heartbeat()

    def chunks(self, n: int) -> None:
        """The open group computes ``n`` chunks (each :meth:`update` is one): heartbeat lines say which."""
        with self._lock:
            if self.open is not None:
                self.open.chunks, self.open.chunks_done = int(n), 0

    def update(self, n: int) -> None:
        """``n`` more point-trials of the open group done (one chunk)."""
        with self._lock:
            g = self.open
            if g is None:
                return
            g.done += int(n)
            g.chunks_done += 1
            g.chunk_started = self.clock()
            if self.bar is not None:
                self.bar.update(int(n))
            elif self.clock() - g.last_line >= self.interval:
                g.last_line = self.clock()
                self._write(self._running_line(g))

    def beat(self) -> None:
        """A heartbeat (the thread calls it every second): off a terminal, a line when
        :attr:`beat_interval` seconds passed without one while waiting or computing; on a
        terminal, the bar redrawn (its elapsed time)."""
        with self._lock:
            if not self.enabled or (self.open is None and self.waited is None):
                return
            if self.bar is not None:
                self.bar.refresh()
                if self.context is not None:
                    self.context()  # (it redraws what it shows)
                return
            now = self.clock()
            if now - self.last_line < self.beat_interval:
                return
            if self.open is not None:
                g, chunk = self.open, self.open.chunks_done + 1
                which = f"chunk {chunk}/{g.chunks}" if g.chunks is not None and chunk <= g.chunks else "a chunk"
                line = f"{self._running_line(g)}; computing {which} ({now - g.chunk_started:.0f} s) …"
                g.last_line = now
            else:
                assert self.waited is not None
                what, since = self.waited
                line = f"[{clock_text(now - self.started)}] {self.label}{what} ({now - since:.0f} s) …"
            context = self.context() if self.context is not None else ""
            self._write(line + (f"; {context}" if context else ""))

    def finish_group(self) -> None:
        """The open group is done: its bar closes (its clock stops) and one line says what it did."""
        with self._lock:
            if self.open is not None:
                line = self._done_line(self.open)
                self._close_group()
                self._write(line)

    def close(self) -> None:
        """Closes the open group without a line (after an error, or at the run's end) and stops the heartbeat."""
        with self._lock:
            self._close_group()
            stop, self._stop = self._stop, None
        if stop is not None:
            stop.set()

    def _close_group(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.open = self.waited = None

    def _start_heartbeat(self) -> None:
        """The daemon thread calling :meth:`beat` every second until :meth:`close` (once per run)."""
        if not self._heartbeat or self._stop is not None:
            return
        stop = self._stop = threading.Event()

        def beating() -> None:
            while not stop.wait(min(1.0, self.beat_interval)):
                self.beat()

        threading.Thread(target=beating, name="jaxfed-progress", daemon=True).start()

    def _write(self, line: str) -> None:
        with self._lock:
            self.last_line = self.clock()
            if self.on_terminal:
                self.bar_cls.write(line, file=self.stream)
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
