"""Running an experiment: :func:`run_experiment` hands its sweep to :func:`jaxfed.engine.run` under the
experiment's identity and writes the result directory (:mod:`jaxfed.rundir`) and its figure."""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import time
from collections.abc import Callable, Mapping

import jax

from jaxfed import engine, rundir, store, validation
from jaxfed.experiments import catalog
from jaxfed.experiments.spec import (
    Experiment,
    Sweep,
    check_config_class,
    check_finite,
    check_representable,
    check_sizes,
    check_sweep,
)

__all__ = ["run_experiment"]


def run_experiment(
    exp: Experiment,
    config,
    n_trials: int | None = None,
    options: engine.RunOptions | None = None,
    *,
    imports: Mapping[str, str] | None = None,
    quiet: bool = False,
    **legacy,
) -> tuple[dict, dict]:
    """Runs an experiment through the engine and writes its result directory.

    Args:
        exp, config: the experiment and its parameters.
        n_trials: trials per point (default ``exp.default_trials``); with a precision target the most.
        options: how to run it, a :class:`jaxfed.engine.RunOptions` (default:
            ``RunOptions.for_experiments()``, which keeps raw trials while they fit, ``keep="auto"``);
            the result directory is ``options.out_dir``. The identity, the metric axes, common random
            numbers and the micro-batch width are the experiment's own.
        imports: ({file name: SHA-256}, from :func:`catalog.import_extensions`): the user files
            loaded for the run (``--import FILE``: channels, conjugate models, …), held in its identity.
        quiet: no progress (``progress=False``).
        **legacy: fields of ``RunOptions`` (``seed=``, ``out_dir=``, ``keep=`` …), over those of ``options``.

    The run's identity (what a rerun on ``out_dir`` must match) is the experiment, parameters,
    points, seed and dtype, and for an experiment that runs user code the SHA-256 of every user
    file it runs and a plugin's distribution and version (:func:`catalog.code_identity`); the trial
    count is not part of it, so rerunning with more trials computes only the new ones (see
    :mod:`jaxfed.store`). Trials with a NaN or ±inf metric are counted per point in
    ``config_json["nonfinite_trials"]`` and reported on stderr, in raw and summary modes alike.
    Progress goes to stderr unless ``quiet`` (:class:`jaxfed.engine.Progress`, its lines prefixed
    with the experiment's name). ``config.json`` records the options (``"options"``) and what the
    engine chose (``"engine"``); it is written after ``metrics.npz`` (the figure last) and records
    the SHA-256 of ``metrics.npz``, so :func:`jaxfed.rundir.load_results` never pairs one run's config with
    another's metrics.

    Returns:
        (config_json, results) where results maps metric names to raw arrays (point, trial, …)
        or, with ``keep="summary"``, to :class:`jaxfed.stats.Summary`.

    Raises:
        ValueError: a bad option, parameter or sweep (before any work), or what :func:`jaxfed.engine.run` raises.
    """
    started = time.perf_counter()
    options = _run_options(options, quiet, legacy)
    n_trials = exp.default_trials if n_trials is None else n_trials
    validation.trial_count(n_trials, "trials")
    dtype = _checked_dtype(config)
    sweep = exp.build(config)
    check_sweep(sweep)
    out_dir = options.out_dir
    if out_dir is not None and len(sweep.labels) >= FIGURE_SERIES_WARN:  # the plan counts the figure too
        _warn(exp)(_figure_cost(len(sweep.labels)))
    if out_dir is not None:  # refused before any work: the run would write through these links at its end
        for name in (rundir.CONFIG_FILE, rundir.METRICS_FILE, f"{exp.name}.png"):
            store.check_no_link(os.path.join(out_dir, name))
    identity = _identity(exp, config, sweep, options.seed, dtype, imports)
    options = _engine_options(exp, sweep, options, identity)
    results = engine.run(sweep.trial, sweep.points, n_trials, options=options)
    config_json = _record(exp, identity, options, n_trials, sweep, results)
    if jax.process_index() == 0:
        for line in rundir.nonfinite_lines(config_json["nonfinite_trials"], sweep.labels, n_trials):
            print(f"jaxfed: warning: {exp.name}: {line}", file=sys.stderr)
    if out_dir is None or jax.process_index() != 0:
        return config_json, results
    return _write_result_directory(exp, config, sweep, out_dir, config_json, results, started)


FIGURE_SERIES_WARN = 100
"""Points from which a run says, before any work, what drawing its figure will cost."""
FIGURE_SECONDS_PER_SERIES = 0.08
"""Seconds to draw one point's series (measured: gfvl-topologies' figure of 300 points took 22.6 s
on a loaded 2-core CPU, where its 6,000 point-trials took 6 s)."""


def _figure_cost(n_points: int) -> str:
    seconds = n_points * FIGURE_SECONDS_PER_SERIES
    return (
        f"the figure will draw {n_points:,} point series after the run: about {seconds:,.0f} s at "
        f"~{FIGURE_SECONDS_PER_SERIES} s a series on a 2-core CPU (the results are written first)"
    )


