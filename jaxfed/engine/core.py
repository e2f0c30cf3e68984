"""A run in two steps: :func:`plan` checks everything that can be checked before work and restores
the store (a :class:`Plan`), :func:`execute` compiles each group's chunk function and feeds its
chunks to the group's sink (a :class:`RunResult`, with a :class:`RunInfo`); :func:`run` is both.

``run(trial, points, n_trials, **options) == execute(plan(trial, points, n_trials, RunOptions(**options)))``
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from jaxfed import stats, validation
from jaxfed.engine import cache, opening
from jaxfed.engine.compiled import ChunkFn, ChunkJob, make_chunk_fn
from jaxfed.engine.devices import (
    broadcast_from_0,
    check_joined,
    default_memory_budget,
    make_mesh,
    platform,
)
from jaxfed.engine.options import RunOptions
from jaxfed.engine.points import (
    Group,
    Trial,
    check_metric_axes,
    check_summarisable,
    coloured_program_digest,
    group_points,
    metric_specs,
    program_digest,
    rebuild,
)
from jaxfed.engine.progress import Progress
from jaxfed.engine.result import GroupInfo, RunInfo, RunResult, TargetInfo
from jaxfed.engine.sinks import RawSink, SummarySink, Writer, open_sinks, pipelined
from jaxfed.engine.sizing import (
    DeviceSpec,
    check_chunk_outputs,
    check_host_memory,
    choose_width,
    estimated_chunk,
    round_up,
    size_text,
    sized_chunk_fn,
    summary_output_bytes,
    trial_bytes,
    trial_live_bytes,
    width_bytes,
)
from jaxfed.engine.target import Target, parse_target, worst_se
from jaxfed.store import GroupSpec

RAW_LIMIT_BYTES = 2 * 2**30
"""``keep="auto"`` keeps every trial when the raw metrics fit in this many bytes, else summaries."""

RAW_TRANSFER_LIMIT_BYTES = 256 * 2**20
"""On an accelerator, ``keep="auto"`` keeps every trial only up to this many bytes of raw
metrics: every raw value crosses to the host, far slower than the device computes them, so raw
runs are bound by the transfer; this much crosses in less than a run's start-up (the
measurements: benchmarks/README.md)."""

MAX_TRIALS = validation.MAX_TRIALS
"""Trials per point at most (2^53): exact in int64 counts and float64 sums; an index from 2^32 on
folds both of its 32-bit halves into its key (:func:`jaxfed.engine.compiled.trial_key`)."""


# --------------------------------------------------------------------------- the plan
class Machine(NamedTuple):
    """Where a run computes: the device mesh (None: unjitted on one device), the micro-batch width
    and each device's memory budget."""

    mesh: Mesh | None
    width: int
    budget: int
    lane_bytes: int  # one trial's working set in a micro-batch (sizing.width_bytes), which sizes chunks
    platform: str  # whose trials these are (the identity's): the mesh's, or a stored run's (stored_only)

    @property
    def n_shards(self) -> int:
        return self.mesh.size if self.mesh is not None else 1


