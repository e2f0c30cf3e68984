"""The sweep engine: runs ``trial(key, point) -> metrics`` over points × trials.

Points are pytrees. Following equinox's filtering convention, **array leaves are traced**
(batched with ``vmap``: a grid over SNR or ρ is one compiled call) and **every other leaf is
static** (Python ints, strings, tuples: part of the compiled function's identity). Points with
equal static parts and array shapes form a group that shares one compiled function.

Randomness: the key of (point p, trial t) is ``fold_in(fold_in(key(seed), p), t)``, so results
are bit-identical whatever the chunk size or execution order.

Execution: for each group, trials run in chunks of ``chunk_size`` (all points of the group at
once); the last chunk is padded to the same size so nothing recompiles. Chunks are written
atomically to ``<out>/chunks/`` when a store directory is given, and a rerun on the same
directory only computes the missing chunks (resume).
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

__all__ = ["run", "chunk_function", "Progress", "ConfigMismatch", "atomic_write_json", "atomic_savez"]

Trial = Callable[[jax.Array, Any], dict]

_DEFAULT_CHUNK_BYTES = 256 * 2**20  # output bytes per chunk when no chunk size is given


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

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        frac = self.done / max(self.total, 1)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        bar = "#" * int(30 * frac)
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {self.done}/{self.total} trials "
            f"{elapsed:6.1f}s elapsed, ETA {eta:6.1f}s"
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
        stacked = [jnp.stack([jnp.asarray(m[1][j]) for m in members]) for j in range(len(traced))]
        out.append((_Group(treedef, static, traced, ids), stacked))
    return out


def _rebuild(group: _Group, traced_leaves: list):
    n = len(group.static) + len(group.traced_slots)
    leaves: list = [None] * n
    for i, value in group.static:
        leaves[i] = value
    for i, value in zip(group.traced_slots, traced_leaves):
        leaves[i] = value
    return jax.tree.unflatten(group.treedef, leaves)


def _make_chunk_fn(trial: Trial, group: _Group, chunk_size: int, use_jit: bool):
    """(root_key, point_ids (P,), traced leaves (P, ...), first_trial) -> metrics (P, C, ...)."""

    def one(root_key, point_id, traced, trial_id):
        key = jax.random.fold_in(jax.random.fold_in(root_key, point_id), trial_id)
        return trial(key, _rebuild(group, traced))

    def chunk(root_key, point_ids, traced, first_trial):
        trial_ids = first_trial + jnp.arange(chunk_size, dtype=jnp.uint32)
        over_trials = jax.vmap(one, in_axes=(None, None, None, 0))
        return jax.vmap(over_trials, in_axes=(None, 0, 0, None))(root_key, point_ids, traced, trial_ids)

    return jax.jit(chunk) if use_jit else chunk


def chunk_function(trial: Trial, points: list, chunk_size: int, seed: int = 0):
    """The jitted function the engine runs for one chunk, with its arguments (for benchmarks).

    ``fn(*args)`` computes trials [0, chunk_size) of every point, returning metrics of shape
    (n_points, chunk_size, …). The points must form a single group (equal static parts).
    """
    groups = _group_points(points)
    if len(groups) != 1:
        raise ValueError(f"points must share their static leaves to form one compiled group, got {len(groups)} groups")
    group, traced = groups[0]
    fn = _make_chunk_fn(trial, group, chunk_size, use_jit=True)
    return fn, (jax.random.key(seed), jnp.asarray(group.point_ids, jnp.uint32), traced, jnp.uint32(0))


# --------------------------------------------------------------------------- store
def _chunk_path(out_dir: str, group_index: int, start: int, stop: int) -> str:
    return os.path.join(out_dir, "chunks", f"g{group_index:03d}_t{start:09d}_{stop:09d}.npz")


def _completed_chunks(out_dir: str, group_index: int) -> list[tuple[int, int, str]]:
    chunk_dir = os.path.join(out_dir, "chunks")
    if not os.path.isdir(chunk_dir):
        return []
    done = []
    prefix = f"g{group_index:03d}_t"
    for name in os.listdir(chunk_dir):
        if name.startswith(prefix) and name.endswith(".npz"):
            start, stop = name[len(prefix) : -4].split("_")
            done.append((int(start), int(stop), os.path.join(chunk_dir, name)))
    return sorted(done)


def _missing_ranges(n_trials: int, done: list[tuple[int, int, str]], chunk_size: int):
    covered = np.zeros(n_trials, bool)
    for start, stop, _ in done:
        covered[start:stop] = True
    ranges, t = [], 0
    while t < n_trials:
        if covered[t]:
            t += 1
            continue
        stop = t
        while stop < n_trials and not covered[stop] and stop - t < chunk_size:
            stop += 1
        ranges.append((t, stop))
        t = stop
    return ranges


def prepare_store(out_dir: str, identity: dict, overwrite: bool = False) -> None:
    """Creates ``out_dir`` or checks that it holds a run of the same identity (for resume).

    Raises:
        ConfigMismatch: the directory holds a different run and ``overwrite`` is False.
    """
    os.makedirs(os.path.join(out_dir, "chunks"), exist_ok=True)
    path = os.path.join(out_dir, "identity.json")
    if os.path.exists(path):
        with open(path) as f:
            existing = json.load(f)
        if existing != identity:
            if not overwrite:
                diff = sorted(k for k in set(existing) | set(identity) if existing.get(k) != identity.get(k))
                raise ConfigMismatch(
                    f"{out_dir} holds a run with a different configuration (differs in {', '.join(diff)}); "
                    "use another --out directory or --overwrite to discard it"
                )
            for name in os.listdir(os.path.join(out_dir, "chunks")):
                os.remove(os.path.join(out_dir, "chunks", name))
    atomic_write_json(path, identity)


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
) -> dict[str, np.ndarray]:
    """Runs ``trial`` for every point and ``n_trials`` trials per point.

    Args:
        trial: pure function ``trial(key, point) -> dict of arrays``; never jitted by the caller.
        points: list of point pytrees (array leaves traced, other leaves static).
        n_trials: trials per point, >= 1.
        seed: root seed; the key of (p, t) is fold_in(fold_in(key(seed), p), t).
        chunk_size: trials per chunk (default: as many as fit ~256 MiB of metrics).
        out_dir: if given, finished chunks are stored there and a rerun resumes from them.
        identity: JSON dict that identifies the run for resume (required with ``out_dir``).
        overwrite: discard a stored run whose identity differs instead of raising.
        progress: show a progress bar on stderr (default: when stderr is a TTY).
        use_jit: ``False`` runs the same vmapped function without ``jax.jit`` (for testing).

    Returns:
        dict metric -> NumPy array of shape (n_points, n_trials, *metric_shape).
    """
    if not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if not points:
        raise ValueError("points must be a non-empty list")
    if out_dir is not None:
        if identity is None:
            raise ValueError("identity is required when out_dir is given")
        prepare_store(out_dir, identity, overwrite)
    if progress is None:
        progress = sys.stderr.isatty()

    root_key = jax.random.key(seed)
    groups = _group_points(points)
    results: dict[str, np.ndarray] = {}
    bar = Progress(n_trials * len(points), progress)

    for g, (group, traced) in enumerate(groups):
        n_points = len(group.point_ids)
        # Metric shapes of one trial, without running it.
        probe = jax.eval_shape(
            lambda k, t: trial(k, _rebuild(group, t)), root_key, [x[0] for x in traced]
        )
        for name, spec in probe.items():
            if name not in results:
                results[name] = np.zeros((len(points), n_trials) + spec.shape, spec.dtype)
        size = chunk_size
        if size is None:
            bytes_per_trial = n_points * sum(math.prod(s.shape) * s.dtype.itemsize for s in probe.values())
            size = int(max(1, min(n_trials, _DEFAULT_CHUNK_BYTES // max(bytes_per_trial, 1))))
        size = min(size, n_trials)
        point_ids = jnp.asarray(group.point_ids, dtype=jnp.uint32)
        rows = np.asarray(group.point_ids)

        done = _completed_chunks(out_dir, g) if out_dir is not None else []
        for start, stop, path in done:
            with np.load(path) as stored:
                for name in probe:
                    results[name][rows, start:stop] = stored[name]
            bar.update(n_points * (stop - start))

        chunk_fn = _make_chunk_fn(trial, group, size, use_jit)
        for start, stop in _missing_ranges(n_trials, done, size):
            out = chunk_fn(root_key, point_ids, traced, jnp.uint32(start))
            out = {name: np.asarray(value)[:, : stop - start] for name, value in out.items()}
            for name, value in out.items():
                results[name][rows, start:stop] = value
            if out_dir is not None:
                atomic_savez(_chunk_path(out_dir, g, start, stop), out)
            bar.update(n_points * (stop - start))
    return results
