"""Result sinks: where a group's chunks go. :class:`RawSink` keeps every trial, :class:`SummarySink`
folds the device's per-chunk summaries in trial order; both restore what the store holds, store
what they computed off the critical path (:class:`Writer`: every raw chunk, a summary's state every
``checkpoint_every`` seconds and at the end of its group) and take chunks through
:func:`pipelined`, which dispatches chunk i + 1 before the host handles chunk i."""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from jaxfed import stats
from jaxfed.engine.devices import broadcast_from_0, raise_on_every_process, to_host
from jaxfed.engine.target import Target, still_running
from jaxfed.store import GroupSpec, Store, StoredSummary, StoreError, finish_summaries


class Writer:
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


def pipelined(chunks, dispatch, handle, writer: Writer, to_copy=lambda outputs: outputs) -> None:
    """For each chunk, ``dispatch(chunk)`` (asynchronous: returns device arrays at once) and then
    ``handle(chunk, outputs)`` of the *previous* chunk, so the device computes chunk i + 1 while
    the host converts, folds and stores chunk i. At most two chunks are alive: the one in flight
    and the one being handled (whose write waits for the previous write first). The copy to the
    host of ``to_copy(outputs)`` (a sink's :meth:`Sink.host_part`) starts at dispatch."""
    previous = None
    for chunk in chunks:
        outputs = dispatch(chunk)
        start_copies_to_host(to_copy(outputs))
        if previous is not None:
            handle(*previous)
        previous = (chunk, outputs)
    if previous is not None:
        handle(*previous)
    writer.wait()


def start_copies_to_host(tree) -> None:
    """Starts the copy of every accelerator array of ``tree`` to the host as soon as it is computed
    (``copy_to_host_async``), so that it overlaps the next chunk instead of starting when the host
    asks for the values. Not on a CPU, where the host reads the device's buffers in place."""
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array) and not leaf.is_deleted() and _platform(leaf) != "cpu":
            leaf.copy_to_host_async()


def _platform(array: jax.Array) -> str:
    return next(iter(array.devices())).platform


def copy_into(into: np.ndarray, rows, start: int, n: int, array) -> None:
    """``into[rows, start : start + n] = array[:, :n]`` for a chunk's metric ``array`` (points,
    batch, …), device shard by device shard: each shard's host buffer (on a CPU the device's own
    memory, read in place) goes straight into its slice of ``into``, without first gathering the
    whole chunk into one host array. Under several processes: gathered to process 0 first."""
    if not isinstance(array, jax.Array) or jax.process_count() > 1:
        into[rows, start : start + n] = to_host(array)[:, :n]
        return
    for shard in array.addressable_shards:
        first = shard.index[1].start or 0  # (the trial axis is the sharded one)
        if first >= n:
            continue  # padding only
        last = min(first + shard.data.shape[1], n)
        into[rows, start + first : start + last] = np.asarray(shard.data)[:, : last - first]


def missing_ranges(n_trials: int, done: list[tuple[int, int]], chunk_size: int) -> list[tuple[int, int]]:
    """Chunks of at most ``chunk_size`` trials covering what ``done`` (stored ranges, possibly
    overlapping) leaves out of [0, n_trials); O(stored chunks), whatever ``n_trials``."""
    ranges, covered = [], 0
    for start, stop in sorted(done) + [(n_trials, n_trials)]:
        ranges += [(t, min(t + chunk_size, start)) for t in range(covered, start, chunk_size)]
        covered = max(covered, stop)
    return ranges


class Resume(NamedTuple):
    """What a group's store holds, decided once when its sink is opened (on every process: process
    0's reading of the store)."""

    complete: bool  # the verified store holds every trial asked for: nothing to compile
    done: int  # point-trials already done (restored)
    chunk_size: int | None  # the chunk size a continued run must keep (a targeted run's), else None