class GroupPlan(NamedTuple):
    """One group of points with equal static parts: its stacked array leaves, the digest of one
    trial's program, its sink (restored from the store) and the chunk size asked for (None:
    from the memory budget)."""

    number: int  # the group's, in the order of first appearance among the points
    group: Group
    traced: list
    program: str
    sink: RawSink | SummarySink
    chunk_size: int | None


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run checked and restored, ready for :func:`execute`; it holds the store's lock and a
    writer thread until executed (or closed: a plan is a context manager)."""

    trial: Trial
    n_trials: int
    n_points: int
    span: int  # the trials per point this run computes: n_trials, or a shard's range (trial_range)
    options: RunOptions
    machine: Machine
    specs: dict  # metric -> (shape, dtype string) of one trial
    keep: str  # "raw" or "summary" ("auto" decided)
    target: Target | None
    groups: tuple[GroupPlan, ...]
    results: dict  # raw: metric -> array (point, trial, …) the sinks fill; summary: {}
    bar: Progress
    writer: Writer
    resources: contextlib.ExitStack  # closes the writer, the progress display and the store

    def close(self) -> None:
        self.resources.close()

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run(trial: Trial, points: list, n_trials: int, *, options: RunOptions | None = None, **kw) -> RunResult:
    """Runs ``trial`` for every point and ``n_trials`` trials per point: :func:`plan`, then :func:`execute`.

    Everything that can be checked before work starts is checked first: the options, the metrics a
    trial returns (by ``jax.eval_shape``), the host memory of the results and the device memory of
    a chunk; each failure is one ``ValueError`` line.

    Args:
        trial: pure function ``trial(key, point) -> dict of arrays``; never jitted by the caller.
            Every point must return the same metric names, shapes and dtypes.
        points: list of point pytrees (array leaves traced, other leaves static).
        n_trials: trials per point, in [1, :data:`MAX_TRIALS`]; with a precision target the most.
        options: a :class:`RunOptions` (default: its defaults).
        **kw: fields of :class:`RunOptions` (``seed``, ``chunk_size``, ``keep``, ``out_dir`` and
            ``identity``, ``target_se`` …), over those of ``options``.

    Returns:
        :class:`RunResult`: a dict metric -> NumPy array (n_points, n_trials, *metric_shape) for
        ``keep="raw"``, or metric -> :class:`jaxfed.stats.Summary` for ``keep="summary"``, with
        ``.info`` (:class:`RunInfo`). Non-finite values stay in raw arrays; summaries leave them
        out of every statistic and count them.

    Raises:
        ValueError: a bad argument, trial output or memory need (before any work);
            :class:`jaxfed.store.StoreError` (a ValueError): an unusable ``out_dir`` or stored file.
    """
    options = RunOptions(**kw) if options is None else dataclasses.replace(options, **kw)
    return execute(plan(trial, points, n_trials, options))


def plan(trial: Trial, points: list, n_trials: int, options: RunOptions | None = None) -> Plan:
    """Everything checked and restored before any work (see :func:`run`): the points grouped and one
    trial of each group traced (metric shapes and programs), the metric axes, ``keep="auto"`` and a
    precision target decided, host and device memory checked, the store's identity made, the store
    opened and verified and each group's sink restored from it.

    Args:
        trial, points, n_trials: as :func:`run`.
        options: a :class:`RunOptions` (default: its defaults).

    Returns:
        The :class:`Plan` for :func:`execute`, holding the store's lock and a writer thread until
        executed or closed.

    Raises:
        ValueError: as :func:`run`, before anything is compiled or computed.
    """
    options = RunOptions() if options is None else options
    _check_arguments(options, points, n_trials)
    is_main = jax.process_index() == 0
    bar = options.progress
    if not isinstance(bar, Progress):  # (a name labels the lines and bars)
        bar = Progress(bar is not False, f"{bar}: " if isinstance(bar, str) and bar else "")
    bar = bar if is_main else Progress(False)
    groups = group_points(points)
    specs, programs, coloured, live = _trace(trial, groups, options.metric_axes)
    machine = _machine(options, n_trials, width_bytes(live, specs))
    keep, target = _mode(options, specs, len(points), n_trials, machine.platform, bar.note)
    # A shard computes its range only: its chunks are sized for it (a trial's values do not depend on
    # the chunk), while the micro-batch width and keep="auto" are the whole run's (its identity).
    span = n_trials if options.trial_range is None else options.trial_range[1] - options.trial_range[0]
    chunk_size = None if options.chunk_size is None else min(options.chunk_size, span)
    if machine.mesh is not None:  # the outputs alone of the smallest (or the given) chunk must fit
        for group, _ in groups:
            check_chunk_outputs(len(group.point_ids), specs, chunk_size, machine.n_shards, machine.width, machine.budget)  # fmt: skip
    identity = None
    if options.out_dir is not None:
        identity = opening.store_identity(options, machine.width, machine.platform, programs, target)
    results = {}
    if keep == "raw":
        results = {name: np.zeros((len(points), n_trials) + shape, dtype) for name, (shape, dtype) in specs.items()}
    resources, writer = contextlib.ExitStack(), Writer()
    try:
        store = opening.open_store(options, identity, bar, is_main, resources, opening.coloured_aliases(identity, programs, coloured), machine.platform)  # fmt: skip
        resources.callback(bar.close)
        resources.callback(writer.close)
        specs_of = [GroupSpec(g, group.point_ids, specs) for g, (group, _) in enumerate(groups)]
        sinks = open_sinks(store, specs_of, n_trials, results, writer, summary=keep == "summary", targeted=target is not None, checkpoint_every=options.checkpoint_every, hist_on_device=hists_on_device(machine) and span <= stats.summary.HIST_INT32_TRIALS, trial_range=options.trial_range)  # fmt: skip
        opening.before_work(options, store, sinks, specs_of, span)
    except BaseException:
        resources.close()
        raise
    plans = tuple(
        GroupPlan(g, group, traced, programs[g], sink, _chunk_request(chunk_size, sink, keep, span))
        for g, ((group, traced), sink) in enumerate(zip(groups, sinks))
    )
    return Plan(
        trial=trial, n_trials=n_trials, n_points=len(points), span=span, options=options, machine=machine, specs=specs,
        keep=keep, target=target, groups=plans, results=results, bar=bar, writer=writer, resources=resources,
    )  # fmt: skip


class DryRun(NamedTuple):
    """What a run would compute, planned and sized without compiling or computing (:func:`dry_run`)."""

    trials: tuple[int, int]  # [start, stop) of each point (a shard's range, or the whole run)
    keep: str  # "raw" or "summary"
    width: int  # trials per micro-batch
    devices: int
    budget: int  # bytes per device
    groups: tuple  # per group: (points, chunk size, chunks, estimated bytes per device)


def dry_run(trial: Trial, points: list, n_trials: int, options: RunOptions | None = None) -> DryRun:
    """The plan of :func:`run` from the shapes alone: checked as :func:`plan` checks (but the store,
    which it neither opens nor writes), each group's chunk size the given one or
    :func:`~jaxfed.engine.sizing.estimated_chunk`'s (the estimate a run starts from, before its
    compiled chunk's memory analysis confirms or shrinks it), and its bytes per device, as that
    estimate reckons them: W · lane bytes + 2 · chunk · trial bytes / devices (+ 3 × a summary's
    fixed outputs; + the host copy of raw values).

    Args:
        trial, points, n_trials: as :func:`run`.
        options: a :class:`RunOptions` with ``use_jit`` (default: its defaults).

    Returns:
        A :class:`DryRun`.

    Raises:
        ValueError: as :func:`plan`, before anything is compiled.
    """
    options = RunOptions() if options is None else options
    _check_arguments(options, points, n_trials)
    validation.check("use_jit", options.use_jit, options.use_jit, "True for a dry run (it sizes compiled chunks)")
    groups = group_points(points)
    specs, _, _, live = _trace(trial, groups, options.metric_axes)
    machine = _machine(options, n_trials, width_bytes(live, specs))
    keep, _ = _mode(options, specs, len(points), n_trials, machine.platform, lambda line: None)
    start, stop = options.trial_range or (0, n_trials)
    assert machine.mesh is not None
    sized = []
    for group, _ in groups:
        n = len(group.point_ids)
        check_chunk_outputs(n, specs, options.chunk_size, machine.n_shards, machine.width, machine.budget)
        fixed, per_trial = (summary_output_bytes(n, specs) if keep == "summary" else 0), trial_bytes(n, specs)
        job = ChunkJob(
            trial=trial, group=group, program="", mesh=machine.mesh, width=machine.width, budget=machine.budget,
            n_trials=stop - start, args=(), common=options.common_random_numbers, summary=keep == "summary",
            fixed=fixed, trial_bytes=per_trial, cache_dir=None, lane_bytes=machine.lane_bytes,
        )  # fmt: skip
        size = min(options.chunk_size, stop - start) if options.chunk_size else estimated_chunk(job)
        host = 0 if keep == "summary" else per_trial
        need = machine.width * machine.lane_bytes + size * (2 * per_trial / machine.n_shards + host) + 3 * fixed
        sized.append((n, size, -(-(stop - start) // size), int(need)))
    return DryRun((start, stop), keep, machine.width, machine.n_shards, machine.budget, tuple(sized))


def _check_arguments(options: RunOptions, points: list, n_trials: int) -> None:
    """Refuses options that are not a :class:`RunOptions`, a trial count out of bounds, no points,
    a trial range past the trials and a store without an identity (one ValueError line)."""
    validation.check("options", options, isinstance(options, RunOptions), "a jaxfed.engine.RunOptions")
    validation.trial_count(n_trials)
    validation.check("points", points, bool(points), "a non-empty list")
    if options.trial_range is not None:
        validation.check(
            "trial_range", options.trial_range, options.trial_range[1] <= n_trials, f"a range of trials [0, {n_trials})"
        )
    if options.out_dir is not None:
        identity_ok = isinstance(options.identity, dict)
        validation.check("identity", options.identity, identity_ok, "a JSON dict when out_dir is given")


def _machine(options: RunOptions, n_trials: int, per_trial: int) -> Machine:
    """The mesh over ``options.devices`` (none without jit), the micro-batch width and the budget;
    refused in one of a scheduler's processes left alone (:func:`jaxfed.engine.devices.check_joined`).

    The width is ``options.micro_batch`` when given; else a stored run's own (:func:`~jaxfed.engine.opening.stored_width`:
    growth and resume compute every trial at the width the run began with, on any machine of its
    platform); else :func:`jaxfed.engine.sizing.choose_width` of the devices and the trial's
    ``per_trial`` bytes. Process 0 decides and every process takes its width. With
    ``stored_only`` the width and platform are the stored run's (:func:`~jaxfed.engine.opening.stored_run`)."""
    check_joined(options.distributed)
    mesh = make_mesh(options.devices) if options.use_jit else None
    budget = options.max_memory if options.max_memory is not None else default_memory_budget(mesh or make_mesh(1))
    where = platform(mesh)
    if options.stored_only:
        width, where = opening.stored_run(options)
    else:
        chosen = options.micro_batch or opening.stored_width(options, where)
        width = chosen if chosen is not None else choose_width(DeviceSpec(where, budget), per_trial, n_trials)
    return Machine(mesh, int(broadcast_from_0(np.asarray([width], np.int64))[0]), budget, per_trial, where)


