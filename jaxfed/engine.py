"""The sweep engine: runs ``trial(key, point) -> metrics`` over points × trials.

Points are pytrees. Following equinox's filtering convention, **array leaves are traced**
(batched with ``vmap``: a grid over SNR or ρ is one compiled call) and **every other leaf is
static** (Python ints, strings, tuples: part of the compiled function's identity). Points with
equal static parts and array shapes form a group that shares one compiled function.

Randomness: the key of (point p, trial t) is ``fold_in(fold_in(key(seed), p), t)``, or with
common random numbers ``fold_in(key(seed), t)`` for every point, so that all points of a trial see
the same data and draws and differ only by their parameters.

Execution, per group: trials run in chunks (all points of the group at once). The trial axis of a
chunk is sharded over a 1-D device mesh (``jax.sharding``, axis name ``"trials"``) spanning the
local devices, or every process's devices after ``jax.distributed.initialize``; process 0
gathers the results and owns the store. The compiled batch per device is a multiple of
:data:`LANES`: XLA's vectorised and scalar code paths can differ in the last bit, so every trial
takes the vectorised path and results are **bit-identical whatever the chunk size, device count
or process count**. The chunk size comes from a memory budget and the compiled function's memory
analysis unless given.

Results: ``keep="raw"`` returns every trial, arrays (point, trial, …); ``keep="summary"`` returns
a :class:`jaxfed.stats.Summary` (count, mean, standard error and a log-spaced histogram for
quantiles) so a million trials need no more memory than one chunk. The device computes each
chunk's part of it inside the compiled chunk function (:func:`jaxfed.stats.chunk_summary`:
integer counts and histograms, float64 sums per block of ``stats.SUMMARY_BLOCK`` trials aligned to
trial indices); the host folds the blocks in trial order. Summary chunks are whole blocks (the
chunk size is rounded up to a multiple of ``SUMMARY_BLOCK``), which keeps summaries bit-identical
whatever the chunk size, device count or process count.

Store: with ``out_dir``, every finished chunk (raw) or summary state (summary) is one atomic file
that records what it covers and is verified on load (see :mod:`jaxfed.store`); rerunning on the
same directory computes only what is missing, so a process killed at any moment loses at most
the chunk in flight, and a run can grow: the trial count is not part of the run's identity, so
asking for more trials computes only the new ones. Asking for fewer is served from the stored
trials in raw mode and refused in summary mode (a summary cannot be cut down). A directory
holding a different configuration, or a damaged file, is refused with one line naming it (or
discarded with ``overwrite``).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxfed import stats
from jaxfed.store import STORE_FORMAT, ConfigMismatch, GroupSpec, Store, StoreError, atomic_savez, atomic_write_json

__all__ = [
    "run",
    "chunk_function",
    "compilation_cache_dir",
    "use_compilation_cache",
    "CACHE_ENV",
    "make_mesh",
    "default_memory_budget",
    "Progress",
    "ConfigMismatch",
    "StoreError",
    "LANES",
    "MAX_TRIALS",
    "RAW_LIMIT_BYTES",
    "atomic_write_json",
    "atomic_savez",
]

Trial = Callable[[jax.Array, Any], dict]

LANES = 64
"""The compiled batch per device is a multiple of this many trials (see the module docstring)."""

RAW_LIMIT_BYTES = 2 * 2**30
"""``keep="auto"`` keeps every trial when the raw metrics fit in this many bytes, else summaries."""

MAX_TRIALS = 2**32
"""Trials per point at most: trial indices are folded into the keys as uint32, so more would repeat keys."""

_MEMORY_FRACTION = 0.25  # default budget: this fraction of the device's (or host's) memory
_BUDGET_FOR_CHUNKS = 0.75  # share of the budget a chunk's buffers may take
_HOST_FRACTION = 0.75  # share of the host's memory that raw results or summary states may take
_SUMMARY_BYTES_PER_BIN = 20  # int32: state, a chunk's counts, the folded state, the one being written and its bytes


# --------------------------------------------------------------------------- progress
class Progress:
    """Progress on stderr through tqdm: one bar per group (trials done, rate, ETA), started after
    the group is compiled, and one-line notes printed above the bars (never into them); silent
    when disabled."""

    def __init__(self, enabled: bool, label: str = ""):
        self.enabled, self.label = enabled, label
        self.bar = None

    def note(self, message: str) -> None:
        if self.enabled:
            tqdm.tqdm.write(f"{self.label}{message}", file=sys.stderr)

    def group(self, description: str, total: int) -> None:
        """Closes the previous group's bar and opens one for ``total`` trials."""
        self.close()
        if self.enabled:
            self.bar = tqdm.tqdm(
                total=total,
                desc=f"{self.label}{description}",
                unit=" point-trials",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(int(n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# --------------------------------------------------------------------------- points
def _is_traced_leaf(leaf) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray))


@dataclass(frozen=True)
class _Group:
    treedef: Any
    static: tuple  # (index, value) of each static leaf
    traced_slots: tuple  # leaf indices that are arrays
    point_ids: tuple  # global point indices in this group


def _group_points(points: list) -> list[tuple[_Group, list]]:
    """Groups points by static part and array shapes; returns (group, stacked array leaves)."""
    groups: dict = {}
    for p, point in enumerate(points):
        leaves, treedef = jax.tree.flatten(point)
        traced = tuple(i for i, leaf in enumerate(leaves) if _is_traced_leaf(leaf))
        static = tuple((i, leaf) for i, leaf in enumerate(leaves) if i not in traced)
        shapes = tuple((np.shape(leaves[i]), np.asarray(leaves[i]).dtype.str) for i in traced)
        key = (treedef, static, traced, shapes)
        groups.setdefault(key, []).append((p, [leaves[i] for i in traced]))
    out = []
    for (treedef, static, traced, _), members in groups.items():
        ids = tuple(p for p, _ in members)
        stacked = [np.stack([np.asarray(m[1][j]) for m in members]) for j in range(len(traced))]
        out.append((_Group(treedef, static, traced, ids), stacked))
    return out


def _rebuild(group: _Group, traced_leaves: list):
    leaves: list = [None] * (len(group.static) + len(group.traced_slots))
    for i, value in group.static:
        leaves[i] = value
    for i, value in zip(group.traced_slots, traced_leaves):
        leaves[i] = value
    return jax.tree.unflatten(group.treedef, leaves)


# --------------------------------------------------------------------------- devices
def make_mesh(devices: int | None = None) -> Mesh:
    """1-D mesh (axis ``"trials"``) over the devices the engine shards trials across.

    Args:
        devices: number of local devices per process (default: all). Under
            ``jax.distributed`` the mesh spans every process's devices.

    Raises:
        ValueError: more devices asked for than present (on CPU, more host devices need
            ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts; the
            ``--devices`` flag of the CLI sets it).
    """
    local = jax.local_devices()
    n = len(local) if devices is None else devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(local):
        raise ValueError(
            f"devices must be an integer in [1, {len(local)}] (the local devices present), got {devices!r}; "
            "on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N creates N host devices"
        )
    # The first n devices of every process, in process order.
    by_process = [[d for d in jax.devices() if d.process_index == p][:n] for p in range(jax.process_count())]
    chosen = [d for devs in by_process for d in devs]
    return Mesh(np.array(chosen), ("trials",))


def default_memory_budget(mesh: Mesh) -> int:
    """Bytes per device for one chunk: a quarter of the device's memory (host RAM on CPU)."""
    device = mesh.devices.flat[0]
    try:
        limit = device.memory_stats()["bytes_limit"]
    except (AttributeError, KeyError, TypeError, jax.errors.JaxRuntimeError):
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, len(jax.local_devices()))
    return int(_MEMORY_FRACTION * limit)


