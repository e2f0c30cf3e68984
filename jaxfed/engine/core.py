""":func:`run`: checks everything that can be checked, restores the store, then per group compiles
the chunk function and feeds its chunks to a result sink."""

from __future__ import annotations

import contextlib
import hashlib
import math

import jax
import numpy as np

from jaxfed import stats, validation
from jaxfed.engine import cache
from jaxfed.engine.compiled import make_chunk_fn, sized_chunk_fn
from jaxfed.engine.devices import (
    broadcast_from_0,
    default_memory_budget,
    make_mesh,
    micro_batch_width,
    platform,
    raise_on_every_process,
)
from jaxfed.engine.memory import check_chunk_outputs, check_host_memory, round_up, size_text, summary_output_bytes
from jaxfed.engine.points import Trial, check_metric_axes, check_summarisable, group_points, metric_specs, rebuild
from jaxfed.engine.progress import Progress
from jaxfed.engine.sinks import RawSink, SummarySink, Writer, pipelined
from jaxfed.engine.target import parse_target, still_running, worst_se
from jaxfed.store import STORE_FORMAT, GroupSpec, Store, StoreError

RAW_LIMIT_BYTES = 2 * 2**30
"""``keep="auto"`` keeps every trial when the raw metrics fit in this many bytes, else summaries."""

MAX_TRIALS = validation.MAX_TRIALS
"""Trials per point at most: trial indices are folded into the keys as uint32, so more would repeat keys."""


class RunResult(dict):
    """What :func:`run` returns: a dict metric -> raw array (point, trial, …) or
    :class:`jaxfed.stats.Summary`, plus ``info``, what the engine chose and measured:

    ``devices``, ``processes``, ``keep``, ``budget_bytes``, ``compilation_cache`` (directory or
    None); per group ``chunk_sizes`` (None when the store already held every trial and nothing
    was compiled), ``compile_s``, ``compile_cached`` (from the persistent cache) and
    ``memory_probe_cached``; ``nonfinite_trials``: metric -> per point, the trials with a NaN
    or ±inf value; with a precision target, ``target`` (per point the trials run and the
    standard error reached).
    """

    def __init__(self, metrics: dict, info: dict):
        super().__init__(metrics)
        self.info = info


