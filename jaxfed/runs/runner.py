"""Running an experiment: :func:`run_experiment` hands its sweep to :func:`jaxfed.engine.run` under the
experiment's identity and writes the result directory (:mod:`jaxfed.store.rundir`) and its figure.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import _thread
import contextlib
import dataclasses
import datetime
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import jax

from jaxfed import engine, stats, store, validation
from jaxfed.engine.core import DryRun
from jaxfed.engine.core import dry_run as engine_dry_run
from jaxfed.engine.progress import LOG_INTERVAL_S, Progress
from jaxfed.experiment import (
    Experiment,
    Sweep,
    check_config_class,
    check_finite,
    check_representable,
    check_sizes,
    check_sweep,
)
from jaxfed.runs import catalog, identity, writer
from jaxfed.store import rundir


def run_experiment(
    exp: Experiment,
    config,
    n_trials: int | None = None,
    options: engine.RunOptions | None = None,
    *,
    imports: Mapping[str, str] | None = None,
    quiet: bool = False,
    sweep: Sweep | None = None,
    report: bool | str = True,
    shards: Sequence[Mapping] = (),
    started: float | None = None,
) -> tuple[dict, dict]:
    """Runs an experiment through the engine and writes its result directory
    (:func:`jaxfed.runs.writer.write_run`: metrics.npz, config.json, the figure, report.md,
    verdicts.json and report.html).

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
        sweep: ``exp.build(config)`` where the caller has built it already (a process that runs
            several shards of one run builds it once, so the trial function is the same object
            and its compiled program, kept in the process, is neither traced to HLO nor loaded
            again); default: built here.
        report: write report.md, verdicts.json and report.html beside the results (False: a run
            that is one step of a larger report, ``jaxfed reproduce`` or ``--decide``); a string:
            written, with it appended to the section's settings (a partial merge says so).
        shards: a merge's account of its shards (:func:`jaxfed.runs.sharding.shard_account`), recorded
            as config.json's ``"shards"`` and stated by the report (this run's own time is the merge's).
        started: the :func:`time.perf_counter` reading ``wall_s`` counts from (default: now).

    The run's identity (what a rerun on ``out_dir`` must match) is the experiment, parameters,
    points, seed and dtype, and for an experiment that runs user code the SHA-256 of every user
    file it runs and a plugin's distribution and version (:func:`identity.code_identity`); the trial
    count is not part of it, so rerunning with more trials computes only the new ones (see
    :mod:`jaxfed.store`). Trials with a NaN or ±inf metric are counted per point in
    ``config_json["nonfinite_trials"]`` and reported on stderr, in raw and summary modes alike.
    Progress goes to stderr unless ``quiet`` (:class:`jaxfed.engine.progress.Progress`, its lines prefixed
    with the experiment's name). ``config.json`` records the options (``"options"``) and what the
    engine chose (``"engine"``); it is written after ``metrics.npz`` (the figure last) and records
    the SHA-256 of ``metrics.npz``, so :func:`jaxfed.store.rundir.load_results` never pairs one run's config with
    another's metrics.

    Returns:
        (config_json, results) where results maps metric names to raw arrays (point, trial, …)
        or, with ``keep="summary"``, to :class:`jaxfed.stats.Summary`.

    Raises:
        ValueError: a bad option, parameter or sweep (before any work), or what :func:`jaxfed.engine.run` raises.
    """
    started = time.perf_counter() if started is None else started
    validation.check(
        "options", options, options is None or isinstance(options, engine.RunOptions), "a jaxfed.engine.RunOptions"
    )
    options = engine.RunOptions.for_experiments() if options is None else options
    if quiet:
        options = dataclasses.replace(options, progress=False)
    if options.out_dir is not None:  # before user code runs: an os.chdir in build() moves no result
        options = dataclasses.replace(options, out_dir=os.path.abspath(options.out_dir))
    n_trials = exp.default_trials if n_trials is None else n_trials
    validation.trial_count(n_trials, "trials")
    dtype = _checked_dtype(config)
    if jax.config.jax_disable_jit:  # type: ignore[attr-defined]  # (set by a user file at import, or JAX_DISABLE_JIT)
        raise ValueError(
            f"{_where(exp)}jax_disable_jit is on: jaxfed compiles every trial ahead of time and cannot run without "
            "jit; leave it off (do not set it in the experiment's file)"
        )
    marker = _start_marker(exp, options.out_dir, imports)
    try:
        return _run(exp, config, n_trials, options, imports, dtype, started, sweep, report, shards)
    finally:
        _end_marker(marker)


def dry_run(
    exp: Experiment, config, n_trials: int, options: engine.RunOptions, *, imports: Mapping[str, str] | None = None
) -> DryRun:
    """:func:`jaxfed.engine.core.dry_run` of the experiment's run (its identity, axes, common random
    numbers and micro-batch width, as :func:`run_experiment` gives them): planned and sized from the
    shapes, nothing compiled, computed or written (a stored run in ``options.out_dir`` is only read,
    for the width a grown run keeps).

    Args:
        exp, config, n_trials, options, imports: as :func:`run_experiment` (``options.trial_range``: a shard's).

    Returns:
        The :class:`jaxfed.engine.core.DryRun`.

    Raises:
        ValueError: what :func:`run_experiment` would refuse before any work.
    """
    validation.trial_count(n_trials, "trials")
    if options.out_dir is not None:
        options = dataclasses.replace(options, out_dir=os.path.abspath(options.out_dir))
    dtype = _checked_dtype(config)
    sweep = exp.build(config)
    with _naming_the_user_file(exp):
        check_sweep(sweep)
    identity = _identity(exp, config, sweep, options.seed, dtype, imports)
    options = _engine_options(exp, sweep, dataclasses.replace(options, progress=False), identity)
    return engine_dry_run(sweep.trial, sweep.points, n_trials, options)


def _run(exp, config, n_trials, options, imports, dtype, started, sweep, report, shards=()) -> tuple[dict, dict]:
    if sweep is None:
        with notice_if_slow(f"{exp.name}: build() of {_file(exp) or exp.name}"):
            sweep = exp.build(config)
    _check_dtype_kept(exp, dtype, "build()")
    with _naming_the_user_file(exp):
        check_sweep(sweep)
    out_dir = options.out_dir
    if out_dir is not None and len(sweep.labels) >= writer.FIGURE_SERIES_WARN:  # the plan counts the figure too
        _warn(exp)(writer.figure_cost(len(sweep.labels)))
    if out_dir is not None:  # refused before any work: the run would write through these links at its end
        for name in (rundir.CONFIG_FILE, rundir.METRICS_FILE, f"{exp.name}.png"):
            store.check_no_link(os.path.join(out_dir, name))
    identity = _identity(exp, config, sweep, options.seed, dtype, imports)
    options = _engine_options(exp, sweep, options, identity)
    fresh = out_dir is not None and _holds_no_run(out_dir)
    try:
        with _naming_the_user_file(exp):
            results = engine.run(sweep.trial, sweep.points, n_trials, options=options)
    except BaseException:
        if fresh:  # a run refused (memory, …) before it stored a trial leaves no directory to block the next
            _remove_empty_store(out_dir)
        raise
    _check_dtype_kept(exp, dtype, "the trial")
    config_json = _record(exp, identity, options, n_trials, sweep, results)
    if shards:
        config_json["shards"] = rundir.jsonable(list(shards))
    if options.trial_range is not None:  # a shard: its record is jaxfed.runs.sharding's
        return config_json, results
    if jax.process_index() == 0:
        for line in _nonfinite_notes(exp.name, config_json["nonfinite_trials"], sweep, n_trials, options.progress):
            print(line, file=sys.stderr)
    if out_dir is None or jax.process_index() != 0:
        return config_json, results
    note = report if isinstance(report, str) else ""
    _WRITING.set()  # the trials are computed: a budget's stop (stopped_after) no longer lands in this step
    with stats.quantiles.bands_reused():  # (the figure and the report band the raw trials once)
        return writer.write_run(exp, config, sweep.labels, out_dir, config_json, results, started, report=report is not False, note=note)  # fmt: skip


def _nonfinite_notes(name: str, nonfinite: Mapping, sweep: Sweep, n_trials: int, progress) -> list[str]:
    """The stderr lines about trials with NaN or ±inf values, one per metric: a warning naming its first
    point (and how many more), or, for a metric the sweep declares may be undefined
    (``Sweep.undefined``), a note saying why, and nothing when ``progress`` is off (``--quiet``)."""
    undefined = sweep.undefined or {}
    lines = []
    for metric, counts in nonfinite.items():
        per_point = rundir.nonfinite_lines({metric: counts}, sweep.labels, n_trials)
        if not per_point:
            continue
        if metric in undefined:
            if progress.enabled if isinstance(progress, Progress) else progress is not False:
                lines.append(
                    f"jaxfed: note: {name}: {metric} is undefined (NaN) at {len(per_point)} of {len(counts)} points, "
                    f"as expected: {undefined[metric]} (left out of bands and summaries; counted in config.json)"
                )
            continue
        others = len(per_point) - 1
        more = f" (and at {others} more point{'s' if others > 1 else ''}: config.json)" if others else ""
        lines.append(f"jaxfed: warning: {name}: {per_point[0]}{more}")
    return lines


# --------------------------------------------------------------------------- user code
def _file(exp: Experiment) -> str:
    """The user file of an experiment loaded from one (``path/to/file.py``), else ""."""
    return exp.source.rpartition(":")[0] if exp.source else ""


def _where(exp: Experiment) -> str:
    return f"{_file(exp)}: " if exp.source else ""


@contextlib.contextmanager
def _naming_the_user_file(exp: Experiment):
    """A ValueError that a user experiment's sweep provoked in jaxfed (a metric's axes that do not
    fit its values, …) names the user's file; the store's own errors and errors raised in the
    user's code (which name their line already) pass as they are."""
    try:
        yield
    except store.StoreError:
        raise
    except ValueError as err:
        if not exp.source or _file(exp) in str(err) or catalog.user_frame(err) is not None:
            raise
        raise ValueError(f"{_file(exp)}: {err}") from err


