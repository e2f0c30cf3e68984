"""Recomputing stored trials: ``jaxfed verify DIR``.

Checksums prove that a result directory is what was written, not that it is true: a directory
whose chunks are removed and whose metrics.npz and digests are all rewritten consistently opens
without a word. But every trial is a pure function of (seed, point, trial index, code), so any
stored value can be recomputed and compared bit for bit. :func:`recompute_sample` draws trials
per point group, recomputes the micro-batch-aligned chunk of the stored width around each (every
point of the group, the trials of the chunk that the run holds), and compares every value. The
values come from the engine (:func:`jaxfed.engine.recompute`, with the run's seed, common random
numbers and micro-batch width); this module only asks for them and compares.

Bit for bit holds for the build that computed the run (:mod:`jaxfed.builds`: JAX, jaxlib, backend,
processor). Recomputed by another build, a trial's values differ in their last bits, which verify
tells apart from values that differ: where the run records another build (or none, or several), a
difference of at most :data:`FEW_ULPS` units in the last place in every value is reported as
"computed by another JAX or processor" (:class:`OtherBuild`, counted, with the largest in ulps and
relative terms); anything more, or any difference under the run's own build, is a value that is
not what the run's seed and code compute.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxfed import builds, engine, stats, store, validation
from jaxfed.runs import catalog
from jaxfed.runs.sharding import experiment_of
from jaxfed.store.rundir import load_results

FEW_ULPS = 64
"""The most units in the last place by which a value recomputed by another build may differ and
still be reported as "computed by another JAX or processor". Another XLA or CPU changes the order
and fusion of a trial's floating-point operations, each a rounding: jax 0.12.1 against 0.10.2 moved
3.4% of a run's float32 values by at most 5.2e-7 relative (a few ulp); an edit or another seed's
value is thousands of ulps away or more."""


class OtherBuild(ValueError):
    """Recomputed values differ from the stored ones by a few ulp at most, as those of another
    build (JAX, jaxlib, backend, processor) do: not verified bit for bit, and not found edited."""


class Gap(NamedTuple):
    """How recomputed values differ from stored ones (:func:`gap`)."""

    compared: int  # values compared
    differing: int  # values whose bits differ
    max_ulps: int  # the largest distance of a differing value within FEW_ULPS, in units in the last place
    max_relative: float  # its largest |stored − recomputed| / max(|stored|, |recomputed|)
    far: tuple | None  # (row, column) of the first value further than FEW_ULPS (or not a float), or None


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance between two float arrays of one dtype in units in the last place: how many
    representable values lie between them (0 where equal, +0 and −0 included).

    Args:
        a, b: arrays of one floating dtype and shape, finite.

    Returns:
        A float64 array (exact while the distance is below 2**53, which is all that is asked of it).
    """
    kind = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    # A float's bits without the sign count the representable values from zero up to its magnitude:
    # two of one sign are the difference of those counts apart, two of two signs their sum (through 0).
    top = np.int64((1 << (8 * a.dtype.itemsize - 1)) - 1)  # (every bit but the sign)
    count_a, count_b = a.view(kind).astype(np.int64) & top, b.view(kind).astype(np.int64) & top
    same_sign = np.signbit(a) == np.signbit(b)
    return np.where(
        same_sign, np.abs(count_a - count_b).astype(np.float64), count_a.astype(np.float64) + count_b.astype(np.float64)
    )