def hists_on_device(machine: Machine) -> bool:
    """Whether a summary's histograms stay on the device between the stores of its state
    (:class:`jaxfed.engine.sinks.SummarySink`): on an accelerator, in one process. On a CPU the
    device's arrays are the host's memory, and the host's in-place addition is the cheapest."""
    return machine.mesh is not None and platform(machine.mesh) != "cpu" and jax.process_count() == 1


def _trace(trial: Trial, groups: list, metric_axes: dict | None) -> tuple[dict, list[str], Callable, int]:
    """(metric specs, per group the digest of one trial's program
    (:func:`~jaxfed.engine.points.program_digest`), a function that returns them as a terminal
    coloured them before (:func:`~jaxfed.engine.points.coloured_program_digest`: printing a program
    is a sizeable part of a warm run's fixed cost, so only when a stored identity differs), the largest working set of
    one trial over the groups: :func:`~jaxfed.engine.sizing.trial_live_bytes`): the shapes of one
    trial's metrics per group, without running anything, checked against ``metric_axes``. The
    program's digest keys the compiled function kept in the process and the store; the working
    set bounds the micro-batch width and sizes the chunks."""
    traces = [
        jax.make_jaxpr(lambda k, t, g=group: trial(k, rebuild(g, t)), return_shape=True)(
            jax.random.key(0), [x[0] for x in traced]
        )
        for group, traced in groups
    ]
    specs = metric_specs([shapes for _, shapes in traces], groups)
    if metric_axes is not None:
        check_metric_axes(metric_axes, specs)
    live = max(trial_live_bytes(jaxpr) for jaxpr, _ in traces)
    jaxprs = [jaxpr for jaxpr, _ in traces]
    return specs, [program_digest(j) for j in jaxprs], lambda: [coloured_program_digest(j) for j in jaxprs], live