def _check_dtype_kept(exp: Experiment, dtype: str, during: str) -> None:
    """ValueError when user code switched ``jax_enable_x64`` after the run's dtype was checked (and
    is recorded): the flag is put back, so that what is recorded is what is stored."""
    now = "float64" if jax.config.read("jax_enable_x64") else "float32"
    if now != dtype:
        jax.config.update("jax_enable_x64", dtype == "float64")
        raise ValueError(
            f"{_where(exp)}jax_enable_x64 was switched ({dtype} to {now}) during {during}; the run is checked and "
            "recorded in the dtype set before it: set JAX_ENABLE_X64=1 in the environment (or jax.config.update at "
            "the top of the file) instead"
        )


NOTICE_AFTER = 5.0
"""Seconds after which a user file's import or ``build()`` still running is said on stderr."""
NOTICE_EVERY = LOG_INTERVAL_S
"""Seconds between the lines after that one (a log is never silent longer than a progress interval)."""


@contextlib.contextmanager
def notice_if_slow(what: str, after: float | None = None):
    """Says ``jaxfed: WHAT … still running after 5 s`` on stderr when the block takes longer than
    ``after`` seconds (a user file's import or ``build()`` that sleeps, downloads or computes),
    then again with the elapsed seconds every :data:`NOTICE_EVERY` seconds until it ends.

    Args:
        what: what the block does, as the line names it.
        after: seconds before the first line (default :data:`NOTICE_AFTER`).
    """
    after = NOTICE_AFTER if after is None else after
    started, done = time.monotonic(), threading.Event()

    def notices() -> None:
        if done.wait(after):
            return
        print(f"jaxfed: {what} … still running after {after:g} s", file=sys.stderr)
        while not done.wait(NOTICE_EVERY):
            print(f"jaxfed: {what} … still running after {time.monotonic() - started:.0f} s", file=sys.stderr)

    with _thread_for_the_block(notices, done):
        yield