def _make_chunk_fn(
    trial: Trial, group: _Group, batch: int, mesh: Mesh | None, common: bool = False, summary: bool = False
):
    """The chunk function of a group, for ``batch`` trials from ``first_trial`` on.

    Raw: (seed, point_ids (P,), traced leaves (P, ...), first_trial) -> metrics (P, batch, ...).
    Summary: (…, first_trial, n_valid) -> metric -> :func:`jaxfed.stats.chunk_summary` of trials
    [first_trial, first_trial + n_valid) (a multiple of ``stats.SUMMARY_BLOCK``) plus ``tail``,
    the raw values (P, SUMMARY_BLOCK, ...) of the block from ``first_trial + n_valid`` on (the
    run's last, partial block, which the host summarises; garbage when there is none).

    With a mesh, the trial axis is sharded across it and the function is jitted; without one it
    runs unjitted on the default device (for testing jit against no-jit).
    """

    def one(root_key, point_id, traced, trial_id):
        key = jax.random.fold_in(root_key if common else jax.random.fold_in(root_key, point_id), trial_id)
        return trial(key, _rebuild(group, traced))

    def metrics(seed, point_ids, traced, first_trial):
        trial_ids = first_trial + jnp.arange(batch, dtype=jnp.uint32)
        if mesh is not None and mesh.size > 1:
            trial_ids = jax.lax.with_sharding_constraint(trial_ids, NamedSharding(mesh, P("trials")))
        over_trials = jax.vmap(one, in_axes=(None, None, None, 0))
        return jax.vmap(over_trials, in_axes=(None, 0, 0, None))(jax.random.key(seed), point_ids, traced, trial_ids)

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
        return metrics
    return jax.jit(metrics, out_shardings=NamedSharding(mesh, P(None, "trials")))


def _to_host(tree) -> dict:
    """The chunk function's outputs (a pytree) as NumPy arrays on process 0, gathered from every process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


def _broadcast_from_0(array: np.ndarray) -> np.ndarray:
    """Process 0's value of a small int64 array on every process (the work plan)."""
    if jax.process_count() == 1:
        return array
    from jax.experimental import multihost_utils

    n = multihost_utils.broadcast_one_to_all(np.int64(array.size))
    padded = np.zeros(int(n), np.int64)
    if jax.process_index() == 0:
        padded[:] = array.ravel()
    # A writable copy: the caller updates it (a summary run's per-point trial counts).
    return np.array(multihost_utils.broadcast_one_to_all(padded)).reshape(-1, *array.shape[1:])