def _mode(options: RunOptions, specs: dict, n_points: int, n_trials: int, where: str, note) -> tuple[str, Target | None]:  # fmt: skip
    """(keep, target): a precision target parsed against the metrics (it implies summaries),
    ``keep="auto"`` decided (on the platform ``where``; a summary chosen is said by ``note``, with
    why); summaries and the host memory of the results checked."""
    keep, target = options.keep, None
    if options.targeted:
        target = parse_target(options.target_se, options.target_metric, specs, options.target_statistic)
        keep = "summary"
    if keep == "auto":
        raw_bytes = n_trials * trial_bytes(n_points, specs)
        limit = RAW_LIMIT_BYTES if where == "cpu" else RAW_TRANSFER_LIMIT_BYTES
        keep = "raw" if raw_bytes <= limit else "summary"
        if keep == "summary":
            why = (
                f"more than the {size_text(RAW_LIMIT_BYTES)} kept in memory"
                if where == "cpu"
                else f"on a {where} raw runs are bound by the copy of every value to the host, above "
                f"{size_text(RAW_TRANSFER_LIMIT_BYTES)}"
            )
            note(
                f"--keep auto: summaries, since the raw metrics would take {size_text(raw_bytes)} ({why}); --keep raw keeps them"
            )
    if keep == "summary":
        check_summarisable(specs)
    check_host_memory(keep, n_points, n_trials, specs)
    return keep, target


