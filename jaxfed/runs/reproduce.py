"""``jaxfed reproduce``'s progress over its experiments: which experiment of how many, and an overall
ETA from each experiment's expected time, corrected by what its group's finished experiments took
(:func:`overall_eta`, :class:`Overall`). The command's (:mod:`jaxfed.cli`), above the engine, whose
:class:`jaxfed.engine.progress.Progress` shows each run's groups below it.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

import tqdm

from jaxfed.engine.progress import clock_text, is_terminal


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
        self.on_terminal = enabled and is_terminal(self.stream)
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
