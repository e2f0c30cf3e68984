"""``jaxfed reproduce`` and ``--decide``: which experiments run and at what size (:func:`reproduced`,
:func:`reproduce_priors`), their progress over the experiments (which of how many, and an overall
ETA from each experiment's expected time corrected by what its group's finished experiments took:
:func:`overall_eta`, :class:`ReproduceProgress`, above the engine, whose
:class:`jaxfed.engine.progress.Progress` shows each run's groups below it), the whole command
(:func:`reproduce`) and the growth of runs until their claims are decided (:func:`decide_runs`,
:func:`run_deciding`).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple, TextIO

import jax
import tqdm

from jaxfed import engine, store
from jaxfed.engine.progress import Progress, clock_text, is_terminal
from jaxfed.experiment import Experiment, make_config
from jaxfed.experiments import REGISTRY
from jaxfed.results import deciding, report
from jaxfed.runs import writer
from jaxfed.runs.ahead import CompilingAhead
from jaxfed.runs.runner import run_and_say, stopped_after


def experiment_group(name: str) -> str:
    """The group an experiment's cost is judged with: its name up to the first "-" ("gfvl", "kmeans")."""
    return name.split("-", 1)[0]


PRIOR_WEIGHT_S = 120.0
"""Seconds of priors the reference speed counts as in :func:`overall_eta` (``w``): this machine's
measured speed outweighs the reference run's after about two minutes of measured experiments, so
one cold or stored experiment does not swing the ETA of all the others."""


def overall_eta(
    prior: Mapping[str, float],
    took: Mapping[str, float | None],
    running: str | None = None,
    running_s: float = 0.0,
    group: Callable[[str], str] = experiment_group,
    prior_weight: float = 0.0,
) -> float:
    """Seconds ``jaxfed reproduce`` still needs: each experiment's prior estimate, corrected by what
    the finished experiments of its group took against theirs, and by the running one's overrun.

    With ``p_e`` the prior seconds of experiment ``e`` (``prior``), ``t_e`` the seconds a finished
    one took (``took``; None: finished but not measured, e.g. served from the store), ``F_g`` the
    measured finished experiments of group ``g``, ``F`` those of every group, ``w`` the
    ``prior_weight`` (prior seconds the reference speed 1 counts as: :data:`PRIOR_WEIGHT_S` in
    ``jaxfed reproduce``), and ``o`` the overrun of the experiment ``r`` running for ``s``
    seconds (``running``, ``running_s``) past its own estimate, counted as measured seconds of
    its group (and of every group) without prior seconds:

        k = (Σ_F t_e + o + w) / (Σ_F p_e + w), else (no denominator) 1
        k_g = (Σ_{F_g} t_e + o [g = g(r)] + w k) / (Σ_{F_g} p_e + w), else (no denominator) k
        o = max(0, k°_{g(r)} p_r − s), k° the factors without o
        ETA = Σ_{e unfinished, not running} k_{g(e)} p_e + max(0, k°_{g(r)} p_r − s)

    A group's own finished experiments replace its prior speed as they add up; before any of its
    own, this machine's speed measured on the other groups scales the priors. Within an
    experiment the ETA falls with the elapsed time until the experiment passes its estimate, then
    rises with the overrun: it moves at every moment, not only when an experiment ends. Never negative.
    """
    measured = {e: t for e, t in took.items() if t is not None and prior.get(e, 0) > 0}

    def factors(overrun: float, overrun_group: str | None) -> Callable[[str], float]:
        def ratio(names, extra: float, base: float) -> float | None:
            expected = sum(prior[e] for e in names) + prior_weight
            return (sum(measured[e] for e in names) + extra + prior_weight * base) / expected if expected > 0 else None

        everywhere = ratio(list(measured), overrun, 1.0)
        overall = 1.0 if everywhere is None else everywhere

        def k(e: str) -> float:
            g = group(e)
            own = ratio([f for f in measured if group(f) == g], overrun if g == overrun_group else 0.0, overall)
            return overall if own is None else own

        return k

    k = factors(0.0, None)
    own_left = 0.0
    if running is not None and running not in took:
        own_left = k(running) * prior[running] - running_s
        if own_left < 0:  # past its estimate: the overrun says its group (and this machine) is slower
            k = factors(-own_left, group(running))
    left = sum(k(e) * p for e, p in prior.items() if e not in took and e != running)
    return left + max(0.0, own_left)