@contextlib.contextmanager
def calling_after(seconds: float, action: Callable[[], object]):
    """Calls ``action()`` in a daemon thread once ``seconds`` have passed in the block, never after
    it: on leaving, the call is cancelled and a call under way is waited for.

    Args:
        seconds: the time before the call.
        action: what is called (in the thread).
    """
    left = threading.Event()

    def after_the_time() -> None:
        if not left.wait(seconds):
            action()

    with _thread_for_the_block(after_the_time, left):
        yield


@contextlib.contextmanager
def _thread_for_the_block(body: Callable[[], None], left: threading.Event):
    # ``body`` runs in a daemon thread while the block runs and must return once ``left`` is set.
    # An exception the main thread receives asynchronously (Ctrl-C, a budget's simulated SIGALRM)
    # may land anywhere here, even inside ``left.set()`` before the flag is stored, or inside
    # ``start()``: the thread is started inside the ``try`` and ``left`` is set again after the
    # join, so no thread outlives its block (one that did printed "still running" for the rest of
    # the process).
    thread = threading.Thread(target=body, name="jaxfed-timer", daemon=True)
    try:
        thread.start()
        yield
    finally:
        try:
            left.set()
            if thread.ident is not None:
                thread.join()
        finally:
            left.set()


_WRITING = threading.Event()
"""Set once a run's computed trials are being written (config.json, metrics.npz, figure): from then
on the stop of :func:`stopped_after` does not land, so a step the budget ends either wrote nothing
new or wrote its whole record, and the report written after it describes the trials on disk."""