def run(
    trial: Trial,
    points: list,
    n_trials: int,
    seed: int = 0,
    chunk_size: int | None = None,
    out_dir: str | None = None,
    identity: dict | None = None,
    overwrite: bool = False,
    progress: bool | Progress | None = None,
    use_jit: bool = True,
    devices: int | None = None,
    max_memory: int | None = None,
    keep: str = "raw",
    common_random_numbers: bool = False,
    compilation_cache: str | None = None,
    target_se: float | None = None,
    target_metric: str | None = None,
    target_statistic: str = "mean",
    micro_batch: int | None = None,
    metric_axes: dict | None = None,
) -> RunResult:
    """Runs ``trial`` for every point and ``n_trials`` trials per point.

    Everything that can be checked before work starts is checked first: arguments, the metrics a
    trial returns (by ``jax.eval_shape``), the host memory of the results and the device memory of
    a chunk; each failure is one ``ValueError`` line.

    Args:
        trial: pure function ``trial(key, point) -> dict of arrays``; never jitted by the caller.
            Every point must return the same metric names, shapes and dtypes.
        points: list of point pytrees (array leaves traced, other leaves static).
        n_trials: trials per point, in [1, :data:`MAX_TRIALS`].
        seed: root seed in [0, 2**32); the key of (p, t) is fold_in(fold_in(key(seed), p), t).
        chunk_size: trials per chunk (capped at ``n_trials``; in summary mode rounded up to a
            multiple of ``stats.SUMMARY_BLOCK``); default: as many as ``max_memory`` allows (on a CPU
            at most ``compiled.CPU_CHUNK_BYTES`` of buffers), in equal chunks.
        out_dir: if given (process 0), finished chunks are stored there and a rerun resumes or
            grows the run (see :mod:`jaxfed.store`).
        identity: JSON dict that identifies the run for resume (required with ``out_dir``); it
            should not contain the trial count, so that a run can grow.
        overwrite: discard stored results that cannot be used (another identity, damaged
            files, a summary of more trials than asked for) instead of raising.
        progress: progress on stderr, on process 0 (default True): a bar per group on a terminal,
            plain lines elsewhere (see :class:`jaxfed.engine.Progress`); or a ``Progress`` to
            report to (its label, stream and line interval).
        use_jit: ``False`` runs the same vmapped function unjitted on one device (for tests).
        devices: local devices per process to shard trials over (default: all).
        max_memory: bytes per device a chunk may use (default: a quarter of the device's
            memory); the chunk size follows from the compiled function's memory analysis.
        keep: ``"raw"`` (every trial), ``"summary"`` (:class:`jaxfed.stats.Summary`, computed on the device)
            or ``"auto"`` (raw when it fits in ``RAW_LIMIT_BYTES``).
        common_random_numbers: every point of trial t gets the key fold_in(key(seed), t), so
            points differ only by their parameters (variance reduction for comparisons).
        target_se, target_metric: a precision target (summary mode; ``n_trials`` is then the
            most per point): chunks run until, for each point on its own, the standard error of
            ``target_statistic`` of ``target_metric`` (``"NAME"``: its worst cell, ``"NAME@i"`` or
            ``"NAME@i,j"``: one cell) is at most ``target_se``; a point stops at the first chunk
            boundary where it is (decided from completed chunks only, so a rerun with the same
            seed and chunk size gives identical results) and is not computed again.
            ``result.info["target"]`` records per point the trials run and the standard error reached.
        target_statistic: ``"mean"`` (default) or ``"median"``: whose standard error
            ``target_se`` bounds (the median's from the histogram, :func:`jaxfed.stats.median_se`).
        micro_batch: trials per micro-batch (default :data:`jaxfed.engine.MICRO_BATCH` of the
            platform): every trial is computed in a fixed-shape program of one point × this many
            trials, whatever the chunk (see :func:`jaxfed.engine.compiled.batched_metrics`), and
            a device's share of a chunk is a multiple of it. Wide micro-batches amortise the
            per-operation cost of cheap trials; narrow ones pad small runs less. Part of a
            stored run's identity, with the platform: results are bit-identical for equal
            identities.
        metric_axes: if given, the names of each metric's axes after (point, trial), checked
            against the trial's shapes before anything runs (every metric named, one name per axis).
        compilation_cache: directory of JAX's persistent compilation cache (and of the memory
            probe's results), ``"off"`` to disable it; default: ``$JAXFED_COMPILATION_CACHE``, else
            a per-user directory (see :func:`compilation_cache_dir`).

    Returns:
        :class:`RunResult`: a dict metric -> NumPy array (n_points, n_trials, *metric_shape) for
        ``keep="raw"``, or metric -> :class:`jaxfed.stats.Summary` for ``keep="summary"``, with
        ``.info``, what the engine chose (see :class:`RunResult`). Non-finite values stay in raw
        arrays; summaries leave them out of every statistic and count them.

    Raises:
        ValueError: a bad argument, trial output or memory need (before any work);
            :class:`jaxfed.store.StoreError` (a ValueError): an unusable ``out_dir`` or stored file.
    """
    _check_arguments(n_trials, chunk_size, max_memory, keep, seed, points, out_dir, identity)
    if micro_batch is not None:
        validation.check(
            "micro_batch",
            micro_batch,
            type(micro_batch) is int and micro_batch > 0 and micro_batch % stats.SUMMARY_BLOCK == 0,
            f"a positive multiple of {stats.SUMMARY_BLOCK} (trials)",
        )
    chunk_size = None if chunk_size is None else min(chunk_size, n_trials)
    mesh = make_mesh(devices) if use_jit else None
    width = micro_batch or micro_batch_width(mesh)
    n_shards = mesh.size if mesh is not None else 1
    budget = max_memory if max_memory is not None else default_memory_budget(mesh or make_mesh(1))
    is_main = jax.process_index() == 0
    bar = progress if isinstance(progress, Progress) else Progress(progress is not False)
    if not is_main:
        bar = Progress(False)
    groups = group_points(points)
    info: dict = dict(
        devices=n_shards,
        processes=jax.process_count(),
        chunk_sizes=[],
        budget_bytes=budget,
        compile_s=[],
        compile_cached=[],
        memory_probe_cached=[],
    )

    # Shapes of one trial's metrics, per group, without running anything; the trial's program (its
    # jaxpr's digest) keys the cached memory probe, so that a rerun need not lower the probe's.
    traces = [
        jax.make_jaxpr(lambda k, t, g=group: trial(k, rebuild(g, t)), return_shape=True)(
            jax.random.key(0), [x[0] for x in traced]
        )
        for group, traced in groups
    ]
    specs = metric_specs([shapes for _, shapes in traces], groups)
    if metric_axes is not None:
        check_metric_axes(metric_axes, specs)
    programs = [hashlib.sha256(str(jaxpr).encode()).hexdigest() for jaxpr, _ in traces]
    target = None
    if target_se is not None or target_metric is not None:
        if keep == "raw":
            raise ValueError(
                "a precision target (target_se) needs keep='summary' (--keep summary): raw runs have a fixed trial count"
            )
        target = parse_target(target_se, target_metric, specs, target_statistic)
        keep = "summary"
        info["target"] = {
            "se": target.se,
            "metric": target_metric,
            "statistic": target.statistic,
            "max_trials": n_trials,
            "trials_per_point": [None] * len(points),
            "se_reached": [None] * len(points),
        }
    if keep == "auto":
        raw_bytes = len(points) * n_trials * sum(math.prod(s) * np.dtype(d).itemsize for s, d in specs.values())
        keep = "raw" if raw_bytes <= RAW_LIMIT_BYTES else "summary"
    info["keep"] = keep
    if keep == "summary":
        check_summarisable(specs)
    check_host_memory(keep, len(points), n_trials, specs)
    if mesh is not None:  # the outputs alone of the smallest (or the given) chunk must fit
        for group, _ in groups:
            check_chunk_outputs(len(group.point_ids), specs, chunk_size, mesh.size, width, budget)
    full_identity = None
    if out_dir is not None:
        # What a trial's compiled program depends on besides the identity given: a trial computed
        # at another micro-batch width, on another platform or by another program is not mixed in.
        full_identity = dict(
            identity or {},
            seed=seed,
            common_random_numbers=bool(common_random_numbers),
            store_format=STORE_FORMAT,
            micro_batch=width,
            platform=platform(mesh),
            programs=programs,
        )
        if target is not None:  # where each point stops depends on the target
            full_identity["target"] = {"se": target.se, "metric": target_metric}
            if target.statistic != "mean":  # (stores of mean-targeted runs keep their identity)
                full_identity["target"]["statistic"] = target.statistic

    results: dict = {}
    nonfinite = {name: np.zeros(len(points), np.int64) for name in specs}
    if keep == "raw":
        results = {name: np.zeros((len(points), n_trials) + shape, dtype) for name, (shape, dtype) in specs.items()}
    writer, scope, store = Writer(), contextlib.ExitStack(), None
    try:
        cache_dir = scope.enter_context(cache.compilation_cache(compilation_cache, bar.note)) if use_jit else None
        info["compilation_cache"] = cache_dir
        # Every stored file is read and verified (by process 0) before anything is compiled or computed.
        refusal: StoreError | None = None
        sinks: list[RawSink | SummarySink] = []
        try:
            store = Store(out_dir if is_main else None, full_identity or {}, overwrite, note=bar.note)
            for g, (group, _) in enumerate(groups):
                spec = GroupSpec(g, group.point_ids, specs)
                sinks.append(
                    RawSink(store, spec, n_trials, results, writer)
                    if keep == "raw"
                    else SummarySink(store, spec, n_trials, writer, is_main)
                )
        except StoreError as err:
            refusal = err
        raise_on_every_process(refusal)
        for g, ((group, traced), sink) in enumerate(zip(groups, sinks)):
            size, chunk_fn = _compile_group(
                trial, group, traced, programs[g], sink, g, len(groups), mesh, width, budget, n_trials, chunk_size,
                seed, common_random_numbers, keep == "summary", target, cache_dir, bar, info,
            )  # fmt: skip
            bar.group(f"group {g + 1}/{len(groups)}", len(group.point_ids) * n_trials, stored=sink.done_trials())
            if target is None:
                point_ids = np.asarray(group.point_ids, np.uint32)

                def dispatch(chunk):  # (used within this iteration only)
                    return chunk_fn(np.uint32(seed), point_ids, traced, np.uint32(chunk[0]), *sink.extra_args(chunk))

                def handle(chunk, device_out):
                    sink.handle(chunk, device_out)
                    bar.update(len(point_ids) * (chunk[1] - chunk[0]))

                pipelined(sink.plan(size or n_trials), dispatch, handle, writer)
            else:
                _run_to_target(
                    sink, chunk_fn, trial, group, traced, mesh, width, size, seed, n_trials, common_random_numbers,
                    target, bar,
                )  # fmt: skip
                writer.wait()
            bar.finish_group()
            parts = sink.finish(nonfinite)
            if keep == "summary":
                for name, part in parts.items():
                    results.setdefault(name, []).append(part)
            if target is not None:
                assert isinstance(sink, SummarySink)
                for p, n, se in zip(sink.rows, sink.counts, worst_se(parts[target.metric][1], target)):
                    info["target"]["trials_per_point"][p] = int(n)
                    info["target"]["se_reached"][p] = float(se)
    finally:
        writer.close()
        bar.close()
        scope.close()  # JAX's cache settings as they were
        if store is not None:
            store.close()
    info["nonfinite_trials"] = {name: counts.tolist() for name, counts in nonfinite.items()}
    if keep == "summary":
        results = {name: stats.merge_point_groups(parts, len(points)) for name, parts in results.items()}
    return RunResult(results, info)


