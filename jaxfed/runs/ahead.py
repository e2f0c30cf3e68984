"""``jaxfed reproduce``'s experiments compiled one ahead (:class:`CompilingAhead`): while an
experiment computes, a worker thread builds the next experiment's sweep and compiles its programs
(:func:`jaxfed.engine.ahead.compile_ahead`; XLA compiles without the GIL), so that the next
experiment finds them compiled instead of waiting for the compiler.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
import time
from typing import NamedTuple

import jax

from jaxfed import engine
from jaxfed.engine.ahead import compile_ahead
from jaxfed.experiment import Experiment, Sweep, make_config
from jaxfed.runs.runner import _engine_options, _holds_no_run


class Compiled(NamedTuple):
    """What compiling an experiment ahead did: groups compiled, seconds, the error that stopped it
    (its one line; "" when none): the experiment then compiles what is missing when it runs."""

    groups: int
    seconds: float
    error: str = ""


class _Job(NamedTuple):
    exp: Experiment
    n_trials: int
    options: engine.RunOptions
    built: concurrent.futures.Future  # (its default config, the Sweep)
    compiled: concurrent.futures.Future  # a Compiled


class CompilingAhead:
    """Experiments built and compiled ahead, one at a time and in the order given, by one worker
    thread.

    :meth:`start` queues an experiment (its default config, its ``build()`` and the compile of
    every group's chunk function, as its run would compile them:
    :func:`jaxfed.engine.ahead.compile_ahead`); :meth:`take` hands its run the config and sweep
    made ahead, whose trial function is the object the programs were compiled for, so that the run finds them among the programs kept in the
    process (or, while the compile is still under way, waits for it through the compilation
    cache's lock and loads it). Skipped (the run builds and compiles as without this): a run of
    user code (a user's file, a plugin, ``--import``: user code runs in the main thread, under
    its run's marker), a directory that holds a run (its store decides what is left and at what
    width), a shard, ``stored_only``, no jit, several processes (a plan takes a collective).

    Nothing here changes a value: the programs compiled ahead are those the run would compile
    (compiling is deterministic), and a failure ahead (any error of the build or the compile) is
    only recorded: the run builds and compiles in the foreground as it would have. An interrupt
    leaves only the compilation cache's entries, which JAX writes whole. :meth:`close` stops the
    worker after the compile under way (XLA's cannot be stopped); the thread is not a daemon, so
    that a process ending meanwhile waits for that one compile: a daemon thread returning from
    XLA into a finalising interpreter is ended by force, which aborts the process.
    """

    def __init__(self, options: engine.RunOptions, imports=None, enabled: bool = True):
        self.enabled = (
            enabled
            and not imports
            and options.use_jit
            and not options.stored_only
            and options.trial_range is None
            and jax.process_count() == 1
        )
        self.jobs: dict[str, _Job] = {}
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, exp: Experiment, n_trials: int, options: engine.RunOptions) -> bool:
        """Queues experiment ``exp``'s default config, build and compile for its run of ``n_trials``
        trials per point with ``options`` (``out_dir`` its result directory); returns whether it
        was queued (see the class for what is skipped)."""
        out_dir = options.out_dir
        if not self.enabled or exp.source or exp.plugin or exp.name in self.jobs:
            return False
        if out_dir is not None and not _holds_no_run(os.fspath(out_dir)):
            return False
        job = _Job(exp, n_trials, options, concurrent.futures.Future(), concurrent.futures.Future())
        self.jobs[exp.name] = job
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="jaxfed-compile-ahead")
            self._worker.start()
        self._queue.put(job)
        return True

    def take(self, name: str) -> tuple[object, Sweep] | None:
        """(default config, sweep) of experiment ``name`` made ahead (waiting for a build under
        way), or None where there are none (not queued, not started yet, which cancels it, or
        failed: the run makes them, and raises what fails)."""
        job = self.jobs.get(name)
        if job is None or job.built.cancel():
            return None
        try:
            return job.built.result()
        except Exception:  # (the run builds it again, and raises what it raises)
            return None

    def outcome(self, name: str) -> Compiled | None:
        """What compiling experiment ``name`` ahead did, where it ended (None: not queued, not
        ended yet, or cancelled)."""
        job = self.jobs.get(name)
        if job is None or not job.compiled.done() or job.compiled.cancelled():
            return None
        return job.compiled.result()

    def close(self) -> None:
        """Cancels the queued experiments not started yet and stops the one under way after its
        current compile (without waiting for it)."""
        self._stop.set()
        for job in self.jobs.values():
            job.built.cancel()  # (only a job not started: its worker cancels its compile too)
        self._queue.put(None)

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            if not job.built.set_running_or_notify_cancel():
                job.compiled.cancel()
                continue
            job.compiled.set_running_or_notify_cancel()  # (cancelled only with the build, above)
            started = time.perf_counter()
            try:
                config = make_config(job.exp.config_cls, {})
                sweep = job.exp.build(config)
            except BaseException as err:  # (the run builds it again and says what fails)
                job.built.set_exception(err)
                job.compiled.set_result(Compiled(0, time.perf_counter() - started, _one_line(err)))
                continue
            job.built.set_result((config, sweep))
            job.compiled.set_result(_compiled(job, sweep, started, self._stop.is_set))


def _compiled(job: _Job, sweep: Sweep, started: float, stopped) -> Compiled:
    """Compiles ``job``'s experiment's programs for ``sweep`` until ``stopped()``; a failure is
    recorded, never raised."""
    try:
        options = _engine_options(job.exp, sweep, job.options, {})
        groups = compile_ahead(sweep.trial, sweep.points, job.n_trials, options, stopped)
    except BaseException as err:  # (the run compiles in the foreground, and raises what it raises)
        return Compiled(0, time.perf_counter() - started, _one_line(err))
    return Compiled(groups, time.perf_counter() - started)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__