def chunk_function(
    trial: Trial, points: list, chunk_size: int, seed: int = 0, devices: int | None = None, common: bool = False
):
    """The jitted function the engine runs for one chunk, with its arguments (for benchmarks).

    ``fn(*args)`` computes trials [0, batch) of every point, batch = ``chunk_size`` rounded up to
    a multiple of ``LANES`` × devices, returning metrics of shape (n_points, batch, …). The points
    must form a single group (equal static parts).
    """
    groups = _group_points(points)
    if len(groups) != 1:
        raise ValueError(f"points must share their static leaves to form one compiled group, got {len(groups)} groups")
    group, traced = groups[0]
    mesh = make_mesh(devices)
    batch = _round_up(chunk_size, LANES * mesh.size)
    fn = _make_chunk_fn(trial, group, batch, mesh, common)
    return fn, (np.uint32(seed), np.asarray(group.point_ids, np.uint32), traced, np.uint32(0))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _balanced_chunk(n_trials: int, fits: int, step: int) -> int:
    """The chunk size for ``n_trials`` when at most ``fits`` trials fit in one chunk: as few
    chunks as fit, of equal size (a multiple of ``step``), so that the last one is not mostly
    padding (262,144 trials in chunks of 190,784 computed 381,568).

    ceil(n / ceil(n / fits)) rounded up to ``step``; at least ``step``, at most ``n_trials``.
    """
    fits = max(step, fits // step * step)
    n_chunks = -(-n_trials // fits)
    return min(n_trials, _round_up(-(-n_trials // n_chunks), step))


def _missing_ranges(n_trials: int, done: list[tuple[int, int]], chunk_size: int) -> list[tuple[int, int]]:
    """Chunks of at most ``chunk_size`` trials covering what ``done`` (stored ranges, possibly
    overlapping) leaves out of [0, n_trials); O(stored chunks), whatever ``n_trials``."""
    ranges, covered = [], 0
    for start, stop in sorted(done) + [(n_trials, n_trials)]:
        ranges += [(t, min(t + chunk_size, start)) for t in range(covered, start, chunk_size)]
        covered = max(covered, stop)
    return ranges


# --------------------------------------------------------------------------- checks before any work
def _metric_specs(probes: list, groups: list) -> dict:
    """metric -> (shape, dtype string) of one trial, from each group's ``eval_shape`` probe.

    Raises:
        ValueError: naming the metric and the problem, when a trial does not return a dict of
            arrays with valid names, or when a metric's names, shape or dtype depend on the point.
    """
    specs, first = None, None
    for (group, _), probe in zip(groups, probes):
        p = group.point_ids[0]
        if not isinstance(probe, dict):
            raise ValueError(
                f"trial must return a dict of metric name -> array, got {type(probe).__name__} (point {p})"
            )
        here = {}
        for name, value in probe.items():
            if not isinstance(name, str) or not name or "/" in name or name.startswith("__"):
                raise ValueError(
                    f"metric name {name!r} (point {p}) must be a non-empty string without '/', not starting with '__'"
                )
            if not isinstance(value, jax.ShapeDtypeStruct):
                raise ValueError(f"metric {name!r} must be an array, got {type(value).__name__} (point {p})")
            here[name] = (tuple(value.shape), np.dtype(value.dtype).str)
        if specs is None:
            specs, first = here, p
            continue
        if set(here) != set(specs):
            raise ValueError(
                f"trial returns metrics {sorted(specs)} for point {first} but {sorted(here)} for point {p}; "
                "every point must return the same metrics"
            )
        for name, (shape, dtype) in here.items():
            if (shape, dtype) != specs[name]:
                raise ValueError(
                    f"metric {name!r} is {specs[name][1]}{list(specs[name][0])} for point {first} but {dtype}{list(shape)} "
                    f"for point {p}: a metric's shape and dtype must not depend on the point"
                )
    return specs


def _host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _size(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}"
        n /= 1024


def _check_host_memory(keep: str, n_points: int, n_trials: int, specs: dict) -> None:
    """Refuses, before anything is allocated, results that cannot fit in the host's memory."""
    cells = sum(math.prod(shape) for shape, _ in specs.values())
    if keep == "raw":
        need = n_points * n_trials * sum(math.prod(shape) * np.dtype(dt).itemsize for shape, dt in specs.values())
        hint = "keep fewer trials or use keep='summary' (--keep summary)"
    else:
        need = n_points * cells * (stats.N_BINS * _SUMMARY_BYTES_PER_BIN + 64)
        hint = "use smaller metric shapes"
    budget = _HOST_FRACTION * _host_memory()
    if need > budget:
        raise ValueError(
            f"keep={keep!r}: the results would need {_size(need)} of host memory, more than the budget of "
            f"{_size(budget)} ({_HOST_FRACTION:.0%} of this machine's); {hint}"
        )


def _refuse_chunk(chunk_size: int, minimum: bool, need: float, budget: int) -> None:
    if need > budget:
        what, hint = (
            (f"the smallest chunk ({chunk_size} trials)", "smaller shapes")
            if minimum
            else (f"a chunk of {chunk_size} trials", "a smaller chunk size")
        )
        raise ValueError(
            f"{what} would need {_size(need)} per device, more than the memory budget of {_size(budget)} "
            f"(--max-memory / max_memory); use {hint} or a larger budget"
        )


def _check_chunk_outputs(n_points: int, specs: dict, chunk_size: int | None, n_devices: int, budget: int) -> None:
    """Refuses a chunk whose outputs alone (a device's share plus the host copy) exceed the
    budget: the smallest chunk, or the given one. Needs only shapes, so it runs before compiling."""
    step = LANES * n_devices
    batch = step if chunk_size is None else _round_up(chunk_size, step)
    out_per_trial = n_points * sum(math.prod(s) * np.dtype(d).itemsize for s, d in specs.values())
    _refuse_chunk(chunk_size or step, chunk_size is None, batch * out_per_trial * (1 + 1 / n_devices), budget)


# --------------------------------------------------------------------------- run
def run(
    trial: Trial,
    points: list,
    n_trials: int,
    seed: int = 0,
    chunk_size: int | None = None,
    out_dir: str | None = None,
    identity: dict | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    use_jit: bool = True,
    devices: int | None = None,
    max_memory: int | None = None,
    keep: str = "raw",
    info: dict | None = None,
    common_random_numbers: bool = False,
    compilation_cache: str | None = None,
    target_se: float | None = None,
    target_metric: str | None = None,
    target_statistic: str = "mean",
) -> dict:
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
            multiple of ``stats.SUMMARY_BLOCK``); default: as many as ``max_memory`` allows.
        out_dir: if given (process 0), finished chunks are stored there and a rerun resumes or
            grows the run (see :mod:`jaxfed.store`).
        identity: JSON dict that identifies the run for resume (required with ``out_dir``); it
            should not contain the trial count, so that a run can grow.
        overwrite: discard stored results that cannot be used (another identity, damaged
            files, a summary of more trials than asked for) instead of raising.
        progress: progress bar on stderr (default: when stderr is a TTY, on process 0).
        use_jit: ``False`` runs the same vmapped function unjitted on one device (for tests).
        devices: local devices per process to shard trials over (default: all).
        max_memory: bytes per device a chunk may use (default: a quarter of the device's
            memory); the chunk size follows from the compiled function's memory analysis.
        keep: ``"raw"`` (every trial), ``"summary"`` (:class:`jaxfed.stats.Summary`, computed on the device)
            or ``"auto"`` (raw when it fits in ``RAW_LIMIT_BYTES``).
        info: if a dict is given, it receives what the engine chose (chunk sizes, devices, keep;
            per group: the chunk size, None when the store already held every trial and nothing
            was compiled), the compilation cache directory, per group the compile time in
            seconds, whether the executable came from the cache and whether the memory probe's
            result did, and ``nonfinite_trials``: metric -> per point, the trials with a NaN or ±inf value.
        common_random_numbers: every point of trial t gets the key fold_in(key(seed), t), so
            points differ only by their parameters (variance reduction for comparisons).
        target_se, target_metric: a precision target (summary mode; ``n_trials`` is then the
            most per point): chunks run until, for each point on its own, the standard error of
            ``target_statistic`` of ``target_metric`` (``"NAME"``: its worst cell, ``"NAME@i"`` or
            ``"NAME@i,j"``: one cell) is at most ``target_se``; a point stops at the first chunk
            boundary where it is (decided from completed chunks only, so a rerun with the same
            seed and chunk size gives identical results) and is not computed again.
            ``info["target"]`` receives per point the trials run and the standard error reached.
        target_statistic: ``"mean"`` (default) or ``"median"``: whose standard error
            ``target_se`` bounds (the median's from the histogram, :func:`jaxfed.stats.median_se`).
        compilation_cache: directory of JAX's persistent compilation cache (and of the memory
            probe's results), ``"off"`` to disable it; default: ``$JAXFED_COMPILATION_CACHE``, else
            a per-user directory (see :func:`compilation_cache_dir`).

    Returns:
        dict metric -> NumPy array (n_points, n_trials, *metric_shape) for ``keep="raw"``,
        or metric -> :class:`jaxfed.stats.Summary` for ``keep="summary"``. Non-finite values
        stay in raw arrays; summaries leave them out of every statistic and count them.

    Raises:
        ValueError: a bad argument, trial output or memory need (before any work);
            :class:`jaxfed.store.StoreError` (a ValueError): an unusable ``out_dir`` or stored file.
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or not 1 <= n_trials <= MAX_TRIALS:
        raise ValueError(f"n_trials must be an integer in [1, 2**32] (trial indices are 32-bit), got {n_trials!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if max_memory is not None and (isinstance(max_memory, bool) or not isinstance(max_memory, int) or max_memory < 1):
        raise ValueError(f"max_memory must be a positive integer number of bytes, got {max_memory!r}")
    if keep not in ("raw", "summary", "auto"):
        raise ValueError(f"keep must be 'raw', 'summary' or 'auto', got {keep!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    if not points:
        raise ValueError("points must be a non-empty list")
    if out_dir is not None and not isinstance(identity, dict):
        raise ValueError("identity (a JSON dict) is required when out_dir is given")
    chunk_size = None if chunk_size is None else min(chunk_size, n_trials)

    mesh = make_mesh(devices) if use_jit else None
    n_shards = mesh.size if mesh is not None else 1
    budget = max_memory if max_memory is not None else default_memory_budget(mesh or make_mesh(1))
    is_main = jax.process_index() == 0
    bar = Progress((sys.stderr.isatty() if progress is None else progress) and is_main)
    groups = _group_points(points)
    info = {} if info is None else info
    cache_dir = use_compilation_cache(compilation_cache, note=bar.note) if use_jit else None
    info.update(
        devices=n_shards,
        processes=jax.process_count(),
        chunk_sizes=[],
        budget_bytes=budget,
        compilation_cache=cache_dir,
        compile_s=[],
        compile_cached=[],
        memory_probe_cached=[],
    )

    # Shapes of one trial's metrics, per group, without running anything.
    probes = [
        jax.eval_shape(lambda k, t, g=group: trial(k, _rebuild(g, t)), jax.random.key(0), [x[0] for x in traced])
        for group, traced in groups
    ]
    specs = _metric_specs(probes, groups)
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
    _check_host_memory(keep, len(points), n_trials, specs)
    if mesh is not None:  # the outputs alone of the smallest (or the given) chunk must fit
        for group, _ in groups:
            _check_chunk_outputs(len(group.point_ids), specs, chunk_size, mesh.size, budget)
    full_identity = None
    if out_dir is not None:
        full_identity = dict(
            identity, seed=seed, common_random_numbers=bool(common_random_numbers), store_format=STORE_FORMAT
        )
        if target is not None:  # where each point stops depends on the target
            full_identity["target"] = {"se": target.se, "metric": target_metric}
            if target.statistic != "mean":  # (stores of mean-targeted runs keep their identity)
                full_identity["target"]["statistic"] = target.statistic

    results: dict = {}
    nonfinite = {name: np.zeros(len(points), np.int64) for name in specs}
    if keep == "raw":
        results = {name: np.zeros((len(points), n_trials) + shape, dtype) for name, (shape, dtype) in specs.items()}
    # Every stored file is read and verified (by process 0) before anything is compiled or computed.
    specs_by_group = [GroupSpec(g, group.point_ids, specs) for g, (group, _) in enumerate(groups)]
    refusal = None
    try:
        store = Store(out_dir if is_main else None, full_identity or {}, overwrite, note=bar.note)
        stored = [_load_stored(store, spec, keep, n_trials, results) for spec in specs_by_group]
    except StoreError as err:
        refusal = err
    _raise_on_every_process(refusal)
    writer = _Writer()
    try:
        for g, ((group, traced), spec, done) in enumerate(zip(groups, specs_by_group, stored)):
            rows = np.asarray(group.point_ids)
            point_ids = np.asarray(group.point_ids, np.uint32)

            summary = keep == "summary"

            def args(start, n_valid=0):
                extra = (np.uint32(n_valid),) if summary else ()
                return (np.uint32(seed), point_ids, traced, np.uint32(start)) + extra

            wanted = chunk_size
            if target is not None and done[3] is not None:  # a targeted run resumes on its own chunk boundaries
                wanted = done[3]
            if summary and wanted is not None:  # chunks start on sum blocks (see stats.SUMMARY_BLOCK)
                wanted = min(_round_up(wanted, stats.SUMMARY_BLOCK), n_trials)
            left = not _complete(done, keep, n_trials)
            if not int(_broadcast_from_0(np.asarray([left], np.int64))[0]):  # verified complete: nothing to compile
                size, chunk_fn, compiled = None, None, {}
            elif mesh is None:
                size, compiled = wanted or min(n_trials, 4096), {}
                chunk_fn = _make_chunk_fn(trial, group, _round_up(size, LANES), None, common_random_numbers, summary)
            else:
                bar.note(f"group {g + 1}/{len(groups)}: compiling …")
                size, chunk_fn, compiled = _sized_chunk_fn(
                    trial,
                    group,
                    mesh,
                    budget,
                    n_trials,
                    wanted,
                    args(0),
                    common_random_numbers,
                    summary,
                    _summary_output_bytes(len(rows), specs) if summary else 0,
                    cache_dir,
                )
            info["chunk_sizes"].append(size)
            for key in ("compile_s", "compile_cached", "memory_probe_cached"):
                info[key].append(compiled.get(key))
            if size is not None:
                bar.note(
                    f"group {g + 1}/{len(groups)}: {len(rows)} point(s), chunk size {size} trials over {n_shards} device(s), "
                    f"memory budget {_size(budget)} per device"
                    + (
                        f", compiled in {compiled['compile_s']:.1f} s{' (cache)' if compiled['compile_cached'] else ''}"
                        if compiled
                        else ""
                    )
                )
            bar.group(f"group {g + 1}/{len(groups)}", len(rows) * n_trials)

            if keep == "raw":
                plan = _broadcast_from_0(
                    np.asarray(_missing_ranges(n_trials, done, size or n_trials), np.int64).reshape(-1, 2)
                )
                bar.update(len(rows) * (n_trials - int((plan[:, 1] - plan[:, 0]).sum())))

                def store_raw(chunk, device_out):
                    start, stop = (int(t) for t in chunk)
                    out = {name: value[:, : stop - start] for name, value in _to_host(device_out).items()}
                    for name, value in out.items():
                        results[name][rows, start:stop] = value
                    writer.submit(store.save_raw, spec, start, stop, out)
                    bar.update(len(rows) * (stop - start))

                _pipelined(plan, lambda chunk: chunk_fn(*args(int(chunk[0]))), store_raw, writer)
                for name in specs:
                    nonfinite[name][rows] = [_nonfinite_trials(results[name][p]) for p in rows]
            else:
                first, states, tails, counts = _resume_point(done, n_trials, len(rows), specs)
                first = int(_broadcast_from_0(np.asarray([first], np.int64))[0])
                counts = _broadcast_from_0(counts)  # only process 0 reads the store
                bar.update(int(counts.sum()))

                def whole(stop):  # trials before ``stop`` in whole sum blocks
                    return stop // stats.SUMMARY_BLOCK * stats.SUMMARY_BLOCK

                def fold_summary(chunk, device_out, active=slice(None)):
                    start, stop = chunk
                    out = _to_host(device_out)
                    n_blocks = (whole(stop) - start) // stats.SUMMARY_BLOCK
                    counts[active] = stop  # on every process: the next chunk's start
                    if is_main:  # new arrays, never changed in place: the writer thread may still read the last ones
                        for name, part in out.items():
                            tail = part["tail"][:, : stop - whole(stop)]
                            if isinstance(active, slice):
                                states[name], tails[name] = stats.fold(states[name], part, n_blocks), tail
                            else:
                                sub = stats.fold(stats.SummaryState(*(f[active] for f in states[name])), part, n_blocks)
                                states[name] = stats.SummaryState(
                                    *(_with_rows(f, active, v) for f, v in zip(states[name], sub))
                                )
                                tails[name] = _with_rows(_widened(tails[name], tail.shape[1]), active, tail)
                        snapshot = {name: dict(states[name]._asdict(), tail=tails[name]) for name in specs}
                        writer.submit(store.save_summary, spec, counts.tolist(), size, snapshot)
                    bar.update((len(rows) if isinstance(active, slice) else active.size) * (stop - start))

                if target is None:
                    plan = [(start, min(start + size, n_trials)) for start in range(first, n_trials, size or n_trials)]
                    _pipelined(
                        plan, lambda chunk: chunk_fn(*args(chunk[0], whole(chunk[1]) - chunk[0])), fold_summary, writer
                    )
                else:
                    # Sequential: each decision needs the chunk before it (and only chunks before it).
                    subset_fn = None  # jitted for the shapes of fewer points, when some have stopped
                    while True:
                        go = _broadcast_from_0(_still_running(states, counts, n_trials, target).astype(np.int64))
                        active = np.flatnonzero(go)
                        if active.size == 0:
                            break
                        start = int(counts[active[0]])
                        stop = min(start + size, n_trials)
                        if active.size < len(rows) and subset_fn is None:
                            subset_fn = (
                                chunk_fn
                                if mesh is None
                                else _make_chunk_fn(
                                    trial, group, _round_up(size, LANES * mesh.size), mesh, common_random_numbers, True
                                )
                            )
                        fn = chunk_fn if active.size == len(rows) else subset_fn
                        sub_args = (
                            np.uint32(seed),
                            point_ids[active],
                            [x[active] for x in traced],
                            np.uint32(start),
                            np.uint32(whole(stop) - start),
                        )
                        fold_summary((start, stop), fn(*sub_args), active)
                    writer.wait()
                tail_lengths = np.where(counts == counts.max(initial=0), counts - whole(counts), 0)
                for name in specs:
                    final, summary_of = stats.finish(states[name], tails[name], tail_lengths)
                    results.setdefault(name, []).append((rows, summary_of))
                    nonfinite[name][rows] = final.nonfinite_trials
                if target is not None:
                    for p, n, se in zip(rows, counts, _worst_se(results[target.metric][-1][1], target)):
                        info["target"]["trials_per_point"][p] = int(n)
                        info["target"]["se_reached"][p] = float(se)

    finally:
        writer.close()
        bar.close()
    info["nonfinite_trials"] = {name: counts.tolist() for name, counts in nonfinite.items()}
    if keep == "summary":
        results = {name: stats.merge_point_groups(parts, len(points)) for name, parts in results.items()}
    return results


def _raise_on_every_process(refusal: StoreError | None) -> None:
    """Raises process 0's refusal of the store on every process: the others would otherwise wait
    for it in the next collective until JAX's heartbeat timeout."""
    if jax.process_count() > 1:
        refused = int(_broadcast_from_0(np.asarray([refusal is not None], np.int64))[0])
        if refused and refusal is None:
            raise StoreError("process 0 refused the result directory (its error line names the file)")
    if refusal is not None:
        raise refusal


def _load_stored(store: Store, spec: GroupSpec, keep: str, n_trials: int, results: dict):
    """What the store holds for a group, verified: raw mode copies the stored trials into
    ``results`` and returns their ranges; summary mode returns what
    :meth:`jaxfed.store.Store.load_summary` does (stop, states, per-point trials, chunk size)."""
    if keep != "raw":
        return store.load_summary(spec, n_trials)
    rows, done = np.asarray(spec.point_ids), []
    for start, stop, arrays in store.raw_chunks(spec, n_trials):
        stop_used = min(stop, n_trials)  # a larger run's chunk serves a smaller request
        for name in spec.metrics:
            results[name][rows, start:stop_used] = arrays[name][:, : stop_used - start]
        done.append((start, stop_used))
    return done


class _Writer:
    """Runs store writes one at a time on a background thread, so that the device and the host
    need not wait for the disk; :meth:`submit` first waits for the previous write (at most one
    pending, in order: the store sees the same sequence of calls as without the thread), and
    re-raises whatever it raised, a simulated or real kill included."""

    def __init__(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxfed-store")
        self._pending = None

    def submit(self, fn, *args) -> None:
        self.wait()
        self._pending = self._pool.submit(fn, *args)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Waits for the last write, then stops the thread (also after an error)."""
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)


def _pipelined(chunks, dispatch, handle, writer: _Writer) -> None:
    """For each chunk, ``dispatch(chunk)`` (asynchronous: returns device arrays at once) and then
    ``handle(chunk, outputs)`` of the *previous* chunk, so the device computes chunk i + 1 while
    the host converts, folds and stores chunk i. At most two chunks are alive: the one in flight
    and the one being handled (whose write waits for the previous write first)."""
    previous = None
    for chunk in chunks:
        outputs = dispatch(chunk)
        if previous is not None:
            handle(*previous)
        previous = (chunk, outputs)
    if previous is not None:
        handle(*previous)
    writer.wait()


def _complete(done, keep: str, n_trials: int) -> bool:
    """Whether the verified store already holds every trial asked for (nothing to compute)."""
    if keep == "raw":
        return not _missing_ranges(n_trials, done, n_trials)
    return done[1] is not None and done[0] == n_trials


def _summary_output_bytes(n_points: int, specs: dict) -> int:
    """Bytes of a summary chunk's outputs that do not grow with the batch: int32 counts and
    histograms, and the raw tail block."""
    per_cell = 4 * (stats.N_BINS + 2)
    return n_points * sum(
        math.prod(shape) * (per_cell + stats.SUMMARY_BLOCK * np.dtype(dt).itemsize) + 4 for shape, dt in specs.values()
    )


def _resume_point(done, n_trials: int, n_points: int, specs: dict) -> tuple[int, dict, dict, np.ndarray]:
    """(first trial to compute, metric -> SummaryState of the whole blocks before it, metric ->
    raw tail after them, per point the trials done) from a stored summary (see
    :meth:`jaxfed.store.Store.load_summary`).

    A finished run (stored up to ``n_trials``) is complete as stored; a shorter one resumes at its
    last whole block, recomputing the partial block after it, so that every block sum is taken
    over the same trials as in an uninterrupted run.
    """
    stop, stored, point_trials, _ = done
    if stored is None:
        states = {name: stats.empty_state((n_points,) + shape) for name, (shape, _) in specs.items()}
        tails = {name: np.zeros((n_points, 0) + shape, dt) for name, (shape, dt) in specs.items()}
        return 0, states, tails, np.zeros(n_points, np.int64)
    states = {name: stats.SummaryState(**{f: s[f] for f in stats.SummaryState._fields}) for name, s in stored.items()}
    tails = {name: s["tail"] for name, s in stored.items()}
    counts = np.asarray(point_trials, np.int64)
    if stop == n_trials:
        return stop, states, tails, counts
    first = stop // stats.SUMMARY_BLOCK * stats.SUMMARY_BLOCK
    tails = {name: tail[:, :0] for name, tail in tails.items()}
    return first, states, tails, np.minimum(counts, first)


def _with_rows(array: np.ndarray, rows, values) -> np.ndarray:
    """A copy of ``array`` with ``rows`` replaced by ``values``."""
    out = array.copy()
    out[rows] = values
    return out


def _widened(tail: np.ndarray, n: int) -> np.ndarray:
    """``tail`` (points, trials, …) zero-padded to at least ``n`` trials."""
    if tail.shape[1] >= n:
        return tail
    out = np.zeros((tail.shape[0], n) + tail.shape[2:], tail.dtype)
    out[:, : tail.shape[1]] = tail
    return out


TARGET_STATISTICS = ("mean", "median")
"""What a precision target bounds the standard error of: the mean (from the float64 sums) or the
median (from the histogram, :func:`jaxfed.stats.median_se`)."""


class Target(NamedTuple):
    """A precision target: every point runs until the standard error of ``statistic`` (the mean
    or the median) of ``metric`` (at ``index``, or the worst cell when None) is at most ``se``."""

    se: float
    metric: str
    index: tuple | None
    statistic: str = "mean"


def parse_target(se, metric: str | None, specs: dict, statistic: str = "mean") -> Target:
    """The :class:`Target` of ``se`` and ``"NAME"`` or ``"NAME@i"`` / ``"NAME@i,j"``.

    Raises:
        ValueError: one line, for a target that is not a positive finite number, an unknown
            metric (naming the known ones), an index that does not exist in its shape or a
            statistic other than those in :data:`TARGET_STATISTICS`.
    """
    if isinstance(se, bool) or not isinstance(se, (int, float)) or not (math.isfinite(se) and se > 0):
        raise ValueError(f"target_se must be a finite number > 0, got {se!r}")
    if statistic not in TARGET_STATISTICS:
        raise ValueError(f"target_statistic must be one of {', '.join(TARGET_STATISTICS)}, got {statistic!r}")
    if not isinstance(metric, str) or not metric:
        raise ValueError(
            f"target_metric is required with target_se: one of {', '.join(sorted(specs))}, optionally NAME@index"
        )
    name, _, index_text = metric.partition("@")
    if name not in specs:
        raise ValueError(f"target metric {name!r} does not exist; metrics: {', '.join(sorted(specs))}")
    shape = specs[name][0]
    if not index_text:
        return Target(float(se), name, None, statistic)
    try:
        index = tuple(int(part) for part in index_text.split(","))
    except ValueError:
        index = None
    if not shape:
        raise ValueError(f"target metric {name!r} is a scalar per trial: give it without @index")
    if index is None or len(index) != len(shape) or not all(0 <= i < n for i, n in zip(index, shape)):
        raise ValueError(
            f"target metric index {index_text!r} does not exist in {name!r}, whose cells have shape {list(shape)} "
            f"(use {name}@i with 0 <= i < n{' per axis, comma-separated' if len(shape) > 1 else ''})"
        )
    return Target(float(se), name, index, statistic)


def _worst_se(summary, target: Target) -> np.ndarray:
    """Per point, the standard error of the target's statistic in its cell (or the worst over
    cells; NaN or inf when a cell has too few finite trials, which never meets a target)."""
    se = np.asarray(summary.se if target.statistic == "mean" else stats.median_se(summary))
    se = se[(slice(None),) + target.index] if target.index is not None else se.reshape(se.shape[0], -1)
    se = np.where(np.isnan(se), np.inf, se)
    return se if se.ndim == 1 else se.max(axis=1, initial=-np.inf)


def _still_running(states: dict, counts: np.ndarray, n_trials: int, target: Target) -> np.ndarray:
    """Per point, whether it needs another chunk: fewer than ``n_trials`` trials and the target
    not yet met by the trials done (decided from completed chunks only)."""
    se = _worst_se(stats.result_of(states[target.metric]), target)
    return (counts < n_trials) & ~(se <= target.se)


def _nonfinite_trials(values: np.ndarray) -> int:
    """Trials (axis 0) of one point's raw metric with a NaN or ±inf anywhere."""
    return int((~np.isfinite(values)).reshape(values.shape[0], -1).any(-1).sum())


def _sized_chunk_fn(trial, group, mesh, budget, n_trials, chunk_size, args, common, summary, fixed=0, cache_dir=None):
    """(chunk size, compiled chunk function, compile record): the given size, or the largest that fits ``budget``.

    Without a given size, compiles for a probe batch of ``LANES`` trials per device and reads the
    memory analysis: temporaries and outputs scale linearly with the batch (arguments do not),
    plus the host copy of the outputs; a chunk may take 75% of the budget, the rest is left to the
    process itself and to the summaries or result arrays. The probe's executable is reused when the size it implies
    needs no larger batch. ``fixed``: bytes of outputs that do not grow with the batch (a summary's
    histograms and counts), counted once on the host and twice on the device (output and scatter).
    The probe's memory figures are cached in ``cache_dir`` under a digest of the lowered program,
    so a rerun compiles only the chunk function (itself from JAX's persistent cache).

    The record holds ``compile_s`` (seconds spent compiling), ``compile_cached`` (every
    executable came from the persistent cache) and ``memory_probe_cached``.

    Raises:
        ValueError: the smallest possible chunk (or the given one) needs more than ``budget``,
            checked from the output shapes before compiling and from the memory analysis after
            (compiling allocates nothing).
    """
    step = LANES * mesh.size
    record = {"compile_s": 0.0, "compile_cached": True, "memory_probe_cached": None}

    def compile_lowered(lowered):
        executable, seconds, cached = _compile(lowered)
        record["compile_s"] += seconds
        record["compile_cached"] &= cached
        return executable

    def compile_batch(batch):
        return compile_lowered(_make_chunk_fn(trial, group, batch, mesh, common, summary).lower(*args))

    chosen = chunk_size is None
    if chosen:
        lowered = _make_chunk_fn(trial, group, step, mesh, common, summary).lower(*args)
        key = _probe_key(lowered, mesh)
        figures = _load_probe(cache_dir, key)
        record["memory_probe_cached"] = figures is not None
        probe = None
        if figures is None:
            probe = compile_lowered(lowered)
            analysis = probe.memory_analysis()
            figures = {"temp": int(analysis.temp_size_in_bytes), "output": int(analysis.output_size_in_bytes)}
            _save_probe(cache_dir, key, figures)
        per_trial_device = max(figures["temp"] + figures["output"] - 2 * fixed, 0) / LANES
        per_trial_host = max(figures["output"] - fixed, 0) / LANES
        per_trial = per_trial_device / mesh.size + per_trial_host
        _refuse_chunk(step, True, step * per_trial + 3 * fixed, budget)
        usable = _BUDGET_FOR_CHUNKS * budget - 3 * fixed  # the rest: the process itself, summaries, results
        chunk_size = _balanced_chunk(n_trials, int(usable // max(per_trial, 1.0)), step)
        if chunk_size <= step:  # the probe's program is the chunk's: compile it (or reuse it), lower nothing again
            return chunk_size, probe if probe is not None else compile_lowered(lowered), record
    compiled = compile_batch(_round_up(chunk_size, step))
    analysis = compiled.memory_analysis()
    if analysis is not None:
        need = analysis.temp_size_in_bytes + analysis.output_size_in_bytes
        if chosen and need > budget and chunk_size > step:
            # The probe's linear extrapolation can underestimate a program whose memory does not
            # scale like the probe's (a 1e6-trial summary chunk needed 21 GiB where 4 were
            # predicted): size again from this compilation's own figure, once.
            per_trial = need / _round_up(chunk_size, step)
            chunk_size = _balanced_chunk(n_trials, int(_BUDGET_FOR_CHUNKS * budget / per_trial), step)
            compiled = compile_batch(_round_up(chunk_size, step))
            analysis = compiled.memory_analysis()
            need = analysis.temp_size_in_bytes + analysis.output_size_in_bytes if analysis is not None else 0
        _refuse_chunk(chunk_size, False, need, budget)
    return chunk_size, compiled, record


# --------------------------------------------------------------------------- compilation cache
CACHE_ENV = "JAXFED_COMPILATION_CACHE"
"""Environment variable: the compilation cache directory, or ``off``."""

_OFF = ("off", "none", "0", "false", "no")
_cache_events = {"hits": 0, "misses": 0}


def compilation_cache_dir(option: str | None = None) -> str | None:
    """The compilation cache directory to use, or None when disabled.

    ``option`` (the ``--compilation-cache`` flag or ``compilation_cache=``) first, then
    ``$JAXFED_COMPILATION_CACHE``, then ``$XDG_CACHE_HOME/jaxfed/xla`` (``~/.cache/jaxfed/xla``);
    ``off`` (or ``none``, ``0``, ``false``, ``no``) disables the cache.
    """
    value = option if option is not None else os.environ.get(CACHE_ENV) or None
    if value is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "jaxfed", "xla")
    if value.strip().lower() in _OFF:
        return None
    return os.path.abspath(os.path.expanduser(value))


def use_compilation_cache(option: str | None = None, note=lambda message: None) -> str | None:
    """Points JAX's persistent compilation cache at :func:`compilation_cache_dir` (every
    executable is cached, however fast it compiled) and returns the directory, or None when the
    cache is off or the directory cannot be created or written (then ``note`` says why and the
    run compiles as usual). Damaged entries in the directory are skipped by JAX with a warning
    and recompiled."""
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    path = compilation_cache_dir(option)
    if path is not None:
        try:
            os.makedirs(path, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(f"{path}: not writable")
        except OSError as err:
            note(f"compilation cache {path} cannot be used ({err.strerror or err}); compiling without it")
            path = None
    if jax.config.jax_compilation_cache_dir != path:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax_cache.reset_cache()  # JAX decides once per process whether it uses a cache
    if not getattr(use_compilation_cache, "listening", False):
        jax.monitoring.register_event_listener(_count_cache_event)
        use_compilation_cache.listening = True
    return path


def _count_cache_event(event: str, **kwargs) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _cache_events["hits"] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        _cache_events["misses"] += 1


def _compile(lowered) -> tuple[Any, float, bool]:
    """(executable, seconds, whether it came from the persistent cache) of a lowered function."""
    hits, misses = _cache_events["hits"], _cache_events["misses"]
    start = time.perf_counter()
    executable = lowered.compile()
    seconds = time.perf_counter() - start
    return executable, seconds, _cache_events["hits"] > hits and _cache_events["misses"] == misses


def _probe_key(lowered, mesh: Mesh) -> str:
    """Digest of what the memory probe's figures depend on: the program and the devices."""
    device = mesh.devices.flat[0]
    what = f"{jax.__version__}|{device.platform}|{getattr(device, 'device_kind', '')}|{mesh.size}|{lowered.as_text()}"
    return hashlib.sha256(what.encode()).hexdigest()


def _load_probe(cache_dir: str | None, key: str) -> dict | None:
    """The cached memory figures {"temp", "output"} (bytes) for ``key``, or None (absent, unreadable or malformed)."""
    if cache_dir is None:
        return None
    try:
        with open(os.path.join(cache_dir, "jaxfed-memory", f"{key}.json"), "rb") as f:
            figures = json.loads(f.read().decode())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    ok = isinstance(figures, dict) and all(type(figures.get(k)) is int and figures[k] >= 0 for k in ("temp", "output"))
    return figures if ok else None


def _save_probe(cache_dir: str | None, key: str, figures: dict) -> None:
    """Caches the memory figures; a cache that cannot be written is only a missed saving."""
    if cache_dir is None:
        return
    try:
        os.makedirs(os.path.join(cache_dir, "jaxfed-memory"), exist_ok=True)
        atomic_write_json(os.path.join(cache_dir, "jaxfed-memory", f"{key}.json"), figures)
    except (OSError, StoreError):
        pass
