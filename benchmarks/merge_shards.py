"""Merging many summary shards (issue 46, "Beyond one machine"): time and memory of ``jaxfed merge``.

A sweep of Fig. 3's trial (``gfvl-topologies`` on 4 graphs, the KL at each of 25 slots: 100 cells,
1.7 MB of summary per shard, most of it the histograms; the issue's 10-point sweep of 10 cells
each has the same cells) is run as ``--shards``
summary shards of 64 trials each (64,000 trials per point for 1,000 shards), each in this process
through ``jaxfed.run_shard`` (the per-shard figures: seconds and bytes on disk). Then, each in a
fresh process (``python -m jaxfed.cli merge …`` on the shards in shuffled order, as a user runs
it after the array job), ``--repeats`` times:

- ``merge_wall_s``: the merge command's wall seconds (the process: importing jaxfed and JAX,
  reading and verifying every shard, joining the summaries, writing the merged run and its report;
  nothing is compiled);
- ``merge_peak_rss_mib``: its peak resident memory (``ru_maxrss`` of the child).

Last, the one-process run of the same trials (``jaxfed run … --keep summary``), whose metrics.npz
the merged one must equal byte for byte (``identical``). Targets (issue 46): merge of 1,000
summary shards <= 10 s and <= 1 GiB.

    python benchmarks/merge_shards.py [--shards 1000] [--jobs 2] [--work DIR] [--repeats 3] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, machine, write_json  # noqa: E402

import jaxfed  # noqa: E402

NAME = "gfvl-topologies"
SETS = {"topologies": "star,ring,complete,line", "n_slots": "25"}


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def make_shards(work: str, count: int, jobs: int) -> tuple[list[str], list[float]]:
    """The ``count`` shard directories, made by ``jobs`` processes (those an earlier run with the
    same ``--work`` finished are reused), and the seconds of each one computed now."""
    paths = [os.path.join(work, "shards", f"{i:05d}") for i in range(count)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        parts = pool.starmap(_make_some, [(paths, count, j, jobs) for j in range(jobs)])
    return paths, [s for part in parts for s in part]


def _make_some(paths: list[str], count: int, job: int, jobs: int) -> list[float]:
    seconds = []
    for i in range(job, count, jobs):
        if os.path.exists(os.path.join(paths[i], "config.json")):  # finished by an earlier run
            continue
        t0 = time.perf_counter()
        jaxfed.run_shard(NAME, 64 * count, (i, count), paths[i], sets=SETS, keep="summary")
        seconds.append(time.perf_counter() - t0)
        if i % 100 < jobs:
            print(f"shard {i}/{count}: {seconds[-1]:.2f} s", file=sys.stderr, flush=True)
    return seconds


def timed_command(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of a child process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux: the largest child so far
    return wall, max(peak, before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2, help="processes making the shards")
    parser.add_argument("--work", default=None, help="where the shards are kept (default a new temporary folder)")
    add_common_arguments(parser, "merge_shards", repeats=3)
    args = parser.parse_args()
    count = 20 if args.quick else args.shards
    work = args.work or tempfile.mkdtemp(prefix="jaxfed-merge-")
    paths, shard_s = make_shards(work, count, args.jobs)
    shuffled = paths[:]
    random.Random(0).shuffle(shuffled)
    merged = os.path.join(work, "merged")
    cli = [sys.executable, "-m", "jaxfed.cli"]
    runs = []
    for _ in range(args.repeats):  # each into a new directory (a rerun onto a merged one writes nothing new)
        shutil.rmtree(merged, ignore_errors=True)
        runs.append(timed_command([*cli, "merge", *shuffled, "--out", merged, "--quiet"]))
    one = os.path.join(work, "one")
    sets = [a for k, v in SETS.items() for a in ("--set", f"{k}={v}")]
    t0 = time.perf_counter()
    trials = str(64 * count)
    subprocess.run([*cli, "run", NAME, "--trials", trials, "--keep", "summary", "--quiet", "--out", one, *sets], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    one_s = time.perf_counter() - t0
    identical = open(os.path.join(one, "metrics.npz"), "rb").read() == open(os.path.join(merged, "metrics.npz"), "rb").read()  # fmt: skip
    payload = {
        "machine": machine(),
        "load_average": open("/proc/loadavg").read().split()[:3],
        "experiment": NAME,
        "sets": SETS,
        "shards": count,
        "trials_per_point": 64 * count,
        "shard_s_median": statistics.median(shard_s) if shard_s else None,
        "shards_computed_now": len(shard_s),
        "shard_bytes_median": statistics.median(_dir_bytes(p) for p in paths[:50]),
        "shards_bytes_total": sum(_dir_bytes(p) for p in paths),
        "merge_wall_s": [round(w, 3) for w, _ in runs],
        "merge_wall_s_median": statistics.median(w for w, _ in runs),
        "merge_peak_rss_mib": max(m for _, m in runs),
        "one_process_run_s": one_s,
        "identical": identical,
    }
    print(payload, file=sys.stderr)
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
