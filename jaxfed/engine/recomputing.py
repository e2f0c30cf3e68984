"""Recomputing a run's trials without running it (``jaxfed verify``): :func:`recompute` gives the
values, or the summary, of given trials of given points, bit for bit those a run computed, from
the trial, the points and the options that made the run's identity (seed, common random numbers,
micro-batch width); :func:`point_groups` numbers the points' groups as a run does.

A trial's values depend only on its key, fold_in(fold_in(key(seed), p), t) (or fold_in(key(seed),
t) with common random numbers), and on the micro-batch program that computes it, one point × W
trials with trial t in lane t mod W (:func:`jaxfed.engine.compiled.batched_metrics`): never on the
chunk, the points beside it or the devices. So each micro-batch that holds a requested trial is
computed by that program on one device, and the trials asked for are cut from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import jax
import numpy as np

from jaxfed import jaxcompat, stats, validation
from jaxfed.engine.compiled import batched_metrics, trial_halves
from jaxfed.engine.options import RunOptions
from jaxfed.engine.points import Trial, group_points


def point_groups(points: list) -> list[tuple[int, ...]]:
    """The points' groups (equal static parts and array shapes, one compiled program each) as a run
    numbers them: group g is the g-th file of its store (:func:`jaxfed.store.summary_path`).

    Args:
        points: the run's list of point pytrees.

    Returns:
        Per group, in the order of first appearance among the points, the indices of its points.
    """
    return [group.point_ids for group, _ in group_points(points)]


def recompute(
    trial: Trial,
    points: list,
    ranges: Sequence[tuple[int, int]],
    options: RunOptions,
    *,
    point_ids: Sequence[int] | None = None,
    summary: bool = False,
) -> Iterator:
    """The values of trials [start, stop) of each range, for the points ``point_ids``, computed as
    the run of ``trial`` over ``points`` with ``options`` computed them: bit for bit on the build
    (JAX, jaxlib, backend, processor) that computed the run. Lazy: one range is computed (and held)
    at a time, by one compiled program per group of points.

    Args:
        trial: the run's ``trial(key, point) -> dict of arrays``.
        points: the run's whole list of points (a point's index is part of its keys).
        ranges: (start, stop) trial ranges, 0 <= start < stop <= :data:`jaxfed.validation.MAX_TRIALS`;
            with ``summary``, ``start`` a multiple of ``stats.summary.SUMMARY_BLOCK``.
        options: the run's ``seed``, ``common_random_numbers`` and ``micro_batch`` (its identity's
            width; a trial's last bits depend on it); the other fields are not read.
        point_ids: the points whose trials are computed, in this order (default: every point).
        summary: yield what a summary run keeps of each range instead of its values: the trials'
            whole blocks summarised (:func:`jaxfed.stats.summary.chunk_summary` from the range's
            first block, float64 sums as the run's device computes them) and the raw values of the
            trials after them (a run's last, partial block).

    Returns:
        An iterator, one item per range in the order given: a dict metric -> array (points, stop -
        start, *metric shape); with ``summary``, a pair (metric -> the summary of the range's whole
        blocks, empty when it has none; metric -> the values of its trials after them).

    Raises:
        ValueError: options without a micro-batch width, a range or point index out of bounds (at
            the call, before anything is computed).
    """
    validation.check("options", options, isinstance(options, RunOptions), "a jaxfed.engine.RunOptions")
    width = options.micro_batch
    validation.check("micro_batch", width, width is not None, "the run's micro-batch width (its identity's)")
    assert width is not None
    block = stats.summary.SUMMARY_BLOCK
    ranges = [(int(start), int(stop)) for start, stop in ranges]
    for start, stop in ranges:
        aligned = not summary or start % block == 0
        fits = 0 <= start < stop <= validation.MAX_TRIALS and aligned
        validation.check("range", (start, stop), fits, "trials [start, stop) of a run" + (f", start a multiple of {block}" if summary else ""))  # fmt: skip
    wanted = list(range(len(points))) if point_ids is None else [int(p) for p in point_ids]
    validation.check("point_ids", point_ids, all(0 <= p < len(points) for p in wanted), f"indices of the {len(points)} points")  # fmt: skip
    programs = _programs(trial, points, wanted, width, options.common_random_numbers)
    values = (_values(programs, wanted, np.uint32(options.seed), width, start, stop) for start, stop in ranges)
    if not summary:
        return values
    return (_summarised(v, start) for v, (start, _) in zip(values, ranges))


def _programs(trial: Trial, points: list, wanted: list, width: int, common: bool) -> list:
    """Per group that holds a wanted point: (its wanted points' ids, their stacked array leaves,
    the jitted micro-batch program of the group: :func:`~jaxfed.engine.compiled.batched_metrics` of one
    micro-batch per point, the program a run runs)."""
    out, asked = [], set(wanted)
    for group, traced in group_points(points):
        rows = [row for row, p in enumerate(group.point_ids) if p in asked]
        if rows:
            ids = np.asarray([group.point_ids[row] for row in rows], np.uint32)
            program = jax.jit(batched_metrics(trial, group, width, width, common))
            out.append((ids, [np.asarray(x)[rows] for x in traced], program))
    return out


def _values(programs: list, wanted: list, seed, width: int, start: int, stop: int) -> dict:
    """metric -> the values (points ``wanted``, trials [start, stop), …): the micro-batches that
    hold them, computed group by group, cut to the range and put in the order of ``wanted``."""
    first = start - start % width
    parts: list[dict] = []
    order: list[int] = []
    for ids, traced, program in programs:
        steps = np.int32(len(ids))  # (one micro-batch per point)
        chunks = [jax.device_get(program(seed, ids, traced, trial_halves(t), steps)) for t in range(first, stop, width)]
        parts.append({m: np.concatenate([c[m] for c in chunks], 1)[:, start - first : stop - first] for m in chunks[0]})
        order.extend(int(p) for p in ids)
    position = {p: row for row, p in enumerate(order)}
    rows = [position[p] for p in wanted]
    return {m: np.concatenate([part[m] for part in parts])[rows] for m in parts[0]}


def _summarised(values: dict, start: int) -> tuple[dict, dict]:
    """(metric -> the summary of the whole blocks of ``values``, trials from ``start`` on, a
    multiple of the block; metric -> the values after them), as a summary run keeps them."""
    block = stats.summary.SUMMARY_BLOCK
    n_trials = next(iter(values.values())).shape[1]
    whole = n_trials - n_trials % block
    parts = {}
    if whole:
        with jaxcompat.enable_x64(True):  # (float64 sums, as on the run's device)
            for metric, v in values.items():
                parts[metric] = stats.summary.chunk_summary(v[:, :whole], whole, np, start // block, whole // block)
    return parts, {metric: v[:, whole:] for metric, v in values.items()}
