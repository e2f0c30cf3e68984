"""``jaxfed reproduce`` cold, with its next experiment compiled while one runs and without (issue 60,
part 7: "the first hour at the engine's speed").

Each round runs ``jaxfed reproduce`` twice in subprocesses, as a user types it (one host device,
the command's default), each on a compilation cache this benchmark has just made empty (cold):
once as it is (the next experiment built and compiled ahead, :mod:`jaxfed.runs.ahead`) and once
with ``reproduce(..., ahead=False)`` (each experiment compiles when it starts), in alternating
order from round to round. Per run: the process's wall seconds, and from the runs' config.json
the engine's seconds (``wall_s`` summed over the experiments) and the seconds they waited for
the compiler (``compile_wait_s`` summed over every group), the issue's compile share being the
second over the first; and whether the two runs' metrics.npz are the same bytes, experiment by
experiment (compiling ahead changes no value). The targets (issue 60): reproduce at most 5 min
cold on the 2-core CPU, compile wait at most 30%.

    python benchmarks/reproduce_ahead.py [--only NAME[,NAME...]] [--scale X] [--rounds 1] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import machine, write_json  # noqa: E402

CHILD = (
    "import functools, sys; from jaxfed.cli import main; from jaxfed.runs import reproduce; "
    "ahead = sys.argv.pop(1) == 'ahead'; "
    "reproduce.reproduce = functools.partial(reproduce.reproduce, ahead=ahead); "
    "sys.exit(main(sys.argv[1:]))"
)
"""The child: ``jaxfed`` as the command runs it, ``reproduce``'s ``ahead`` set by its first argument."""


def reproduce_once(ahead: bool, args: list, work: str) -> dict:
    """``jaxfed reproduce ARGS`` cold (an emptied cache of its own), with or without compiling ahead."""
    cache = tempfile.mkdtemp(prefix="ahead-cache-", dir=work)
    out = os.path.join(work, "ahead" if ahead else "foreground")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, JAXFED_COMPILATION_CACHE=cache)
    env.pop("XLA_FLAGS", None)  # (the command's default: one host device)
    start = time.perf_counter()
    argv = [
        sys.executable,
        "-c",
        CHILD,
        "ahead" if ahead else "foreground",
        "reproduce",
        *args,
        "--out",
        out,
        "--quiet",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"jaxfed reproduce {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    engine_s = waited = 0.0
    per_experiment = {}
    for name in sorted(os.listdir(out)):
        config = os.path.join(out, name, "config.json")
        if not os.path.isfile(config):
            continue
        with open(config) as f:
            record = json.load(f)
        wait = sum(s for s in record["engine"].get("compile_wait_s", []) if s is not None)
        per_experiment[name] = {"wall_s": record["wall_s"], "compile_wait_s": wait}
        engine_s, waited = engine_s + record["wall_s"], waited + wait
    return {
        "seconds": seconds,
        "engine_s": engine_s,
        "compile_wait_s": waited,
        "compile_share": waited / engine_s if engine_s else None,
        "experiments": per_experiment,
        "out": out,
    }


def same_metrics(a: str, b: str) -> dict:
    """Per experiment, whether metrics.npz is the same bytes in result directories ``a`` and ``b``."""
    out = {}
    for name in sorted(os.listdir(a)):
        left, right = os.path.join(a, name, "metrics.npz"), os.path.join(b, name, "metrics.npz")
        if os.path.isfile(left):
            with open(left, "rb") as f, open(right, "rb") as g:
                out[name] = f.read() == g.read()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated experiment names (default: every one)")
    parser.add_argument("--scale", type=float, default=1.0, help="reproduce's --scale")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs, in alternating order")
    parser.add_argument("--quick", action="store_true", help="three small experiments at --scale 0.01")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "reproduce_ahead.json"))
    args = parser.parse_args(argv)
    only, scale = (args.only, args.scale) if not args.quick else ("gfvl-topologies,kmeans-digits1,gfvl-graphs", 0.01)
    command = ["--scale", str(scale)] + (["--only", only] if only else [])
    work, load_before = tempfile.mkdtemp(prefix="reproduce-ahead-"), os.getloadavg()[0]
    rounds = []
    try:
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            runs = {("ahead" if on else "foreground"): reproduce_once(on, command, work) for on in order}
            runs["same_metrics"] = same_metrics(runs["ahead"].pop("out"), runs["foreground"].pop("out"))
            rounds.append(runs)
            for kind in ("ahead", "foreground"):
                run = runs[kind]
                print(
                    f"round {r + 1} {kind:10s}: {run['seconds']:7.1f} s; compiler {run['compile_wait_s']:6.1f} s of "
                    f"{run['engine_s']:6.1f} s of engine time ({run['compile_share']:.2f})"
                )
            print(f"round {r + 1} metrics.npz the same bytes: {all(runs['same_metrics'].values())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"machine": machine(), "command": command, "load_before": load_before, "load_after": os.getloadavg()[0]}
    write_json(args.out, {**payload, "rounds": rounds})


if __name__ == "__main__":
    main()
