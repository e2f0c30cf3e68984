"""The report's statistics against the engine and a per-trial NumPy loop (issue 35 part 7).

A Fig. 3 run through the CLI, ``jaxfed run gfvl-topologies --trials N`` with a warm compilation
cache, end to end (a fresh process: imports, engine, result directory, figure, report), against
reference (a) of ``gfvl_conjugate.py``: NumPy one trial at a time, a Python loop over slots, timed on
``--loop-trials`` trials per topology and scaled to N. Inside each run the time spent in the report's
intervals and verdicts (``jaxfed.stats``: ``paired_verdict``, ``interval``, ``quantile_interval``,
``bootstrap_interval``, ``sign_test``; outermost calls only) and in ``stats.band`` is summed, and
the engine's own wall time read from ``config.json`` (``wall_s``, the cached compile included).

``--code DIR`` measures the code in DIR instead of this checkout's; ``--before DIR`` also runs the code in DIR (a checkout of the commit before, e.g. ``git archive REV |
tar -x -C DIR``) on ``PYTHONPATH``, alternating with this checkout round by round, so that both
see the same load.

    python benchmarks/report_statistics.py [--trials 20000] [--loop-trials 3] [--repeats 3] [--before DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STATISTICS = ("paired_verdict", "interval", "quantile_interval", "bootstrap_interval", "sign_test")


def worker(out_dir: str, cache: str, n_trials: int) -> None:
    """One CLI run in this process with timers around the report's statistics; prints them as JSON."""
    from jaxfed import cli, stats

    spent = {"statistics_s": 0.0, "band_s": 0.0}
    depth = [0]

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            depth[0] += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[key] += time.perf_counter() - start

        return wrapper

    for name in STATISTICS:
        if hasattr(stats, name):
            setattr(stats, name, timed(getattr(stats, name), "statistics_s"))
    stats.band = timed(stats.band, "band_s")
    cli.main(
        ["run", "gfvl-topologies", "--trials", str(n_trials), "--out", out_dir, "--compilation-cache", cache, "--quiet"]
    )
    print(json.dumps(spent))


def cli_run(code_root: str, out_dir: str, cache: str, n_trials: int) -> dict:
    """Wall time of one CLI run of the code in ``code_root`` (a fresh process), its statistics' times
    and the engine's wall time."""
    env = dict(os.environ, PYTHONPATH=code_root)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--worker", out_dir, cache, str(n_trials)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    spent = json.loads(done.stdout.strip().splitlines()[-1])
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    cached = config["engine"]["compile_cached"]
    return {"wall_s": wall, "engine_s": config["wall_s"], "compile_cached": cached, **spent}


def loop_seconds(n_trials: int, loop_trials: int) -> float:
    """Reference (a) of gfvl_conjugate.py on ``loop_trials`` trials per topology, scaled to ``n_trials``."""
    sys.path.insert(0, HERE)
    from gfvl_conjugate import numpy_loop

    from jaxfed.experiments.gfvl import topologies as gfvl_topologies
    from jaxfed.gfvl import graphs

    cfg = gfvl_topologies.Config()
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for name in cfg.topologies:
        numpy_loop(rng, graphs.build(name, cfg.n_agents), cfg, loop_trials)
    return (time.perf_counter() - start) * n_trials / loop_trials


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--loop-trials", type=int, default=3, help="trials per topology for the NumPy loop")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (one run of each code per round)")
    parser.add_argument("--before", default=None, help="directory with the code before, run on PYTHONPATH")
    parser.add_argument("--code", default=ROOT, help="directory with the code to measure (default: this checkout)")
    parser.add_argument("--out", default=None, help="JSON file for the figures")
    args = parser.parse_args(argv)
    codes = {"this code": os.path.abspath(args.code)} | (
        {"before": os.path.abspath(args.before)} if args.before else {}
    )
    runs: dict = {name: [] for name in codes}
    loops = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "xla")
        for name, root in codes.items():  # fills the compilation cache
            cli_run(root, os.path.join(tmp, f"warm-{len(runs[name])}-{name[0]}"), cache, args.trials)
        for r in range(args.repeats):
            loops.append(loop_seconds(args.trials, args.loop_trials))
            for name, root in codes.items():
                runs[name].append(cli_run(root, os.path.join(tmp, f"{name[0]}{r}"), cache, args.trials))
    loop = statistics.median(loops)
    result: dict = {"benchmark": "report_statistics", "trials": args.trials, "numpy_loop_s": loops, "codes": {}}
    print(
        f"{args.trials} Fig. 3 trials; NumPy per-trial loop {loop:.1f} s (rounds {', '.join(f'{s:.1f}' for s in loops)})"
    )
    for name, rows in runs.items():
        med = {
            key: statistics.median(row[key] for row in rows) for key in ("wall_s", "engine_s", "statistics_s", "band_s")
        }
        ratios = [loops[i] / row["wall_s"] for i, row in enumerate(rows)]
        shares = [row["statistics_s"] / row["engine_s"] for row in rows]
        result["codes"][name] = {"runs": rows, "median": med, "loop_over_cli": ratios, "statistics_over_engine": shares}
        print(
            f"{name:14s} CLI {med['wall_s']:.2f} s (engine {med['engine_s']:.2f} s, statistics "
            f"{med['statistics_s']:.3f} s, band {med['band_s']:.2f} s): loop / CLI "
            f"{', '.join(f'{x:.1f}' for x in ratios)}; statistics / engine {', '.join(f'{x:.3f}' for x in shares)}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
