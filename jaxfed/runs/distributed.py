"""A run's shards as Dask tasks: :func:`run_on_dask` (``jaxfed run NAME --executor dask://HOST:PORT``).

Every trial is a pure function of (seed, point, trial), so a run splits into shards
(:mod:`jaxfed.runs.sharding`) that any process may compute in any order and a merge puts
back together, the same bytes as one process's run. Here the shards are Dask tasks: one per shard,
finer than the workers so that the load balances, each computed by ``sharding.run_shard`` in a
worker process into its own shard directory next to the run's, and merged by ``sharding.merge``
in the calling process. Dask does the scheduling: a task that raises is retried (``retries``), and
a lost worker's tasks are given to another worker by the scheduler; such a task resumes from the
chunks its shard directory already holds, so a lost worker costs at most the unfinished part of
the tasks it was running. A lost worker is told in one warning naming its tasks; a lost scheduler
ends the call in one line (:class:`SchedulerLost`: the shards stored; the same call resumes).

The workers write where the caller reads: a file system shared by every worker and the caller,
at the same path (the shard directories are ``OUT_DIR.shards/IIIII-of-TTTTT``, kept after the
merge). Dask itself is an optional dependency (``pip install "jaxfed[dask]"``), imported only here.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from jaxfed import engine, stats
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.runs import catalog, sharding
from jaxfed.runs.catalog import find

if TYPE_CHECKING:  # (for the annotations only: Dask is an optional dependency)
    from distributed import Client

TASKS_PER_THREAD = 4
"""Default tasks per worker thread: finer than the workers, so that a fast worker takes over a slow
one's share and a lost worker's tasks are small."""

MISSING_EXTRA = 'running on Dask needs the dask extra: pip install ".[dask]" (or "jaxfed[dask]")'

_SHARD_NAME = re.compile(r"^(\d{5})-of-(\d{5})$")

LOG = logging.getLogger("jaxfed")
"""Where a lost worker is told (a warning; with no logging configured, Python prints it on stderr)."""

SCHEMES = ("dask", "tcp", "tls", "ws", "wss", "ucx", "inproc")
"""The address schemes taken: ``dask://`` (``--executor``'s form, which is Dask's ``tcp://``) and Dask's own."""


class SchedulerLost(ConnectionError):
    """The Dask scheduler went away mid-run: the message says how many shards are stored and that
    the same call (command) resumes from them."""


def run_on_dask(
    client: Client | str,
    name: str,
    n_trials: int,
    out_dir: str,
    *,
    sets: Mapping[str, str] | None = None,
    seed: int = 0,
    keep: str = "auto",
    imports: Sequence[str] = (),
    tasks: int | None = None,
    wait_for_workers: int | None = None,
    retries: int = 3,
    quiet: bool = False,
    on_done: Callable[[int, int, int], None] | None = None,
    mix_builds: bool = False,
) -> str:
    """Runs ``n_trials`` trials per point of the experiment ``name`` as Dask tasks and merges them
    into the result directory ``out_dir``, the same bytes as ``jaxfed run NAME --trials N --out
    OUT_DIR`` in one process.

    Args:
        client: a ``distributed.Client``, or a scheduler's address (``tcp://HOST:PORT``, or
            ``dask://HOST:PORT`` as ``--executor`` takes it) to which a client is connected for the
            run and closed after it.
        name: a built-in experiment's name or ``path/to/file.py:NAME`` (the file on the shared file
            system); ``sets``, ``seed``, ``keep`` and ``imports`` are ``jaxfed run``'s ``--set``,
            ``--seed``, ``--keep`` and ``--import``.
        tasks: how many shards (tasks); default :data:`TASKS_PER_THREAD` per worker thread of the
            cluster when the tasks are cut (after ``wait_for_workers``; else those present, or the
            first to join if none has), or the count of the shards ``OUT_DIR.shards`` already holds
            (a rerun resumes them), at most one per 64-trial block.
        wait_for_workers: wait (``client.wait_for_workers``) until this many workers have joined
            before cutting the run into tasks: a cluster still starting (``cluster.scale(jobs=25)``
            returns at once) is then filled, not cut for the workers present at the call.
        retries: the times Dask reruns a task that raised (a lost worker's task is rescheduled by
            the scheduler, up to its ``allowed-failures``).
        quiet: no line on stderr at the start (the workers, threads and tasks seen) and per
            finished task. A worker lost mid-run is told whatever ``quiet`` (a warning of the
            ``jaxfed`` logger naming the task rerun); this handles the client's ``"all"`` event topic
            during the call (``client.subscribe_topic``).
        on_done: called in this process as ``on_done(index, finished, tasks)`` after each finished
            task (after its line).
        mix_builds: workers of different builds (JAX, jaxlib, processor: :mod:`jaxfed.builds`)
            may compute the shards, and a task rerun on another worker resumes its shard (``jaxfed
            run --mix-builds``); the merged ``build.json`` lists every build as mixed. Without it, a
            merge of shards of different builds is refused.

    The shard directories ``OUT_DIR.shards/IIIII-of-TTTTT`` are written by the workers (a file
    system shared by the workers and this process is assumed, at the same path: ``out_dir`` is made
    absolute here) and kept after the merge; rerunning the same call resumes from them.

    Returns:
        ``out_dir``.

    Raises:
        ImportError: Dask is not installed (one line naming the extra).
        ValueError: before any task is submitted, what every task would refuse (:func:`check_here`),
            or a scheduler address that is not ``SCHEME://HOST:PORT`` (:func:`scheduler_address`).
        ConnectionError: no scheduler answers at the address given, or the scheduler was lost
            mid-run (:class:`SchedulerLost`: how many shards are stored; the same call resumes).
        Exception: the error of a task that failed after its retries (the other tasks are cancelled).
    """
    address = scheduler_address(client) if isinstance(client, str) else None
    distributed = _import_distributed()
    out_dir = os.path.abspath(out_dir)
    name, imports = _absolute_user_files(name, imports)
    client = _connect(distributed, address) if isinstance(client, str) else client
    try:
        count = task_count(client, n_trials, f"{out_dir}.shards", tasks, wait_for_workers)
        check_here(name, n_trials, count, sets or {}, imports)
        if not quiet:
            print(f"{name}: {_cluster_seen(client)}: {count} tasks -> {out_dir}.shards", file=sys.stderr, flush=True)
        shard_dirs = [shard_dir(out_dir, i, count) for i in range(count)]
        futures = _submit(client, name, n_trials, shard_dirs, dict(sets or {}), seed, keep, imports, retries, mix_builds)  # fmt: skip
        _wait_unless_lost(distributed, client, futures, name, quiet, on_done, address, shard_dirs)
    finally:
        if address is not None and client.status != "closed":
            client.close()
    return sharding.merge(shard_dirs, out_dir, experiment=name, imports=imports, mix_builds=mix_builds)