def _chunk_request(chunk_size: int | None, sink, keep: str, n_trials: int) -> int | None:
    """The chunk size a group asks for: the given one, or the one a continued run must keep; in
    summary mode on whole sum blocks (see ``stats.summary.SUMMARY_BLOCK``). None: from the memory budget."""
    wanted = sink.resume().chunk_size or chunk_size
    if keep == "summary" and wanted is not None:
        wanted = min(round_up(wanted, stats.summary.SUMMARY_BLOCK), n_trials)
    return wanted


# --------------------------------------------------------------------------- execution
def execute(plan: Plan) -> RunResult:
    """Runs a :func:`plan`: per group, compiles the chunk function (none when the store holds every
    trial) and computes the chunks left, a fixed count or until a precision target holds; then
    closes the plan (the store's lock, the writer thread, the progress display) and returns the
    :class:`RunResult`. JAX's compilation cache is the run's while it executes, then as it was.

    Args:
        plan: a :class:`Plan` from :func:`plan`, not executed or closed yet.

    Returns:
        The :class:`RunResult`, as :func:`run` returns it.

    Raises:
        ValueError: one line for a chunk that runs out of device memory and is not retried (at
            one micro-batch per device, in a multi-process run or with a precision target); an
            error compiling or running a group is raised as it came.
    """
    nonfinite = {name: np.zeros(plan.n_points, np.int64) for name in plan.specs}
    with plan:
        with _compilation_cache(plan) as cache_dir, _compiling_ahead(plan, cache_dir) as compiled:
            done = [_run_group(plan, gp, cache_dir, nonfinite, compiled[gp.number]) for gp in plan.groups]
    infos, parts = [info for info, _ in done], [part for _, part in done]
    info = RunInfo(
        devices=plan.machine.n_shards,
        processes=jax.process_count(),
        budget_bytes=plan.machine.budget,
        keep=plan.keep,
        compilation_cache=cache_dir,
        groups=tuple(infos),
        nonfinite_trials={name: counts.tolist() for name, counts in nonfinite.items()},
        target=_target_info(plan, parts),
    )
    if plan.keep == "raw":
        return RunResult(plan.results, info)
    summaries = {name: stats.summary.merge_point_groups([p[name] for p in parts], plan.n_points) for name in plan.specs}
    return RunResult(summaries, info)


def _compilation_cache(plan: Plan):
    """JAX's persistent compilation cache for the run (a context; its value: the directory or None)."""
    if not plan.options.use_jit:
        return contextlib.nullcontext(None)
    return cache.compilation_cache(plan.options.compilation_cache, plan.bar.note)


@contextlib.contextmanager
def _compiling_ahead(plan: Plan, cache_dir: str | None):
    """Per group, a future of :func:`_compile_group`: with a device mesh, every group's chunk
    function is compiled in threads from the start, in group order, up to one per core at once
    (XLA compiles a program on its own threads and releases the GIL), so that later groups
    compile while earlier ones compile or run; the groups still run in order. Compiling is
    deterministic: the programs, and so the values, are those of one group after another. On
    exit the compiles not yet started are cancelled (an error or an interrupt in an earlier
    group); one under way is left to its thread, so an interrupted run ends without waiting for
    it, and its process waits for it at its end (not a daemon: one returning from XLA into a
    finalising interpreter would be ended by force, aborting the process)."""
    if plan.machine.mesh is None or len(plan.groups) == 1:
        yield [None] * len(plan.groups)  # (nothing to overlap: each group compiles when it runs)
        return
    compiles = _GroupCompiles(plan, cache_dir, max(1, min(len(plan.groups), COMPILE_THREADS or os.cpu_count() or 1)))
    try:
        yield compiles.futures
    finally:
        compiles.cancel()


