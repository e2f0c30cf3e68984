"""The sweep engine: runs ``trial(key, point) -> metrics`` over points × trials.

Points are pytrees. Following equinox's filtering convention, **array leaves are traced**
(batched with ``vmap``: a grid over SNR or ρ is one compiled call) and **every other leaf is
static** (Python ints, strings, tuples: part of the compiled function's identity). Points with
equal static parts and array shapes form a group that shares one compiled function.

Randomness: the key of (point p, trial t) is ``fold_in(fold_in(key(seed), p), t)``, or with
common random numbers ``fold_in(key(seed), t)`` for every point, so that all points of a trial see
the same data and draws and differ only by their parameters; from t = 2^32 on (a run holds up to
2^53 trials per point) ``fold_in`` takes the whole 64-bit index
(:func:`jaxfed.engine.compiled.trial_key`).

Execution, per group: trials run in chunks (all points of the group at once). Each chunk's
trials are shared out over a 1-D device mesh (axis ``"trials"``) spanning the local devices, or
every process's devices after ``jax.distributed.initialize``; process 0 gathers the results and
owns the store.

Determinism by construction: every trial is computed by one fixed program, a **micro-batch** of
one point × W trials (:func:`choose_width`: 512 on a CPU, up to :data:`MICRO_BATCH` on an
accelerator as its memory allows; an experiment may choose its own width; a stored run keeps its own),
looped over inside each device's program with a run-time trip count and fenced by optimisation
barriers; trial t always takes lane t mod the width, and every device runs the same
single-device program on its share. So a trial's values do not depend on the chunk size, the
number of points in its group, how many points a precision target still runs, where a resumed
or grown chunk starts, or the device and process count: results are **bit-identical for equal
stored identities** (seed, common random numbers, micro-batch width, platform, the trial's
program). They are not bit-identical across platforms (CPU vs GPU) or micro-batch widths, and a
store refuses to mix those. The chunk size comes from a memory budget and the compiled
function's memory analysis unless given.

Results: ``keep="raw"`` returns every trial, arrays (point, trial, …); ``keep="summary"`` returns
a :class:`jaxfed.stats.Summary` (count, mean, standard error and a log-spaced histogram for
quantiles) so a million trials need no more memory than one chunk. The device computes each
chunk's part of it inside the compiled chunk function's loop over micro-batches, the values never
stored (:func:`jaxfed.engine.compiled.batched_summary`, bit for bit :func:`jaxfed.stats.summary.chunk_summary`:
integer counts and histograms, float64 sums per block of ``stats.summary.SUMMARY_BLOCK`` trials aligned to
trial indices, merged by a fixed pairwise tree over aligned ranges of blocks, so a chunk hands
the host O(log n) partial sums per cell). Summary chunks are whole blocks (the
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

A run in two steps: ``run(trial, points, n_trials, **options)`` is
``execute(plan(trial, points, n_trials, RunOptions(**options)))``. :class:`RunOptions` is one
frozen value for how a run is done (seed, chunk size, keep, devices, memory budget, common random
numbers, compilation cache, a precision target, the store, progress), checked when it is made;
:func:`plan` checks everything else that can be checked before work (the trial's metric shapes,
``keep="auto"``, host and device memory, the store's identity) and restores the store into each
group's sink (a :class:`Plan`); :func:`execute` compiles each group's chunk function and drives its
chunks, a fixed count or until a precision target holds, into a :class:`RunResult` whose ``info``
is a :class:`RunInfo`.

Layout: :mod:`~jaxfed.engine.options` (:class:`RunOptions`), :mod:`~jaxfed.engine.points`
(grouping), :mod:`~jaxfed.engine.devices` (mesh, processes), :mod:`~jaxfed.engine.sizing`
(micro-batch width, budgets, chunk size), :mod:`~jaxfed.engine.cache` (compilation cache),
:mod:`~jaxfed.engine.compiled` (the chunk function), :mod:`~jaxfed.engine.sinks` (raw
and summary results, resume, pipelining), :mod:`~jaxfed.engine.target` (precision targets),
:mod:`~jaxfed.engine.progress`, :mod:`~jaxfed.engine.opening` (the store before work: identity,
opening, the build claimed), :mod:`~jaxfed.engine.result` (:class:`RunResult`, :class:`RunInfo`)
and :mod:`~jaxfed.engine.core` (:func:`plan`, :func:`execute`, :func:`run`);
:mod:`~jaxfed.engine.recomputing`: given trials recomputed without a run (``jaxfed verify``;
not public); :mod:`~jaxfed.engine.testing`: what benchmarks and tests reach inside for (not public).
"""

from jaxfed.engine import testing as testing  # (not public: benchmarks and tests)
from jaxfed.engine.cache import CACHE_ENV, CacheInfo, cache_info, clear_cache
from jaxfed.engine.core import Plan, execute, plan, run
from jaxfed.engine.devices import start_distributed, use_all_cores
from jaxfed.engine.options import RunOptions
from jaxfed.engine.recomputing import point_groups as point_groups  # (not public: jaxfed verify)
from jaxfed.engine.recomputing import recompute as recompute  # (not public: jaxfed verify)
from jaxfed.engine.result import RunInfo, RunResult
from jaxfed.engine.sizing import DeviceSpec, choose_width
from jaxfed.engine.target import TARGET_STATISTICS, Target, parse_target
from jaxfed.store import ConfigMismatch, StoreError

__all__ = [
    "run",
    "plan",
    "execute",
    "RunOptions",
    "Plan",
    "RunResult",
    "RunInfo",
    "cache_info",
    "clear_cache",
    "CacheInfo",
    "CACHE_ENV",
    "use_all_cores",
    "start_distributed",
    "Target",
    "TARGET_STATISTICS",
    "parse_target",
    "ConfigMismatch",
    "StoreError",
    "choose_width",
    "DeviceSpec",
]
