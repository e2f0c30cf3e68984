"""Scaling of the engine: throughput vs number of trials and vs number of devices.

Workload: the Fig. 3 experiment (gfvl-topologies: 3 topologies × 300 slots per trial) run through
``jaxfed.engine.run``, as a user would. For each trial count the wall time includes compilation
(reported apart, measured once), so small runs show what a user waits for; large runs stream into
summaries (``keep="summary"``) from 100,000 trials on. The device sweep times the engine's chunk
function on 1, 2 and 4 forced CPU devices (each in a subprocess, since the device count is fixed at
JAX start-up); on a 2-core CPU more host devices share the same two cores, so this measures the
sharding overhead rather than a speed-up.

    python benchmarks/scaling.py [--max-trials 1000000] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, compile_time, machine, median_time, write_json  # noqa: E402


def device_child(n_devices: int, trials: int, repeats: int) -> dict:
    from jaxfed import engine
    from jaxfed.experiments import gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    fn, args = engine.chunk_function(sweep.trial, sweep.points, trials, devices=n_devices)
    t_compile, compiled = compile_time(fn, *args)
    t = median_time(lambda: compiled(*args), repeats)
    work = len(sweep.points) * trials * 300
    return {"devices": n_devices, "trials": trials, "seconds": t, "compile_s": t_compile, "trial_slots_per_s": work / t}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-trials", type=int, default=1_000_000)
    parser.add_argument("--device-trials", type=int, default=20_000)
    add_common_arguments(parser, "scaling", repeats=3)
    parser.add_argument("--no-device-sweep", action="store_true", help="skip the 1/2/4 forced CPU devices sweep")
    parser.add_argument("--device-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device_child:
        print(json.dumps(device_child(args.device_child, args.device_trials, args.repeats)))
        return None
    if args.quick:
        args.max_trials, args.device_trials, args.repeats = 10_000, 2_000, 2

    from jaxfed import engine
    from jaxfed.experiments import gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    fn, fn_args = engine.chunk_function(sweep.trial, sweep.points, engine.LANES)
    t_compile, _ = compile_time(fn, *fn_args)

    by_trials = []
    n = 10
    while n <= args.max_trials:
        keep = "summary" if n >= 100_000 else "raw"
        start = time.perf_counter()
        info: dict = {}
        engine.run(sweep.trial, sweep.points, n, keep=keep, info=info)
        seconds = time.perf_counter() - start
        work = len(sweep.points) * n * 300
        by_trials.append({"trials": n, "seconds": seconds, "keep": keep, "chunk_size": info["chunk_sizes"][0],
                          "trial_slots_per_s": work / seconds})
        print(f"{n:>9} trials  {seconds:8.2f} s  {work / seconds:10.3e} trial·slots/s  ({keep}, chunk {info['chunk_sizes'][0]})")
        n *= 10

    by_devices = []
    for d in () if args.no_device_sweep else (1, 2, 4):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={d}")
        out = subprocess.run(
            [sys.executable, __file__, "--device-child", str(d), "--device-trials", str(args.device_trials),
             "--repeats", str(args.repeats)],
            capture_output=True, text=True, env=env, check=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        by_devices.append(row)
        print(f"{d} device(s)  {row['seconds']:8.3f} s  {row['trial_slots_per_s']:10.3e} trial·slots/s  compile {row['compile_s']:.2f} s")

    result = {"benchmark": "scaling", "machine": machine(), "compile_s": t_compile,
              "by_trials": by_trials, "by_devices": by_devices}
    result["summary"] = [
        {"case": f"{row['trials']} trials (wall, incl. compile)", "throughput": row["trial_slots_per_s"],
         "unit": "trial·slot/s", "vs_numpy": None, "vs_rng_limit": None, "compile_s": t_compile}
        for row in by_trials
    ] + [
        {"case": f"{row['devices']} CPU device(s)", "throughput": row["trial_slots_per_s"], "unit": "trial·slot/s",
         "vs_numpy": None, "vs_rng_limit": None, "compile_s": row["compile_s"]}
        for row in by_devices
    ]
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