class _GroupCompiles:
    """``futures[g]``: group g's :func:`_compile_group`, computed by ``workers`` threads that take
    the groups in order."""

    def __init__(self, plan: Plan, cache_dir: str | None, workers: int):
        self.futures: list[concurrent.futures.Future] = [concurrent.futures.Future() for _ in plan.groups]
        self._next = iter(range(len(plan.groups)))
        self._lock = threading.Lock()
        for _ in range(workers):
            threading.Thread(target=self._work, args=(plan, cache_dir), name="jaxfed-compile-group").start()

    def _work(self, plan: Plan, cache_dir: str | None) -> None:
        while True:
            with self._lock:
                number = next(self._next, None)
            if number is None:
                return
            future = self.futures[number]
            if not future.set_running_or_notify_cancel():
                continue  # (cancelled: the run ended before this group)
            try:
                future.set_result(_compile_group(plan, plan.groups[number], cache_dir))
            except BaseException as err:  # (the run raises it when it reaches this group)
                future.set_exception(err)

    def cancel(self) -> None:
        for future in self.futures:
            future.cancel()


COMPILE_THREADS: int | None = None
"""Groups compiled at once, at most (None: one per core, see :func:`_compiling_ahead`)."""


def _run_group(plan: Plan, gp: GroupPlan, cache_dir: str | None, nonfinite: dict, compiled) -> tuple[GroupInfo, dict]:
    """(what was chosen, the group's results: see ``Sink.finish``) of one group's chunks, its
    chunk function from ``compiled`` (a future of :func:`_compile_group`, or None: compiled here)."""
    where = f"group {gp.number + 1}/{len(plan.groups)}"
    if plan.machine.mesh is not None and not gp.sink.resume().complete and not (compiled and compiled.done()):
        plan.bar.waiting(f"{where}: compiling")
    started = time.perf_counter()
    info, chunk_fn = compiled.result() if compiled is not None else _compile_group(plan, gp, cache_dir)
    if info.compile_s is not None:
        info = info._replace(compile_wait_s=time.perf_counter() - started)
    if chunk_fn is not None:
        _note_compiled(plan, gp, info)
    n_groups, size = len(plan.groups), info.chunk_size
    plan.bar.group(f"group {gp.number + 1}/{n_groups}", len(gp.group.point_ids) * plan.span, gp.sink.resume().done)
    if plan.target is None:
        info = _run_fixed(plan, gp, info, chunk_fn, cache_dir)
    else:
        assert isinstance(gp.sink, SummarySink)
        try:
            _run_to_target(plan, gp, gp.sink, size, chunk_fn)
        except jax.errors.JaxRuntimeError as err:
            if not out_of_memory(err):
                raise
            # (a smaller chunk would move the chunk boundaries, where the points decide to stop)
            raise _out_of_memory_error(
                plan, size or plan.n_trials, err, "a precision-targeted run is not retried"
            ) from err
        plan.writer.wait()
    plan.bar.finish_group()
    return info, gp.sink.finish(nonfinite)


def _compile_group(plan: Plan, gp: GroupPlan, cache_dir: str | None) -> tuple[GroupInfo, ChunkFn | None]:
    """(what was chosen and measured, the chunk function) of a group; (GroupInfo(), None) when its
    sink is already complete (nothing compiled)."""
    if gp.sink.resume().complete:
        return GroupInfo(), None
    m, options, summary = plan.machine, plan.options, plan.keep == "summary"
    if m.mesh is None:
        size = gp.chunk_size or min(plan.span, 4096)
        batch = round_up(size, m.width)
        fn = make_chunk_fn(plan.trial, gp.group, batch, None, m.width, options.common_random_numbers, summary)
        return GroupInfo(size), fn
    size, fn, compiled = sized_chunk_fn(_chunk_job(plan, gp, cache_dir), gp.chunk_size)
    return GroupInfo(size, compiled["compile_s"], compiled["compile_cached"]), fn