def shard_dir(out_dir: str, index: int, count: int) -> str:
    """The directory of shard ``index`` of ``count``: ``OUT_DIR.shards/IIIII-of-TTTTT``."""
    return f"{out_dir}.shards/{index:05d}-of-{count:05d}"


def task_count(client: Client, n_trials: int, shards_root: str, tasks: int | None, wait_for_workers: int | None) -> int:
    """The task count of a call: ``tasks`` if given, else :func:`default_tasks` of the cluster
    after waiting (``client.wait_for_workers``) for ``wait_for_workers`` workers if given."""
    if wait_for_workers is not None and (isinstance(wait_for_workers, bool) or wait_for_workers < 1):
        raise ValueError(f"wait_for_workers must be a positive number of workers, got {wait_for_workers!r}")
    if wait_for_workers is not None:
        client.wait_for_workers(wait_for_workers)
    return tasks if tasks is not None else default_tasks(client, n_trials, shards_root)


def default_tasks(client: Client, n_trials: int, shards_root: str) -> int:
    """The task count of a run: the count of the shards already under ``shards_root`` if they are of
    one count (a rerun resumes them), else :data:`TASKS_PER_THREAD` per worker thread (waiting for
    a first worker if none has joined); at most one task per sum block of 64 trials
    (``stats.summary.SUMMARY_BLOCK``: shards are cut on them)."""
    blocks = max(1, -(-n_trials // stats.summary.SUMMARY_BLOCK))
    found = existing_count(shards_root)
    if found is not None:
        return found
    threads = sum(client.nthreads().values())
    if not threads:
        client.wait_for_workers(1)
        threads = sum(client.nthreads().values())
    return max(1, min(TASKS_PER_THREAD * threads, blocks))


def existing_count(shards_root: str) -> int | None:
    """The count ``T`` of the ``IIIII-of-TTTTT`` shard directories under ``shards_root`` when they are
    all of one count, else None (none there, or several counts)."""
    try:
        names = os.listdir(shards_root)
    except FileNotFoundError:
        return None
    counts = {int(m.group(2)) for m in map(_SHARD_NAME.match, names) if m}
    return counts.pop() if len(counts) == 1 else None


def check_here(name: str, n_trials: int, tasks: int, sets: Mapping[str, str], imports: Sequence[str]) -> None:
    """Refuses in the calling process, before anything is submitted, what every task would refuse:
    an unknown experiment or parameter, a user file that does not load (ValueError, as ``jaxfed
    run`` words it), or a task count outside 1 to the run's 64-trial blocks."""
    catalog.import_extensions(imports)
    make_config(find(name).config_cls, dict(sets))
    if n_trials < 1:
        raise ValueError(f"trials must be at least 1, got {n_trials}")
    blocks = -(-n_trials // stats.summary.SUMMARY_BLOCK)
    if not 1 <= tasks <= blocks:
        raise ValueError(
            f"tasks must be from 1 to {blocks} for {n_trials} trials (shards are cut on blocks of "
            f"{stats.summary.SUMMARY_BLOCK} trials), got {tasks}"
        )


def _shard_task(name, n_trials, index, count, out_dir, sets, seed, keep, imports, token, mix_builds=False) -> str:
    """One task, in a worker process: shard ``index`` of ``count`` into ``out_dir`` (resuming from
    what it holds), with the experiment this process built for the call ``token`` if it ran one of
    its tasks before (:func:`_built`)."""
    exp, cfg, imported, sweep = _built(token, name, sets, imports)
    options = engine.RunOptions.for_experiments(seed=seed, keep=keep, out_dir=out_dir, progress=False, mix_builds=mix_builds)  # fmt: skip
    sharding.compute_shard(exp, cfg, n_trials, sharding.Shard(index, count), options, imported or None, sweep)
    return out_dir


_BUILT: dict = {}
"""{token: (experiment, config, imported files, sweep)} of the last call whose task this worker
process ran (one entry)."""
_BUILT_LOCK = threading.Lock()


def _built(token: str, name: str, sets: Mapping[str, str], imports: Sequence[str]) -> tuple:
    """The experiment ``name``, its config, the user files it imported and its sweep, built once per
    call ``token`` in this process: the call's next tasks here take the same trial function, whose
    compiled chunk program the engine keeps in the process (``KEPT_CHUNK_FNS``), so they neither
    trace it to HLO nor load it from the cache again (0.26 s of a 0.34 s task of 2,500 Fig. 3
    trials). Only within one call: every task of a call builds the same sweep, but another call
    may follow an edited user file."""
    with _BUILT_LOCK:  # (a worker of several threads runs tasks side by side)
        if token not in _BUILT:
            imported = catalog.import_extensions(imports)
            exp = catalog.find(name, REGISTRY)
            cfg = make_config(exp.config_cls, dict(sets))
            _BUILT.clear()
            _BUILT[token] = (exp, cfg, imported, exp.build(cfg))
        return _BUILT[token]


def _submit(client, name, n_trials, shard_dirs, sets, seed, keep, imports, retries, mix_builds=False) -> dict:
    """Submits a task per shard directory; {future: shard index}. The keys name the run's tasks and
    are unique to this call (a rerun's tasks are new tasks, which resume from the directories)."""
    count, token = len(shard_dirs), uuid.uuid4().hex[:8]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.rsplit(":", 1)[-1])
    futures = {}
    for index, directory in enumerate(shard_dirs):
        args = (name, n_trials, index, count, directory, sets, seed, keep, tuple(imports), token, mix_builds)
        key = f"jaxfed-{label}-{index:05d}-of-{count:05d}-{token}"
        futures[client.submit(_shard_task, *args, key=key, retries=retries, pure=False)] = index
    return futures


def _wait_unless_lost(distributed, client, futures, name, quiet, on_done, address, shard_dirs) -> None:
    """:func:`_wait`, or where the scheduler was lost (its connection, not a task's error)
    :class:`SchedulerLost` raised from None (one line: what it says is the whole story), a client
    made here (``address``) closed first, quietly (:func:`_close_quietly`)."""
    try:
        _wait(distributed, client, futures, name, quiet, on_done)
    except (CancelledError, asyncio.CancelledError, OSError) as error:
        if getattr(error, "reason", None) != "scheduler-connection-lost" and client.status == "running":
            raise
        if address is not None:
            _close_quietly(client)
        raise SchedulerLost(_lost_line(address or "the Dask scheduler", shard_dirs)) from None


def _wait(distributed, client, futures: dict, name: str, quiet: bool, on_done) -> None:
    """Waits for every task as Dask reports them finished (``as_completed``, on ``client``'s event
    loop: by default it takes the process's default client's, which with several clients in one
    process heard of finished tasks seconds late, or never once that client was closed), releasing
    each finished one's future (its result is a path; were its worker lost, nothing would be
    recomputed); on the first error cancels the rest and raises it."""
    count, finished, start = len(futures), 0, time.perf_counter()
    running = {future.key: index for future, index in futures.items()}
    client.subscribe_topic("all", lambda event: _tell_lost_worker(event, running, name, count))
    try:
        for future in distributed.as_completed(list(futures), loop=client.loop):
            running.pop(future.key, None)
            index = futures.pop(future)
            if future.status != "finished":  # (its value, a path, is not fetched: were its worker lost, a
                future.result()  # fetch would rerun it) raises the task's error after its retries, or its cancel
            finished += 1
            if not quiet:
                print(
                    f"{name}: task {index + 1} of {count} done ({finished}/{count} finished, "
                    f"{time.perf_counter() - start:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
            if on_done is not None:
                on_done(index, finished, count)
            future.release()
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    finally:
        if client.status == "running":
            client.unsubscribe_topic("all")


def _tell_lost_worker(event: tuple, running: Mapping[str, int], name: str, count: int) -> None:
    """The scheduler's ``remove-worker`` event (on the ``"all"`` topic): one warning naming the
    tasks of this call that the lost worker held unfinished, which the scheduler gives to others."""
    _, message = event
    if not isinstance(message, dict) or message.get("action") != "remove-worker":
        return
    indices = sorted(i for i in (running.get(key) for key in message.get("processing-tasks", ())) if i is not None)
    if indices:  # (None: another call's task, or one finished since)
        tasks = ", ".join(str(i + 1) for i in indices)
        LOG.warning(
            f"{name}: Dask worker {message.get('worker', '?')} was lost holding task(s) {tasks} of {count}; "
            "they are rerun on the other workers, each resuming from its shard's finished chunks"
        )


def scheduler_address(address: str) -> str:
    """A scheduler's address checked at once: ``dask://HOST:PORT`` (``--executor``'s form) as Dask's
    ``tcp://HOST:PORT``, Dask's own (``tcp://``, ``tls://``, …) as given.

    Args:
        address: ``SCHEME://HOST:PORT`` with a scheme of :data:`SCHEMES` and a port from 1 to
            65535 (``inproc://`` addresses as Dask writes them).

    Returns:
        the address as Dask takes it.

    Raises:
        ValueError: one line naming the address, what is wrong and the form allowed.
    """
    scheme, sep, rest = address.partition("://")
    form = "dask://HOST:PORT (or Dask's tcp://, tls://, … HOST:PORT)"
    if not sep or scheme not in SCHEMES:
        raise ValueError(f"scheduler address {address!r}: expected {form}")
    if scheme == "inproc":
        return address
    host, colon, port = rest.rpartition(":")
    if not colon or not host or "/" in rest:
        raise ValueError(f"scheduler address {address!r}: expected {form}; a host and a port are needed")
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"scheduler address {address!r}: the port must be an integer from 1 to 65535, got {port!r}")
    return "tcp://" + rest if scheme == "dask" else address


def _connect(distributed, address: str | None) -> Client:
    """A client of the scheduler at ``address`` (checked), or a ConnectionError of one line where
    none answers within Dask's connect timeout (``distributed.comm.timeouts.connect``, 30 s)."""
    try:
        return distributed.Client(address)
    except (OSError, TimeoutError) as error:
        raise ConnectionError(
            f"{address}: no Dask scheduler answered there ({' '.join(str(error).split())}); start one "
            "(`dask scheduler --port PORT`) or give the address it prints"
        ) from None


def _close_quietly(client: Client) -> None:
    """Closes a client made here whose scheduler was lost, without the traceback Dask's client logs
    as its closing cancels its attempt to reconnect (jaxfed's line says what happened)."""
    dask_client = logging.getLogger("distributed.client")
    level = dask_client.level
    dask_client.setLevel(logging.CRITICAL)
    try:
        client.close()
    finally:
        dask_client.setLevel(level)


def _cluster_seen(client: Client) -> str:
    """The workers and threads the scheduler has now, as the start line says them."""
    threads = client.nthreads()
    return f"{len(threads)} Dask worker(s) of {sum(threads.values())} thread(s) in all"


def _lost_line(address: str, shard_dirs: Sequence[str]) -> str:
    """What is said when the scheduler is lost mid-run: the shards stored, and that the same call
    resumes from them (the task count is taken from the directories)."""
    stored = sum(sharding._finished_record(d) is not None for d in shard_dirs)
    root = os.path.dirname(shard_dirs[0])
    return (
        f"{address}: the Dask scheduler was lost mid-run; {stored} of {len(shard_dirs)} shards are stored "
        f"in {root} (the others keep their finished chunks); rerun the same command to resume from them"
    )


def _absolute_user_files(name: str, imports: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """A user experiment's file (``path/file.py:NAME``) and the ``--import`` files as absolute paths,
    so that workers with another working directory find them on the shared file system."""
    path, colon, attr = name.rpartition(":")
    if colon and path.endswith(".py"):
        name = f"{os.path.abspath(path)}:{attr}"
    return name, tuple(os.path.abspath(p) for p in imports)


def _import_distributed() -> Any:
    """The ``distributed`` module, or an ImportError of one line naming the extra."""
    try:
        import distributed  # optional: the dask extra, loaded only to run on Dask
    except ImportError as error:
        raise ImportError(MISSING_EXTRA) from error
    return distributed
