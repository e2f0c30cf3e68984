"""Sizing: the micro-batch width (:func:`choose_width`, from a :class:`DeviceSpec` and one trial's
bytes), what a run may allocate (host results, a chunk on the device), the chunk size that fits
the memory budget (:func:`sized_chunk_fn`: estimated from the shapes, :func:`estimated_chunk`, and
checked by the compiled chunk's own memory analysis), refused with one line before anything is
computed when it does not fit."""

from __future__ import annotations

import math
import os
import re
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from jaxfed import jaxcompat, stats
from jaxfed.engine.compiled import ChunkFn, ChunkJob, Compiler
from jaxfed.engine.devices import default_memory_budget, make_mesh, platform
from jaxfed.engine.points import group_points, metric_specs, rebuild

# --------------------------------------------------------------------------- the micro-batch width
MICRO_BATCH = {"cpu": 512, "gpu": 262144, "tpu": 262144}
"""The widest micro-batch, in trials, by platform (:func:`choose_width`): every trial is computed
in a micro-batch of one point × W trials (see :func:`jaxfed.engine.compiled.batched_metrics`), and
a device's share of a chunk is a multiple of W. W enters the compiled shape of a trial, so it is
part of a stored run's identity. On a CPU W is this width; on an accelerator the widest power of
two up to it that the memory budget allows (:func:`choose_width`): each of a trial's sequential
steps is one launch over the micro-batch, and a narrow one leaves an accelerator mostly idle
(the figures: docs/performance.md)."""

MIN_WIDTH = 1024
"""The narrowest micro-batch an accelerator is given by :func:`choose_width` (a trial too large for
it is refused by the chunk's memory check, as before)."""

WIDTH_FRACTION = 1 / 4
"""Share of a device's memory budget one micro-batch's working set may take (:func:`choose_width`):
a chunk is several micro-batches' outputs besides, and the estimate of a trial's working set
(:func:`trial_live_bytes`) counts what XLA may fuse away, but not its scratch."""

SUMMARY_BYTES_PER_CELL = 20
"""Bytes per trial and metric cell the summary adds to a micro-batch (float64 value and square, int32 bin)."""


class DeviceSpec(NamedTuple):
    """A described device: what :func:`choose_width` decides from (a real one: :func:`device_spec`)."""

    platform: str  # "cpu", "gpu", "tpu"
    memory_bytes: int  # the memory budget a device gives a chunk (--max-memory, default a quarter of its memory)


def device_spec(mesh: Mesh | None, budget: int | None = None) -> DeviceSpec:
    """The :class:`DeviceSpec` of the mesh's devices (the default device without a mesh) at
    ``budget`` bytes (default :func:`jaxfed.engine.devices.default_memory_budget`)."""
    if budget is None:
        budget = default_memory_budget(mesh if mesh is not None else make_mesh(1))
    return DeviceSpec(platform(mesh), int(budget))


def choose_width(device: DeviceSpec, trial_bytes: float, n_trials: int | None = None) -> int:
    """Trials per micro-batch on ``device`` for a trial whose working set is ``trial_bytes`` bytes
    (:func:`width_bytes`).

    On a CPU: ``MICRO_BATCH["cpu"]`` (512), whatever the trial (the cores are filled at that width,
    and its figures are the ones measured). On an accelerator: the largest power of two W with

        W ≤ MICRO_BATCH[platform],  W · trial_bytes ≤ WIDTH_FRACTION · memory_bytes,
        W ≤ 2^⌈log2 n_trials⌉ (a run of n trials pads at most to the next power of two),

    and at least :data:`MIN_WIDTH`. A power of two is a multiple of ``stats.summary.SUMMARY_BLOCK``, as a
    summary needs. The width is part of the run's identity: a stored run keeps its own
    (:func:`jaxfed.engine.core.plan` reads it back), whatever this rule says on another machine.

    Args:
        device: the device's platform and memory (:class:`DeviceSpec`).
        trial_bytes: one trial's working set in bytes.
        n_trials: the run's trials per point, if known (the width need not exceed its next power of two).

    Returns:
        The micro-batch width, a power of two.
    """
    if device.platform == "cpu":
        return MICRO_BATCH["cpu"]
    widest = MICRO_BATCH.get(device.platform, MICRO_BATCH["gpu"])
    fits = WIDTH_FRACTION * device.memory_bytes / max(float(trial_bytes), 1.0)
    if n_trials is not None:
        widest = min(widest, 1 << max(int(n_trials) - 1, 0).bit_length())
    width = MIN_WIDTH
    while width * 2 <= min(widest, fits):
        width *= 2
    return width


