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

Results: ``keep="raw"`` returns every trial, arrays (point, trial, …); ``keep="summary"`` streams
each chunk into a :class:`jaxfed.stats.Summary` (count, mean, standard error and a log-spaced
histogram for quantiles, merged exactly in trial order) so a million trials need no more memory
than one chunk.

Store: with ``out_dir``, finished work is written atomically (temporary file + ``os.replace``)
and recorded in ``manifest.json``; rerunning on the same directory computes only what is missing,
a directory holding a different configuration is refused (or cleared with ``overwrite``), and a
process killed at any moment loses at most the chunk in flight.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxfed import stats

__all__ = [
    "run",
    "chunk_function",
    "make_mesh",
    "default_memory_budget",
    "Progress",
    "ConfigMismatch",
    "LANES",
    "RAW_LIMIT_BYTES",
    "atomic_write_json",
    "atomic_savez",
]

Trial = Callable[[jax.Array, Any], dict]

LANES = 64
"""The compiled batch per device is a multiple of this many trials (see the module docstring)."""

RAW_LIMIT_BYTES = 2 * 2**30
"""``keep="auto"`` keeps every trial when the raw metrics fit in this many bytes, else summaries."""

_MEMORY_FRACTION = 0.25  # default budget: this fraction of the device's (or host's) memory
_BUDGET_FOR_CHUNKS = 0.75  # share of the budget a chunk's buffers may take


class ConfigMismatch(ValueError):
    """An output directory already holds a run with a different configuration."""


# --------------------------------------------------------------------------- atomic files
def atomic_write_json(path: str, obj) -> None:
    """Writes JSON to ``path`` via a temporary file and ``os.replace`` (never half-written)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_savez(path: str, arrays: dict) -> None:
    """``np.savez`` to ``path`` via a temporary file and ``os.replace``."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------- progress
class Progress:
    """A one-line progress bar on stderr, redrawn between chunks; silent when disabled."""

    def __init__(self, total: int, enabled: bool, label: str = ""):
        self.total, self.enabled, self.label = total, enabled, label
        self.done = 0
        self.start = time.perf_counter()

    def note(self, message: str) -> None:
        if self.enabled:
            sys.stderr.write(f"{self.label}{message}\n")
            sys.stderr.flush()

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        frac = self.done / max(self.total, 1)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        bar = "#" * int(30 * frac)
        sys.stderr.write(
            f"\r{self.label}[{bar:<30}] {self.done}/{self.total} trials {elapsed:6.1f}s elapsed, ETA {eta:6.1f}s"
        )
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


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


def _make_chunk_fn(trial: Trial, group: _Group, batch: int, mesh: Mesh | None, common: bool = False):
    """(seed, point_ids (P,), traced leaves (P, ...), first_trial) -> metrics (P, batch, ...).

    With a mesh, the trial axis is sharded across it and the function is jitted; without one it
    runs unjitted on the default device (for testing jit against no-jit).
    """

    def one(root_key, point_id, traced, trial_id):
        key = jax.random.fold_in(root_key if common else jax.random.fold_in(root_key, point_id), trial_id)
        return trial(key, _rebuild(group, traced))

    def chunk(seed, point_ids, traced, first_trial):
        trial_ids = first_trial + jnp.arange(batch, dtype=jnp.uint32)
        if mesh is not None and mesh.size > 1:
            trial_ids = jax.lax.with_sharding_constraint(trial_ids, NamedSharding(mesh, P("trials")))
        over_trials = jax.vmap(one, in_axes=(None, None, None, 0))
        return jax.vmap(over_trials, in_axes=(None, 0, 0, None))(jax.random.key(seed), point_ids, traced, trial_ids)

    if mesh is None:
        return chunk
    return jax.jit(chunk, out_shardings=NamedSharding(mesh, P(None, "trials")))


def _to_host(tree) -> dict:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return {name: np.asarray(value) for name, value in tree.items()}


