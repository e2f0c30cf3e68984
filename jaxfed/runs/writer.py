"""The one writer of a finished run's result directory: metrics.npz and config.json
(:mod:`jaxfed.store.rundir`), the figure, and report.md, verdicts.json and report.html
(:mod:`jaxfed.results.report`). A run from the command line or from Python, a grown run, a merge
of shards and a run on Dask all end in :func:`write_run`; ``jaxfed report DIR`` writes a finished
run's report again (:func:`write_report`), ``jaxfed reproduce`` and ``--decide`` a report of several
sections (:func:`write_sections`); ``jaxfed reproduce`` its plan first (:func:`write_plan`).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import json
import os
import sys
import time

from jaxfed import store
from jaxfed.experiment import Experiment
from jaxfed.results import report as reports
from jaxfed.store import rundir

REPORT_FILES = ("report.md", rundir.VERDICTS_FILE, "report.html")
"""The report of a run's trials (:func:`write_report`): removed before a new record is written."""
FIGURE_SERIES_WARN = 100
"""Points from which a run says, before any work, what drawing its figure will cost."""
FIGURE_SECONDS_PER_SERIES = 0.08
"""Seconds to draw one point's series (docs/performance.md)."""


def figure_cost(n_points: int) -> str:
    """The line that says, before any work, what drawing the figure of ``n_points`` series will cost."""
    seconds = n_points * FIGURE_SECONDS_PER_SERIES
    return (
        f"the figure will draw {n_points:,} point series after the run: about {seconds:,.0f} s at "
        f"~{FIGURE_SECONDS_PER_SERIES} s a series on a 2-core CPU (the results are written first)"
    )


def write_run(
    exp: Experiment,
    config,
    labels: list,
    out_dir: str,
    config_json: dict,
    results: dict,
    started: float,
    *,
    report: bool = True,
    note: str = "",
) -> tuple[dict, dict]:
    """Writes every file of a finished run into ``out_dir``: metrics.npz and config.json, the
    figure ``NAME.png``, then (``report``) report.md, verdicts.json and report.html.

    A rerun that computed nothing leaves the record as it was (the figure is drawn again only when
    it is missing); a run that served fewer trials than are stored writes nothing (its record
    describes the stored run, and ``config_json`` says ``served_from``).

    Args:
        exp: the experiment that ran.
        config: its parameters (an instance of ``exp.config_cls``).
        labels: the sweep's point labels (``Sweep.labels``).
        out_dir: the result directory (absolute).
        config_json: the run's record before the digests of the files it names.
        results: metric name -> values, as :func:`jaxfed.runs.run_experiment` returns them.
        started: ``time.perf_counter()`` when the run started (config.json's ``wall_s``, the
            report's time).
        report: write report.md, verdicts.json and report.html too (off for a run that is one
            step of a larger report: ``jaxfed reproduce``, ``--decide``).
        note: appended to the report section's settings (a partial merge says so).

    Returns:
        (config_json, results): the record as written (or as it was kept), and ``results``.

    Raises:
        OSError, jaxfed.store.StoreError: a file that cannot be written.
    """
    computed = any(size is not None for size in config_json["engine"]["chunk_sizes"])
    recorded = None if computed else rundir.stored_record(out_dir)
    n_trials = config_json["n_trials"]
    if recorded is not None and recorded["n_trials"] == n_trials and not rundir.same_metrics(out_dir, results):
        recorded = None  # metrics.npz is not what the chunks hold (verified before it is kept): rewritten
    if recorded is not None and (recorded["n_trials"], recorded["keep"]) == (n_trials, config_json["keep"]):
        figure = os.path.join(out_dir, f"{exp.name}.png")
        if not os.path.lexists(figure):  # (a plot that failed after the record was written)
            exp.plot(config, labels, results, figure)
        config_json = recorded  # a rerun that computed nothing leaves the record as it was
    elif recorded is not None and recorded["n_trials"] > n_trials:
        # fewer trials than stored: served from the store; the record still describes the stored run
        return dict(config_json, served_from=out_dir, stored_trials=recorded["n_trials"]), results
    else:
        # The report of the trials stored until now goes first: a run stopped after its new record
        # (killed, an error in the figure or the report, --decide's budget) leaves no report.md or
        # verdicts.json describing other trials than config.json and metrics.npz.
        for name in REPORT_FILES:
            rundir.remove_own_file(os.path.join(out_dir, name))
        config_json = rundir.write_results(out_dir, config_json, results, started)
        # The figure last: a plot that fails (a bug in a user's plot) loses no result; `jaxfed plot`
        # or the same command again draws it.
        if len(labels) >= FIGURE_SERIES_WARN:
            print(f"{exp.name}: results written; drawing the figure of {len(labels):,} points …", file=sys.stderr)
        exp.plot(config, labels, results, os.path.join(out_dir, f"{exp.name}.png"))
    if report:
        write_report(out_dir, exp, config, config_json, results, time.perf_counter() - started, note)
    return config_json, results


def write_report(out_dir: str, exp: Experiment, config, config_json: dict, results: dict, seconds: float, note: str = "") -> str:  # fmt: skip
    """Writes ``out_dir``'s report.md, verdicts.json and report.html of one finished run (the
    verdict policy, the table of claims and the experiment's section); nothing is computed.

    Args:
        out_dir: the run's result directory.
        exp, config: the experiment and its parameters.
        config_json, results: the run's record and metrics (:func:`jaxfed.store.rundir.load_results`).
        seconds: the time the report says the run took.
        note: appended to the section's settings.

    Returns:
        report.md's path.

    Raises:
        OSError, jaxfed.store.StoreError: a file that cannot be written.
    """
    section = reports.section(exp, config, config_json, results, seconds)
    if note:
        section = section._replace(settings=section.settings + note)
    return reports.write(out_dir, [(exp.name, section)], seconds)


PLAN = "reproduce-plan.json"
"""In a ``jaxfed reproduce`` folder from its start: the experiments it runs, in order, and their
trials per point; ``jaxfed report`` of an interrupted reproduction names those that did not finish."""


def write_plan(out_dir: str, trials: dict) -> str:
    """Writes ``out_dir/reproduce-plan.json`` (:data:`PLAN`): ``{"experiments": {name: trials}}`` in run order.

    Args:
        out_dir: the reproduction's folder (made if missing).
        trials: experiment name -> trials per point, in run order.

    Returns:
        The file's path.

    Raises:
        OSError, jaxfed.store.StoreError: a file that cannot be written.
    """
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, PLAN)
    store.atomic_write_bytes(path, (json.dumps({"experiments": dict(trials)}, indent=1) + "\n").encode())
    return path


def write_sections(out_dir: str, sections: list, seconds: float, deciding: str = "", missing: tuple = ()) -> str:
    """Writes report.md, verdicts.json and report.html of several sections: ``jaxfed reproduce``'s
    report of every run in its directory, or a ``--decide`` run's (each claim's standing verdict).

    Args:
        out_dir: the directory of the report.
        sections: (experiment name, :class:`jaxfed.results.report.Section`) pairs, in order.
        seconds: the time the report says it all took.
        deciding: the account of ``--decide`` (:func:`jaxfed.results.deciding.summary`), or "".
        missing: the experiments a partial report lacks (``jaxfed report`` of an interrupted
            reproduction), named at its top.

    Returns:
        report.md's path.

    Raises:
        OSError, jaxfed.store.StoreError: a file that cannot be written.
    """
    return reports.write(out_dir, sections, seconds, deciding, missing)
