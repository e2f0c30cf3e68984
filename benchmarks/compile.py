"""Compile time, cold and warm (issue 45, "Engine V"): what a first run waits for.

Per built-in experiment at its default configuration (``--only`` to choose some):

- ``stablehlo_lines`` and ``compile_s``: the StableHLO text lines of each group's device program
  (the engine's chunk function for one micro-batch on one device: the program a run compiles,
  whose micro-batch loop body does not depend on the chunk) and the seconds XLA takes to compile
  it in this process, where JAX's persistent cache is off (cold by construction), summed over
  the groups;
- ``cold`` and ``warm``: ``jaxfed run NAME`` in a subprocess (every core a host device, as a user
  runs it) with a compilation cache directory this benchmark has just made empty, then the same
  command on that now-filled cache: the process's wall seconds, the engine's ``compile_s``
  (summed over the groups in config.json; groups compile side by side), ``compile_wait_s`` (the
  seconds the run waited for the compiler, summed likewise) and its share of the wall time.

For gfvl-topologies at ``--trials`` trials (default 20,000, the issue's case), the cold and warm
runs end to end against the per-trial NumPy loop (benchmarks/gfvl_conjugate.py's reference (a),
one trial at a time, timed on ``--loop-trials`` trials per topology and scaled to ``--trials``):
the speed-up a user sees the first time and the second. ``--baseline DIR`` runs the same
end-to-end case with the jaxfed of another checkout (``PYTHONPATH=DIR``) in the same run, for a
before/after on the same machine at the same load.

    python benchmarks/compile.py [--only NAME[,NAME...]] [--trials 20000] [--baseline DIR] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, experiment_width, machine, write_json  # noqa: E402
from gfvl_conjugate import numpy_loop  # noqa: E402
from scaling import cli_run  # noqa: E402

from jaxfed import engine  # noqa: E402
from jaxfed.engine.points import group_points  # noqa: E402
from jaxfed.experiment import make_config  # noqa: E402
from jaxfed.experiments import REGISTRY  # noqa: E402
from jaxfed.experiments.gfvl import topologies as gfvl_topologies
from jaxfed.gfvl import graphs


def program_sizes(name: str) -> dict:
    """StableHLO lines and cold compile seconds of each group's device program of ``name``."""
    exp = REGISTRY[name]
    sweep = exp.build(make_config(exp.config_cls, {}))
    width = experiment_width(exp) or engine.testing.MICRO_BATCH["cpu"]
    lines, seconds = [], []
    for group, _ in group_points(sweep.points):
        points = [sweep.points[i] for i in group.point_ids]
        fn, args = engine.sizing.chunk_function(sweep.trial, points, width, micro_batch=width, devices=1)
        lowered = fn.lower(*args)
        lines.append(len(lowered.as_text().splitlines()))
        start = time.perf_counter()
        lowered.compile()
        seconds.append(time.perf_counter() - start)
    return {"groups": len(lines), "stablehlo_lines": lines, "compile_s": seconds, "compile_s_total": sum(seconds)}


def cold_and_warm(args: list, work: str) -> dict:
    """``jaxfed ARGS`` on an empty compilation cache, then again on the cache it filled."""
    cache = tempfile.mkdtemp(prefix="compile-cache-", dir=work)
    out: dict = {}
    for kind in ("cold", "warm"):
        target = os.path.join(work, f"run-{kind}")
        shutil.rmtree(target, ignore_errors=True)
        done = cli_run([*args, "--out", target], cache)
        compile_s = sum(s for s in done["engine"]["compile_s"] if s is not None)
        waited_per_group = done["engine"].get("compile_wait_s", done["engine"]["compile_s"])  # (older: in turn)
        waited = sum(s for s in waited_per_group if s is not None)
        out[kind] = {"seconds": done["seconds"], "compile_s": compile_s, "compile_wait_s": waited}
        out[kind]["compile_share"] = waited / done["seconds"]
        shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    out["cold_over_warm"] = out["cold"]["seconds"] / out["warm"]["seconds"]
    return out