def _note_compiled(plan: Plan, gp: GroupPlan, info: GroupInfo) -> None:
    """The line that says what a group's chunk function is and what compiling it took."""
    m = plan.machine
    compile_note = ""
    if info.compile_s is not None:
        compile_note = f", compiled in {info.compile_s:.1f} s{' (cache)' if info.compile_cached else ''}"
    plan.bar.detail(  # (sizing details: not in a notebook unless verbose)
        f"group {gp.number + 1}/{len(plan.groups)}: {len(gp.group.point_ids)} point(s), chunk size "
        f"{info.chunk_size} trials over {m.n_shards} device(s), memory budget {size_text(m.budget)} per "
        f"device{compile_note}"
    )


def _chunk_job(plan: Plan, gp: GroupPlan, cache_dir: str | None) -> ChunkJob:
    """What :func:`jaxfed.engine.sizing.sized_chunk_fn` builds and sizes a group's chunk function from."""
    m, summary = plan.machine, plan.keep == "summary"
    point_ids = np.asarray(gp.group.point_ids, np.uint32)
    args = (np.uint32(plan.options.seed), point_ids, gp.traced, np.uint32(0)) + ((np.uint32(0),) * 2 if summary else ())
    fixed = summary_output_bytes(len(point_ids), plan.specs) if summary else 0
    assert m.mesh is not None
    return ChunkJob(
        trial=plan.trial, group=gp.group, program=gp.program, mesh=m.mesh, width=m.width, budget=m.budget,
        n_trials=plan.span, args=args, common=plan.options.common_random_numbers, summary=summary, fixed=fixed,
        trial_bytes=trial_bytes(len(point_ids), plan.specs), cache_dir=cache_dir, lane_bytes=m.lane_bytes,
    )  # fmt: skip


def _run_fixed(plan: Plan, gp: GroupPlan, info: GroupInfo, chunk_fn, cache_dir: str | None) -> GroupInfo:
    """The chunks a group's sink has left, ``info.chunk_size`` trials each at most, chunk i + 1
    dispatched before chunk i is handled (:func:`jaxfed.engine.sinks.pipelined`); returns ``info``
    with the chunk size the group ended with.

    A chunk whose execution runs out of device memory (:func:`out_of_memory`) is computed again
    with the same trial indices in chunks half as large, and so are the chunks after it
    (:func:`_halved`): a trial's values do not depend on the chunk, so the results are those of
    the larger chunks, bit for bit. A sink's ``handle`` changes nothing before its outputs reach
    the host, so a chunk whose outputs fail is simply not handled. Below one micro-batch per
    device, or in a multi-process run (the processes would have to agree on every retry), it is
    one ValueError line (:func:`_out_of_memory_error`).
    """
    sink, seed = gp.sink, np.uint32(plan.options.seed)
    point_ids = np.asarray(gp.group.point_ids, np.uint32)
    size = info.chunk_size or plan.span
    left = list(sink.chunks(size))  # the chunks not handled yet, in trial order
    handled = 0
    plan.bar.chunks(len(left))

    def dispatch(chunk):
        return chunk_fn(seed, point_ids, gp.traced, np.int64(chunk[0]), *sink.extra_args(chunk))

    def handle(chunk, device_out):
        nonlocal handled
        sink.handle(chunk, device_out)
        handled += 1
        plan.bar.update(len(point_ids) * (chunk[1] - chunk[0]))

    while True:
        try:
            pipelined(left[handled:], dispatch, handle, plan.writer, sink.host_part)
            return info if info.chunk_size is None else info._replace(chunk_size=size)  # (None: all stored)
        except jax.errors.JaxRuntimeError as err:
            if not out_of_memory(err):
                raise
            smaller, chunk_fn, compile_s = _halved(plan, gp, size, err, cache_dir)
            where = f"group {gp.number + 1}/{len(plan.groups)}"
            plan.bar.note(f"{where}: out of device memory in a chunk of {size} trials; chunks of {smaller} from trial {left[handled][0]}")  # fmt: skip
            left = [(t, min(t + smaller, stop)) for start, stop in left[handled:] for t in range(start, stop, smaller)]
            size, handled = smaller, 0
            plan.bar.chunks(len(left))
            info = info._replace(compile_s=None if info.compile_s is None else info.compile_s + compile_s)


def out_of_memory(err: Exception) -> bool:
    """Whether an XLA runtime error says that the device ran out of memory (``RESOURCE_EXHAUSTED``)."""
    text = str(err)
    return text.startswith("RESOURCE_EXHAUSTED") or "out of memory" in text.lower()