def _run_options(options, quiet: bool, legacy: dict) -> engine.RunOptions:
    """``options`` (default ``RunOptions.for_experiments()``) with the keyword arguments over it."""
    validation.check(
        "options", options, options is None or isinstance(options, engine.RunOptions), "a jaxfed.engine.RunOptions"
    )
    known = {f.name for f in dataclasses.fields(engine.RunOptions)}
    for name in legacy:
        if name not in known:
            raise TypeError(f"run_experiment() got an unexpected keyword argument {name!r}")
    if quiet:
        legacy = dict(legacy, progress=False)
    if options is None:
        return engine.RunOptions.for_experiments(**legacy)
    return dataclasses.replace(options, **legacy)


def _checked_dtype(config) -> str:
    """The run's dtype, after checking the config's class and values (finite, JSON, normal in the dtype)."""
    check_config_class(type(config))
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    check_finite(type(config), values)
    check_sizes(type(config), values)
    dtype = "float64" if jax.config.read("jax_enable_x64") else "float32"
    check_representable(config, dtype)
    rundir.check_json("parameters", dataclasses.asdict(config))
    return dtype


def _identity(exp: Experiment, config, sweep: Sweep, seed: int, dtype: str, imports) -> dict:
    """What identifies an experiment's run in its store (see :func:`run_experiment`)."""
    return rundir.jsonable(
        {
            "experiment": exp.name,
            "parameters": dataclasses.asdict(config),
            "points": sweep.labels,
            "seed": seed,
            "dtype": dtype,
            **catalog.code_identity(exp, config),  # user code: "code" (file digests), "plugin"
            **({"imports": dict(imports)} if imports else {}),
        }
    )


def _engine_options(exp: Experiment, sweep: Sweep, options: engine.RunOptions, identity: dict) -> engine.RunOptions:
    """The engine's options of an experiment's run: the experiment's identity, axes, common random
    numbers and micro-batch width, and progress lines named after the experiment (in a log)."""
    progress = options.progress
    if not isinstance(progress, engine.Progress):
        progress = engine.Progress(progress is not False, label=f"{exp.name}: ")
    return dataclasses.replace(
        options,
        identity=identity,
        progress=progress,
        common_random_numbers=exp.common_random_numbers,
        micro_batch=(exp.micro_batch or {}).get(jax.devices()[0].platform),
        metric_axes=sweep.metric_axes,
    )


def _record(exp: Experiment, identity: dict, options: engine.RunOptions, n_trials: int, sweep: Sweep, results) -> dict:
    """config.json's content, before the digests of the files it names."""
    info = dict(results.info)  # (RunInfo.record(): the keys "engine" has always had)
    nonfinite = info.pop("nonfinite_trials")
    config_json = dict(identity)
    if exp.source:
        config_json["source"] = exp.source  # for the reader (never imported from the directory: see `jaxfed plot`)
    config_json.update(
        n_trials=n_trials,
        keep=options.keep,
        description=exp.description,
        metrics={name: rundir.metric_doc(value, sweep.metric_axes[name]) for name, value in results.items()},
        nonfinite_trials=nonfinite,
        coords=rundir.axis_coords(sweep.metric_axes, sweep.coords, rundir.trial_shapes(results), _warn(exp)),
        options=rundir.jsonable(options.record()),
        engine=info,
        versions=rundir.versions(),
        device=str(jax.devices()[0]),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    return config_json


def _warn(exp: Experiment) -> Callable[[str], None]:
    def warn(line: str) -> None:
        if jax.process_index() == 0:
            print(f"jaxfed: warning: {exp.name}: {line}", file=sys.stderr)

    return warn


def _write_result_directory(exp, config, sweep, out_dir, config_json, results, started) -> tuple[dict, dict]:
    """Writes metrics.npz, config.json and the figure, unless a rerun computed nothing (the record
    is left as it was) or served fewer trials than stored (the record describes the stored run)."""
    computed = any(size is not None for size in config_json["engine"]["chunk_sizes"])
    recorded = None if computed else rundir.stored_record(out_dir)
    n_trials = config_json["n_trials"]
    if recorded is not None and recorded["n_trials"] == n_trials and not rundir.same_metrics(out_dir, results):
        recorded = None  # metrics.npz is not what the chunks hold (verified before it is kept): rewritten
    if recorded is not None and (recorded["n_trials"], recorded["keep"]) == (n_trials, config_json["keep"]):
        figure = os.path.join(out_dir, f"{exp.name}.png")
        if not os.path.lexists(figure):  # (a plot that failed after the record was written)
            exp.plot(config, sweep.labels, results, figure)
        return recorded, results  # a rerun that computed nothing leaves the record as it was
    if recorded is not None and recorded["n_trials"] > n_trials:
        # fewer trials than stored: served from the store; the record still describes the stored run
        return dict(config_json, served_from=out_dir, stored_trials=recorded["n_trials"]), results
    config_json = rundir.write_results(out_dir, config_json, results, started)
    # The figure last: a plot that fails (a bug in a user's plot) loses no result; `jaxfed plot`
    # or the same command again draws it.
    if len(sweep.labels) >= FIGURE_SERIES_WARN:
        print(f"{exp.name}: results written; drawing the figure of {len(sweep.labels):,} points …", file=sys.stderr)
    exp.plot(config, sweep.labels, results, os.path.join(out_dir, f"{exp.name}.png"))
    return config_json, results
