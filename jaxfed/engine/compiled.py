"""The compiled chunk function of a group (raw metrics, or their summary computed on the device),
compiled and kept in the process (:class:`Compiler`); its size is :mod:`jaxfed.engine.sizing`'s."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import math
import threading
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxfed import jaxcompat, stats
from jaxfed.engine.cache import timed_compile
from jaxfed.engine.devices import platform
from jaxfed.engine.points import Group, Trial, rebuild


class ChunkFn:
    """The chunk function of a group: ``fn(seed, point_ids, traced, first_trial, *extra)``, the
    first trial an integer (any below 2^53: each device's program takes its :func:`trial_halves`).

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
            with jaxcompat.enable_x64(True):  # float64 block sums on any device; the trial itself stays as it is
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
                on_device = jaxcompat.single_device_sharding(device)
                self.executables[device] = jax.jit(self.program, in_shardings=on_device, out_shardings=on_device)

    def metrics_args(self, seed, point_ids, traced, first_trial, offset: int) -> tuple:
        """The trial program's arguments for the device at trial ``offset``: the chunk's, the first
        trial moved by the offset, and the loop's trip count (rows × micro-batches)."""
        steps = np.int32(len(point_ids) * self.blocks)
        return (seed, point_ids, traced, trial_halves(trial_index(first_trial) + offset), steps)

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
        return (*args, np.uint32(share_valid), low_block(first_block + offset // stats.summary.SUMMARY_BLOCK))

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
    """A device's share of a summary chunk: :func:`jaxfed.stats.summary.chunk_summary` of its trials
    [0, ``n_valid``) (whole blocks, from block ``first_block`` on), with ``tail``, the raw values
    (points, SUMMARY_BLOCK, …) of the block from ``n_valid`` on (the run's last, partial block
    when this share holds it; garbage otherwise), ``blocks`` (points,), the whole blocks
    summarised, and ``full`` (points,), whether they fill the share (the tail is in the first
    share that is not full). Every leaf gets a share axis of length 1 after the points."""
    out = stats.summary.chunk_summary(values, n_valid, jnp, first_block, histogram=histogram)
    tail = jax.lax.dynamic_slice_in_dim(values, n_valid, stats.summary.SUMMARY_BLOCK, axis=1)
    return _with_share_fields(out, tail, n_valid, values.shape[1])


@functools.partial(jax.jit, static_argnames=("histogram", "block"))
def _jitted_share_summary(values, n_valid, first_block, histogram: str, block: int) -> dict:
    """:func:`share_summary` as one program. ``block`` is ``stats.summary.SUMMARY_BLOCK``, which the trace
    reads: a static argument, so that a changed block size (tests patch it) is traced anew, not
    served a program built for another."""
    del block
    return share_summary(values, n_valid, first_block, histogram)


def eager_share_summary(values, n_valid, first_block, histogram: str) -> dict:
    """The op-by-op engine's :func:`share_summary`, compiled as one program: op by op, its few hundred
    operations would each be compiled for every new shape before a test's first summary chunk."""
    return _jitted_share_summary(values, n_valid, first_block, histogram, stats.summary.SUMMARY_BLOCK)


def _with_share_fields(out: dict, tail, n_valid, local: int) -> dict:
    """``out`` with the share's ``tail``, ``blocks`` and ``full`` (see :func:`share_summary`), and a
    share axis of length 1 after the points on every leaf."""
    n_points = tail.shape[0]
    out["tail"] = tail
    blocks = jnp.asarray(n_valid).astype(np.int32) // stats.summary.SUMMARY_BLOCK
    out["blocks"] = jnp.broadcast_to(blocks, (n_points,))
    out["full"] = jnp.broadcast_to(blocks * stats.summary.SUMMARY_BLOCK == local, (n_points,))
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
    n_valid) count (a multiple of ``stats.summary.SUMMARY_BLOCK``; the chunk starts at block
    ``first_block``, so the O(log n) dyadic sums are aligned to trial indices, and the histogram
    is counted by :func:`histogram_method`'s method), and the block from ``first_trial + n_valid``
    on (the run's last, partial block, which the host summarises) is kept raw.

    ``batch`` is a multiple of the micro-batch ``width`` × devices.
    """
    return ChunkFn(trial, group, batch, mesh, width, common, summary)


def histogram_method(kind: str) -> str:
    """How the device counts the summary's histogram (:data:`jaxfed.stats.summary.HISTOGRAM_METHODS`, the
    same counts either way): XLA's scatter-add on a CPU, where it is fastest; sorting on an
    accelerator, where a scatter-add serialises on the bins many values share (a KL of 0 after
    the cover time)."""
    return "scatter" if kind == "cpu" else "sort"


def compile_chunk_fn(fn: ChunkFn, args: tuple, compile_lowered) -> tuple[ChunkFn, dict]:
    """Compiles ``fn`` (with a mesh) for ``args`` on every local device, and the raw mode's flags,
    with ``compile_lowered(lowered)``; returns it with one device's memory figures: ``temp`` (the
    program's temporaries; in raw mode its outputs too, and the flags' temporaries) and
    ``output`` (what goes to the host), in bytes."""

    def lowered(g, device):
        return fn.executables[device].lower(*fn.device_args(g, *args))

    # One executable per device. With a compilation cache (every engine run has one: the user's
    # or a scratch one) the first device compiles the program and the others load it from the
    # cache (on a CPU one entry serves every host device: cache.one_entry_for_every_host_device);
    # without one, each device compiles its own, side by side in threads (XLA releases the GIL).
    (g0, first), rest = fn.positions[0], fn.positions[1:]
    fn.executables[first] = compile_lowered(lowered(g0, first))
    if jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]
        fn.executables.update({device: compile_lowered(lowered(g, device)) for g, device in rest})
    elif rest:
        with concurrent.futures.ThreadPoolExecutor(len(rest), thread_name_prefix="jaxfed-compile") as pool:
            fn.executables.update(zip([d for _, d in rest], pool.map(compile_lowered, [lowered(*p) for p in rest])))
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
    with ``common`` (common random numbers); from t = 2^32 on, :func:`trial_key`'s 64-bit fold.
    ``first_trial`` is :func:`trial_halves` of the first trial's index.

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

    Each micro-batch's values are read once (:func:`jaxfed.stats.summary.summary_pass`): counted into the
    running histogram, their float64 :data:`~jaxfed.stats.summary.SUMMARY_BLOCK` sums placed at their
    blocks, their non-finite trials counted and the raw tail block kept while they are in cache; the share's values are never
    stored (a share's values, tens of megabytes for gfvl-topologies, would be written out and read
    back by a second program). The trials are the same program as in raw mode, and every output is the
    bits of :func:`share_summary` of their values: counts are integers, a block's sums a fixed
    tree of its own values (a micro-batch is whole blocks, as ``width`` is a multiple of
    SUMMARY_BLOCK), and the dyadic sums are taken from the placed block sums after the loop.
    """
    micro_batch = _micro_batch_fn(trial, group, width, common)

    def on_device(seed, point_ids, traced, first_trial, steps, n_valid, first_block):
        n_valid = jnp.asarray(n_valid).astype(jnp.int32)
        tail_at = jnp.minimum(n_valid, local - stats.summary.SUMMARY_BLOCK)  # the raw block kept (as share_summary)

        def start(shapes, n_points):
            with jaxcompat.enable_x64(True):
                return {
                    name: _SummaryCarry(
                        hist=jnp.zeros((n_points,) + s.shape[1:] + (stats.summary.N_BINS,), jnp.int32),
                        sums=jnp.zeros((n_points, local // stats.summary.SUMMARY_BLOCK) + s.shape[1:], jnp.float64),
                        squares=jnp.zeros((n_points, local // stats.summary.SUMMARY_BLOCK) + s.shape[1:], jnp.float64),
                        nonfinite=jnp.zeros((n_points,), jnp.int32),
                        tail=jnp.zeros((n_points, stats.summary.SUMMARY_BLOCK) + s.shape[1:], s.dtype),
                    )
                    for name, s in shapes.items()
                }

        def add(carry, values, row, block):
            with jaxcompat.enable_x64(True):  # float64 block sums on any device; the trial itself stays as it is
                return {
                    name: _added(carry[name], v, row, block, width, n_valid, tail_at, histogram)
                    for name, v in values.items()
                }

        carry = _micro_batch_loop(micro_batch, local // width, width, start, add)(
            seed, point_ids, traced, first_trial, steps
        )
        with jaxcompat.enable_x64(True):
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
    one = stats.summary.summary_pass(v[None], valid[None], jnp)  # the micro-batch's values read once
    at = (row, block * (width // stats.summary.SUMMARY_BLOCK)) + (jnp.int32(0),) * (v.ndim - 1)
    start = jnp.clip(tail_at - offset, 0, width - stats.summary.SUMMARY_BLOCK)
    here = (tail_at >= offset) & (tail_at < offset + width)
    tail = jnp.where(here, jax.lax.dynamic_slice_in_dim(v, start, stats.summary.SUMMARY_BLOCK), c.tail[row])
    return _SummaryCarry(
        hist=stats.summary.count_into(c.hist, row, one.bins[0], jnp, histogram),
        sums=jax.lax.dynamic_update_slice(c.sums, one.sums, at),
        squares=jax.lax.dynamic_update_slice(c.squares, one.squares, at),
        nonfinite=c.nonfinite.at[row].add(one.nonfinite_trials[0]),
        tail=c.tail.at[row].set(tail),
    )


def _finished(carry: _SummaryCarry, n_valid, first_block, local: int) -> dict:
    """The :func:`share_summary` of a device's share from its running summary ``carry``."""
    out = stats.summary.summary_of_blocks(
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
        lanes, first = jnp.arange(width, dtype=jnp.uint32), halves(first)
        shift = first[1] % width  # (W is a power of two: t mod W is the low half's)
        highs, lows = moved(first, (lanes + (width - shift)) % width)  # lane j: the trial ≡ j (mod W)
        values = jax.vmap(lambda h, t: trial(trial_key(base, h, t), rebuild(group, point)))(highs, lows)
        values = jax.lax.optimization_barrier(values)
        return {name: jnp.take(v, (lanes + shift) % width, axis=0) for name, v in values.items()}

    return micro_batch


def _micro_batch_loop(micro_batch, blocks: int, width: int, start, update):
    """The device loop of :func:`batched_metrics`: (seed, point_ids, traced, first_trial, steps) ->
    ``update(…(update(start(shapes, rows), values₀, 0, 0)…), values, row, block)`` over the
    micro-batches (row, block), each computed by ``micro_batch`` behind an optimisation barrier;
    ``shapes``: one micro-batch's metric shapes."""

    def on_device(seed, point_ids, traced, first_trial, steps):
        point_ids, traced, first_trial = jnp.asarray(point_ids), [jnp.asarray(x) for x in traced], halves(first_trial)
        shapes = jax.eval_shape(micro_batch, seed, point_ids[0], [x[0] for x in traced], first_trial)

        def step(i, carry):
            row, block = i // blocks, i % blocks
            first = jnp.stack(moved(first_trial, (block * width).astype(jnp.uint32)))
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
                micro_batch(seed, point_ids[row], point, trial_halves(trial_index(first_trial) + b * width))
                for b in range(blocks)
            ]
            rows.append({name: np.concatenate([np.asarray(p[name]) for p in parts]) for name in parts[0]})
        return {name: np.stack([r[name] for r in rows]) for name in rows[0]}

    return metrics


def trial_halves(index) -> np.ndarray:
    """uint32 (2,): the (high, low) 32-bit halves of trial index ``index`` (< 2^64), how the chunk
    programs take their first trial: JAX's 64-bit integers may be off, so no traced int64."""
    index = int(index)
    return np.array([index >> 32, index & 0xFFFFFFFF], np.uint32)


def trial_index(first) -> int:
    """The trial index of :func:`trial_halves` ``first`` (or of a plain integer)."""
    if np.ndim(first) == 0:
        return int(first)
    high, low = (int(x) for x in np.asarray(first))
    return high << 32 | low


def low_block(block: int) -> np.uint32:
    """A chunk's first summary block as the device takes it, modulo 2^32: the dyadic pieces of a
    chunk of fewer than 2^31 blocks depend only on its start's low bits (their alignment)."""
    return np.uint32(int(block) & 0xFFFFFFFF)


def halves(first):
    """A traced first trial as (high, low) uint32 (2,): :func:`trial_halves`' pair as it is, a
    scalar index below 2^32 (the earlier form, still accepted) with a high half of 0."""
    first = jnp.asarray(first, jnp.uint32)
    return first if first.ndim else jnp.stack([jnp.uint32(0), first])


def moved(first, offset):
    """(high, low) of trial ``first`` (:func:`trial_halves`, traced) + ``offset`` (uint32, traced,
    any shape, < 2^32): the low half wraps modulo 2^32 and carries into the high one."""
    low = first[1] + offset
    return first[0] + (low < first[1]).astype(jnp.uint32), low


def trial_key(base, high, low):
    """The key of trial index t = high·2^32 + low under ``base`` (a point's key, or the root's with
    common random numbers); ``high``, ``low`` uint32, traced (under jit and vmap).

    t < 2^32 (high = 0): ``fold_in(base, t)``, the key every trial had before indices grew past
    32 bits, computed by the same call, so a stored run grows and merges bit for bit. From 2^32
    on, with Threefry (JAX's default), the Threefry-2x32 hash of the counter (high, low) under
    ``base``: the very function ``fold_in`` applies to (0, t), taken on the whole 64-bit index.
    For a fixed key Threefry is a bijection of counters, so the keys of all 2^64 indices are
    distinct, and none equals a key the trial itself derives (those hash under the trial's own
    key). Nesting instead, fold_in(fold_in(base, high), low), would give trial high·2^32 + low the
    key trial ``high`` derives for its own stream ``low`` (a trial folds small constants into its
    key). Both branches are computed and one selected (a traced ``high``): a second hash per trial.
    Another generator (``jax_default_prng_impl``) folds ``low`` into its fold of ``high``, without
    that guarantee (its keys past 2^32 may meet a trial's own streams).
    """
    low_key = jax.random.fold_in(base, low)
    if str(jax.random.key_impl(base)) == "threefry2x32":
        words = threefry_2x32(jax.random.key_data(base), jnp.stack([high, low]))
        high_key = jax.random.wrap_key_data(words, impl="threefry2x32")
    else:
        high_key = jax.random.fold_in(jax.random.fold_in(base, high), low)
    return jax.random.wrap_key_data(
        jnp.where(high == 0, jax.random.key_data(low_key), jax.random.key_data(high_key)),
        impl=jax.random.key_impl(base),
    )


def nonfinite_per_trial(values):
    """bool (P, T): whether trial t of point p has a NaN or ±inf in any cell of ``values`` (P, T, ...)."""
    return ~jnp.isfinite(values).reshape(values.shape[:2] + (-1,)).all(-1)


class ChunkJob(NamedTuple):
    """What a group's chunk function is built and sized from (:func:`jaxfed.engine.sizing.sized_chunk_fn`)."""

    trial: Trial
    group: Group
    program: str  # digest of one trial's jaxpr: keys the compiled function kept in the process
    mesh: Mesh
    width: int  # trials per micro-batch
    budget: int  # bytes per device
    n_trials: int
    args: tuple  # example arguments of the chunk function: (seed, point ids, traced leaves, first trial[, n_valid])
    common: bool  # common random numbers
    summary: bool  # device summaries instead of raw metrics
    fixed: int  # bytes of outputs that do not grow with the batch (a summary's histograms and counts)
    trial_bytes: int  # bytes of one trial's metrics, every point of the group
    cache_dir: str | None  # the persistent compilation cache (keys the kept function: a run reports its use)
    lane_bytes: int  # one trial's working set in a micro-batch (sizing.width_bytes of the jaxpr's estimate)

    @property
    def step(self) -> int:
        """Trials of one micro-batch on every device: chunk sizes are multiples of it."""
        return self.width * self.mesh.size


class Compiler:
    """``compile_batch(batch)``: a job's chunk function compiled for ``batch`` trials, with its
    memory figures (:func:`compile_chunk_fn`); the compile times and cache hits add up in ``record``."""

    def __init__(self, job: ChunkJob):
        self.job = job
        self.record: dict[str, Any] = {"compile_s": 0.0, "compile_cached": True}
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
        with _KEPT_LOCK:  # (groups compile in threads: jaxfed.engine.core._compiling_ahead)
            if key in _KEPT:
                _KEPT.move_to_end(key)
                return _KEPT[key]
        fn = make_chunk_fn(j.trial, j.group, batch, j.mesh, j.width, j.common, j.summary)
        self._spans = []
        try:
            kept = compile_chunk_fn(fn, j.args, self._compile)
        finally:  # the wall time during which some compile ran (devices compile side by side)
            self.record["compile_s"] += _covered(self._spans)
        with _KEPT_LOCK:
            _KEPT[key] = kept
            while len(_KEPT) > KEPT_CHUNK_FNS:
                _KEPT.popitem(last=False)
        return kept


KEPT_CHUNK_FNS = 8
"""Compiled chunk functions kept in the process (the last used), so that running the same trial
again (a notebook's rerun, a grown sweep) neither traces, lowers nor loads it again, most of a
small rerun's time otherwise (benchmarks/README.md)."""
_KEPT: collections.OrderedDict = collections.OrderedDict()
_KEPT_LOCK = threading.Lock()

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
