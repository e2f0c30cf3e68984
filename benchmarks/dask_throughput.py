"""Two local Dask workers against one `jaxfed run` (issue 58's targets: >= 0.9x its throughput, cold and
warm, at 100,000 trials; the caller's time after the last task <= 20% of the call).

In one run on this machine, at ``--trials`` trials (default 20,000) of ``--experiment`` (default
gfvl-topologies, the paper's Fig. 3), compile included:

- ``one_process``: ``jaxfed run NAME --trials N --out D1`` in a subprocess, as a user types it (every
  core a host device), on an empty compilation cache: the process's wall seconds;
- ``dask``: the same run through ``jaxfed.runs.distributed.run_on_dask`` on a scheduler and
  ``--workers`` worker processes of one thread each (one host device each), started here on
  localhost with their own empty compilation cache: the seconds of the call (the workers import
  JAX and jaxfed during their first task, which counts; the caller merges the shards, which counts
  too), and separately the seconds the cluster took to start, which do not count.

Throughput is trials x points per second; ``ratio`` is the Dask run's over the one process's, and
``same_bytes`` whether the two metrics.npz are equal byte for byte. ``--repeats`` alternates the two
(each on fresh caches) and reports the median of each. ``dask`` uses run_on_dask's default task count
(4 per worker thread); ``dask_one_task_per_worker`` the same run in one task per worker, which pays
the per-task costs (tracing the program, loading it from the cache, the shard's files) once per
worker. ``--warm``: every run on one compilation cache that an untimed run of each kind filled
first (the programs loaded, not compiled; the workers still start fresh and import JAX in their
first task). The machine and its load average before, during (at each round's start) and after
are recorded.

    python benchmarks/dask_throughput.py [--trials 20000] [--experiment NAME] [--workers 2] [--warm] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, machine, write_json  # noqa: E402
from scaling import cli_run  # noqa: E402

from jaxfed.experiment import make_config  # noqa: E402
from jaxfed.experiments import REGISTRY  # noqa: E402
from jaxfed.runs import distributed as on_dask  # noqa: E402

TARGET = 0.9
"""Issue 58 (was 0.8, issue 46): two local workers at >= 0.9x the throughput of one `jaxfed run`."""
CALLER_TARGET = 0.2
"""Issue 58: the caller's time after the last task (reading the shards back, merging, the report)
at most this fraction of the whole call."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_cluster(n_workers: int, work: str, cache: str):
    """A scheduler and ``n_workers`` worker processes of one thread each on localhost (their logs in
    ``work``, their compilation cache ``cache``); yields (client, seconds the cluster took to start)."""
    import distributed  # (the dask extra)

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, JAXFED_COMPILATION_CACHE=cache)
    commands = [["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]]
    for i in range(n_workers):
        commands.append(["distributed.cli.dask_worker", address, "--nthreads", "1", "--nworkers", "1"])
        commands[-1] += ["--no-dashboard", "--name", f"w{i}", "--local-directory", os.path.join(work, f"w{i}")]
    start = time.perf_counter()
    processes = []
    for i, command in enumerate(commands):
        log = open(os.path.join(work, f"process-{i}.log"), "w")
        processes.append(subprocess.Popen([sys.executable, "-m", *command], env=env, stdout=log, stderr=log))
    try:
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(n_workers, timeout=120)
            yield client, time.perf_counter() - start
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def one_process(name: str, n_trials: int, work: str, cache: str | None = None) -> tuple[float, bytes]:
    """(wall seconds, metrics.npz) of ``jaxfed run NAME --trials N`` on the compilation cache
    ``cache`` (default: an empty one, removed after)."""
    out = os.path.join(work, "one-process")
    scratch = cache is None
    cache = tempfile.mkdtemp(prefix="cache-one-", dir=work) if cache is None else cache
    done = cli_run(["run", name, "--trials", str(n_trials), "--out", out], cache)
    with open(os.path.join(out, "metrics.npz"), "rb") as f:
        metrics = f.read()
    shutil.rmtree(out)
    if scratch:
        shutil.rmtree(cache)
    return done["seconds"], metrics


def through_dask(
    name: str, n_trials: int, n_workers: int, tasks: int | None, work: str, cache: str | None = None
) -> tuple[dict, bytes]:
    """A fresh local cluster whose workers share the compilation cache ``cache`` (default: an empty
    one, removed after), then ``run_on_dask`` (``tasks`` tasks, None: its default): ({"seconds" of
    the call, "startup" seconds of the cluster, "tasks", "first_task_s" and "last_task_s" (when
    the first and the last task were reported done, from the call's start), "merge_s" (the rest of
    the call: the merge in this process)}, metrics.npz)."""
    out = os.path.join(work, "on-dask")
    cluster_dir = tempfile.mkdtemp(prefix="cluster-", dir=work)
    scratch = cache is None
    cache = tempfile.mkdtemp(prefix="cache-dask-", dir=work) if cache is None else cache
    done: list[float] = []
    with local_cluster(n_workers, cluster_dir, cache) as (client, startup):
        count = tasks or on_dask.default_tasks(client, n_trials, f"{out}.shards")
        start = time.perf_counter()
        on_dask.run_on_dask(
            client, name, n_trials, out, tasks=count, quiet=True, on_done=lambda *_: done.append(time.perf_counter())
        )
        seconds = time.perf_counter() - start
    with open(os.path.join(out, "metrics.npz"), "rb") as f:
        metrics = f.read()
    for path in (out, f"{out}.shards", cluster_dir, *([cache] if scratch else [])):
        shutil.rmtree(path)
    row = {"seconds": seconds, "startup": startup, "tasks": count, "first_task_s": done[0] - start}
    row.update(last_task_s=done[-1] - start, merge_s=start + seconds - done[-1])
    return row, metrics


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--experiment", default="gfvl-topologies", choices=sorted(REGISTRY))
    parser.add_argument("--workers", type=int, default=2, help="worker processes of one thread each")
    parser.add_argument("--warm", action="store_true", help="every run on one compilation cache, filled first")
    add_common_arguments(parser, "dask_throughput", repeats=1)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials = 2_000
    exp = REGISTRY[args.experiment]
    n_points = len(exp.build(make_config(exp.config_cls, {})).points)
    rows: dict = {"machine": machine(), "load_before": os.getloadavg(), "experiment": args.experiment}
    rows.update(trials=args.trials, points=n_points, workers=args.workers, threads_per_worker=1, warm=args.warm)
    variants = {"dask": None, "dask_one_task_per_worker": args.workers}
    runs: dict = {"one_process": [], **{key: [] for key in variants}, "same_bytes": [], "load": []}
    with tempfile.TemporaryDirectory(prefix="jaxfed-dask-bench-") as work:
        cache = None
        if args.warm:  # (filled by an untimed run of each kind: the programs of one and of two host devices)
            cache = tempfile.mkdtemp(prefix="cache-warm-", dir=work)
            one_process(args.experiment, args.trials, work, cache)
            through_dask(args.experiment, args.trials, args.workers, None, work, cache)
        for _ in range(args.repeats):
            runs["load"].append(os.getloadavg())
            alone, reference = one_process(args.experiment, args.trials, work, cache)
            runs["one_process"].append({"seconds": alone})
            line = f"one process {alone:.1f} s"
            for key, tasks in variants.items():
                row, merged = through_dask(args.experiment, args.trials, args.workers, tasks, work, cache)
                runs[key].append(row)
                runs["same_bytes"].append(merged == reference)
                line += f"; {args.workers} workers, {row['tasks']} tasks {row['seconds']:.1f} s"
                line += f" (first task {row['first_task_s']:.1f} s, merge {row['merge_s']:.1f} s)"
            print(line)
    rows["runs"] = runs
    for key in ("one_process", *variants):
        seconds = statistics.median(r["seconds"] for r in runs[key])
        rows[key] = {"seconds": seconds, "trials_per_s": args.trials * n_points / seconds}
        if key != "one_process":
            rows[key]["tasks"] = runs[key][0]["tasks"]
            rows[key]["ratio"] = rows[key]["trials_per_s"] / rows["one_process"]["trials_per_s"]
    rows["target"], rows["met"] = TARGET, rows["dask"]["ratio"] >= TARGET
    caller = statistics.median(r["merge_s"] / r["seconds"] for r in runs["dask"])
    rows["caller_fraction"] = {"median": caller, "target": CALLER_TARGET, "met": caller <= CALLER_TARGET}
    rows["same_bytes"] = all(runs["same_bytes"])
    rows["load_after"] = os.getloadavg()
    print(
        f"{args.experiment} --trials {args.trials}{' (warm)' if args.warm else ''}: one process {rows['one_process']['seconds']:.1f} s; "
        f"Dask ({args.workers} workers) {rows['dask']['seconds']:.1f} s with {rows['dask']['tasks']} tasks: "
        f"{rows['dask']['ratio']:.2f}x the throughput (target {TARGET}: {'met' if rows['met'] else 'not met'}), "
        f"{rows['dask_one_task_per_worker']['ratio']:.2f}x with one task per worker; the caller after the last task "
        f"{caller:.0%} of the call (target {CALLER_TARGET:.0%}: {'met' if caller <= CALLER_TARGET else 'not met'}); "
        f"same bytes: {rows['same_bytes']}; "
        f"load {rows['load_before']} -> {rows['load_after']}"
    )
    write_json(args.out, rows)


if __name__ == "__main__":
    main()