def open_sinks(store: Store, specs: list, n_trials: int, results: dict, writer: Writer, *, summary: bool, targeted: bool, checkpoint_every: float = 0.0, clock: Callable[[], float] = time.monotonic, hist_on_device: bool = False, trial_range: tuple[int, int] | None = None) -> list:  # fmt: skip
    """Each group's sink (``specs``: a :class:`jaxfed.store.GroupSpec` per group), with what ``store``
    holds restored, and each group's :class:`Resume` decided: the one place a group's resume is.
    A summary's state is stored every ``checkpoint_every`` seconds by ``clock`` and at the end of
    its group, its histograms kept on the device in between with ``hist_on_device`` (:class:`SummarySink`).

    First process 0 reads and verifies every stored file (a refusal is raised on every process,
    before any collective the others would wait in), then every process takes process 0's
    decisions (:meth:`Sink.settle`). ``trial_range`` (start, stop): a shard's, whose sinks compute
    and store those trials only.

    Raises:
        StoreError: a stored file cannot be used (on process 0; on the others, that it refused).
    """
    refusal: StoreError | None = None
    sinks: list[RawSink | SummarySink] = []
    is_main = jax.process_index() == 0
    try:
        for spec in specs:
            sinks.append(
                SummarySink(
                    store,
                    spec,
                    n_trials,
                    writer,
                    is_main,
                    targeted,
                    checkpoint_every,
                    clock,
                    hist_on_device,
                    trial_range,
                )  # fmt: skip
                if summary
                else RawSink(store, spec, n_trials, results, writer, trial_range)
            )
    except StoreError as err:
        refusal = err
    raise_on_every_process(refusal)
    for sink in sinks:
        sink.settle()
    return sinks


class Sink:
    """What a group's chunks are handed to: the interface :func:`jaxfed.engine.execute` drives in
    raw and summary modes alike. A sink restores what the store holds when it is opened
    (:func:`open_sinks`) and then takes the chunks left.

    - ``settle()``: process 0's reading of the store on every process (a collective), once;
    - ``resume()``: the :class:`Resume` of the group;
    - ``chunks(size)``: the chunks (start, stop) left to compute, ``size`` trials at most each;
    - ``extra_args(chunk)``: the chunk function's arguments after (seed, points, leaves, start);
    - ``handle(chunk, device_out)``: takes a finished chunk (host conversion, results, store);
    - ``host_part(device_out)``: what of a chunk's outputs goes to the host;
    - ``finish(nonfinite)``: the group's results, after its last chunk.
    """

    _resume: Resume | None = None

    def host_part(self, device_out):
        return device_out

    def settle(self) -> None:
        raise NotImplementedError

    def resume(self) -> Resume:
        assert self._resume is not None, "settle() first (open_sinks)"
        return self._resume


