"""The compiled chunk function of a group (raw metrics, or their summary computed on the device)
and its size from the memory budget."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import math
import re
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxfed import stats
from jaxfed.engine.cache import load_probe, probe_key, save_probe, timed_compile
from jaxfed.engine.devices import make_mesh, micro_batch_width, platform
from jaxfed.engine.memory import BUDGET_FOR_CHUNKS, balanced_chunk, refuse_chunk, round_up, size_text
from jaxfed.engine.points import Group, Trial, group_points, rebuild


class ChunkFn:
    """The chunk function of a group: ``fn(seed, point_ids, traced, first_trial, *extra)``.

    Each device of the mesh runs the same single-device program on its share of the chunk's
    trials (device g of the mesh: trials ``first_trial + g·local + [0, local)``), so a trial's
    values do not depend on the device count: no SPMD partitioning of the trial. In summary mode
    the same program summarises its share inside its micro-batch loop (:func:`batched_summary`,
    the bits of :func:`share_summary` of the share's values), so no program spans the
    devices at all: the shares' summaries come back side by side, (points, devices, …), and the
    host folds them in trial order (exact: counts add, and the dyadic sums of consecutive shares
    push into the binary counter in order, see :class:`jaxfed.stats.SummaryState`). In raw mode
    the shares are assembled into arrays sharded over the mesh's ``"trials"`` axis, whose
    non-finite flags one SPMD program computes. Both are gathered to process 0 by
    :func:`jaxfed.engine.devices.to_host`. Without a mesh it runs op by op on the default device
    (``use_jit=False``, for tests of the engine's bookkeeping; the summary is one jitted program,
    :func:`eager_share_summary`).
    """

    def __init__(self, trial, group, batch, mesh, width, common=False, summary=False, flags=True):
        self.mesh, self.summary = mesh, summary
        n_shards = mesh.size if mesh is not None else 1
        self.local = batch // n_shards  # trials per point on each device
        self.blocks = self.local // width  # micro-batches per point on each device
        metrics = batched_metrics(trial, group, self.local, width, common, eager=mesh is None)
        histogram = histogram_method(platform(mesh))

        def summarised_op_by_op(seed, point_ids, traced, first_trial, steps, n_valid, first_block):
            """Without a mesh: the share's values, then their summary (the reference of the loop's)."""
            values = metrics(seed, point_ids, traced, first_trial, steps)
            with jax.enable_x64(True):  # float64 block sums on any device; the trial itself stays as it is
                return {name: eager_share_summary(v, n_valid, first_block, histogram) for name, v in values.items()}

        def raw(values):
            return values, {name: nonfinite_per_trial(v) for name, v in values.items()}

        summarised = (
            summarised_op_by_op
            if mesh is None  # compiled: summarised inside the micro-batch loop, the values never stored
            else batched_summary(trial, group, self.local, width, common, histogram)
        )
        self.metrics = metrics
        self.program: Any = summarised if summary else metrics  # what each device runs on its share
        self.finish: Any = raw if flags and not summary else None  # over the assembled shares (raw)
        self.executables: dict = {}  # device -> the program there (jitted, or compiled ahead)
        self.positions: list = []  # (position in the mesh, device) of this process's devices
        if mesh is not None:
            self.finish = self.finish and jax.jit(self.finish)
            self.positions = [
                (g, device) for g, device in enumerate(mesh.devices.flat) if device.process_index == jax.process_index()
            ]
            for _, device in self.positions:
                on_device = SingleDeviceSharding(device)
                self.executables[device] = jax.jit(self.program, in_shardings=on_device, out_shardings=on_device)

    def metrics_args(self, seed, point_ids, traced, first_trial, offset: int) -> tuple:
        """The trial program's arguments for the device at trial ``offset``: the chunk's, the first
        trial moved by the offset, and the loop's trip count (rows × micro-batches)."""
        steps = np.int32(len(point_ids) * self.blocks)
        return (seed, point_ids, traced, np.uint32(int(first_trial) + offset), steps)

    def device_args(self, g: int, seed, point_ids, traced, first_trial, *extra) -> tuple:
        """The arguments of the program of the device at mesh position ``g``. In summary mode
        ``extra`` is the chunk's (trials in whole blocks, first block), and the device's share is
        trials ``g·local + [0, local)`` of the chunk: its whole-block trials are those of the
        chunk's that fall in the share, and its first block is the chunk's moved by the share."""
        offset = g * self.local
        args = self.metrics_args(seed, point_ids, traced, first_trial, offset)
        if not self.summary:
            return args
        n_valid, first_block = (int(x) for x in extra)
        share_valid = min(max(n_valid - offset, 0), self.local)
        return (*args, np.uint32(share_valid), np.uint32(first_block + offset // stats.SUMMARY_BLOCK))

    def lower(self, *args) -> _Lowered:
        """As ``jax.jit(f).lower(*args)``: ``.compile()`` compiles every device's program (and the
        raw mode's flags) ahead of time and returns this function."""
        return _Lowered(self, args)

    def __call__(self, seed, point_ids, traced, first_trial, *extra):
        if self.mesh is None:
            out = self.program(*self.device_args(0, seed, point_ids, traced, first_trial, *extra))
            return out if self.finish is None else self.finish(out)
        shares = [
            self.executables[device](*self.device_args(g, seed, point_ids, traced, first_trial, *extra))
            for g, device in self.positions
        ]
        out = jax.tree.map(lambda *leaves: self._assembled(leaves), *shares)
        return out if self.finish is None else self.finish(out)

    def _assembled(self, leaves: tuple) -> jax.Array:
        """One array (points, n·devices, …) of the devices' shares ``leaves`` (points, n, …), sharded
        over the mesh: the raw values along the trial axis, the summaries along their share axis (n = 1)."""
        assert self.mesh is not None
        shape = (leaves[0].shape[0], leaves[0].shape[1] * self.mesh.size) + leaves[0].shape[2:]
        sharding = NamedSharding(self.mesh, P(None, "trials"))
        return jax.make_array_from_single_device_arrays(shape, sharding, list(leaves))


def share_summary(values, n_valid, first_block, histogram: str) -> dict:
    """A device's share of a summary chunk: :func:`jaxfed.stats.chunk_summary` of its trials
    [0, ``n_valid``) (whole blocks, from block ``first_block`` on), with ``tail``, the raw values
    (points, SUMMARY_BLOCK, …) of the block from ``n_valid`` on (the run's last, partial block
    when this share holds it; garbage otherwise), ``blocks`` (points,), the whole blocks
    summarised, and ``full`` (points,), whether they fill the share (the tail is in the first
    share that is not full). Every leaf gets a share axis of length 1 after the points."""
    out = stats.chunk_summary(values, n_valid, jnp, first_block, histogram=histogram)
    tail = jax.lax.dynamic_slice_in_dim(values, n_valid, stats.SUMMARY_BLOCK, axis=1)
    return _with_share_fields(out, tail, n_valid, values.shape[1])


@functools.partial(jax.jit, static_argnames=("histogram", "block"))
def _jitted_share_summary(values, n_valid, first_block, histogram: str, block: int) -> dict:
    """:func:`share_summary` as one program. ``block`` is ``stats.SUMMARY_BLOCK``, which the trace
    reads: a static argument, so that a changed block size (tests patch it) is traced anew, not
    served a program built for another."""
    del block
    return share_summary(values, n_valid, first_block, histogram)


def eager_share_summary(values, n_valid, first_block, histogram: str) -> dict:
    """The op-by-op engine's :func:`share_summary`, compiled as one program: op by op, its few hundred
    operations, each compiled for every new shape, took ~13 s before a test's first summary chunk."""
    return _jitted_share_summary(values, n_valid, first_block, histogram, stats.SUMMARY_BLOCK)


def _with_share_fields(out: dict, tail, n_valid, local: int) -> dict:
    """``out`` with the share's ``tail``, ``blocks`` and ``full`` (see :func:`share_summary`), and a
    share axis of length 1 after the points on every leaf."""
    n_points = tail.shape[0]
    out["tail"] = tail
    blocks = jnp.asarray(n_valid).astype(np.int32) // stats.SUMMARY_BLOCK
    out["blocks"] = jnp.broadcast_to(blocks, (n_points,))
    out["full"] = jnp.broadcast_to(blocks * stats.SUMMARY_BLOCK == local, (n_points,))
    return {name: jnp.expand_dims(x, 1) for name, x in out.items()}


class _Lowered(NamedTuple):
    fn: ChunkFn
    args: tuple

    def compile(self) -> ChunkFn:
        return compile_chunk_fn(self.fn, self.args, lambda lowered: lowered.compile())[0]


def make_chunk_fn(
    trial: Trial,
    group: Group,
    batch: int,
    mesh: Mesh | None,
    width: int,
    common: bool = False,
    summary: bool = False,
) -> ChunkFn:
    """The chunk function of a group, for ``batch`` trials from ``first_trial`` on (not compiled
    yet: see :func:`compile_chunk_fn`).

    Raw: (seed, point_ids (P,), traced leaves (P, ...), first_trial) -> (metrics (P, batch, ...),
    metric -> bool (P, batch): the trial has a NaN or ±inf value), so that the host need not
    pass over every value to count the non-finite trials.
    Summary: (…, first_trial, n_valid, first_block) -> metric -> per device of the mesh, its
    :func:`share_summary` side by side (points, devices, …): trials [first_trial, first_trial +
    n_valid) count (a multiple of ``stats.SUMMARY_BLOCK``; the chunk starts at block
    ``first_block``, so the O(log n) dyadic sums are aligned to trial indices, and the histogram
    is counted by :func:`histogram_method`'s method), and the block from ``first_trial + n_valid``
    on (the run's last, partial block, which the host summarises) is kept raw.

    ``batch`` is a multiple of the micro-batch ``width`` × devices.
    """
    return ChunkFn(trial, group, batch, mesh, width, common, summary)


def histogram_method(kind: str) -> str:
    """How the device counts the summary's histogram (:data:`jaxfed.stats.HISTOGRAM_METHODS`, the
    same counts either way): XLA's scatter-add on a CPU, where it is fastest; sorting on an
    accelerator, where a scatter-add serialises on the bins many values share (a KL of 0 after
    the cover time)."""
    return "scatter" if kind == "cpu" else "sort"


def compile_chunk_fn(fn: ChunkFn, args: tuple, compile_lowered) -> tuple[ChunkFn, dict]:
    """Compiles ``fn`` (with a mesh) for ``args`` on every local device, and the raw mode's flags,
    with ``compile_lowered(lowered)``; returns it with one device's memory figures: ``temp`` (the
    program's temporaries; in raw mode its outputs too, and the flags' temporaries) and
    ``output`` (what goes to the host), in bytes."""
    lowered = {device: fn.executables[device].lower(*fn.device_args(g, *args)) for g, device in fn.positions}
    # One executable per device (host devices do not share one), compiled side by side in threads
    # (XLA releases the GIL) so that several cores share the work.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lowered), thread_name_prefix="jaxfed-compile") as pool:
        done = dict(zip(lowered, pool.map(compile_lowered, lowered.values())))
    fn.executables.update(done)
    temp, output = _memory(fn.executables[fn.positions[0][1]])
    if fn.finish is None:
        return fn, {"temp": temp, "output": output}
    shares = jax.eval_shape(fn.metrics, *fn.metrics_args(args[0], args[1], args[2], args[3], 0))
    values = {
        name: jax.ShapeDtypeStruct(
            (s.shape[0], fn.local * fn.mesh.size) + s.shape[2:],
            s.dtype,
            sharding=NamedSharding(fn.mesh, P(None, "trials")),
        )
        for name, s in shares.items()
    }
    fn.finish = compile_lowered(fn.finish.lower(values))
    finish_temp, finish_output = _memory(fn.finish)
    return fn, {"temp": temp + output + finish_temp, "output": finish_output}


def _covered(spans: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals ``spans``."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


def _memory(executable) -> tuple[int, int]:
    """(temporaries, outputs) in bytes of a compiled program (0, 0 where it cannot tell)."""
    analysis = executable.memory_analysis()
    if analysis is None:
        return 0, 0
    return int(analysis.temp_size_in_bytes), int(analysis.output_size_in_bytes)


def batched_metrics(trial: Trial, group: Group, local: int, width: int, common: bool = False, eager: bool = False):
    """(seed, point_ids (P,), traced leaves (P, ...), first_trial, steps) -> metrics (P, local, ...)
    of trials first_trial + [0, local) on one device (unjitted).

    The key of (point p, trial t) is fold_in(fold_in(key(seed), p), t), or fold_in(key(seed), t)
    with ``common`` (common random numbers).

    Determinism by construction: a trial never sees the chunk. The device loops over
    micro-batches of one point × ``width`` trials, ``steps`` = rows × micro-batches of them; the
    loop body is one fixed-shape program, the same whatever the chunk size, the number of points
    (rows) or the device count (every device runs this same single-device program on its share),
    and fenced by optimisation barriers, so XLA can neither fuse it with what surrounds it nor
    specialise it to the chunk's shape. The trip count is a run-time argument, so the loop is
    never unrolled or, at one step, inlined. Within the micro-batch, trial t always takes lane
    t mod ``width`` (the lanes are rotated back after the barrier), so where a chunk starts does
    not matter either.

    ``eager``: the same micro-batches in a Python loop, op by op (no compilation of the whole
    program: for tests of the engine's bookkeeping, ``use_jit=False``).
    """
    micro_batch = _micro_batch_fn(trial, group, width, common)
    if eager:
        return _op_by_op(micro_batch, local // width, width)

    def start(shapes, n_points):
        return {name: jnp.zeros((n_points, local) + s.shape[1:], s.dtype) for name, s in shapes.items()}

    def keep(out, values, row, block):
        return {
            name: jax.lax.dynamic_update_slice(
                out[name], value[None], (row, block * width) + (jnp.int32(0),) * (value.ndim - 1)
            )
            for name, value in values.items()
        }

    return _micro_batch_loop(micro_batch, local // width, width, start, keep)


def batched_summary(trial: Trial, group: Group, local: int, width: int, common: bool, histogram: str):
    """(seed, point_ids, traced, first_trial, steps, n_valid, first_block) -> metric -> the
    device's :func:`share_summary` of trials first_trial + [0, local), summarised inside the
    micro-batch loop of :func:`batched_metrics` (unjitted).

    Each micro-batch's values are counted into the running histogram, their float64
    :data:`~jaxfed.stats.SUMMARY_BLOCK` sums placed at their blocks, their non-finite trials
    counted and the raw tail block kept while they are in cache; the share's values are never
    stored (a 12,288-trial share of gfvl-topologies held 44 MB of them, written out and read back
    by a second program). The trials are the same program as in raw mode, and every output is the
    bits of :func:`share_summary` of their values: counts are integers, a block's sums a fixed
    tree of its own values (a micro-batch is whole blocks, as ``width`` is a multiple of
    SUMMARY_BLOCK), and the dyadic sums are taken from the placed block sums after the loop.
    """
    micro_batch = _micro_batch_fn(trial, group, width, common)

    def on_device(seed, point_ids, traced, first_trial, steps, n_valid, first_block):
        n_valid = jnp.asarray(n_valid).astype(jnp.int32)
        tail_at = jnp.minimum(n_valid, local - stats.SUMMARY_BLOCK)  # the raw block kept (as share_summary)

        def start(shapes, n_points):
            with jax.enable_x64(True):
                return {
                    name: _SummaryCarry(
                        hist=jnp.zeros((n_points,) + s.shape[1:] + (stats.N_BINS,), jnp.int32),
                        sums=jnp.zeros((n_points, local // stats.SUMMARY_BLOCK) + s.shape[1:], jnp.float64),
                        squares=jnp.zeros((n_points, local // stats.SUMMARY_BLOCK) + s.shape[1:], jnp.float64),
                        nonfinite=jnp.zeros((n_points,), jnp.int32),
                        tail=jnp.zeros((n_points, stats.SUMMARY_BLOCK) + s.shape[1:], s.dtype),
                    )
                    for name, s in shapes.items()
                }

        def add(carry, values, row, block):
            with jax.enable_x64(True):  # float64 block sums on any device; the trial itself stays as it is
                return {
                    name: _added(carry[name], v, row, block, width, n_valid, tail_at, histogram)
                    for name, v in values.items()
                }

        carry = _micro_batch_loop(micro_batch, local // width, width, start, add)(
            seed, point_ids, traced, first_trial, steps
        )
        with jax.enable_x64(True):
            return {name: _finished(c, n_valid, first_block, local) for name, c in carry.items()}

    return on_device


class _SummaryCarry(NamedTuple):
    """One metric's running summary of a device's share inside the micro-batch loop."""

    hist: jax.Array  # (points, *cells, N_BINS) int32
    sums: jax.Array  # (points, local / SUMMARY_BLOCK, *cells) float64 block sums, placed at their blocks
    squares: jax.Array  # the same for the squares
    nonfinite: jax.Array  # (points,) int32: valid trials with a non-finite value
    tail: jax.Array  # (points, SUMMARY_BLOCK, *cells): the raw block from trial min(n_valid, local − 64) on


def _added(c: _SummaryCarry, v, row, block, width: int, n_valid, tail_at, histogram: str) -> _SummaryCarry:
    """The running summary ``c`` after micro-batch ``block`` of row ``row``, values ``v`` (W, *cells)
    of the share's trials block·W + [0, W), of which those below ``n_valid`` count; the raw block
    from ``tail_at`` on is kept when it lies in this micro-batch."""
    offset = block * width
    valid = (offset + jnp.arange(width, dtype=jnp.int32) < n_valid).reshape((width,) + (1,) * (v.ndim - 1))
    finite = jnp.isfinite(v)
    used = finite & valid
    sums, squares = stats.block_sums(v[None], used[None], jnp)
    at = (row, block * (width // stats.SUMMARY_BLOCK)) + (jnp.int32(0),) * (v.ndim - 1)
    start = jnp.clip(tail_at - offset, 0, width - stats.SUMMARY_BLOCK)
    here = (tail_at >= offset) & (tail_at < offset + width)
    tail = jnp.where(here, jax.lax.dynamic_slice_in_dim(v, start, stats.SUMMARY_BLOCK), c.tail[row])
    return _SummaryCarry(
        hist=stats.count_into(c.hist, row, stats.bin_index(v, jnp), used, jnp, histogram),
        sums=jax.lax.dynamic_update_slice(c.sums, sums, at),
        squares=jax.lax.dynamic_update_slice(c.squares, squares, at),
        nonfinite=c.nonfinite.at[row].add(((~finite) & valid).reshape(width, -1).any(-1).sum(dtype=jnp.int32)),
        tail=c.tail.at[row].set(tail),
    )


def _finished(carry: _SummaryCarry, n_valid, first_block, local: int) -> dict:
    """The :func:`share_summary` of a device's share from its running summary ``carry``."""
    out = stats.summary_of_blocks(
        carry.hist, carry.sums, carry.squares, carry.nonfinite, n_valid, first_block, None, jnp
    )
    return _with_share_fields(out, carry.tail, n_valid, local)


def _micro_batch_fn(trial: Trial, group: Group, width: int, common: bool):
    """micro_batch(seed, point_id, point, first) -> metrics (W, ...) of trials first + [0, W)."""

    def micro_batch(seed, point_id, point, first):
        """Trial t is computed in lane t mod W (whatever ``first``), and the lanes are rotated back
        into trial order after the barrier."""
        root = jax.random.key(seed)
        base = root if common else jax.random.fold_in(root, point_id)
        lanes = jnp.arange(width, dtype=jnp.uint32)
        shift = first % width
        trial_ids = first + (lanes + (width - shift)) % width  # lane j: the trial ≡ j (mod W)
        values = jax.vmap(lambda t: trial(jax.random.fold_in(base, t), rebuild(group, point)))(trial_ids)
        values = jax.lax.optimization_barrier(values)
        return {name: jnp.take(v, (lanes + shift) % width, axis=0) for name, v in values.items()}

    return micro_batch


def _micro_batch_loop(micro_batch, blocks: int, width: int, start, update):
    """The device loop of :func:`batched_metrics`: (seed, point_ids, traced, first_trial, steps) ->
    ``update(…(update(start(shapes, rows), values₀, 0, 0)…), values, row, block)`` over the
    micro-batches (row, block), each computed by ``micro_batch`` behind an optimisation barrier;
    ``shapes``: one micro-batch's metric shapes."""

    def on_device(seed, point_ids, traced, first_trial, steps):
        point_ids, traced = jnp.asarray(point_ids), [jnp.asarray(x) for x in traced]
        shapes = jax.eval_shape(micro_batch, seed, point_ids[0], [x[0] for x in traced], first_trial)

        def step(i, carry):
            row, block = i // blocks, i % blocks
            first = first_trial + (block * width).astype(jnp.uint32)
            inputs = jax.lax.optimization_barrier((seed, point_ids[row], [x[row] for x in traced], first))
            return update(carry, micro_batch(*inputs), row, block)

        return jax.lax.fori_loop(jnp.int32(0), steps, step, start(shapes, len(point_ids)))

    return on_device


def _op_by_op(micro_batch, blocks: int, width: int):
    """The device program of :func:`batched_metrics` as a Python loop over its micro-batches, op by op."""

    def metrics(seed, point_ids, traced, first_trial, steps):
        rows = []
        for row in range(len(point_ids)):
            point = [jnp.asarray(x[row]) for x in traced]
            parts = [
                micro_batch(seed, point_ids[row], point, np.uint32(first_trial + b * width)) for b in range(blocks)
            ]
            rows.append({name: np.concatenate([np.asarray(p[name]) for p in parts]) for name in parts[0]})
        return {name: np.stack([r[name] for r in rows]) for name in rows[0]}

    return metrics


def nonfinite_per_trial(values):
    """bool (P, T): whether trial t of point p has a NaN or ±inf in any cell of ``values`` (P, T, ...)."""
    return ~jnp.isfinite(values).reshape(values.shape[:2] + (-1,)).all(-1)


def chunk_function(
    trial: Trial,
    points: list,
    chunk_size: int,
    seed: int = 0,
    devices: int | None = None,
    common: bool = False,
    micro_batch: int | None = None,
):
    """The function the engine runs for one chunk's metrics, with its arguments (for benchmarks).

    ``fn(*args)`` computes trials [0, batch) of every point, batch = ``chunk_size`` rounded up to
    a multiple of the micro-batch width × devices, returning metrics of shape (n_points, batch, …);
    ``fn.lower(*args).compile()`` compiles it ahead of time. On one device ``fn`` is the jitted
    trial program itself (its arguments end with the micro-batch loop's trip count), on several a
    :class:`ChunkFn`. The points must form a single group (equal static parts).
    """
    groups = group_points(points)
    if len(groups) != 1:
        raise ValueError(f"points must share their static leaves to form one compiled group, got {len(groups)} groups")
    group, traced = groups[0]
    mesh = make_mesh(devices)
    width = micro_batch or micro_batch_width(mesh)
    batch = round_up(chunk_size, width * mesh.size)
    fn = ChunkFn(trial, group, batch, mesh, width, common, flags=False)
    args = (np.uint32(seed), np.asarray(group.point_ids, np.uint32), traced, np.uint32(0))
    if mesh.size == 1:
        return jax.jit(fn.metrics), fn.metrics_args(*args, 0)
    return fn, args


class ChunkJob(NamedTuple):
    """What a group's chunk function is built and sized from (:func:`sized_chunk_fn`)."""

    trial: Trial
    group: Group
    program: str  # digest of one trial's jaxpr: keys the cached memory probe
    mesh: Mesh
    width: int  # trials per micro-batch
    budget: int  # bytes per device
    n_trials: int
    args: tuple  # example arguments of the chunk function: (seed, point ids, traced leaves, first trial[, n_valid])
    common: bool  # common random numbers
    summary: bool  # device summaries instead of raw metrics
    fixed: int  # bytes of outputs that do not grow with the batch (a summary's histograms and counts)
    trial_bytes: int  # bytes of one trial's metrics, every point of the group
    cache_dir: str | None  # where the probe's memory figures are cached

    @property
    def step(self) -> int:
        """Trials of one micro-batch on every device: chunk sizes are multiples of it."""
        return self.width * self.mesh.size


def sized_chunk_fn(job: ChunkJob, chunk_size: int | None) -> tuple[int, ChunkFn, dict]:
    """(chunk size, compiled chunk function, compile record): ``chunk_size``, or the largest that
    fits ``job.budget``.

    Without a given size, a run whose metrics take at most :data:`WHOLE_RUN_FRACTION` of a
    chunk's memory (:func:`_chunk_limit`), of at most :data:`WHOLE_RUN_MICRO_BATCHES`
    micro-batches per device, is compiled once, as one chunk of every trial, and
    resized (below) only if its memory analysis says it does not fit; the record's
    ``memory_probe_cached`` is then None. A larger run compiles for a probe batch of one
    micro-batch per device and reads the memory analysis: temporaries and outputs scale linearly
    with the batch (arguments do not), plus the host copy of the outputs; a chunk may take 75% of
    the budget (on a CPU at most ``CPU_CHUNK_BYTES`` on all host devices together), the rest is
    left to the process itself and to the summaries or result arrays. The probe's executable is
    reused when the size it implies needs no larger batch. ``job.fixed`` bytes of outputs are not
    extrapolated, but reserved three times (device output, scatter, host copy). The probe's
    figures are cached (:func:`_probed_size`).

    A chosen size is corrected from the compiled chunk's own memory analysis when it exceeds the
    budget, and shrunk when the device refuses memory while compiling (a GPU allocates while it
    autotunes; the refused size scales the chunk down), at most ``MAX_RESIZES`` times.

    The record holds ``compile_s`` (seconds spent compiling), ``compile_cached`` (every
    executable came from the persistent cache) and ``memory_probe_cached``.

    Raises:
        ValueError: the smallest possible chunk (or the given one) needs more than the budget,
            checked from the output shapes before compiling and from the memory analysis after,
            or the device refused it while compiling.
    """
    compile_batch = _Compiler(job)
    chosen = chunk_size is None
    if chunk_size is None and _compiled_whole(job):
        # A run whose every value is a small part of a chunk's memory is compiled once, as one
        # chunk: no probe (the probe and the chunk each compile the whole trial program; the
        # kmeans groups of `jaxfed reproduce` took 41-100 s each); its own memory analysis
        # confirms that it fits, or sizes it again.
        return _fitted(job, compile_batch, job.n_trials, chosen, _chunk_limit(job))
    if chunk_size is None:
        chunk_size, probe = _probed_size(job, compile_batch)
        if probe is not None and chunk_size <= job.step:  # the probe's program is the chunk's
            return chunk_size, probe, compile_batch.record
    return _fitted(job, compile_batch, chunk_size, chosen)


class _Compiler:
    """``compile_batch(batch)``: a job's chunk function compiled for ``batch`` trials, with its
    memory figures (:func:`compile_chunk_fn`); the compile times and cache hits add up in ``record``."""

    def __init__(self, job: ChunkJob):
        self.job = job
        self.record: dict[str, Any] = {"compile_s": 0.0, "compile_cached": True, "memory_probe_cached": None}
        self._spans: list[tuple[float, float]] = []  # (start, end) of each compile of the current call

    def _compile(self, lowered):
        start = time.perf_counter()
        executable, _, cached = timed_compile(lowered)
        self._spans.append((start, time.perf_counter()))
        self.record["compile_cached"] &= cached
        return executable

    def __call__(self, batch: int) -> tuple[ChunkFn, dict]:
        j = self.job
        key = _kept_key(j, batch)
        if key in _KEPT:
            _KEPT.move_to_end(key)
            return _KEPT[key]
        fn = make_chunk_fn(j.trial, j.group, batch, j.mesh, j.width, j.common, j.summary)
        self._spans = []
        try:
            _KEPT[key] = compile_chunk_fn(fn, j.args, self._compile)
        finally:  # the wall time during which some compile ran (devices compile side by side)
            self.record["compile_s"] += _covered(self._spans)
        while len(_KEPT) > KEPT_CHUNK_FNS:
            _KEPT.popitem(last=False)
        return _KEPT[key]


KEPT_CHUNK_FNS = 8
"""Compiled chunk functions kept in the process (the last used), so that running the same trial
again (a notebook's rerun, a grown sweep) neither traces, lowers nor loads it again: that took
0.85 s of a 1.05 s rerun of 64 gfvl-topologies trials."""
_KEPT: collections.OrderedDict = collections.OrderedDict()

# JAX options that change what a trial traces to (as jax.jit's own cache keys on its trace context).
_TRACE_OPTIONS = (
    "jax_enable_x64",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
)


def _kept_key(job: ChunkJob, batch: int) -> tuple:
    """What a compiled chunk function depends on: as for ``jax.jit``, the trial function itself
    (its identity: a redefined function is compiled anew; arrays it closes over are constants of
    its program) and its jaxpr's digest, the group's static parts and traced shapes, the batch,
    the devices, the mode and the JAX options that change tracing; and the compilation cache
    directory, whose use each run reports."""
    traced = tuple((np.shape(x), np.asarray(x).dtype.str) for x in job.args[2])
    options = tuple(getattr(jax.config, name, None) for name in _TRACE_OPTIONS)  # (with contexts applied)
    devices = tuple((d.process_index, d.id) for d in job.mesh.devices.flat)
    return (
        job.trial,
        job.program,
        job.group,
        traced,
        batch,
        devices,
        job.width,
        job.common,
        job.summary,
        options,
        job.cache_dir,
    )


def _probed_size(job: ChunkJob, compile_batch: _Compiler) -> tuple[int, ChunkFn | None]:
    """(chunk size, the probe's compiled function or None) from the memory probe's figures.

    The figures are cached in ``job.cache_dir`` under a digest of ``job.program`` (one trial's
    jaxpr, digested) and of what the batched program adds (points, devices, mode), so a rerun
    neither lowers nor compiles the probe, only the chunk function (itself from JAX's persistent
    cache). A cached figure is a hint, never a reason to refuse: when it would refuse the smallest
    chunk, or size the chunk at one micro-batch per device, the probe is compiled and its own
    figures decide (and replace the cached ones); a larger chunk sized from a stale figure is
    corrected from the compiled chunk's own memory analysis (:func:`_fitted`).
    """
    points = len(job.group.point_ids)
    key = probe_key(
        job.program,
        job.mesh,
        points=points,
        lanes=job.width,
        common=job.common,
        summary="in the micro-batch loop" if job.summary else False,  # (figures of the summary after the loop differ)
        fixed=job.fixed,
    )
    cached = load_probe(job.cache_dir, key)
    chunk_size = None if cached is None else _probe_chunk(cached, job)
    probe = None
    # (a cache file edited to temp = 1e15 refused every later run: "would need 909 TiB")
    if chunk_size is None or chunk_size <= job.step:
        probe, figures = compile_batch(job.step)
        if figures != cached:
            save_probe(job.cache_dir, key, figures)
        chunk_size = _probe_chunk(figures, job, refuse=True)
        cached = cached if figures == cached else None
    compile_batch.record["memory_probe_cached"] = cached is not None
    assert chunk_size is not None  # (refused otherwise)
    return chunk_size, probe


def _fitted(
    job: ChunkJob, compile_batch: _Compiler, chunk_size: int, chosen: bool, limit: float | None = None
) -> tuple[int, ChunkFn, dict]:
    """The chunk function compiled for ``chunk_size`` (given, or ``chosen`` from the probe or as
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
                raise ValueError(
                    f"{what} does not fit in the device's memory: compiling it asked for {asked}; "
                    "use a smaller --chunk-size / chunk_size or smaller shapes"
                ) from err
            chunk_size = resized(chunk_size, refused or 2 * limit)
            continue
        need = figures["temp"] + figures["output"]
        if chosen and need > ceiling and chunk_size > step:
            # The probe's linear extrapolation can underestimate a program whose memory does not
            # scale like the probe's (a 1e6-trial summary chunk needed 21 GiB where 4 were
            # predicted): size again from this compilation's own figure.
            chunk_size = resized(chunk_size, need)
            continue
        refuse_chunk(chunk_size, False, need, budget)
        return chunk_size, compiled, compile_batch.record
    raise ValueError(
        f"no chunk size fitting the memory budget of {size_text(budget)} was found in {MAX_RESIZES} compilations "
        "(--max-memory / max_memory); give --chunk-size / chunk_size"
    )


def _probe_chunk(figures: dict, job: ChunkJob, refuse: bool = False) -> int | None:
    """The chunk size the probe's memory ``figures`` (one micro-batch of ``job.width`` trials per
    device, ``job.step`` trials in all) imply for the budget; None when even ``step`` trials would
    not fit (``refuse``: ValueError instead, the one-line refusal)."""
    step, width, mesh, budget, fixed = job.step, job.width, job.mesh, job.budget, job.fixed
    # A summary's running histogram and sums are the micro-batch loop's carry (temporaries) besides
    # its outputs: counted as per-trial bytes, that carry (14 MB of gfvl-topologies histograms over
    # a 512-trial probe) sized chunks at 29,696 trials, for 0.8 KB per trial of real growth.
    carry = fixed if job.summary else 0
    per_trial_device = max(figures["temp"] + figures["output"] - fixed - carry, 0) / width
    per_trial_host = max(figures["output"] - fixed, 0) / width
    per_trial = per_trial_device / mesh.size + per_trial_host
    need = step * per_trial + 3 * fixed + carry
    if refuse:
        refuse_chunk(step, True, need, budget)
    elif need > budget:
        return None
    usable = BUDGET_FOR_CHUNKS * budget - 3 * fixed - carry  # the rest: the process itself, summaries, results
    fits = usable // max(per_trial, 1.0)
    if mesh.devices.flat[0].platform == "cpu":
        # Host devices share the host's memory: the cap is on the chunk's buffers on all of them.
        fits = min(fits, CPU_CHUNK_BYTES // max(per_trial_device + per_trial_host, 1.0))
    return balanced_chunk(job.n_trials, int(fits), step)


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
is compiled once as one chunk, without the memory probe."""
WHOLE_RUN_MICRO_BATCHES = 16
"""A longer run is chunked from the probe's figures, as before: one chunk of every trial would
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