def _halved(plan: Plan, gp: GroupPlan, size: int, err: Exception, cache_dir: str | None):
    """(chunk size, compiled chunk function, seconds compiling) for chunks half as large as
    ``size`` (rounded up to one micro-batch per device), after ``err``, an out-of-memory error.

    Raises:
        ValueError: ``size`` is one micro-batch per device already, or the run has several processes.
    """
    m = plan.machine
    step = m.width * m.n_shards
    smaller = round_up(max(size // 2, 1), step)
    if jax.process_count() > 1:
        raise _out_of_memory_error(plan, size, err, "a multi-process run is not retried") from err
    if smaller >= round_up(size, step):
        raise _out_of_memory_error(plan, size, err, "the smallest chunk, one micro-batch per device") from err
    if m.mesh is None:
        fn = make_chunk_fn(plan.trial, gp.group, smaller, None, m.width, plan.options.common_random_numbers, plan.keep == "summary")  # fmt: skip
        return smaller, fn, 0.0
    smaller, fn, record = sized_chunk_fn(_chunk_job(plan, gp, cache_dir), smaller)
    return smaller, fn, record["compile_s"]


def _out_of_memory_error(plan: Plan, size: int, err: Exception, why: str) -> ValueError:
    """The one line of an out-of-memory error that is not retried (``why``)."""
    m = plan.machine
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")[:200]
    return ValueError(
        f"the {platform(m.mesh)} device ran out of memory running a chunk of {size} trials ({m.width} per "
        f"micro-batch x {m.n_shards} device(s); {why}): {first}; use a smaller --chunk-size / chunk_size or "
        f"--max-memory / max_memory (budget {size_text(m.budget)} per device), smaller shapes, or free the device"
    )


def _run_to_target(plan: Plan, gp: GroupPlan, sink: SummarySink, size, chunk_fn) -> None:
    """Chunks of the points still short of the target until none is (sequential: each decision
    needs the chunk before it, and only chunks before it).

    The points still running are padded (repeating the first) to a power of two, at most the
    group's size, and the padding's results dropped: at most log2(points) shapes are compiled,
    not one per number of points left (46 kmeans-snr points stopping one by one compiled ~10 times).
    """
    assert plan.target is not None
    m, options = plan.machine, plan.options
    point_ids = np.asarray(gp.group.point_ids, np.uint32)
    subset_fn = None  # jitted for fewer rows (it compiles once per row count)
    for chunk, active in sink.targeted_chunks(size, plan.target):
        n_rows = min(len(point_ids), 1 << (int(active.size) - 1).bit_length())
        rows = np.concatenate([active, np.full(n_rows - active.size, active[0])])
        if n_rows < len(point_ids) and m.mesh is not None and subset_fn is None:
            batch = round_up(size, m.width * m.mesh.size)
            subset_fn = make_chunk_fn(plan.trial, gp.group, batch, m.mesh, m.width, options.common_random_numbers, True)
        fn = chunk_fn if n_rows == len(point_ids) or subset_fn is None else subset_fn
        sub_args = (np.uint32(options.seed), point_ids[rows], [x[rows] for x in gp.traced], np.int64(chunk[0]))
        out = fn(*sub_args, *sink.extra_args(chunk))
        if n_rows > active.size:
            out = jax.tree.map(lambda x: x[: active.size], out)
        sink.handle(chunk, out, active)
        plan.bar.update(active.size * (chunk[1] - chunk[0]))


def _target_info(plan: Plan, parts: list) -> TargetInfo | None:
    """Per point, the trials a precision-targeted run ran and the standard error it reached."""
    target = plan.target
    if target is None:
        return None
    trials: list = [None] * plan.n_points
    reached: list = [None] * plan.n_points
    for gp, part in zip(plan.groups, parts):
        assert isinstance(gp.sink, SummarySink)
        rows, counts = gp.sink.trials_per_point()
        for p, n, se in zip(rows, counts, worst_se(part[target.metric][1], target)):
            trials[p], reached[p] = int(n), float(se)
    metric = plan.options.target_metric
    assert metric is not None
    return TargetInfo(target.se, metric, target.statistic, plan.n_trials, trials, reached)