def gap(stored: np.ndarray, mine: np.ndarray) -> Gap:
    """How ``mine`` (recomputed) differs from ``stored``, arrays (points, trials, …) of one shape
    and dtype.

    Args:
        stored, mine: the stored and the recomputed values.

    Returns:
        A :class:`Gap`: the values compared and differing; the largest distance in ulps and in
        relative terms of those within :data:`FEW_ULPS`; the first (point row, trial column) of a
        value further away, not a float, or finite (or NaN) on one side only.
    """
    shape = (stored.shape[0], stored.shape[1], -1)
    a, b = stored.reshape(shape), mine.reshape(shape)
    differs = a != b
    if np.issubdtype(a.dtype, np.floating):
        differs = a.view(f"u{a.dtype.itemsize}") != b.view(f"u{b.dtype.itemsize}")  # (bits: -0 and NaN too)
        finite = np.isfinite(a) & np.isfinite(b)
        distance = np.where(finite, ulps(np.where(finite, a, 0), np.where(finite, b, 0)), np.inf)
        distance = np.where(np.isnan(a) & np.isnan(b), 0.0, distance)  # (a NaN's payload is no value)
    else:
        distance = np.full(a.shape, np.inf)
    distance = np.where(differs, distance, 0.0)
    too_far = distance > FEW_ULPS
    far = None
    if too_far.any():
        row, column = (int(i[0]) for i in np.nonzero(too_far.any(-1)))
        far = (row, column)
    near = differs & ~too_far
    if not near.any():
        return Gap(a.size, int(differs.sum()), 0, 0.0, far)
    x, y = a[near].astype(np.float64), b[near].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.nan_to_num(np.abs(x - y) / np.maximum(np.abs(x), np.abs(y)))
    return Gap(a.size, int(differs.sum()), int(distance[near].max()), float(relative.max()), far)


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

    Returns:
        The line saying what was checked (and, under another build, how far the values are).

    Raises:
        ValueError: one line naming the first value that differs, or code that is not the run's.
    """
    if sample != "all":
        validation.integer("sample", sample, 1)
    config_json, results = load_results(out_dir)
    exp, cfg = experiment_of(config_json, experiment, catalog.import_extensions(imports), "the run")
    every = sample == "all"
    if any(isinstance(value, stats.Summary) for value in results.values()):
        return recompute_summary(exp, cfg, out_dir, config_json, None if every else int(sample))
    n_trials = int(config_json["n_trials"])
    return recompute_sample(exp, cfg, out_dir, config_json, results, n_trials if every else int(sample), seed)


def recompute_sample(exp, cfg, out_dir: str, config_json: dict, results: dict, sample: int, seed: int) -> str:
    """Recomputes ``sample`` trials (drawn with ``seed``; every trial when ``sample`` is at least the
    run's) of every point group of a finished raw run and compares each value of every metric bit
    for bit with metrics.npz; returns the line saying what was checked.

    Args:
        exp, cfg: the run's experiment and its configuration.
        out_dir: the run's result directory.
        config_json, results: its config.json and metrics (:func:`jaxfed.store.rundir.load_results`).
        sample: trials drawn per point group, each recomputed with its micro-batch.
        seed: the draw's seed.

    Returns:
        The line saying what was recomputed.

    Raises:
        ValueError: one line naming the first value that differs (metric, point, trial, stored and
            recomputed), or a run kept as summaries (no trial's value is stored).
    """
    if any(isinstance(value, stats.Summary) for value in results.values()):
        raise ValueError(
            f"{out_dir}: keeps summaries, not each trial's values; verify recomputes stored trials (rerun with --keep raw)"
        )
    options = _run_options(exp, out_dir, config_json)
    width, n_trials = int(options.micro_batch), int(config_json["n_trials"])  # type: ignore[arg-type]
    sweep = exp.build(cfg)
    draw = np.random.default_rng(seed)
    checked = chunks = 0
    tally = _Tally(out_dir)
    for ids in engine.point_groups(sweep.points):
        trials = np.sort(draw.choice(n_trials, size=min(sample, n_trials), replace=False))
        ranges = [(start, min(start + width, n_trials)) for start in sorted({int(t) - int(t) % width for t in trials})]
        recomputed = engine.recompute(sweep.trial, sweep.points, ranges, options, point_ids=ids)
        for (start, stop), computed in zip(ranges, recomputed):
            for metric, mine in computed.items():
                tally.values(metric, ids, start, np.asarray(results[metric])[list(ids), start:stop], mine)
            checked += len(ids) * (stop - start)
            chunks += 1
    tally.finish()
    return (
        f"{out_dir}: {checked} (point, trial) values of {len(results)} metric(s) recomputed bit for bit "
        f"({chunks} chunk(s) of {width} trials around {min(sample, n_trials)} trial(s) per group drawn with seed {seed})"
    )


def _run_options(exp, out_dir: str, config_json: dict) -> engine.RunOptions:
    """What a run's trials are recomputed with (:func:`jaxfed.engine.recompute`): its seed, common
    random numbers and micro-batch width."""
    identity = store.read_json(f"{out_dir}/identity.json")
    return engine.RunOptions(
        seed=int(config_json["seed"]),
        common_random_numbers=bool(exp.common_random_numbers),
        micro_batch=int(identity["micro_batch"]),
        progress=False,
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

    Args:
        exp, cfg: the run's experiment and its configuration.
        out_dir: the run's result directory.
        config_json: its config.json.
        sample: the aligned pieces recomputed per group, the smallest first; None: every one.

    Returns:
        The line saying what was recomputed.

    Raises:
        ValueError: one line naming the first sum or value that differs (metric, point, trials).
    """
    options, sweep = _run_options(exp, out_dir, config_json), exp.build(cfg)
    checked_trials = checked_pieces = 0
    tally = _Tally(out_dir)
    for g, ids in enumerate(engine.point_groups(sweep.points)):
        stored = store.read_summary(store.summary_path(out_dir, g))
        blocks = int(next(iter(stored.states.values())).blocks.max())
        pieces, block = stats.summary.dyadic_pieces(0, blocks), stats.summary.SUMMARY_BLOCK
        chosen = sorted(sorted(pieces)[: len(pieces) if sample is None else sample], key=lambda p: p[1] << p[0])
        ranges = [((k << j) * block, ((k + 1) << j) * block) for j, k in chosen]  # (in trial order: fresh folds them)
        ranges += [(blocks * block, stored.stop)] if stored.stop > blocks * block else []  # (the raw tail)
        recomputed = engine.recompute(sweep.trial, sweep.points, ranges, options, point_ids=ids, summary=True)
        fresh = {m: stats.summary.empty_state(state.count.shape) for m, state in stored.states.items()}
        tail_at, tail = 0, {}  # (the raw tail's first trial and values)
        for (start, stop), (parts, values) in zip(ranges, recomputed):
            if parts:
                _compare_piece(tally, stored, ids, (start, stop), parts, fresh if sample is None else None)
                checked_pieces += 1
            else:
                tail_at, tail = start, values
            checked_trials += len(ids) * (stop - start)
        if sample is None:
            for metric, state in stored.states.items():
                for field in ("count", "nan_count", "hist", "nonfinite_trials", "total", "total_sq"):
                    tally.sums(metric, field, ids, (0, blocks * block), getattr(state, field), getattr(fresh[metric], field), stored.tails[metric].dtype)  # fmt: skip
        for metric, kept in stored.tails.items() if tail else ():
            tally.values(metric, ids, tail_at, kept, tail[metric])
    tally.finish()
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


def _compare_piece(tally, stored, ids, trials: tuple[int, int], parts: dict, fresh: dict | None) -> None:
    """Compares the stored sums of the aligned piece of whole blocks ``trials`` with the recomputed
    summary ``parts``; folds ``parts`` into ``fresh`` (every piece, in trial order) unless None."""
    n_blocks = (trials[1] - trials[0]) // stats.summary.SUMMARY_BLOCK
    j = n_blocks.bit_length() - 1
    for metric, state in stored.states.items():
        part, dtype = parts[metric], stored.tails[metric].dtype
        tally.sums(metric, "sum", ids, trials, state.total[:, j], part["sum_pieces"][:, 0], dtype)
        tally.sums(metric, "sum of squares", ids, trials, state.total_sq[:, j], part["sq_pieces"][:, 0], dtype)
        if fresh is not None:
            fresh[metric] = stats.summary.fold(fresh[metric], part, n_blocks)


class _Tally:
    """Every comparison of one verify: a difference is raised at once as "values differ" where the
    run records this build alone (bit for bit is then owed) or where it exceeds :data:`FEW_ULPS`;
    otherwise counted, and :meth:`finish` raises :class:`OtherBuild` for them all."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.recorded = store.read_builds(out_dir)
        self.here = builds.this_build()
        listed = self.recorded["builds"] if self.recorded else []
        # Another build may have computed some stored trials: none recorded (a directory written
        # before builds were), several (mixed), an unrecorded start, or one that is not this one.
        self.elsewhere = not (
            len(listed) == 1
            and not self.recorded.get("unrecorded")  # type: ignore[union-attr]
            and builds.same_bits(listed[0], self.here)
        )
        self.compared = self.differing = self.max_ulps = 0
        self.max_relative, self.worst = 0.0, ""

    def values(self, metric: str, point_ids, start: int, stored: np.ndarray, mine: np.ndarray) -> None:
        """Compares the stored values of trials [start, …) of a group's points with the recomputed."""
        self.compared += stored.size
        if stored.dtype == mine.dtype and stored.shape == mine.shape and stored.tobytes() == mine.tobytes():
            return
        if stored.shape != mine.shape or stored.dtype != mine.dtype:
            raise ValueError(
                f"{self.out_dir}: metric {metric!r} is {stored.dtype}{list(stored.shape)} stored, "
                f"{mine.dtype}{list(mine.shape)} recomputed: not what this code computes"
            )
        found = gap(stored, mine)
        if not self.elsewhere or found.far is not None:
            row, column = found.far if self.elsewhere and found.far else _first_difference(stored, mine)
            a, b = np.ravel(stored[row, column]), np.ravel(mine[row, column])
            at = _first_differing_value(a, b)
            raise ValueError(
                f"{self.out_dir}: metric {metric!r} of point {point_ids[row]}, trial {start + column}, value at flat "
                f"index {at} of the trial's {a.size} is stored as {a[at].item()!r}, recomputed as {b[at].item()!r}: "
                "the stored values are not what the run's seed and code compute"
                + (
                    f" (more than {FEW_ULPS} ulp apart: values differ, not the last bits of another build)"
                    if self.elsewhere
                    else ""
                )  # fmt: skip
            )
        self._near(metric, found.differing, found.max_ulps, found.max_relative)

    def sums(self, metric: str, what: str, point_ids, trials: tuple[int, int], stored, mine, dtype) -> None:
        """Compares a summary's stored field ``what`` (sums, counts) of trials ``trials`` with the
        recomputed; a float sum of another build's values may differ by a few ulp of the metric's
        ``dtype`` relative to it (its terms did), a count not at all."""
        stored, mine = np.asarray(stored), np.asarray(mine)
        self.compared += stored.size
        if stored.shape == mine.shape and stored.dtype == mine.dtype and stored.tobytes() == mine.tobytes():
            return
        rows = [i for i in range(stored.shape[0]) if stored[i].tobytes() != mine[i].tobytes()] if stored.shape == mine.shape else [0]  # fmt: skip
        relative = np.inf
        if self.elsewhere and stored.shape == mine.shape and np.issubdtype(stored.dtype, np.floating):
            x, y = stored.astype(np.float64), mine.astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                apart = np.where(x == y, 0.0, np.abs(x - y) / np.maximum(np.abs(x), np.abs(y)))
            relative = float(np.nan_to_num(apart, nan=np.inf).max())
        eps = float(np.finfo(dtype).eps) if np.issubdtype(np.dtype(dtype), np.floating) else 0.0
        if not (eps and relative <= FEW_ULPS * eps):
            raise ValueError(
                f"{self.out_dir}: metric {metric!r} of point {point_ids[rows[0]]}: the stored {what} of trials "
                f"[{trials[0]}, {trials[1]}) is not what the run's seed and code compute (recomputed bit for bit)"
            )
        differing = int(np.count_nonzero(stored != mine))
        self._near(f"{metric} ({what})", differing, int(np.ceil(relative / eps)), relative)

    def _near(self, metric: str, differing: int, max_ulps: int, max_relative: float) -> None:
        self.differing += differing
        if max_ulps > self.max_ulps or (max_ulps == self.max_ulps and not self.worst):
            self.worst = metric
        self.max_ulps, self.max_relative = max(self.max_ulps, max_ulps), max(self.max_relative, max_relative)

    def finish(self) -> None:
        """Raises :class:`OtherBuild` where values differed by a few ulp (and none by more)."""
        if not self.differing:
            return
        listed = self.recorded["builds"] if self.recorded else []
        if not listed:
            records = "the run records no build (written before builds were recorded)"
        elif len(listed) > 1:
            records = f"the run records {len(listed)} builds (mixed: {'; '.join(builds.short(b) for b in listed)})"
        else:
            records = f"the run records {builds.short(listed[0])}" + (
                " and earlier trials of an unrecorded one" if self.recorded.get("unrecorded") else ""  # type: ignore[union-attr]
            )
        todo = (
            f"; verify it with the run's build for a bit-for-bit check ({builds.remedy(listed[0], self.here)})"
            if len(listed) == 1 and not builds.same_bits(listed[0], self.here)
            else "; values of a build other than this one cannot be checked bit for bit here"
        )
        raise OtherBuild(
            f"{self.out_dir}: computed by another JAX or processor: {self.differing:,} of {self.compared:,} "
            f"recomputed values differ from the stored ones, by at most {self.max_ulps} ulp ({self.max_relative:.1e} "
            f"relative, in {self.worst}), none by more; {records}, this is {builds.short(self.here)}"
            + (builds.feature_note(listed[0], self.here) if len(listed) == 1 else "")
            + todo
        )


def _first_differing_value(a: np.ndarray, b: np.ndarray) -> int:
    """The flat index of the first value of two flat arrays of one dtype whose bits differ (−0 and
    +0, two NaNs of other payloads too); 0 where none does."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    differs = (a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)).any(-1)
    return int(np.argmax(differs))


def _first_difference(stored: np.ndarray, mine: np.ndarray) -> tuple[int, int]:
    """(row, column) of the first (point, trial) whose stored and recomputed bits differ."""
    same = (stored.view(np.uint8).reshape(stored.shape[:2] + (-1,)) == mine.view(np.uint8).reshape(mine.shape[:2] + (-1,))).all(-1)  # fmt: skip
    row, column = (int(i[0]) for i in np.nonzero(~same))
    return row, column