def _broadcast_from_0(array: np.ndarray) -> np.ndarray:
    """Process 0's value of a small int64 array on every process (the work plan)."""
    if jax.process_count() == 1:
        return array
    from jax.experimental import multihost_utils

    n = multihost_utils.broadcast_one_to_all(np.int64(array.size))
    padded = np.zeros(int(n), np.int64)
    if jax.process_index() == 0:
        padded[:] = array.ravel()
    return np.asarray(multihost_utils.broadcast_one_to_all(padded)).reshape(-1, *array.shape[1:])


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


# --------------------------------------------------------------------------- store
class _Store:
    """Result directory: identity check, manifest of finished chunks, summary states.

    Only process 0 touches the files; every method is a no-op elsewhere or without a directory.
    """

    def __init__(self, out_dir: str | None, identity: dict | None, overwrite: bool):
        self.dir = out_dir if jax.process_index() == 0 else None
        self.manifest = {"chunks": [], "summaries": {}}
        if self.dir is None:
            return
        os.makedirs(os.path.join(self.dir, "chunks"), exist_ok=True)
        for name in os.listdir(os.path.join(self.dir, "chunks")):
            if name.endswith(".tmp"):  # a write that a kill interrupted
                os.remove(os.path.join(self.dir, "chunks", name))
        path = os.path.join(self.dir, "identity.json")
        if os.path.exists(path):
            with open(path) as f:
                existing = json.load(f)
            if existing != identity:
                if not overwrite:
                    diff = sorted(k for k in set(existing) | set(identity) if existing.get(k) != identity.get(k))
                    raise ConfigMismatch(
                        f"{self.dir} holds a run with a different configuration (differs in {', '.join(diff)}); "
                        "use another --out directory or --overwrite to discard it"
                    )
                for name in os.listdir(os.path.join(self.dir, "chunks")):
                    os.remove(os.path.join(self.dir, "chunks", name))
                if os.path.exists(self._manifest_path):
                    os.remove(self._manifest_path)
        atomic_write_json(path, identity)
        if os.path.exists(self._manifest_path):
            with open(self._manifest_path) as f:
                self.manifest = json.load(f)

    @property
    def _manifest_path(self) -> str:
        return os.path.join(self.dir, "manifest.json")

    def finished_chunks(self, group: int) -> list[tuple[int, int, str]]:
        if self.dir is None:
            return []
        done = []
        for g, start, stop, name in self.manifest["chunks"]:
            path = os.path.join(self.dir, "chunks", name)
            if g == group and os.path.exists(path):
                done.append((start, stop, path))
        return sorted(done)

    def save_chunk(self, group: int, start: int, stop: int, arrays: dict) -> None:
        if self.dir is None:
            return
        name = f"g{group:03d}_t{start:09d}_{stop:09d}.npz"
        atomic_savez(os.path.join(self.dir, "chunks", name), arrays)
        self.manifest["chunks"].append([group, start, stop, name])
        atomic_write_json(self._manifest_path, self.manifest)

    def load_summary(self, group: int) -> tuple[int, dict | None]:
        """(next trial to compute, summary states) of a group in summary mode."""
        entry = self.manifest["summaries"].get(str(group)) if self.dir is not None else None
        if entry is None:
            return 0, None
        with np.load(os.path.join(self.dir, "chunks", entry["file"])) as z:
            states = {}
            for key in z.files:
                metric, field = key.split("/", 1)
                states.setdefault(metric, {})[field] = z[key]
        return entry["next_trial"], states

    def save_summary(self, group: int, next_trial: int, states: dict) -> None:
        if self.dir is None:
            return
        name = f"summary_g{group:03d}.npz"
        arrays = {f"{metric}/{field}": value for metric, s in states.items() for field, value in s.items()}
        atomic_savez(os.path.join(self.dir, "chunks", name), arrays)
        self.manifest["summaries"][str(group)] = {"file": name, "next_trial": next_trial}
        atomic_write_json(self._manifest_path, self.manifest)