class RawSink(Sink):
    """Every trial, written into ``results[name][rows, start:stop]`` (arrays (point, trial, …)
    shared by all groups) and stored chunk by chunk. The stored chunks are copied in first; a
    larger run's chunk serves a smaller request."""

    def __init__(self, store: Store, spec: GroupSpec, n_trials: int, results: dict, writer: Writer, trial_range=None):
        self.store, self.spec, self.n_trials, self.results, self.writer = store, spec, n_trials, results, writer
        # a shard's: the trials outside its range count as done, for planning only
        start, stop = trial_range or (0, n_trials)
        self.outside = [(0, start), (stop, n_trials)]
        self.rows = np.asarray(spec.point_ids)
        # consecutive points (one group: all of them) as a slice: a plain copy, not a scatter
        # (several times faster for a large chunk)
        consecutive = len(self.rows) > 0 and np.array_equal(
            self.rows, np.arange(self.rows[0], self.rows[0] + len(self.rows))
        )
        self.at = slice(int(self.rows[0]), int(self.rows[0]) + len(self.rows)) if consecutive else self.rows
        self.done = []
        for start, stop, arrays in store.raw_chunks(spec, n_trials):
            stop_used = min(stop, n_trials)
            for name in spec.metrics:
                results[name][self.at, start:stop_used] = arrays[name][:, : stop_used - start]
            self.done.append((start, stop_used))
        # per point, the non-finite trials of the computed chunks (counted on the device)
        self.computed_nonfinite = {name: np.zeros(len(self.rows), np.int64) for name in spec.metrics}

    def settle(self) -> None:
        missing = missing_ranges(self.n_trials, self.done + self.outside, self.n_trials)
        complete = int(broadcast_from_0(np.asarray([not missing], np.int64))[0])  # only process 0 reads the store
        span = self.n_trials - sum(stop - start for start, stop in self.outside)  # (a shard's range)
        done = len(self.rows) * (span - sum(stop - start for start, stop in missing))
        self._resume = Resume(bool(complete), done, None)

    def chunks(self, size: int) -> list:
        plan = broadcast_from_0(
            np.asarray(missing_ranges(self.n_trials, self.done + self.outside, size), np.int64).reshape(-1, 2)
        )
        return [(int(start), int(stop)) for start, stop in plan]

    def extra_args(self, chunk) -> tuple:
        return ()

    def handle(self, chunk, device_out) -> None:
        """Copies the chunk into the results shard by shard (:func:`copy_into`) and stores it from
        there: per chunk the host copies each value once."""
        start, stop = chunk
        jax.block_until_ready(device_out)  # an execution error (out of memory) before anything changes
        values, bad = device_out
        for name, value in values.items():
            copy_into(self.results[name], self.at, start, stop - start, value)
            self.computed_nonfinite[name] += to_host(bad[name])[:, : stop - start].sum(1)
        # Views of the results (a copy where the rows are not consecutive): nothing writes these trials again.
        out = {name: self.results[name][self.at, start:stop] for name in values}
        self.writer.submit(self.store.save_raw, self.spec, start, stop, out)

    def finish(self, nonfinite: dict) -> dict:
        """The non-finite trials per point: the device's counts of the computed chunks plus the
        host's of the restored trials (their union: stored ranges may overlap); the arrays are
        ``results`` already (returns an empty dict)."""
        restored = _union(self.done)  # (only restored ranges: computed chunks are planned around them)
        for name in self.spec.metrics:
            on_host = [
                sum(nonfinite_trials(self.results[name][p, start:stop]) for start, stop in restored) for p in self.rows
            ]
            nonfinite[name][self.rows] = self.computed_nonfinite[name] + np.asarray(on_host, np.int64)
        return {}


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint sorted ranges covering the same trials as ``ranges``."""
    merged: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _whole(stop):
    """Trials before ``stop`` in whole sum blocks (see ``stats.summary.SUMMARY_BLOCK``)."""
    return stop // stats.summary.SUMMARY_BLOCK * stats.summary.SUMMARY_BLOCK


class SummarySink(Sink):
    """Per point, a :class:`jaxfed.stats.SummaryState` of whole sum blocks plus the raw tail of the
    last partial block, folded in trial order from the device's per-chunk summaries. The state is
    stored after the first chunk handled ``checkpoint_every`` seconds (by ``clock``) or more after
    the group started or was last stored (0: after every chunk), and always at the end of the
    group, so that a kill loses at most that interval of work and a fast device never waits for a
    snapshot of every chunk. Points may advance separately (a precision target stops some): each
    point's trials done are the next chunk's start. A stored summary resumes at its last whole
    block (see :func:`resume_point`); a targeted one (``targeted``) on its stored chunk size,
    whose boundaries are where its points stopped.

    ``hist_on_device``: the chunks' histograms (14 MB a chunk for Fig. 3's 900 cells × N_BINS) are
    added up on the device (:func:`_running_hist`) and pulled into the host's state only when it is
    stored or finished (:meth:`_pull_hists`), so that the host neither copies nor adds them per
    chunk; integer additions, so the counts are the same. Not for a targeted run, whose targets
    read the state after every chunk."""

    def __init__(
        self,
        store: Store,
        spec: GroupSpec,
        n_trials: int,
        writer: Writer,
        is_main: bool,
        targeted=False,
        checkpoint_every: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        hist_on_device: bool = False,
        trial_range: tuple[int, int] | None = None,
    ):
        start, n_trials = trial_range or (0, n_trials)  # a shard's trials [start, stop)
        self.start = start
        self.store, self.spec, self.n_trials, self.writer, self.is_main = store, spec, n_trials, writer, is_main
        self.hist_on_device = hist_on_device and not targeted
        self.device_hists: dict = {}  # metric -> the histograms of the chunks handled since the last pull
        self.checkpoint_every, self.clock = checkpoint_every, clock
        self.stored_at = clock()  # when the stored state was last brought up to date (reset when chunks start)
        self.unstored = False  # chunks were folded since
        self.rows = np.asarray(spec.point_ids)
        stored = store.load_summary(spec, n_trials)
        complete = stored is not None and stored.stop == n_trials
        first, states, self.tails, counts = resume_point(stored, n_trials, len(self.rows), spec.metrics, start)
        # The sink owns its histograms and adds each chunk's into them in place (see handle).
        self.states = {name: state._replace(hist=np.array(state.hist)) for name, state in states.items()}
        kept = (stored.chunk or 0) if targeted and stored is not None else 0
        self._read = np.asarray([first, complete, kept, *counts], np.int64)  # (this process's reading)
        self.size: int | None = None  # the chunk size, recorded in the store (a targeted run resumes on it)

    def settle(self) -> None:
        decided = broadcast_from_0(self._read)  # only process 0 reads the store
        self.first, self.counts = int(decided[0]), decided[3:]
        done = int((self.counts - self.start).sum())  # (a shard's trials from its start)
        self._resume = Resume(bool(decided[1]), done, int(decided[2]) or None)

    def chunks(self, size: int) -> list:
        self.size, self.stored_at = size, self.clock()
        return [(start, min(start + size, self.n_trials)) for start in range(self.first, self.n_trials, size)]

    def targeted_chunks(self, size: int, target: Target):
        """Yields (chunk, active): the next chunk of the points ``active`` (an index array) still
        short of ``target``, decided after the previous chunk was handled and from completed chunks
        only, until no point is (every running point has done the same trials)."""
        self.size, self.stored_at = size, self.clock()
        while True:
            running = still_running(self.states, self.counts, self.n_trials, target)
            active = np.flatnonzero(broadcast_from_0(running.astype(np.int64)))  # process 0 folds the states
            if active.size == 0:
                self.store_state()  # the end of the group (unless its last chunk was stored)
                return
            start = int(self.counts[active[0]])
            yield (start, min(start + size, self.n_trials)), active

    def trials_per_point(self) -> tuple[np.ndarray, np.ndarray]:
        """(point ids, trials done by each)."""
        return self.rows, self.counts.copy()

    def extra_args(self, chunk) -> tuple:
        """(trials of the chunk in whole blocks, the chunk's first block modulo 2^32): see
        ``make_chunk_fn`` (a chunk's dyadic pieces depend only on its start's low bits)."""
        return (np.uint32(_whole(chunk[1]) - chunk[0]), np.uint32(chunk[0] // stats.summary.SUMMARY_BLOCK & 0xFFFFFFFF))

    def host_part(self, device_out):
        """The chunk's outputs but its histograms, when they stay on the device."""
        if not self.hist_on_device:
            return device_out
        return {name: {k: v for k, v in part.items() if k != "hist"} for name, part in device_out.items()}

    def handle(self, chunk, device_out, active=slice(None)) -> None:
        """Folds a chunk of the points ``active`` (all, or an index array of those still running):
        its devices' shares in trial order (see :class:`jaxfed.engine.compiled.ChunkFn`); with
        ``hist_on_device`` its histograms are added on the device."""
        start, stop = chunk
        out = to_host(self.host_part(device_out))
        if self.hist_on_device:  # (after the outputs reached the host: a failed chunk changes nothing)
            for name, part in device_out.items():
                self.device_hists[name] = _running_hist(self.device_hists.get(name), part["hist"])
        n_blocks = (_whole(stop) - start) // stats.summary.SUMMARY_BLOCK
        self.counts[active] = stop  # on every process: the next chunk's start
        if not self.is_main:
            return
        # New arrays, but for the histograms, which the sink owns and adds into in place (a new
        # 14 MB array per chunk for Fig. 3 was most of the host's work): the writer thread reads
        # a snapshot's copy of them (store_state).
        for name, part in out.items():
            before = self.states[name]
            if not isinstance(active, slice):
                before = stats.SummaryState(*(f if f is None else f[active] for f in before))  # type: ignore[arg-type]  # (copies)
            state, tail = folded_shares(before, part, n_blocks, stop - _whole(stop))
            if isinstance(active, slice):
                self.states[name], self.tails[name] = state, tail
            else:
                self.states[name] = stats.SummaryState(*(f if f is None else with_rows(f, active, v) for f, v in zip(self.states[name], state)))  # type: ignore[arg-type]  # fmt: skip
                self.tails[name] = with_rows(widened(self.tails[name], tail.shape[1]), active, tail)
        self.unstored = True
        finished = bool(np.all(self.counts >= self.n_trials))
        if finished or self.clock() - self.stored_at >= self.checkpoint_every:
            self.store_state()

    def _pull_hists(self) -> None:
        """Adds the histograms kept on the device into the host's state (in place: the sink owns it)."""
        for name, running in self.device_hists.items():
            np.add(self.states[name].hist, np.asarray(running), out=self.states[name].hist)
        self.device_hists = {}

    def store_state(self) -> None:
        """Submits the state folded so far to the store, if it holds anything the store does not
        (process 0 only)."""
        self._pull_hists()
        if not (self.is_main and self.unstored):
            return
        snapshot = {
            name: dict(self.states[name]._asdict(), hist=self.states[name].hist.copy(), tail=self.tails[name])
            for name in self.spec.metrics
        }
        self.writer.submit(self.store.save_summary, self.spec, self.counts.tolist(), self.size, snapshot)
        self.stored_at, self.unstored = self.clock(), False

    def finish(self, nonfinite: dict) -> dict:
        """metric -> (rows, :class:`jaxfed.stats.Summary`) of the group (its state stored, if it was not)."""
        self.store_state()
        states = {name: self.states[name] for name in self.spec.metrics}
        parts = {}
        for name, (final, summary) in finish_summaries(states, self.tails, self.counts).items():
            parts[name] = (self.rows, summary)
            nonfinite[name][self.rows] = final.nonfinite_trials
        return parts


@functools.partial(jax.jit, donate_argnums=0)
def _add_shares(running, hist):
    return running + hist.sum(axis=1, dtype=hist.dtype)


@jax.jit
def _sum_shares(hist):
    return hist.sum(axis=1, dtype=hist.dtype)


def _running_hist(running, hist):
    """``running`` (points, *cells, N_BINS) plus a chunk's histograms ``hist`` (points, devices,
    *cells, N_BINS), added over the devices' shares, on the device (``running`` None: the first
    chunk's); int32 additions, exact in any order."""
    return _sum_shares(hist) if running is None else _add_shares(running, hist)


def folded_shares(state: stats.SummaryState, part: dict, n_blocks: int, n_tail: int):
    """(``state`` followed by a chunk's devices' shares, the chunk's raw tail of ``n_tail``
    trials): ``part`` holds each share's :func:`jaxfed.engine.compiled.share_summary` along axis
    1, in trial order; the shares' whole blocks add up to the chunk's ``n_blocks``, and the tail
    is in the first share whose blocks do not fill it. The shares' histograms are added into
    ``state.hist`` in place (``hist_in_place`` of :func:`jaxfed.stats.summary.fold`): the caller owns it."""
    tail = None
    summarised = 0
    for g in range(part["blocks"].shape[1]):
        share = {field: values[:, g] for field, values in part.items()}
        blocks = int(share["blocks"][0])
        if blocks:
            state = stats.summary.fold(state, share, blocks, hist_in_place=True)
            summarised += blocks
        if tail is None and not share["full"][0]:
            tail = share["tail"][:, :n_tail]
    if summarised != n_blocks:
        raise AssertionError(f"the devices summarised {summarised} blocks of a chunk of {n_blocks}")
    if tail is None:  # every share full: the chunk ends on a whole block
        tail = part["tail"][:, 0, :0]
    return state, tail


def resume_point(stored: StoredSummary | None, n_trials: int, n_points: int, specs: dict, start: int = 0) -> tuple[int, dict, dict, np.ndarray]:  # fmt: skip
    """(first trial to compute, metric -> SummaryState of the whole blocks before it, metric ->
    raw tail after them, per point the trials done) from a group's stored summary (see
    :meth:`jaxfed.store.Store.load_summary`; None: nothing stored).

    A finished run (stored up to ``n_trials``) is complete as stored; a shorter one resumes at its
    last whole block, recomputing the partial block after it, so that every block sum is taken
    over the same trials as in an uninterrupted run. A shard's trials begin at ``start`` (a
    whole block).
    """
    if stored is None:
        block = stats.summary.SUMMARY_BLOCK
        states = {name: stats.summary.range_state((n_points,) + shape, start // block) for name, (shape, _) in specs.items()}  # fmt: skip
        tails = {name: np.zeros((n_points, 0) + shape, dt) for name, (shape, dt) in specs.items()}
        return start, states, tails, np.full(n_points, start, np.int64)
    if stored.stop == n_trials:
        return stored.stop, stored.states, stored.tails, stored.point_trials
    first = _whole(stored.stop)
    tails = {name: tail[:, :0] for name, tail in stored.tails.items()}
    return first, stored.states, tails, np.minimum(stored.point_trials, first)


def with_rows(array: np.ndarray, rows, values) -> np.ndarray:
    """A copy of ``array`` with ``rows`` replaced by ``values``."""
    out = array.copy()
    out[rows] = values
    return out


def widened(tail: np.ndarray, n: int) -> np.ndarray:
    """``tail`` (points, trials, …) zero-padded to at least ``n`` trials."""
    if tail.shape[1] >= n:
        return tail
    out = np.zeros((tail.shape[0], n) + tail.shape[2:], tail.dtype)
    out[:, : tail.shape[1]] = tail
    return out


def nonfinite_trials(values: np.ndarray) -> int:
    """Trials (axis 0) of one point's raw metric with a NaN or ±inf anywhere."""
    return sum(
        int((~np.isfinite(block)).reshape(block.shape[0], -1).any(-1).sum())
        for block in (
            values[i : i + stats.quantiles.TRIAL_BLOCK] for i in range(0, values.shape[0], stats.quantiles.TRIAL_BLOCK)
        )
    )
