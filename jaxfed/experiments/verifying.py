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

from collections.abc import Sequence

import jax
import numpy as np

from jaxfed import jaxcompat, stats, store, validation
from jaxfed.engine.compiled import ChunkFn
from jaxfed.engine.devices import make_mesh
from jaxfed.engine.points import group_points
from jaxfed.experiments import catalog
from jaxfed.experiments.sharding import experiment_of
from jaxfed.store.rundir import load_results


def verify(
    out_dir: str,
    *,
    sample: int | str = 8,
    seed: int = 0,
    experiment: str | None = None,
    imports: Sequence[str] = (),
) -> str:
    """Recomputes stored values of the finished run in ``out_dir`` from its seed and the installed
    code, bit for bit (``jaxfed verify DIR``); returns the line saying what was checked.

    Args:
        out_dir: a finished run's result directory.
        sample: a raw run: trials drawn per point group (each recomputed with its micro-batch
            chunk); a summary run: the stored sums of aligned block ranges per group, the
            smallest first; ``"all"``: everything (a summary's histograms and counts too).
        seed: the draw's seed (raw runs).
        experiment: the user or plugin experiment that wrote ``out_dir`` (``path/file.py:NAME``;
            a result directory never runs the code it names); a built-in one is found by name.
        imports: the user files the run was run with (``--import``).

    Raises:
        ValueError: one line naming the first value that differs, or code that is not the run's.
    """
    if sample != "all":
        validation.integer("sample", sample, 1)
    config_json, results = load_results(out_dir)
    exp, cfg = experiment_of(config_json, experiment, catalog.import_extensions(imports))
    every = sample == "all"
    if any(isinstance(value, stats.Summary) for value in results.values()):
        return recompute_summary(exp, cfg, out_dir, config_json, None if every else int(sample))
    n_trials = int(config_json["n_trials"])
    return recompute_sample(exp, cfg, out_dir, config_json, results, n_trials if every else int(sample), seed)


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


def recompute_summary(exp, cfg, out_dir: str, config_json: dict, sample: int | None) -> str:
    """Recomputes the trials of a finished summary run's smallest stored sums and compares them bit
    for bit: per group, the ``sample`` aligned pieces of whole blocks of the stored state with the
    fewest trials (every piece when ``sample`` is None: then the whole state, histograms and
    counts too, is recomputed and compared) and the raw tail of the last partial block; returns
    the line saying what was checked.

    A summary keeps per cell the float64 sums D(j, k) of aligned ranges of 2^j blocks of 64 trials
    (:class:`jaxfed.stats.SummaryState`), each a fixed function of its trials: the cheapest check
    of a summary recomputes the smallest ones; the histograms and counts add over every trial and
    are checked only by recomputing all of them.

    Raises:
        ValueError: one line naming the first sum or value that differs (metric, point, trials).
    """
    identity = store.read_json(f"{out_dir}/identity.json")
    width, seed = int(identity["micro_batch"]), np.uint32(config_json["seed"])
    sweep = exp.build(cfg)
    mesh, block = make_mesh(1), stats.summary.SUMMARY_BLOCK
    checked_trials = checked_pieces = 0
    for g, (group, traced) in enumerate(group_points(sweep.points)):
        stored = store.read_summary(store.summary_path(out_dir, g))
        fn = ChunkFn(sweep.trial, group, width, mesh, width, exp.common_random_numbers, flags=False)
        program, ids = jax.jit(fn.metrics), np.asarray(group.point_ids, np.uint32)

        def values(start: int, stop: int) -> dict:
            parts = [jax.device_get(program(*fn.metrics_args(seed, ids, traced, np.uint32(t), 0))) for t in range(start - start % width, stop, width)]  # fmt: skip
            first = start - start % width
            return {m: np.concatenate([p[m] for p in parts], 1)[:, start - first : stop - first] for m in parts[0]}

        some_state = next(iter(stored.states.values()))
        pieces = stats.summary.dyadic_pieces(0, int(some_state.blocks.max()))
        chosen = sorted(pieces)[: len(pieces) if sample is None else sample]
        fresh = {m: stats.summary.empty_state(state.count.shape) for m, state in stored.states.items()}
        for j, k in sorted(chosen, key=lambda p: p[1] << p[0]):  # (in trial order: fresh states fold them)
            first_block, n_blocks = k << j, 1 << j
            computed = values(first_block * block, (first_block + n_blocks) * block)
            for metric, state in stored.states.items():
                with jaxcompat.enable_x64(True):
                    part = stats.summary.chunk_summary(computed[metric], n_blocks * block, np, first_block, n_blocks)
                for name, mine, kept in (("sum", part["sum_pieces"][:, 0], state.total[:, j]), ("sum of squares", part["sq_pieces"][:, 0], state.total_sq[:, j])):  # fmt: skip
                    _compare_sums(out_dir, metric, name, group.point_ids, (first_block * block, (first_block + n_blocks) * block), kept, mine)  # fmt: skip
                if sample is None:
                    fresh[metric] = stats.summary.fold(fresh[metric], part, n_blocks)
            checked_trials += len(ids) * n_blocks * block
            checked_pieces += 1
        if sample is None:
            for metric, state in stored.states.items():
                for field in ("count", "nan_count", "hist", "nonfinite_trials", "total", "total_sq"):
                    _compare_sums(out_dir, metric, field, group.point_ids, (0, int(state.blocks.max()) * block), getattr(state, field), getattr(fresh[metric], field))  # fmt: skip
        start = int(some_state.blocks.max()) * block
        if stored.stop > start:
            computed = values(start, stored.stop)
            for metric, tail in stored.tails.items():
                _compare(out_dir, metric, group.point_ids, start, tail, computed[metric])
            checked_trials += len(ids) * (stored.stop - start)
    what = (
        "every stored sum, histogram and count" if sample is None else f"the {sample} smallest stored sum(s) per group"
    )
    return (
        f"{out_dir}: summary run: {what} and the raw tail recomputed bit for bit ({checked_pieces} aligned range(s) of "
        f"whole blocks, {checked_trials} (point, trial) values); the histograms and counts add over every trial and "
        "are recomputed only by --sample all"
        if sample is not None
        else f"{out_dir}: summary run: {what} and the raw tail recomputed bit for bit ({checked_trials} (point, trial) values)"
    )


def _compare_sums(out_dir: str, metric: str, what: str, point_ids, trials: tuple[int, int], stored, mine) -> None:
    stored, mine = np.asarray(stored), np.asarray(mine)
    if stored.shape == mine.shape and stored.dtype == mine.dtype and stored.tobytes() == mine.tobytes():
        return
    rows = [i for i in range(stored.shape[0]) if stored[i].tobytes() != mine[i].tobytes()] if stored.shape == mine.shape else [0]  # fmt: skip
    raise ValueError(
        f"{out_dir}: metric {metric!r} of point {point_ids[rows[0]]}: the stored {what} of trials [{trials[0]}, "
        f"{trials[1]}) is not what the run's seed and code compute (recomputed bit for bit)"
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