@contextlib.contextmanager
def baseline_checkout(root: str):
    """The CLI subprocesses started meanwhile import jaxfed from the checkout at ``root`` (on the
    path and as the working directory, which ``python -c`` puts first on the path)."""
    before, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = os.path.abspath(root) + (os.pathsep + before if before else "")
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def numpy_loop_seconds(n_trials: int, loop_trials: int) -> float:
    """Seconds the per-trial NumPy loop takes for ``n_trials`` trials of every topology of Fig. 3,
    scaled from ``loop_trials`` timed trials per topology."""
    cfg = gfvl_topologies.Config()
    rng = np.random.default_rng(0)
    per_trial = 0.0
    for topology in cfg.topologies:
        adjacency = graphs.build(topology, cfg.n_agents)
        start = time.perf_counter()
        numpy_loop(rng, adjacency, cfg, loop_trials)
        per_trial += (time.perf_counter() - start) / loop_trials
    return per_trial * n_trials


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated experiment names (default: every one)")
    parser.add_argument("--trials", type=int, default=20_000, help="gfvl-topologies' trials against NumPy")
    parser.add_argument("--loop-trials", type=int, default=30, help="trials per topology of the NumPy loop")
    parser.add_argument(
        "--baseline", default=None, help="another checkout's root: its end-to-end run beside this one's"
    )
    parser.add_argument("--skip-experiments", action="store_true", help="only the end-to-end gfvl-topologies case")
    add_common_arguments(parser, "compile", repeats=1)
    args = parser.parse_args(argv)
    names = sorted(REGISTRY) if args.only is None else args.only.split(",")
    if args.quick:
        names, args.trials, args.loop_trials = names[:1] if args.only else ["gfvl-topologies"], 2_000, 3
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "jaxfed")):
        parser.error(f"--baseline: {args.baseline} holds no jaxfed/ package; give a checkout's root")
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        parser.error(f"--only: unknown experiment(s) {', '.join(unknown)}; allowed: {', '.join(sorted(REGISTRY))}")
    rows: dict = {"machine": machine(), "load_before": os.getloadavg(), "experiments": {}}
    with tempfile.TemporaryDirectory(prefix="jaxfed-compile-bench-") as work:
        for name in [] if args.skip_experiments else names:
            row = program_sizes(name)
            row.update(cold_and_warm(["run", name], work))
            rows["experiments"][name] = row
            print(
                f"{name:28s} {sum(row['stablehlo_lines']):7d} StableHLO lines, compile {row['compile_s_total']:6.2f} s; "
                f"cold run {row['cold']['seconds']:6.1f} s (compile {row['cold']['compile_share']:.0%}), "
                f"warm {row['warm']['seconds']:6.1f} s (compile {row['warm']['compile_share']:.0%})"
            )
        fig3 = cold_and_warm(["run", "gfvl-topologies", "--trials", str(args.trials)], work)
        if args.baseline:
            with baseline_checkout(args.baseline):
                fig3["baseline"] = cold_and_warm(["run", "gfvl-topologies", "--trials", str(args.trials)], work)
    fig3["trials"] = args.trials
    fig3["numpy_loop_s"] = numpy_loop_seconds(args.trials, args.loop_trials)
    for row in (fig3, fig3.get("baseline", {})):
        for kind in ("cold", "warm") if row else ():
            row[kind]["speedup_over_numpy_loop"] = fig3["numpy_loop_s"] / row[kind]["seconds"]
    rows["gfvl_topologies_end_to_end"] = fig3
    rows["load_after"] = os.getloadavg()
    print(
        f"gfvl-topologies --trials {args.trials}: cold {fig3['cold']['seconds']:.1f} s "
        f"({fig3['cold']['speedup_over_numpy_loop']:.1f}x the NumPy loop, compile {fig3['cold']['compile_share']:.0%}), "
        f"warm {fig3['warm']['seconds']:.1f} s ({fig3['warm']['speedup_over_numpy_loop']:.1f}x); "
        f"NumPy loop {fig3['numpy_loop_s']:.0f} s (scaled); load {rows['load_before']} -> {rows['load_after']}"
    )
    if "baseline" in fig3:
        base = fig3["baseline"]
        print(
            f"baseline {args.baseline}: cold {base['cold']['seconds']:.1f} s ({base['cold']['speedup_over_numpy_loop']:.1f}x, "
            f"compile {base['cold']['compile_share']:.0%}), warm {base['warm']['seconds']:.1f} s "
            f"({base['warm']['speedup_over_numpy_loop']:.1f}x)"
        )
    write_json(args.out, rows)


if __name__ == "__main__":
    main()
