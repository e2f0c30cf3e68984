"""Runs every benchmark at a size that fits a few minutes, writes one JSON and prints a table.

Columns: throughput, speed-up over the plain-NumPy reference (the one an expert would write, where a
benchmark has several), fraction of the random-number limit reached (limit time / our time; 1.0
would mean the simulation costs no more than drawing its random numbers), and compile time.

    python benchmarks/run_all.py [--out FILE] [--full]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json  # noqa: E402

# benchmark module -> arguments for a run of a few minutes on a 2-core CPU (``--full``: their defaults)
BENCHMARKS = {
    "gfvl_conjugate": ["--trials", "3000", "--loop-trials", "5", "--repeats", "3"],
    "gfvl_nonconjugate": ["--trials", "256", "--loop-trials", "2", "--repeats", "3"],
    "gfvl_logistic": ["--trials", "256", "--loop-trials", "2", "--repeats", "3"],
    "oac_channel": ["--devices", "10", "100", "--trials", "2000", "--seconds", "1", "--numpy-seconds", "1"],
    "kmeans_oac": ["--trials", "256", "--chunk", "128", "--numpy-trials", "1", "--repeats", "2", "--skip-sweep"],
    "scaling": ["--max-trials", "100000", "--device-trials", "5000", "--repeats", "2"],
}
# on an accelerator: larger batches where the device does the work, NumPy references kept small
ACCELERATOR = {
    "gfvl_conjugate": ["--trials", "100000", "--loop-trials", "2", "--numpy-trials", "2000", "--repeats", "5"],
    "gfvl_nonconjugate": ["--trials", "10000", "--loop-trials", "1", "--repeats", "3"],
    "gfvl_logistic": ["--trials", "4096", "--loop-trials", "1", "--repeats", "3"],
    "oac_channel": ["--trials", "10000", "--seconds", "2", "--numpy-seconds", "1"],
    "kmeans_oac": ["--trials", "1000", "--chunk", "1024", "--numpy-trials", "1", "--repeats", "3", "--skip-sweep"],
    "scaling": ["--max-trials", "100000", "--device-trials", "100000", "--repeats", "3", "--no-device-sweep"],
}


def summary_rows(name: str, result: dict) -> list[dict]:
    """The table rows of one benchmark's JSON (its ``summary`` list, or none)."""
    return [dict(row, benchmark=name) for row in result.get("summary", [])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "run_all.json"))
    parser.add_argument("--full", action="store_true", help="each benchmark at its full default size")
    parser.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
    parser.add_argument("--accelerator", action="store_true", help="sizes for a GPU (see ACCELERATOR)")
    args = parser.parse_args(argv)
    results, rows = {}, []
    for name, bench_args in (ACCELERATOR if args.accelerator else BENCHMARKS).items():
        if args.only and name not in args.only:
            continue
        print(f"== {name}", flush=True)
        module = importlib.import_module(name)
        out = os.path.join(os.path.dirname(args.out), f"{name}.json")
        start = time.perf_counter()
        try:
            result = module.main(([] if args.full else bench_args) + ["--out", out])
        except Exception as err:  # one failing benchmark must not lose the others' figures
            print(f"{name} failed: {type(err).__name__}: {err}", flush=True)
            results[name] = {"error": f"{type(err).__name__}: {err}"}
            continue
        results[name] = dict(result, wall_s=time.perf_counter() - start)
        rows += summary_rows(name, result)
        write_json(args.out, {"machine": machine(), "rows": rows, "results": results})

    print()
    print(f"{'benchmark':<34} {'throughput':>22} {'x NumPy':>9} {'of RNG limit':>13} {'compile s':>10}")
    for row in rows:
        vs_numpy = f"{row['vs_numpy']:.1f}" if row.get("vs_numpy") is not None else "-"
        vs_rng = f"{row['vs_rng_limit']:.2f}" if row.get("vs_rng_limit") is not None else "-"
        print(
            f"{row['benchmark'] + ': ' + row['case']:<34} {row['throughput']:12.3e} {row['unit']:>9} "
            f"{vs_numpy:>9} {vs_rng:>13} {row['compile_s']:10.2f}"
        )
    write_json(args.out, {"machine": machine(), "rows": rows, "results": results})


if __name__ == "__main__":
    main()