def micro_batch_width(mesh: Mesh | None = None, trial_bytes: float = 0.0, n_trials: int | None = None) -> int:
    """:func:`choose_width` on the mesh's devices (the default device without one) at their default
    budget: without ``trial_bytes``, the platform's widest (:data:`MICRO_BATCH`)."""
    return choose_width(device_spec(mesh), trial_bytes, n_trials)


def width_bytes(live_bytes: int, specs: dict) -> int:
    """One trial's bytes in a micro-batch: its working set ``live_bytes`` (:func:`trial_live_bytes`),
    its metrics (``specs``: metric -> (shape, dtype)) twice (the values and their copy in trial
    order) and the summary's :data:`SUMMARY_BYTES_PER_CELL` per metric cell."""
    cells = sum(math.prod(shape) for shape, _ in specs.values())
    return int(live_bytes) + 2 * trial_bytes(1, specs) + SUMMARY_BYTES_PER_CELL * cells


def trial_live_bytes(jaxpr) -> int:
    """An upper estimate of one trial's working set: the largest total size of the values live at
    once while ``jaxpr`` (one trial's, closed or not) runs its equations in order, a value live from
    the equation that makes it to its last use, and a loop's or call's body adding its own peak
    at its equation (its operands counted twice). XLA reuses and fuses buffers, so a compiled trial
    needs at most about this much per lane of a micro-batch."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    last_use: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if jaxcompat.is_var(v):
                last_use[v] = i
    for v in jaxpr.outvars:
        if jaxcompat.is_var(v):
            last_use[v] = len(jaxpr.eqns)
    live = sum(_bytes(v) for v in (*jaxpr.constvars, *jaxpr.invars))
    peak = live
    for i, eqn in enumerate(jaxpr.eqns):
        inner = max((trial_live_bytes(sub) for sub in jaxcompat.jaxprs_in_params(eqn.params)), default=0)
        made = sum(_bytes(v) for v in eqn.outvars if not jaxcompat.is_drop_var(v))
        peak = max(peak, live + made + inner)
        live += made
        used = {v for v in eqn.invars if jaxcompat.is_var(v)}
        live -= sum(_bytes(v) for v in used if last_use.get(v) == i)
        live -= sum(_bytes(v) for v in eqn.outvars if jaxcompat.is_var(v) and v not in last_use)
    return int(peak)


def _bytes(v) -> int:
    aval = v.aval
    shape = getattr(aval, "shape", ())
    try:
        itemsize = np.dtype(aval.dtype).itemsize
    except TypeError:  # (a PRNG key's extended dtype)
        itemsize = getattr(aval.dtype, "itemsize", 8)
    return math.prod(shape) * itemsize


# --------------------------------------------------------------------------- memory budgets
BUDGET_FOR_CHUNKS = 0.75  # share of the budget a chunk's buffers may take


HOST_FRACTION = 0.75  # share of the host's memory that raw results or summary states may take


SUMMARY_BYTES_PER_BIN = 20  # int32: state, a chunk's counts, the folded state, the one being written and its bytes


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def balanced_chunk(n_trials: int, fits: int, step: int) -> int:
    """The chunk size for ``n_trials`` when at most ``fits`` trials fit in one chunk: as few
    chunks as fit, of equal size (a multiple of ``step``), so that the last one is not mostly
    padding (262,144 trials in chunks of 190,784 computed 381,568).

    ceil(n / ceil(n / fits)) rounded up to ``step``; at least ``step``, at most ``n_trials``.
    """
    fits = max(step, fits // step * step)
    n_chunks = -(-n_trials // fits)
    return min(n_trials, round_up(-(-n_trials // n_chunks), step))


def trial_bytes(n_points: int, specs: dict) -> int:
    """Bytes of one trial's metrics (``specs``: metric -> (shape, dtype)) at every one of ``n_points`` points."""
    return n_points * sum(math.prod(shape) * np.dtype(dt).itemsize for shape, dt in specs.values())