def _check_arguments(n_trials, chunk_size, max_memory, keep, seed, points, out_dir, identity) -> None:
    """One ``ValueError`` line for the first bad argument of :func:`run` (:mod:`jaxfed.validation`)."""
    validation.trial_count(n_trials)
    if chunk_size is not None:
        validation.integer("chunk_size", chunk_size, 1)
    if max_memory is not None:
        validation.integer("max_memory", max_memory, 1, note=" (bytes)")
    validation.one_of("keep", keep, ("raw", "summary", "auto"))
    validation.seed(seed)
    validation.check("points", points, bool(points), "a non-empty list")
    if out_dir is not None:
        validation.check("identity", identity, isinstance(identity, dict), "a JSON dict when out_dir is given")


def _compile_group(
    trial, group, traced, program, sink, g, n_groups, mesh, width, budget, n_trials, chunk_size, seed, common,
    summary, target, cache_dir, bar, info,
):  # fmt: skip
    """(chunk size, chunk function) of a group, recorded in ``info``; (None, None) when its sink
    is already complete (nothing compiled). ``program``: the digest of one trial's jaxpr."""
    point_ids = np.asarray(group.point_ids, np.uint32)
    extra = (np.uint32(0),) if summary else ()
    wanted = chunk_size
    if target is not None and sink.stored_chunk_size is not None:  # a targeted run resumes on its own chunk boundaries
        wanted = sink.stored_chunk_size
    if summary and wanted is not None:  # chunks start on sum blocks (see stats.SUMMARY_BLOCK)
        wanted = min(round_up(wanted, stats.SUMMARY_BLOCK), n_trials)
    compiled: dict = {}
    if not int(broadcast_from_0(np.asarray([not sink.complete], np.int64))[0]):  # verified complete
        size, chunk_fn = None, None
    elif mesh is None:
        size = wanted or min(n_trials, 4096)
        chunk_fn = make_chunk_fn(trial, group, round_up(size, width), None, width, common, summary)
    else:
        bar.note(f"group {g + 1}/{n_groups}: compiling …")
        size, chunk_fn, compiled = sized_chunk_fn(
            trial, group, program, mesh, width, budget, n_trials, wanted,
            (np.uint32(seed), point_ids, traced, np.uint32(0)) + extra, common, summary,
            summary_output_bytes(len(point_ids), sink.spec.metrics) if summary else 0, cache_dir,
        )  # fmt: skip
    info["chunk_sizes"].append(size)
    for key in ("compile_s", "compile_cached", "memory_probe_cached"):
        info[key].append(compiled.get(key))
    if size is not None:
        n_shards = mesh.size if mesh is not None else 1
        compile_note = ""
        if compiled:
            compile_note = (
                f", compiled in {compiled['compile_s']:.1f} s{' (cache)' if compiled['compile_cached'] else ''}"
            )
        bar.note(
            f"group {g + 1}/{n_groups}: {len(point_ids)} point(s), chunk size {size} trials over {n_shards} device(s), "
            f"memory budget {size_text(budget)} per device{compile_note}"
        )
    return size, chunk_fn