@contextlib.contextmanager
def stopped_after(seconds: float, stop: type[BaseException]):
    """Raises ``stop`` in the block once ``seconds`` have passed: a timer thread
    (:func:`calling_after`) simulates a SIGALRM in the main thread (``_thread.interrupt_main``), so
    a run stops at its next Python step, as after Ctrl-C, its finished chunks stored. No interval
    timer is touched: a real SIGALRM meanwhile (another alarm of the process, pytest-timeout's)
    goes to the handler that was there. Where Python discards the exception (it landed in a
    garbage-collection callback: ``sys.unraisablehook`` sees it), it is raised again at the next
    step. Once the block's run writes its computed trials (``_WRITING``), the stop no longer lands:
    the step ends with its record written whole. Without SIGALRM (Windows) or off the main thread,
    the block runs to its end.

    Args:
        seconds: the time the block may take.
        stop: the exception raised in it when the time is up
            (:class:`jaxfed.results.deciding.StepStopped` for ``--decide``).

    Raises:
        stop: the time was up before the block ended.
    """
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = threading.Event()

    in_block = [True]  # (a list store, not a call: an alarm cannot land inside it, as it can in Event.set)

    def on_alarm(signum, frame):
        if ours.is_set():
            if in_block[0] and not _WRITING.is_set():
                raise stop
            return
        if callable(previous):
            previous(signum, frame)

    def fire():
        ours.set()
        _thread.interrupt_main(signal.SIGALRM)

    def on_unraisable(unraisable) -> None:
        # ``stop`` raised where Python discards exceptions (a garbage-collection or weakref callback,
        # a __del__: JAX runs such callbacks): raise it again at the block's next Python step.
        if isinstance(unraisable.exc_value, stop) and ours.is_set():
            if in_block[0] and not _WRITING.is_set():
                _thread.interrupt_main(signal.SIGALRM)
            return
        previous_hook(unraisable)

    _WRITING.clear()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    previous_hook, sys.unraisablehook = sys.unraisablehook, on_unraisable
    try:
        with calling_after(max(seconds, 1e-3), fire):
            try:
                yield
            finally:
                in_block[0] = False  # a stop after the block's end would land in its clean-up
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGALRM, previous)


def run_and_say(
    exp: Experiment,
    config,
    n_trials: int,
    options: engine.RunOptions,
    *,
    imports: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
    report: bool = True,
    sweep: Sweep | None = None,
) -> tuple[dict, dict]:
    """:func:`run_experiment` into ``options.out_dir``, with the status lines of ``jaxfed run``
    (where it goes; then the chunk sizes, devices and times, or that the trials were served from a
    larger stored run) given to ``say``.

    Args:
        exp, config, n_trials, options, imports, report, sweep: as :func:`run_experiment` takes them.
        say: called with each status line (None: no lines).

    Returns:
        (config_json, results), as :func:`run_experiment` returns them.

    Raises:
        ValueError: what :func:`run_experiment` raises.
    """
    if say is not None:
        say(f"{exp.name}: {n_trials} trials -> {options.out_dir}")
    config_json, results = run_experiment(exp, config, n_trials, options, imports=imports, report=report, sweep=sweep)
    engine_info = config_json["engine"]
    if say is not None and "served_from" in config_json:
        say(
            f"{exp.name}: served the first {n_trials} of the {config_json['stored_trials']} stored trials "
            "(the stored run's record is left as it is)"
        )
    elif say is not None:
        waited = sum(s for s in engine_info["compile_wait_s"] if s is not None)
        cached = " (from the cache)" if all(engine_info["compile_cached"]) else ""
        say(
            f"{exp.name}: chunk size(s) {engine_info['chunk_sizes']} trials over {engine_info['devices']} device(s) "
            f"in {engine_info['processes']} process(es), kept {engine_info['keep']}; {config_json['wall_s']:.1f} s, "
            f"of which waiting for the compiler {waited:.1f} s{cached}"
        )
    return config_json, results


