"""Recomputing stored trials: ``jaxfed verify DIR``.

Checksums prove that a result directory is what was written, not that it is true: a directory
whose chunks are removed and whose metrics.npz and digests are all rewritten consistently opens
without a word. But every trial is a pure function of (seed, point, trial index, code), so any
stored value can be recomputed and compared bit for bit. :func:`recompute_sample` draws trials
per point group, recomputes the micro-batch-aligned chunk of the stored width around each (every
point of the group, the trials of the chunk that the run holds), and compares every value.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxfed import stats, store
from jaxfed.engine.compiled import ChunkFn
from jaxfed.engine.devices import make_mesh
from jaxfed.engine.points import group_points


def recompute_sample(exp, cfg, out_dir: str, config_json: dict, results: dict, sample: int, seed: int) -> str:
    """Recomputes ``sample`` trials (drawn with ``seed``; every trial when ``sample`` is at least the
    run's) of every point group of a finished raw run and compares each value of every metric bit
    for bit with metrics.npz; returns the line saying what was checked.

    Raises:
        ValueError: one line naming the first value that differs (metric, point, trial, stored and
            recomputed), or a run kept as summaries (no trial's value is stored).
    """
    if any(isinstance(value, stats.Summary) for value in results.values()):
        raise ValueError(
            f"{out_dir}: keeps summaries, not each trial's values; verify recomputes stored trials (rerun with --keep raw)"
        )
    identity = store.read_json(f"{out_dir}/identity.json")
    width, n_trials = int(identity["micro_batch"]), int(config_json["n_trials"])
    sweep = exp.build(cfg)
    draw = np.random.default_rng(seed)
    mesh = make_mesh(1)
    checked = chunks = 0
    for group, traced in group_points(sweep.points):
        trials = np.sort(draw.choice(n_trials, size=min(sample, n_trials), replace=False))
        fn = ChunkFn(sweep.trial, group, width, mesh, width, exp.common_random_numbers, flags=False)
        program = jax.jit(fn.metrics)
        ids = np.asarray(group.point_ids, np.uint32)
        for start in sorted({int(t) - int(t) % width for t in trials}):
            args = fn.metrics_args(np.uint32(config_json["seed"]), ids, traced, np.uint32(start), 0)
            computed = jax.device_get(program(*args))
            stop = min(start + width, n_trials)
            for metric, values in computed.items():
                stored = np.asarray(results[metric])[list(group.point_ids), start:stop]
                mine = np.asarray(values)[:, : stop - start]
                _compare(out_dir, metric, group.point_ids, start, stored, mine)
            checked += len(group.point_ids) * (stop - start)
            chunks += 1
    return (
        f"{out_dir}: {checked} (point, trial) values of {len(results)} metric(s) recomputed bit for bit "
        f"({chunks} chunk(s) of {width} trials around {min(sample, n_trials)} trial(s) per group drawn with seed {seed})"
    )


def _compare(out_dir: str, metric: str, point_ids, start: int, stored: np.ndarray, mine: np.ndarray) -> None:
    if stored.dtype == mine.dtype and stored.shape == mine.shape and stored.tobytes() == mine.tobytes():
        return
    if stored.shape != mine.shape or stored.dtype != mine.dtype:
        raise ValueError(
            f"{out_dir}: metric {metric!r} is {stored.dtype}{list(stored.shape)} stored, {mine.dtype}{list(mine.shape)} "
            "recomputed: not what this code computes"
        )
    same = (stored.view(np.uint8).reshape(stored.shape[:2] + (-1,)) == mine.view(np.uint8).reshape(mine.shape[:2] + (-1,))).all(-1)  # fmt: skip
    row, column = (int(i[0]) for i in np.nonzero(~same))
    raise ValueError(
        f"{out_dir}: metric {metric!r} of point {point_ids[row]}, trial {start + column} is stored as "
        f"{stored[row, column].ravel()[:3].tolist()}, recomputed as {mine[row, column].ravel()[:3].tolist()}: the "
        "stored values are not what the run's seed and code compute"
    )