def _run_to_target(
    sink, chunk_fn, trial, group, traced, mesh, width, size, seed, n_trials, common, target, bar
) -> None:
    """Chunks of the points still short of the target until none is (sequential: each decision
    needs the chunk before it, and only chunks before it).

    The points still running are padded (repeating the first) to a power of two, at most the
    group's size, and the padding's results dropped: at most log2(points) shapes are compiled,
    not one per number of points left (46 kmeans-snr points stopping one by one compiled ~10 times).
    """
    point_ids = np.asarray(group.point_ids, np.uint32)
    sink.size = size
    subset_fn = None  # jitted for fewer rows (it compiles once per row count)
    while True:
        go = broadcast_from_0(still_running(sink.states, sink.counts, n_trials, target).astype(np.int64))
        active = np.flatnonzero(go)
        if active.size == 0:
            return
        start = int(sink.counts[active[0]])  # every running point has done the same trials
        chunk = (start, min(start + size, n_trials))
        n_rows = min(len(point_ids), 1 << (int(active.size) - 1).bit_length())
        rows = np.concatenate([active, np.full(n_rows - active.size, active[0])])
        if n_rows < len(point_ids) and mesh is not None and subset_fn is None:
            subset_fn = make_chunk_fn(trial, group, round_up(size, width * mesh.size), mesh, width, common, True)
        fn = chunk_fn if n_rows == len(point_ids) or subset_fn is None else subset_fn
        sub_args = (np.uint32(seed), point_ids[rows], [x[rows] for x in traced], np.uint32(start))
        out = fn(*sub_args, *sink.extra_args(chunk))
        if n_rows > active.size:
            out = jax.tree.map(lambda x: x[: active.size], out)
        sink.handle(chunk, out, active)
        bar.update(active.size * (chunk[1] - chunk[0]))