MARKER = ".user-code-running"
"""In a result directory while a user experiment's code runs (build, trials, figure): what runs
and since when. A run that ended without a word inside it (a kill; ``os._exit`` outside the
``jaxfed`` command) leaves it, and the next run says so."""


def _start_marker(exp: Experiment, out_dir: str | None, imports=None) -> tuple[str, bool] | None:
    """Writes ``out_dir/MARKER`` for a user or plugin experiment, or any experiment run with user
    files (``imports``: a channel, family, graph, …), after saying, when one is there from a
    process no longer running, that the previous run ended inside user code: (its path, whether
    the directory was created for it)."""
    if out_dir is None or not (exp.source or exp.plugin or imports) or jax.process_index() != 0:
        return None
    path = os.path.join(out_dir, MARKER)
    if os.path.lexists(path):
        try:
            previous = store.read_json(path, 4096)
        except store.StoreError:
            previous = {}
        pid = previous.get("pid") if isinstance(previous, dict) else None
        if not (isinstance(pid, int) and _alive(pid)):
            previous = previous if isinstance(previous, dict) else {}
            _warn(exp)(
                f"the previous run on {out_dir} ended inside the experiment's code ({previous.get('code', '?')}, "
                f"running since {previous.get('since', '?')}) without an error: it was killed or ended the "
                "process itself; its results were not written (this run computes them)"
            )
    created = not os.path.isdir(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        since = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        code = _file(exp) or exp.plugin or ", ".join(imports or ())
        store.atomic_write_json(path, {"pid": os.getpid(), "code": code, "since": since})
    except (OSError, store.StoreError):
        return None  # (an unwritable --out is reported by the store, with its name)
    return path, created


def _holds_no_run(out_dir: str) -> bool:
    """True when ``out_dir`` is absent or holds nothing but the user-code marker: this run creates its store."""
    return not os.path.isdir(out_dir) or set(os.listdir(out_dir)) <= {MARKER}


def _remove_empty_store(out_dir: str) -> None:
    """Removes the store a failed run created in ``out_dir`` when it holds no trial
    (:func:`jaxfed.store.remove_empty`), so that a rerun with another configuration (a narrower
    micro-batch, say) is not refused as a different run; anything else there stays."""
    if jax.process_index() == 0:
        store.remove_empty(out_dir, keep=(MARKER,))


def _end_marker(marker: tuple[str, bool] | None) -> None:
    """Removes the marker (and the directory, when it was created for it and holds nothing else)."""
    if marker is None:
        return
    path, created = marker
    try:
        os.remove(path)
        if created and not os.listdir(os.path.dirname(path)):
            os.rmdir(os.path.dirname(path))
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return pid != os.getpid()


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
            **identity.code_identity(exp, config),  # user code: "code" (file digests), "plugin"
            **({"imports": dict(imports)} if imports else {}),
        }
    )


def _engine_options(exp: Experiment, sweep: Sweep, options: engine.RunOptions, identity: dict) -> engine.RunOptions:
    """The engine's options of an experiment's run: the experiment's identity, axes, common random
    numbers and micro-batch width, and progress lines named after the experiment (in a log)."""
    progress = options.progress
    if not isinstance(progress, Progress):
        progress = Progress(progress is not False, label=f"{exp.name}: ")
    return dataclasses.replace(
        options,
        identity=identity,
        progress=progress,
        common_random_numbers=exp.common_random_numbers,
        micro_batch=exp.width_on(jax.devices()[0].platform),
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
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    return config_json


def _warn(exp: Experiment) -> Callable[[str], None]:
    def warn(line: str) -> None:
        if jax.process_index() == 0:
            print(f"jaxfed: warning: {exp.name}: {line}", file=sys.stderr)

    return warn
