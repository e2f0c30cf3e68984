"""The compiled chunk function of a group (raw metrics, or their summary computed on the device)
and its size from the memory budget."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxfed import stats
from jaxfed.engine.cache import load_probe, probe_key, save_probe, timed_compile
from jaxfed.engine.devices import LANES, make_mesh
from jaxfed.engine.memory import BUDGET_FOR_CHUNKS, balanced_chunk, refuse_chunk, round_up, size_text
from jaxfed.engine.points import Group, Trial, group_points, rebuild


def make_chunk_fn(
    trial: Trial, group: Group, batch: int, mesh: Mesh | None, common: bool = False, summary: bool = False
):
    """The chunk function of a group, for ``batch`` trials from ``first_trial`` on.

    Raw: (seed, point_ids (P,), traced leaves (P, ...), first_trial) -> (metrics (P, batch, ...),
    metric -> bool (P, batch): the trial has a NaN or ±inf value), so that the host need not
    pass over every value to count the non-finite trials.
    Summary: (…, first_trial, n_valid) -> metric -> :func:`jaxfed.stats.chunk_summary` of trials
    [first_trial, first_trial + n_valid) (a multiple of ``stats.SUMMARY_BLOCK``) plus ``tail``,
    the raw values (P, SUMMARY_BLOCK, ...) of the block from ``first_trial + n_valid`` on (the
    run's last, partial block, which the host summarises; garbage when there is none).

    With a mesh, the trial axis is sharded across it and the function is jitted; without one it
    runs unjitted on the default device (for testing jit against no-jit).
    """

    metrics = batched_metrics(trial, group, batch, mesh, common)

    def raw(seed, point_ids, traced, first_trial):
        values = metrics(seed, point_ids, traced, first_trial)
        return values, {name: nonfinite_per_trial(v) for name, v in values.items()}

    def summarised(seed, point_ids, traced, first_trial, n_valid):
        values = metrics(seed, point_ids, traced, first_trial)
        with jax.enable_x64(True):  # float64 block sums on any device; the trial itself stays as it is
            return {
                name: dict(
                    stats.chunk_summary(v, n_valid, jnp),
                    tail=jax.lax.dynamic_slice_in_dim(v, n_valid, stats.SUMMARY_BLOCK, axis=1),
                )
                for name, v in values.items()
            }

    if summary:
        return summarised if mesh is None else jax.jit(summarised)
    if mesh is None:
        return raw
    return jax.jit(raw, out_shardings=NamedSharding(mesh, P(None, "trials")))


def batched_metrics(trial: Trial, group: Group, batch: int, mesh: Mesh | None, common: bool = False):
    """(seed, point_ids (P,), traced leaves (P, ...), first_trial) -> metrics (P, batch, ...) of
    trials first_trial + [0, batch): the bare kernel, vmapped over trials and points (unjitted).

    The key of (point p, trial t) is fold_in(fold_in(key(seed), p), t), or fold_in(key(seed), t)
    with ``common`` (common random numbers)."""

    def one(root_key, point_id, traced, trial_id):
        key = jax.random.fold_in(root_key if common else jax.random.fold_in(root_key, point_id), trial_id)
        return trial(key, rebuild(group, traced))

    def metrics(seed, point_ids, traced, first_trial):
        trial_ids = first_trial + jnp.arange(batch, dtype=jnp.uint32)
        if mesh is not None and mesh.size > 1:
            trial_ids = jax.lax.with_sharding_constraint(trial_ids, NamedSharding(mesh, P("trials")))
        over_trials = jax.vmap(one, in_axes=(None, None, None, 0))
        return jax.vmap(over_trials, in_axes=(None, 0, 0, None))(jax.random.key(seed), point_ids, traced, trial_ids)

    return metrics


def nonfinite_per_trial(values):
    """bool (P, T): whether trial t of point p has a NaN or ±inf in any cell of ``values`` (P, T, ...)."""
    return ~jnp.isfinite(values).reshape(values.shape[:2] + (-1,)).all(-1)


def chunk_function(
    trial: Trial, points: list, chunk_size: int, seed: int = 0, devices: int | None = None, common: bool = False
):
    """The jitted function the engine runs for one chunk, with its arguments (for benchmarks).

    ``fn(*args)`` computes trials [0, batch) of every point, batch = ``chunk_size`` rounded up to
    a multiple of ``LANES`` × devices, returning metrics of shape (n_points, batch, …). The points
    must form a single group (equal static parts).
    """
    groups = group_points(points)
    if len(groups) != 1:
        raise ValueError(f"points must share their static leaves to form one compiled group, got {len(groups)} groups")
    group, traced = groups[0]
    mesh = make_mesh(devices)
    batch = round_up(chunk_size, LANES * mesh.size)
    fn = jax.jit(
        batched_metrics(trial, group, batch, mesh, common), out_shardings=NamedSharding(mesh, P(None, "trials"))
    )
    return fn, (np.uint32(seed), np.asarray(group.point_ids, np.uint32), traced, np.uint32(0))


def sized_chunk_fn(trial, group, program, mesh, budget, n_trials, chunk_size, args, common, summary, fixed, cache_dir):
    """(chunk size, compiled chunk function, compile record): the given size, or the largest that fits ``budget``.

    Without a given size, compiles for a probe batch of ``LANES`` trials per device and reads the
    memory analysis: temporaries and outputs scale linearly with the batch (arguments do not),
    plus the host copy of the outputs; a chunk may take 75% of the budget (on a CPU at most
    ``CPU_CHUNK_BYTES``), the rest is left to the process itself and to the summaries or result
    arrays. The probe's executable is reused when the size it implies needs no larger batch.
    ``fixed``: bytes of outputs that do not grow with the batch (a summary's histograms and
    counts): not extrapolated, but reserved three times (device output, scatter, host copy).

    The probe's memory figures are cached in ``cache_dir`` under a digest of ``program`` (one
    trial's jaxpr, digested) and of what the batched program adds (points, devices, mode), so a
    rerun neither lowers nor compiles the probe, only the chunk function (itself from JAX's
    persistent cache). Figures that no longer fit the program can only mis-size the chunk, which
    the compiled chunk's own memory analysis then corrects (below).

    A chosen size is corrected from the compiled chunk's own memory analysis when it exceeds
    ``budget``, and shrunk when the device refuses memory while compiling (a GPU allocates while
    it autotunes; the refused size scales the chunk down), at most ``MAX_RESIZES`` times.

    The record holds ``compile_s`` (seconds spent compiling), ``compile_cached`` (every
    executable came from the persistent cache) and ``memory_probe_cached``.

    Raises:
        ValueError: the smallest possible chunk (or the given one) needs more than ``budget``,
            checked from the output shapes before compiling and from the memory analysis after,
            or the device refused it while compiling.
    """
    step = LANES * mesh.size
    record: dict[str, Any] = {"compile_s": 0.0, "compile_cached": True, "memory_probe_cached": None}

    def compile_lowered(lowered):
        executable, seconds, cached = timed_compile(lowered)
        record["compile_s"] += seconds
        record["compile_cached"] &= cached
        return executable

    def compile_batch(batch):
        return compile_lowered(make_chunk_fn(trial, group, batch, mesh, common, summary).lower(*args))

    chosen = chunk_size is None
    if chosen:
        key = probe_key(
            program, mesh, points=len(group.point_ids), lanes=LANES, common=common, summary=summary, fixed=fixed
        )
        figures = load_probe(cache_dir, key)
        record["memory_probe_cached"] = figures is not None
        probe = None
        if figures is None:
            probe = compile_batch(step)
            analysis = probe.memory_analysis()
            figures = {"temp": int(analysis.temp_size_in_bytes), "output": int(analysis.output_size_in_bytes)}
            save_probe(cache_dir, key, figures)
        # The fixed outputs once: subtracting them twice (as if the scatter copied the histograms)
        # left nothing of a summary probe's 21 KB per trial, and the whole run became one chunk.
        per_trial_device = max(figures["temp"] + figures["output"] - fixed, 0) / LANES
        per_trial_host = max(figures["output"] - fixed, 0) / LANES
        per_trial = per_trial_device / mesh.size + per_trial_host
        refuse_chunk(step, True, step * per_trial + 3 * fixed, budget)
        usable = BUDGET_FOR_CHUNKS * budget - 3 * fixed  # the rest: the process itself, summaries, results
        if mesh.devices.flat[0].platform == "cpu":
            usable = min(usable, CPU_CHUNK_BYTES)
        chunk_size = balanced_chunk(n_trials, int(usable // max(per_trial, 1.0)), step)
        if chunk_size <= step:  # the probe's program is the chunk's
            return chunk_size, probe if probe is not None else compile_batch(step), record

    def resized(size: int, need: float) -> int:
        """The chunk size for which ``need`` bytes at ``size`` trials scale to fit, smaller than ``size``."""
        fits = balanced_chunk(n_trials, int(BUDGET_FOR_CHUNKS * budget * round_up(size, step) / need), step)
        return min(fits, max(step, round_up(size // 2, step)))

    for _ in range(MAX_RESIZES):
        try:
            compiled = compile_batch(round_up(chunk_size, step))
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
            chunk_size = resized(chunk_size, refused or 2 * BUDGET_FOR_CHUNKS * budget)
            continue
        analysis = compiled.memory_analysis()
        need = analysis.temp_size_in_bytes + analysis.output_size_in_bytes if analysis is not None else 0
        if chosen and need > budget and chunk_size > step:
            # The probe's linear extrapolation can underestimate a program whose memory does not
            # scale like the probe's (a 1e6-trial summary chunk needed 21 GiB where 4 were
            # predicted): size again from this compilation's own figure.
            chunk_size = resized(chunk_size, need)
            continue
        refuse_chunk(chunk_size, False, need, budget)
        return chunk_size, compiled, record
    raise ValueError(
        f"no chunk size fitting the memory budget of {size_text(budget)} was found in {MAX_RESIZES} compilations "
        "(--max-memory / max_memory); give --chunk-size / chunk_size"
    )


# On a CPU a chunk's buffers are fresh host memory: the first call of a 6 GiB chunk (262,144
# gfvl-topologies trials) ran 50% slower than the next ones (page faults), while chunks of 32,768
# (0.8 GiB) run at full speed from the first, and several chunks let the host's work on one
# overlap the next. A chosen chunk on a CPU takes at most this much; a given one is not limited.
CPU_CHUNK_BYTES = 2**30
MAX_RESIZES = 6  # compilations of the chunk function that may be refused or found too large before giving up
_SIZE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def refused_bytes(err: Exception) -> float | None:
    """The size of the allocation a RESOURCE_EXHAUSTED error names ("… allocate 299.02GiB …"), or None."""
    match = re.search(r"allocate ([0-9.]+) ?(TiB|GiB|MiB|KiB|B)\b", str(err))
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)] if match else None