def host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def size_text(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


def check_host_memory(keep: str, n_points: int, n_trials: int, specs: dict) -> None:
    """Refuses, before anything is allocated, results that cannot fit in the host's memory."""
    cells = sum(math.prod(shape) for shape, _ in specs.values())
    if keep == "raw":
        need = n_trials * trial_bytes(n_points, specs)
        hint = "keep fewer trials or use keep='summary' (--keep summary)"
    else:
        need = n_points * cells * (stats.summary.N_BINS * SUMMARY_BYTES_PER_BIN + 64)
        hint = "use smaller metric shapes"
    budget = HOST_FRACTION * host_memory()
    if need > budget:
        raise ValueError(
            f"keep={keep!r}: the results would need {size_text(need)} of host memory, more than the budget of "
            f"{size_text(budget)} ({HOST_FRACTION:.0%} of this machine's); {hint}"
        )


def refuse_chunk(
    chunk_size: int, minimum: bool, need: float, budget: int, padding: tuple[int, int] | None = None
) -> None:
    """ValueError when a chunk of ``chunk_size`` trials (``minimum``: the smallest there is) needs more
    than ``budget`` bytes; ``padding`` = (micro-batch width, devices): a chunk is padded to a whole
    micro-batch on every device, which the advice names where a smaller chunk cannot help."""
    if need > budget:
        what = f"the smallest chunk ({chunk_size} trials)" if minimum else f"a chunk of {chunk_size} trials"
        padded = padding is not None and (minimum or chunk_size <= padding[0] * padding[1])
        hint = "smaller shapes" if minimum else "a smaller chunk size"
        if padding is not None and padded:
            what += f", padded to {_padding_text(*padding)},"
            hint = f"a narrower micro-batch ({padding_advice()}), smaller shapes"
        raise ValueError(
            f"{what} would need {size_text(need)} per device, more than the memory budget of {size_text(budget)} "
            f"(--max-memory / max_memory); use {hint} or a larger budget"
        )


def _padding_text(width: int, devices: int) -> str:
    per = f"on each of {devices} devices" if devices > 1 else "on the device"
    return f"a whole micro-batch of {width} trials {per}"


def padding_advice() -> str:
    """How to narrow the micro-batch, the unit every chunk is padded to."""
    return (
        "an experiment's micro_batch={'cpu': 64}, a positive multiple of 64 trials; RunOptions(micro_batch=64) "
        "for engine.run"
    )


def check_chunk_outputs(
    n_points: int, specs: dict, chunk_size: int | None, n_devices: int, width: int, budget: int
) -> None:
    """Refuses a chunk whose outputs alone (a device's share plus the host copy) exceed the
    budget: the smallest chunk (a micro-batch of ``width`` trials on every device), or the given
    one. Needs only shapes, so it runs before compiling."""
    step = width * n_devices
    batch = step if chunk_size is None else round_up(chunk_size, step)
    out_per_trial = trial_bytes(n_points, specs)
    need = batch * out_per_trial * (1 + 1 / n_devices)
    refuse_chunk(chunk_size or step, chunk_size is None, need, budget, (width, n_devices))


def summary_output_bytes(n_points: int, specs: dict) -> int:
    """Bytes of a summary chunk's outputs that do not grow with the batch: int32 counts and
    histograms, the float64 partial sums (at most 2 per level and sum), and the raw tail block."""
    per_cell = 4 * (stats.summary.N_BINS + 2) + 8 * 2 * 2 * stats.summary.SUM_LEVELS
    return n_points * sum(
        math.prod(shape) * (per_cell + stats.summary.SUMMARY_BLOCK * np.dtype(dt).itemsize) + 4
        for shape, dt in specs.values()
    )


# --------------------------------------------------------------------------- the chunk size


def sized_chunk_fn(job: ChunkJob, chunk_size: int | None) -> tuple[int, ChunkFn, dict]:
    """(chunk size, compiled chunk function, compile record): ``chunk_size``, or the largest that
    fits ``job.budget``, compiled once.

    Without a given size, a run whose metrics take at most :data:`WHOLE_RUN_FRACTION` of a
    chunk's memory (:func:`_chunk_limit`), of at most :data:`WHOLE_RUN_MICRO_BATCHES`
    micro-batches per device, is one chunk of every trial; a larger run is sized from its shapes
    (:func:`estimated_chunk`). Either is compiled once, and its memory analysis confirms that it
    fits, or sizes it again (below). Nothing else is compiled: the memory probe of one
    micro-batch per device, which compiled the same trial program a second time, is gone.

    A chosen size is corrected from the compiled chunk's own memory analysis when it exceeds the
    budget, and shrunk when the device refuses memory while compiling (a GPU allocates while it
    autotunes; the refused size scales the chunk down), at most ``MAX_RESIZES`` times.

    The record holds ``compile_s`` (seconds spent compiling) and ``compile_cached`` (every
    executable came from the persistent cache).

    Raises:
        ValueError: the smallest possible chunk (or the given one) needs more than the budget,
            checked from the output shapes before compiling and from the memory analysis after,
            or the device refused it while compiling.
    """
    compile_batch = Compiler(job)
    if chunk_size is not None:
        return _fitted(job, compile_batch, chunk_size, chosen=False)
    if _compiled_whole(job):
        return _fitted(job, compile_batch, job.n_trials, True, _chunk_limit(job))
    return _fitted(job, compile_batch, estimated_chunk(job), chosen=True)


def estimated_chunk(job: ChunkJob) -> int:
    """The chunk size the budget allows by the program's shapes, before compiling anything.

    A device's chunk program holds one micro-batch's working set, which does not grow with the
    chunk (``job.width · job.lane_bytes``, :func:`width_bytes` of the jaxpr's estimate
    :func:`trial_live_bytes`), and its share of the outputs, which does: each of its ``s / d``
    trials (``d`` devices) keeps its metrics twice (the output and the loop's copy) on the device,
    and raw values once more on the host. A summary's fixed outputs are reserved three times
    (device output, scatter, host copy). With ``limit`` = :func:`_chunk_limit` (on a CPU also the
    host devices' shared :data:`CPU_CHUNK_BYTES`):

        s ≤ (limit − W · lane_bytes − 3 · fixed) / (2 · trial_bytes / d + host_bytes),

    balanced over the run (:func:`balanced_chunk`), at least one micro-batch per device. The
    compiled chunk's memory analysis then checks the estimate (:func:`_fitted`).
    """
    devices = job.mesh.size
    host = 0 if job.summary else job.trial_bytes  # a summary's values never leave the device
    per_trial = 2 * job.trial_bytes / devices + host
    room = _chunk_limit(job) - job.width * job.lane_bytes - 3 * job.fixed
    fits = int(room // max(per_trial, 1.0)) if room > 0 else job.step
    return balanced_chunk(job.n_trials, fits, job.step)


def _fitted(
    job: ChunkJob, compile_batch: Compiler, chunk_size: int, chosen: bool, limit: float | None = None
) -> tuple[int, ChunkFn, dict]:
    """The chunk function compiled for ``chunk_size`` (given, or ``chosen`` by the estimate or as
    the whole run), resized while it does not fit (see :func:`sized_chunk_fn`): a chosen chunk
    needing more than ``limit`` bytes (default: the budget) is sized again to ``limit`` (default:
    ``BUDGET_FOR_CHUNKS`` of the budget)."""
    step, budget = job.step, job.budget

    ceiling = budget if limit is None else limit
    limit = BUDGET_FOR_CHUNKS * budget if limit is None else limit

    def resized(size: int, need: float) -> int:
        """The chunk size for which ``need`` bytes at ``size`` trials scale to fit, smaller than ``size``."""
        fits = balanced_chunk(job.n_trials, int(limit * round_up(size, step) / need), step)
        return min(fits, max(step, round_up(size // 2, step)))

    for _ in range(MAX_RESIZES):
        try:
            compiled, figures = compile_batch(round_up(chunk_size, step))
        except jax.errors.JaxRuntimeError as err:
            # A GPU allocates while it compiles (autotuning): a chunk too large for the device can
            # be refused there, before any memory analysis can be read.
            if "RESOURCE_EXHAUSTED" not in str(err):
                raise
            refused = refused_bytes(err)
            if not chosen or chunk_size <= step:
                what = f"the smallest chunk ({chunk_size} trials)" if chosen else f"a chunk of {chunk_size} trials"
                asked = size_text(refused) if refused else "more than was free"
                hint = "a smaller --chunk-size / chunk_size or smaller shapes"
                if chunk_size <= step:  # padded to one micro-batch per device: a smaller chunk is the same program
                    what += f" (padded to {_padding_text(job.width, step // job.width)})"
                    hint = f"a narrower micro-batch ({padding_advice()}) or smaller shapes"
                raise ValueError(
                    f"{what} does not fit in the device's memory: compiling it asked for {asked}; use {hint}"
                ) from err
            chunk_size = resized(chunk_size, refused or 2 * limit)
            continue
        need = figures["temp"] + figures["output"]
        if chosen and need > ceiling and chunk_size > step:
            # The estimate can be short of what XLA allocates (a 1e6-trial summary chunk needed
            # 21 GiB where a linear extrapolation predicted 4): size again from this
            # compilation's own figure.
            chunk_size = resized(chunk_size, need)
            continue
        refuse_chunk(chunk_size, False, need, budget, (job.width, step // job.width))
        return chunk_size, compiled, compile_batch.record
    raise ValueError(
        f"no chunk size fitting the memory budget of {size_text(budget)} was found in {MAX_RESIZES} compilations "
        "(--max-memory / max_memory); give --chunk-size / chunk_size"
    )


def _chunk_limit(job: ChunkJob) -> float:
    """Bytes a chosen chunk may take per device: ``BUDGET_FOR_CHUNKS`` of the budget, on a CPU at
    most ``CPU_CHUNK_BYTES`` on all host devices together."""
    limit = BUDGET_FOR_CHUNKS * job.budget
    if job.mesh.devices.flat[0].platform == "cpu":
        limit = min(limit, CPU_CHUNK_BYTES / job.mesh.size)
    return limit


WHOLE_RUN_FRACTION = 1 / 8
"""Without a given chunk size, a run whose metrics take at most this share of a chunk's memory
(:func:`_chunk_limit`), and of at most :data:`WHOLE_RUN_MICRO_BATCHES` micro-batches per device,
is compiled as one chunk."""
WHOLE_RUN_MICRO_BATCHES = 16
"""A longer run is chunked (:func:`estimated_chunk`): one chunk of every trial would
show no progress and store no summary state until its end (10^6 k-means trials of milliseconds
each in one chunk)."""


def _compiled_whole(job: ChunkJob) -> bool:
    """Whether a run without a given chunk size is compiled once, as one chunk of every trial
    (see :data:`WHOLE_RUN_FRACTION`)."""
    small = job.n_trials * job.trial_bytes <= _chunk_limit(job) * WHOLE_RUN_FRACTION
    return small and job.n_trials <= WHOLE_RUN_MICRO_BATCHES * job.step


# On a CPU a chunk's buffers are fresh host memory: the first call of a 6 GiB chunk (262,144
# gfvl-topologies trials) ran 50% slower than the next ones (page faults), while chunks of 32,768
# (0.8 GiB) run at full speed from the first, and several chunks let the host's work on one
# overlap the next. A chosen chunk on a CPU takes at most this much, on all its host devices
# together (they share the host's memory); a given one is not limited.
CPU_CHUNK_BYTES = 2**30
MAX_RESIZES = 6  # compilations of the chunk function that may be refused or found too large before giving up
_SIZE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def refused_bytes(err: Exception) -> float | None:
    """The size of the allocation a RESOURCE_EXHAUSTED error names ("… allocate 299.02GiB …"), or None."""
    match = re.search(r"allocate ([0-9.]+) ?(TiB|GiB|MiB|KiB|B)\b", str(err))
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)] if match else None


def trial_width(trial, points: list, n_trials: int, mesh: Mesh | None = None) -> int:
    """The width the engine chooses for a run of ``n_trials`` trials of ``trial`` at ``points`` on
    the mesh's devices at their default budget: :func:`choose_width` of the largest working set
    over the points' groups (:func:`trial_live_bytes`, :func:`width_bytes`)."""
    groups = group_points(points)
    traces = [
        jax.make_jaxpr(lambda k, t, g=group: trial(k, rebuild(g, t)), return_shape=True)(
            jax.random.key(0), [x[0] for x in traced]
        )
        for group, traced in groups
    ]
    specs = metric_specs([shapes for _, shapes in traces], groups)
    live = max(trial_live_bytes(jaxpr) for jaxpr, _ in traces)
    return choose_width(device_spec(mesh), width_bytes(live, specs), n_trials)


def chunk_function(
    trial,
    points: list,
    chunk_size: int,
    seed: int = 0,
    devices: int | None = None,
    common: bool = False,
    micro_batch: int | None = None,
):
    """The function the engine runs for one chunk's metrics, with its arguments (for benchmarks).

    ``fn(*args)`` computes trials [0, batch) of every point, batch = ``chunk_size`` rounded up to
    a multiple of the micro-batch width × devices (``micro_batch``, default the engine's
    :func:`choose_width` for this trial, ``chunk_size`` trials and the devices' default budget),
    returning metrics of shape (n_points, batch, …); ``fn.lower(*args).compile()`` compiles it
    ahead of time. On one device ``fn`` is the jitted trial program itself (its arguments end with
    the micro-batch loop's trip count), on several a :class:`~jaxfed.engine.compiled.ChunkFn`.
    The points must form a single group (equal static parts).
    """
    groups = group_points(points)
    if len(groups) != 1:
        raise ValueError(f"points must share their static leaves to form one compiled group, got {len(groups)} groups")
    group, traced = groups[0]
    mesh = make_mesh(devices)
    width = micro_batch or trial_width(trial, points, chunk_size, mesh)
    batch = round_up(chunk_size, width * mesh.size)
    fn = ChunkFn(trial, group, batch, mesh, width, common, flags=False)
    args = (np.uint32(seed), np.asarray(group.point_ids, np.uint32), traced, np.uint32(0))
    if mesh.size == 1:
        return jax.jit(fn.metrics), fn.metrics_args(*args, 0)
    return fn, args
