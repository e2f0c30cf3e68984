"""Progress on stderr: on a terminal a tqdm bar per point group, elsewhere (a log file) plain lines
with elapsed time, trials done, rate and ETA; one-line notes above either; silent when disabled.

:class:`Progress` is one run's (``engine.run``); :class:`Overall` is ``jaxfed reproduce``'s, over
its experiments.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping
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


def _is_terminal(stream) -> bool:
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
        self.on_terminal = enabled and _is_terminal(self.stream)
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


def experiment_group(name: str) -> str:
    """The group an experiment's cost is judged with: its name up to the first "-" ("gfvl", "kmeans")."""
    return name.split("-", 1)[0]


def overall_eta(
    prior: Mapping[str, float],
    took: Mapping[str, float | None],
    running: str | None = None,
    running_s: float = 0.0,
    group: Callable[[str], str] = experiment_group,
) -> float:
    """Seconds ``jaxfed reproduce`` still needs: each experiment's prior estimate, corrected by what
    the finished experiments of its group took against theirs.

    With ``p_e`` the prior seconds of experiment ``e`` (``prior``), ``t_e`` the seconds a finished
    one took (``took``; None: finished but not measured, e.g. served from the store), ``F_g`` the
    measured finished experiments of group ``g`` and ``F`` those of every group:

        k_g = Σ_{F_g} t_e / Σ_{F_g} p_e, else (F_g empty) Σ_F t_e / Σ_F p_e, else (F empty) 1
        ETA = Σ_{e unfinished, not running} k_{g(e)} p_e + max(0, k_{g(r)} p_r − s)

    for the experiment ``r`` running for ``s`` seconds (``running``, ``running_s``): a group's own
    finished experiments replace its prior speed; before any of its own, this machine's speed
    measured on the other groups scales the priors. Never negative.
    """
    measured = {e: t for e, t in took.items() if t is not None and prior.get(e, 0) > 0}

    def factor(names) -> float | None:
        expected = sum(prior[e] for e in names)
        return sum(measured[e] for e in names) / expected if expected > 0 else None

    everywhere = factor(list(measured))
    overall = 1.0 if everywhere is None else everywhere

    def k(e: str) -> float:
        own = factor([f for f in measured if group(f) == group(e)])
        return overall if own is None else own

    left = sum(k(e) * p for e, p in prior.items() if e not in took and e != running)
    if running is not None and running not in took:
        left += max(0.0, k(running) * prior[running] - running_s)
    return left


class _Bar(tqdm.tqdm):
    """A tqdm bar whose ``{overall_eta}`` field is computed each time the bar is drawn."""

    def __init__(self, eta: Callable[[], str], **kwargs):
        self._eta = eta  # (set first: tqdm draws the bar in __init__)
        super().__init__(**kwargs)

    @property
    def format_dict(self):
        return {**super().format_dict, "overall_eta": self._eta()}


class Overall:
    """``jaxfed reproduce``'s progress over its experiments, silent when not ``enabled``.

    ``prior`` maps the experiments, in the order they run, to the seconds each is expected to take
    before anything has run (``jaxfed reproduce`` scales a reference run's times to the trial counts:
    ``jaxfed.cli.reproduce_priors``). The ETA is :func:`overall_eta`: the priors, each group's
    corrected by the time its finished experiments took against their priors (of every group's,
    until one of its own has finished), less the running experiment's elapsed time. On a terminal: a
    tqdm bar "experiment i/n: NAME" with the elapsed time and that ETA (computed when the bar is
    drawn), above the runs' bars; elsewhere: a line ``[elapsed] reproduce: i/n experiments done, ETA
    t`` when the first experiment starts and after each one.
    """

    def __init__(
        self,
        enabled: bool,
        prior: Mapping[str, float],
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        group: Callable[[str], str] = experiment_group,
    ):
        self.enabled, self.prior, self.clock, self.group = enabled, dict(prior), clock, group
        self.stream = sys.stderr if stream is None else stream
        self.started = self.current_started = clock()
        self.current: str | None = None
        self.took: dict[str, float | None] = {}  # finished experiments: seconds, None when not measured
        self.on_terminal = enabled and _is_terminal(self.stream)
        self.bar: _Bar | None = None  # opened by the first start, with its name

    def eta(self) -> float:
        """Seconds still needed (:func:`overall_eta`), now."""
        running_s = self.clock() - self.current_started
        return overall_eta(self.prior, self.took, self.current, running_s, self.group)

    def start(self, name: str) -> None:
        """Experiment ``name`` starts."""
        first = self.current is None and not self.took
        self.current, self.current_started = name, self.clock()
        description = f"experiment {len(self.took) + 1}/{len(self.prior)}: {name}"
        if self.on_terminal and self.bar is None:
            self.bar = _Bar(
                lambda: clock_text(self.eta()),
                total=len(self.prior),
                desc=description,
                file=self.stream,
                dynamic_ncols=True,
                bar_format="{desc} |{bar}| [{elapsed}, ETA {overall_eta}]",
            )
        elif self.bar is not None:
            self.bar.set_description_str(description)
        elif self.enabled and first:
            self._write_line()

    def finish(self, measured: bool = True) -> None:
        """The current experiment is done; ``measured``: its time says how fast its group runs here
        (not when its trials were served from the store)."""
        if self.current is None:
            return
        self.took[self.current] = self.clock() - self.current_started if measured else None
        self.current = None
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled:
            self._write_line()

    def line(self) -> str:
        """``[elapsed] reproduce: i/n experiments done, ETA t``."""
        return (
            f"[{clock_text(self.clock() - self.started)}] reproduce: {len(self.took)}/{len(self.prior)} "
            f"experiments done, ETA {clock_text(self.eta())}"
        )

    def _write_line(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