def _missing_ranges(n_trials: int, done: list[tuple[int, int, str]], chunk_size: int) -> list[tuple[int, int]]:
    covered = np.zeros(n_trials + 1, np.int64)
    for start, stop, _ in done:
        covered[start] += 1
        covered[stop] -= 1
    free = np.cumsum(covered)[:n_trials] == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], free.astype(np.int8), [0]])))
    ranges = []
    for start, stop in zip(edges[0::2], edges[1::2]):
        ranges += [(int(t), int(min(t + chunk_size, stop))) for t in range(start, stop, chunk_size)]
    return ranges


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
) -> dict:
    """Runs ``trial`` for every point and ``n_trials`` trials per point.

    Args:
        trial: pure function ``trial(key, point) -> dict of arrays``; never jitted by the caller.
        points: list of point pytrees (array leaves traced, other leaves static).
        n_trials: trials per point, >= 1.
        seed: root seed in [0, 2**32); the key of (p, t) is fold_in(fold_in(key(seed), p), t).
        chunk_size: trials per chunk; default: as many as ``max_memory`` allows.
        out_dir: if given (process 0), finished chunks are stored there and a rerun resumes.
        identity: JSON dict that identifies the run for resume (required with ``out_dir``).
        overwrite: discard a stored run whose identity differs instead of raising.
        progress: progress bar on stderr (default: when stderr is a TTY, on process 0).
        use_jit: ``False`` runs the same vmapped function unjitted on one device (for tests).
        devices: local devices per process to shard trials over (default: all).
        max_memory: bytes per device a chunk may use (default: a quarter of the device's
            memory); the chunk size follows from the compiled function's memory analysis.
        keep: ``"raw"`` (every trial), ``"summary"`` (streaming :class:`jaxfed.stats.Summary`)
            or ``"auto"`` (raw when it fits in ``RAW_LIMIT_BYTES``).
        info: if a dict is given, it receives what the engine chose (chunk sizes, devices, keep).
        common_random_numbers: every point of trial t gets the key fold_in(key(seed), t), so
            points differ only by their parameters (variance reduction for comparisons).

    Returns:
        dict metric -> NumPy array (n_points, n_trials, *metric_shape) for ``keep="raw"``,
        or metric -> :class:`jaxfed.stats.Summary` for ``keep="summary"``.
    """
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if max_memory is not None and (not isinstance(max_memory, int) or max_memory < 1):
        raise ValueError(f"max_memory must be a positive number of bytes, got {max_memory!r}")
    if keep not in ("raw", "summary", "auto"):
        raise ValueError(f"keep must be 'raw', 'summary' or 'auto', got {keep!r}")
    if not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    if not points:
        raise ValueError("points must be a non-empty list")
    if out_dir is not None and identity is None:
        raise ValueError("identity is required when out_dir is given")

    mesh = make_mesh(devices) if use_jit else None
    n_shards = mesh.size if mesh is not None else 1
    budget = max_memory if max_memory is not None else default_memory_budget(mesh or make_mesh(1))
    store = _Store(out_dir, identity, overwrite)
    is_main = jax.process_index() == 0
    bar = Progress(n_trials * len(points), (sys.stderr.isatty() if progress is None else progress) and is_main)
    groups = _group_points(points)
    info = {} if info is None else info
    info.update(devices=n_shards, processes=jax.process_count(), chunk_sizes=[], budget_bytes=budget)

    # Shapes of one trial's metrics, per group, without running anything.
    probes = [
        jax.eval_shape(lambda k, t, g=group: trial(k, _rebuild(g, t)), jax.random.key(0), [x[0] for x in traced])
        for group, traced in groups
    ]
    if keep == "auto":
        raw_bytes = sum(
            len(group.point_ids) * n_trials * math.prod(s.shape) * s.dtype.itemsize
            for (group, _), probe in zip(groups, probes)
            for s in probe.values()
        )
        keep = "raw" if raw_bytes <= RAW_LIMIT_BYTES else "summary"
    info["keep"] = keep

    results: dict = {}
    for g, ((group, traced), probe) in enumerate(zip(groups, probes)):
        rows = np.asarray(group.point_ids)
        point_ids = np.asarray(group.point_ids, np.uint32)
        if keep == "raw":
            for name, spec in probe.items():
                if name not in results:
                    results[name] = np.zeros((len(points), n_trials) + spec.shape, spec.dtype)

        args = lambda start: (np.uint32(seed), point_ids, traced, np.uint32(start))  # noqa: E731
        if mesh is None:
            size = chunk_size or min(n_trials, 4096)
            chunk_fn = _make_chunk_fn(trial, group, _round_up(size, LANES), None, common_random_numbers)
        else:
            size, chunk_fn = _sized_chunk_fn(
                trial, group, mesh, budget, n_trials, chunk_size, args(0), common_random_numbers
            )
        info["chunk_sizes"].append(size)
        bar.note(f"group {g}: {len(rows)} point(s), chunk size {size} trials over {n_shards} device(s)")

        def compute(start, stop):
            out = chunk_fn(*args(start))
            return {name: value[:, : stop - start] for name, value in _to_host(out).items()}

        if keep == "raw":
            done = store.finished_chunks(g)
            for start, stop, path in done:
                with np.load(path) as stored:
                    for name in probe:
                        results[name][rows, start:stop] = stored[name]
                bar.update(len(rows) * (stop - start))
            plan = _broadcast_from_0(np.asarray(_missing_ranges(n_trials, done, size), np.int64).reshape(-1, 2))
            for start, stop in plan:
                out = compute(int(start), int(stop))
                for name, value in out.items():
                    results[name][rows, start:stop] = value
                store.save_chunk(g, int(start), int(stop), out)
                bar.update(len(rows) * (stop - start))
        else:
            next_trial, states = store.load_summary(g)
            next_trial = int(_broadcast_from_0(np.asarray([next_trial], np.int64))[0])
            accumulators = {
                name: stats.SummaryAccumulator.from_state(states[name])
                if states is not None
                else stats.SummaryAccumulator((len(rows),) + spec.shape)
                for name, spec in probe.items()
            }
            bar.update(len(rows) * next_trial)
            for start in range(next_trial, n_trials, size):
                stop = min(start + size, n_trials)
                out = compute(start, stop)
                if is_main:
                    for name, value in out.items():
                        accumulators[name].add(value)
                    store.save_summary(g, stop, {name: acc.state() for name, acc in accumulators.items()})
                bar.update(len(rows) * (stop - start))
            for name, acc in accumulators.items():
                results.setdefault(name, []).append((rows, acc.result()))

    if keep == "summary":
        results = {name: stats.merge_point_groups(parts, len(points)) for name, parts in results.items()}
    return results