class _Bar(tqdm.tqdm):
    """A tqdm bar whose ``{overall_eta}`` field is computed each time the bar is drawn."""

    def __init__(self, eta: Callable[[], str], **kwargs):
        self._eta = eta  # (set first: tqdm draws the bar in __init__)
        super().__init__(**kwargs)

    @property
    def format_dict(self):
        return {**super().format_dict, "overall_eta": self._eta()}


class ReproduceProgress:
    """``jaxfed reproduce``'s progress over its experiments, silent when not ``enabled``.

    ``prior`` maps the experiments, in the order they run, to the seconds each is expected to take
    before anything has run (``jaxfed reproduce`` scales a reference run's times to the trial counts:
    :func:`reproduce_priors`). The ETA is :func:`overall_eta`: the priors, each group's
    corrected by the time its finished experiments took against their priors (of every group's,
    until one of its own has finished; the reference speed weighing ``prior_weight`` prior
    seconds), less the running experiment's elapsed time, plus what its overrun says of the
    others. On a terminal: a tqdm bar "experiment i/n: NAME" with the elapsed time and that ETA
    (computed when the bar is drawn, redrawn every second by the runs' heartbeat), above the runs'
    bars; elsewhere: a line ``[elapsed] reproduce: i/n experiments done, ETA t`` when the first
    experiment starts and after each one, and the same status after each heartbeat line of a run
    (:meth:`run_progress`). Every line's elapsed time counts from this object's creation.
    """

    def __init__(
        self,
        enabled: bool,
        prior: Mapping[str, float],
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        group: Callable[[str], str] = experiment_group,
        prior_weight: float = PRIOR_WEIGHT_S,
    ):
        self.enabled, self.prior, self.clock, self.group = enabled, dict(prior), clock, group
        self.prior_weight = prior_weight
        self.stream = sys.stderr if stream is None else stream
        self.started = self.current_started = clock()
        self.current: str | None = None
        self.took: dict[str, float | None] = {}  # finished experiments: seconds, None when not measured
        self.on_terminal = enabled and is_terminal(self.stream)
        self.bar: _Bar | None = None  # opened by the first start, with its name

    def eta(self) -> float:
        """Seconds still needed (:func:`overall_eta`), now."""
        running_s = self.clock() - self.current_started
        return overall_eta(self.prior, self.took, self.current, running_s, self.group, self.prior_weight)

    def run_progress(self, name: str, given: bool | str | Progress | None) -> bool | str | Progress:
        """The engine's progress for experiment ``name``'s run: ``given`` (the run options'
        ``progress``) when it is a :class:`~jaxfed.engine.progress.Progress` or False, else (None,
        True or a name) one labelled by the experiment, on this command's clock (its lines' elapsed time counts from the
        command's start) and with the overall ETA after each of its heartbeat lines."""
        if isinstance(given, Progress) or given is False or not self.enabled:
            return given if given is not None else True
        return Progress(
            True, f"{name}: ", stream=self.stream, clock=self.clock, started=self.started, context=self.context
        )

    def timed(self, say: Callable[[str], None] | None) -> Callable[[str], None] | None:
        """``say`` with each line after ``[elapsed]`` on this command's clock (None stays None)."""
        if say is None:
            return None
        return lambda line: say(f"[{clock_text(self.clock() - self.started)}] {line}")

    def context(self) -> str:
        """What a run's heartbeat line ends with: ``reproduce: i/n experiments done, ETA t``
        (on a terminal the overall bar is redrawn instead, its ETA with it)."""
        if self.bar is not None:
            self.bar.refresh()
            return ""
        return self._status()

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
        return f"[{clock_text(self.clock() - self.started)}] {self._status()}"

    def _status(self) -> str:
        return f"reproduce: {len(self.took)}/{len(self.prior)} experiments done, ETA {clock_text(self.eta())}"

    def _write_line(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# --------------------------------------------------------------------------- planning
def reproduced(only: str | None) -> list[Experiment]:
    """The experiments ``jaxfed reproduce`` runs, in order.

    Args:
        only: None for every built-in experiment, else names separated by commas (``--only``;
            repeated names count once, in the order first given).

    Returns:
        The experiments.

    Raises:
        ValueError: an unknown name (the line lists the known ones).
    """
    if only is None:
        return list(REGISTRY.values())
    names = list(dict.fromkeys(name.strip() for name in only.split(",") if name.strip()))
    unknown = [name for name in names if name not in REGISTRY] or ([] if names else [only])
    if unknown:
        raise ValueError(f"--only: unknown experiment(s) {', '.join(map(repr, unknown))}; known: {', '.join(REGISTRY)}")
    return [REGISTRY[name] for name in names]


REFERENCE_SECONDS: dict[str, tuple[float, float]] = {
    "gfvl-topologies": (8.1, 0.1),
    "gfvl-local-iters": (69.6, 20.1),
    "gfvl-local-iters-paper": (93.4, 25.0),
    "gfvl-unlearning": (66.7, 24.7),
    "gfvl-unlearning-paper": (71.2, 15.0),
    "gfvl-unlearning-conjugate": (30.9, 0.5),
    "gfvl-heterogeneity": (42.5, 0.7),
    "gfvl-logistic": (80.6, 44.1),
    "gfvl-wallclock": (38.8, 5.4),
    "gfvl-graphs": (20.4, 7.3),
    "kmeans-convergence": (47.8, 119.9),
    "kmeans-snr": (113.3, 408.1),
    "kmeans-ablation": (90.7, 85.0),
    "kmeans-devices": (52.1, 16.7),
    "kmeans-digits1": (11.1, 14.1),
    "kmeans-oac-counts": (37.7, 13.8),
    "kmeans-channels": (71.0, 27.1),
}
"""Per built-in experiment, what it took in a reference ``jaxfed reproduce --compilation-cache off``
at its default trial count: (seconds outside its trials: building, compiling, the figure and the
reading; seconds of its trials, point-trials / rate summed over the engine's groups' "done" lines).
The priors of the overall ETA (:func:`reproduce_priors`), which the run corrects as it goes: only
the ratios between experiments matter once one has finished. Where and when they were measured:
docs/performance.md."""


def reproduce_priors(experiments: list[Experiment], trials: Mapping[str, int]) -> dict[str, float]:
    """Seconds each experiment is expected to take before anything has run, in run order.

    ``fixed + trials_s × n / N`` from its :data:`REFERENCE_SECONDS` (``n`` its trials per point
    now, ``N`` its default); an experiment without a reference (a registered user experiment) gets
    the mean prior of its group's experiments that have one (of all of them, if none has), else 0.

    Args:
        experiments: the experiments, in the order they run.
        trials: each experiment's trials per point, by name.

    Returns:
        Experiment name -> expected seconds.
    """
    known = {
        exp.name: fixed + trials_s * trials[exp.name] / exp.default_trials
        for exp in experiments
        if exp.name in REFERENCE_SECONDS
        for fixed, trials_s in [REFERENCE_SECONDS[exp.name]]
    }

    def mean_of(names: list) -> float | None:
        return sum(known[n] for n in names) / len(names) if names else None

    everywhere = mean_of(list(known)) or 0.0

    def guess(name: str) -> float:
        same = mean_of([n for n in known if experiment_group(n) == experiment_group(name)])
        return everywhere if same is None else same

    return {exp.name: known[exp.name] if exp.name in known else guess(exp.name) for exp in experiments}


def record_digest(out_dir: str) -> str | None:
    """The ``record_sha256`` of ``out_dir/config.json``.

    Args:
        out_dir: a result directory (it may not exist).

    Returns:
        The digest, or None when there is no record to read.
    """
    try:
        record = store.read_json(os.path.join(out_dir, "config.json"))
    except (OSError, store.StoreError):
        return None
    return record.get("record_sha256") if isinstance(record, dict) else None


def computed_here(config_json: dict, digest_before: str | None) -> bool:
    """Whether a run computed its trials here, so that its time measures this machine: it wrote a
    new record (a rerun that computed nothing keeps the stored one) and did not serve its trials
    from a larger stored run. (A resumed run that computed part of its trials counts: its time is short.)

    Args:
        config_json: the run's record as :func:`jaxfed.runs.run_experiment` returned it.
        digest_before: :func:`record_digest` of its directory before it ran.

    Returns:
        True when its time measures this machine.
    """
    return "served_from" not in config_json and config_json.get("record_sha256") != digest_before


# --------------------------------------------------------------------------- the command
class Reproduced(NamedTuple):
    """What :func:`reproduce` did: report.md's path (None in a process other than 0), each
    experiment's seconds in run order, and the seconds of the whole."""

    report: str | None
    times: list[tuple[str, float]]
    seconds: float


def reproduce(
    out: str,
    *,
    scale: float = 1.0,
    only: str | None = None,
    options: engine.RunOptions | None = None,
    imports: Mapping[str, str] | None = None,
    budget: float | None = None,
    say: Callable[[str], None] | None = None,
    ahead: bool = True,
) -> Reproduced:
    """``jaxfed reproduce``: every built-in experiment (or those ``only`` names) at ``scale`` times
    its default trial count, each into ``out/NAME``, then one report.md (verdicts.json,
    report.html) of them all in ``out``.

    While an experiment runs, the next one is built and its programs compiled in a background
    thread (:class:`jaxfed.runs.ahead.CompilingAhead`), so that it finds them compiled: the same
    programs, so the same values, as compiled when it starts.

    Args:
        out: the directory of the runs and the report (absolute).
        scale: multiplies every default trial count (at least 1 trial).
        only: names separated by commas (:func:`reproduced`).
        options: the run options (``out_dir`` is each run's own).
        imports: the user files loaded for the runs (:func:`jaxfed.runs.catalog.import_extensions`).
        budget: with ``--decide``: seconds to spend growing the runs whose claims are undecided
            (:func:`decide_runs`); None: no growth.
        say: status lines and the overall progress (None: quiet).
        ahead: compile the next experiment while one runs (False: each compiles when it starts).

    Returns:
        A :class:`Reproduced`.

    Raises:
        ValueError: an unknown name, or what :func:`jaxfed.runs.run_experiment` raises.
    """
    experiments = reproduced(only)
    options = engine.RunOptions.for_experiments() if options is None else options
    trials = {exp.name: max(1, round(exp.default_trials * scale)) for exp in experiments}
    # Which experiment of how many, and an overall ETA from each experiment's reference time,
    # corrected by its group's finished ones; the engine's per-group bars open below it (on a
    # terminal), its lines between its lines (in a log).
    overall = ReproduceProgress(say is not None and jax.process_index() == 0, reproduce_priors(experiments, trials))
    sections, times, start, runs = [], [], time.perf_counter(), {}
    if jax.process_index() == 0:  # (what an interrupted reproduction's report names as missing)
        writer.write_plan(out, trials)
    compiling = CompilingAhead(options, imports, enabled=ahead)
    try:
        for exp, after in zip(experiments, experiments[1:] + [None]):
            overall.start(exp.name)
            t0, out_dir = time.perf_counter(), os.path.join(out, exp.name)
            digest_before = record_digest(out_dir)
            made = compiling.take(exp.name)  # (made ahead: its trial is the one compiled for)
            cfg, sweep = made if made is not None else (make_config(exp.config_cls, {}), None)
            if after is not None:  # compiled while this one runs
                compiling.start(after, trials[after.name], dataclasses.replace(options, out_dir=os.path.join(out, after.name)))  # fmt: skip
            run_options = dataclasses.replace(options, out_dir=out_dir, progress=overall.run_progress(exp.name, options.progress))  # fmt: skip
            config_json, results = run_and_say(exp, cfg, trials[exp.name], run_options, imports=imports, say=overall.timed(say), report=False, sweep=sweep)  # fmt: skip
            _say_ahead(exp.name, compiling, sweep is not None, overall.timed(say))
            spt = deciding.seconds_per_trial(config_json, trials[exp.name])
            runs[exp.name] = deciding.Run(exp, cfg, config_json, results, 0, trials[exp.name], spt)
            times.append((exp.name, time.perf_counter() - t0))
            sections.append((exp.name, report.section(exp, cfg, config_json, results, times[-1][1])))
            overall.finish(measured=computed_here(config_json, digest_before))
    finally:
        compiling.close()
    overall.close()
    text = ""
    if budget is not None:
        decided, text = decide_runs(runs, options, lambda name: os.path.join(out, name), {}, budget, imports, say)
        sections = list(decided.items())
    path = writer.write_sections(out, sections, time.perf_counter() - start, text) if jax.process_index() == 0 else None
    return Reproduced(path, times, time.perf_counter() - start)


def _say_ahead(name: str, compiling: CompilingAhead, used: bool, say: Callable[[str], None] | None) -> None:
    """The status line of what compiling experiment ``name`` ahead did (nothing when it was not
    compiled ahead, or quiet)."""
    done = compiling.outcome(name)
    if say is None or done is None:
        return
    if done.error:
        say(f"{name}: compiling ahead failed ({done.error}); compiled when it ran")
    elif used:
        say(f"{name}: {done.groups} group program(s) built and compiled ahead in {done.seconds:.1f} s, beside the experiment before it")  # fmt: skip


def decide_runs(
    runs: dict,
    options: engine.RunOptions,
    out_dir_of: Callable[[str], str],
    sets: Mapping[str, str],
    budget: float,
    imports: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[dict, str]:
    """``--decide``: grows the runs holding undecided claims look by look until they are decided
    or ``budget`` seconds are spent (:func:`jaxfed.results.deciding.decide`).

    Args:
        runs: experiment name -> :class:`jaxfed.results.deciding.Run` (the first look's runs).
        options: the run options (``out_dir`` is each run's own).
        out_dir_of: an experiment's name -> its result directory.
        sets: the parameters of the runs (``--set`` strings).
        budget: seconds to spend.
        imports: the user files loaded for the runs.
        say: status lines (None: quiet).

    Returns:
        (sections by experiment name, report.md's account of the procedure).

    Raises:
        ValueError: what :func:`jaxfed.runs.run_experiment` raises.
    """

    def grow(run, n: int, seconds_left: float):
        before = run.config_json["n_trials"]
        run_options = dataclasses.replace(options, out_dir=out_dir_of(run.exp.name))
        cfg = make_config(run.exp.config_cls, dict(sets))
        with stopped_after(seconds_left, deciding.StepStopped):
            config_json, results = run_and_say(run.exp, cfg, n, run_options, imports=imports, say=say, report=False)
        spt = deciding.seconds_per_trial(config_json, n - before)
        return run._replace(cfg=cfg, config_json=config_json, results=results, seconds_per_trial=spt)

    sections, claims, spent, before, stopped = deciding.decide(runs, grow, budget, say or (lambda line: None))
    return sections, deciding.summary(claims, before, spent, budget, stopped)


def run_deciding(
    exp: Experiment,
    config,
    n_trials: int,
    options: engine.RunOptions,
    sets: Mapping[str, str],
    budget: float,
    *,
    imports: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> str:
    """``jaxfed run NAME --decide``: one run into ``options.out_dir``, grown until its claims are
    decided or ``budget`` seconds are spent (:func:`decide_runs`), then its report.md,
    verdicts.json and report.html with the procedure's account.

    Args:
        exp, config, n_trials: the experiment, its parameters and the first look's trials per point.
        options: the run options, ``out_dir`` the result directory.
        sets: the parameters as ``--set`` strings (each growth makes the same config).
        budget: seconds to spend deciding.
        imports: the user files loaded for the run.
        say: status lines (None: quiet).

    Returns:
        report.md's path.

    Raises:
        ValueError: what :func:`jaxfed.runs.run_experiment` raises.
    """
    start = time.perf_counter()
    config_json, results = run_and_say(exp, config, n_trials, options, imports=imports, say=say, report=False)
    spt = deciding.seconds_per_trial(config_json, n_trials)
    runs = {exp.name: deciding.Run(exp, config, config_json, results, 0, n_trials, spt)}
    sections, text = decide_runs(runs, options, lambda name: str(options.out_dir), sets, budget, imports, say)
    return writer.write_sections(str(options.out_dir), list(sections.items()), time.perf_counter() - start, text)