def _sized_chunk_fn(trial, group, mesh, budget, n_trials, chunk_size, args, common):
    """(chunk size, compiled chunk function): the given size, or the largest that fits ``budget``.

    Without a given size, compiles for a probe batch of ``LANES`` trials per device and reads the
    memory analysis: temporaries and outputs scale linearly with the batch (arguments do not),
    plus the host copy of the outputs; a chunk may take 75% of the budget, the rest is left to the
    process itself and to the summaries or result arrays. The probe's executable is reused when the size it implies
    needs no larger batch.
    """
    step = LANES * mesh.size
    if chunk_size is None:
        probe = _make_chunk_fn(trial, group, step, mesh, common).lower(*args).compile()
        analysis = probe.memory_analysis()
        per_trial_device = (analysis.temp_size_in_bytes + analysis.output_size_in_bytes) / LANES
        per_trial_host = analysis.output_size_in_bytes / LANES
        usable = _BUDGET_FOR_CHUNKS * budget  # the rest: the process itself, summaries, results
        fits = int(usable // max(per_trial_device / mesh.size + per_trial_host, 1.0))
        chunk_size = min(n_trials, max(step, fits // step * step))
        if chunk_size <= step:
            return chunk_size, probe
    return chunk_size, _make_chunk_fn(trial, group, _round_up(chunk_size, step), mesh, common).lower(*args).compile()
