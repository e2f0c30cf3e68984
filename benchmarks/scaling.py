"""Scaling of the engine: throughput vs number of trials and vs number of devices.

Workload: the Fig. 3 experiment (gfvl-topologies: 3 topologies × 300 slots per trial) run through
``jaxfed.engine.run``, as a user would. For each trial count the wall time includes compilation
(reported apart, measured once), so small runs show what a user waits for; large runs stream into
summaries (``keep="summary"``) from 100,000 trials on. The device sweep times the engine's chunk
function on 1, 2 and 4 forced CPU devices (each in a subprocess, since the device count is fixed at
JAX start-up); on a 2-core CPU more host devices share the same two cores, so this measures the
sharding overhead rather than a speed-up.

The engine-overhead comparisons (``--engine``, issue "Engine II"; each CLI run is a subprocess
with its own compilation cache directory, so nothing is shared with earlier runs):

- summary sweep: a ``jaxfed run gfvl-topologies --keep summary`` of ``--sweep-trials`` trials
  (default 262,144) through the CLI, minus the fixed cost of a 64-trial run, against the bare
  trial kernel (the engine's chunk function, no host work) on the same trials: the ratio of
  throughputs (target >= 0.9 on the 2-core CPU, >= 0.8 on a GPU). Both use every core: the CLI
  makes one host device per core, and this process does the same before JAX starts
  (``engine.use_all_cores``), so the kernel runs on as many host devices as the sweep;
- raw without ``--out``: ``engine.run(keep="raw")`` of ``--raw-trials`` trials minus a 64-trial
  run's fixed cost, against the kernel on the same trials, the three timed in turn, five rounds
  (target >= 0.9);

Where rounds are repeated, a target's verdict is "met" or "not met" only when every round's
ratio agrees (the range of 5 rounds covers the median ratio with 94% probability), else
"inconclusive".
- the summary sweep in process (``--parts in-process``): ``engine.run`` of ``--sweep-trials``
  trials from a warm compilation cache against the kernel in calls of its chunk size, five rounds,
  as the whole call's ratio and as the marginal one (minus a 64-trial run);
- a ``--million``-trial ``--keep summary`` run: wall time and peak resident memory;
- fixed cost: two ``--trials 64`` runs in a row on a fresh compilation cache, five times (the
  second <= 40% of the first, paired per round), one with the cache off, and the start-up floor
  (JAX's backend and matplotlib imported, nothing run);
- ``--target-se``: kmeans-snr run to a target standard error of the final loss, trials per SNR
  point and the precision reached, against a fixed-count run of the largest per-point count
  (the fixed count that reaches the same worst-point precision).

The engine's own ceiling (``--engine-ceiling``, issue "Engine III"): ``engine.run`` with a store
directory (as ``jaxfed run`` does) on a trial that only returns values of a chosen shape (by
default 3 points x 300 float32 per trial, like Fig. 3), derived from the trial's key with a few
integer operations, so that the device does almost nothing and what is left is the engine's host
work. Per chunk size (``--ceiling-chunks``, a CPU-like and a GPU-like one) and ``keep`` (raw,
summary), ``--ceiling-runs`` runs of ``--ceiling-k`` chunks each (fresh store directory each,
compilation from a warm cache, measured apart); around the engine's host work, timers measure:

- ``main_s``: the main thread's time in the sink's ``handle`` (conversion to NumPy, results,
  fold, snapshot), started once the chunk's outputs are ready (``block_until_ready`` first: the
  device's time is not counted), without its waits for the previous write (``waited_s``, apart);
- ``writer_s``: the store's ``save_raw``/``save_summary`` calls (on the writer thread, overlapping
  the next chunk), including the end-of-group write;
- ``host_s = main_s + writer_s``: the host's seconds per chunk, the figure the target is on
  (reported per chunk and per value);
- ``host_cpu_s``: the same work in CPU seconds of the two threads (``time.thread_time``). On a
  CPU the device computes the next chunk on the same cores meanwhile, so the wall-clock
  ``main_s`` includes the time the host thread waits for a core (3-4 ms of work took 3-43 ms);
  the CPU seconds are what the engine's host work costs there, as the wall clock is on a GPU;
- ``unhidden_s``: the run's wall time minus its
  compilation and minus the device time of the same chunks by the bare compiled chunk function
  (dispatched back to back; what the host work adds to the wall time when it does not overlap).

Medians over the runs.

    python benchmarks/scaling.py [--max-trials 1000000] [--quick] [--out FILE]
    python benchmarks/scaling.py --engine [--quick] [--out FILE]
    python benchmarks/scaling.py --engine-ceiling [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (  # noqa: E402
    add_common_arguments,
    compile_time,
    device_to_host_bandwidth,
    experiment_width,
    machine,
    median_time,
    write_json,
)


def device_child(n_devices: int, trials: int, repeats: int) -> dict:
    from jaxfed import engine
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    width = experiment_width(gfvl_topologies.EXPERIMENT)
    fn, args = engine.testing.chunk_function(sweep.trial, sweep.points, trials, devices=n_devices, micro_batch=width)
    t_compile, compiled = compile_time(fn, *args)
    t = median_time(lambda: compiled(*args), repeats)
    work = len(sweep.points) * trials * 300
    return {"devices": n_devices, "trials": trials, "seconds": t, "compile_s": t_compile, "trial_slots_per_s": work / t}


def cli_run(args: list, cache_dir: str) -> dict:
    """Runs ``jaxfed`` in a subprocess; {"seconds", "maxrss_mib", "engine" (config.json's)}."""
    code = (
        "import json, resource, sys; from jaxfed.cli import main; rc = main(sys.argv[1:]); "
        "print(json.dumps({'rc': rc, 'maxrss_kib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))"
    )
    env = dict(os.environ, JAXFED_COMPILATION_CACHE=cache_dir)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args, "--quiet"], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"jaxfed {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    if child["rc"] != 0:
        raise RuntimeError(f"jaxfed {' '.join(args)} exited with status {child['rc']}: {done.stderr.strip()[-500:]}")
    out = args[args.index("--out") + 1]
    with open(os.path.join(out, "config.json")) as f:
        engine_info = json.load(f)["engine"]
    return {"seconds": seconds, "maxrss_mib": child["maxrss_kib"] / 1024, "engine": engine_info}


def kernel_throughput(trials: int, repeats: int) -> float:
    """Trials per second of the bare chunk function of gfvl-topologies (all points), compile excluded."""
    from jaxfed import engine
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    width = experiment_width(gfvl_topologies.EXPERIMENT)  # the CLI's, which the sweep it is set against runs
    fn, args = engine.testing.chunk_function(sweep.trial, sweep.points, trials, micro_batch=width)
    _, compiled = compile_time(fn, *args)
    return trials / median_time(lambda: compiled(*args), repeats)


RAW_BYTES_CAP = 8 * 2**30  # the raw run's results on the host (and on the device)


def power_of_two(n: float) -> int:
    """The power of two nearest ``n`` in log scale, at least 1,024."""
    return max(1024, 2 ** int(round(np.log2(max(n, 1.0)))))


def at_first_trial(fn_args: tuple, first: int) -> tuple:
    """``engine.testing.chunk_function``'s arguments for the chunk starting at trial ``first``: the first
    trial is the fourth argument, as its (high, low) 32-bit halves; any after it (on one device, the
    micro-batch loop's trip count) stay."""
    from jaxfed.engine.compiled import trial_halves

    return (*fn_args[:3], trial_halves(first), *fn_args[4:])


def raw_bytes_per_trial() -> int:
    """Bytes of one gfvl-topologies trial's raw metrics, all points."""
    import jax

    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    shapes = jax.eval_shape(sweep.trial, jax.random.key(0), sweep.points[0])
    return len(sweep.points) * sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))


def engine_comparisons(args, work: str, save=lambda rows: None) -> dict:
    """The issue's engine-overhead comparisons (see the module docstring); ``work``: a scratch
    directory; ``save(rows)`` is called after each part, so that a run stopped by a time limit
    keeps the parts it finished."""

    def out(name):
        return ["--out", os.path.join(work, name)]

    def cache(name):
        return os.path.join(work, f"cache-{name}")

    rows: dict = {}
    wanted = set(args.parts)
    if args.sweep_seconds:  # sizes from the kernel's speed on this machine (a GPU's is not known ahead)
        probe = kernel_throughput(args.kernel_probe, args.repeats)
        args.sweep_trials = max(power_of_two(probe * args.sweep_seconds), args.sweep_min)
        raw_cap = 2 ** int(np.log2(RAW_BYTES_CAP / raw_bytes_per_trial()))
        args.raw_trials = min(power_of_two(probe * args.sweep_seconds / 4), raw_cap)
        rows["sizing"] = {"probe_trials": args.kernel_probe, "probe_trials_per_s": probe, "seconds": args.sweep_seconds}
        print(f"kernel {probe:.3g} trials/s at {args.kernel_probe}: sweep {args.sweep_trials}, raw {args.raw_trials}")
    if "sweep" in wanted:
        rows.update(summary_and_raw(args, out, cache))
        save(rows)
    if "in-process" in wanted:
        rows["summary_in_process"] = summary_in_process(args, cache)
        save(rows)
    if "million" in wanted:
        rows["million_summary"] = million_run(args, out, cache)
        save(rows)
    if "fixed" in wanted:
        rows["fixed_cost"] = fixed_cost(out, cache)
        save(rows)
    if "target" in wanted:
        rows["target_se"] = target_comparison(args, out, cache, work)
        save(rows)
    return rows


def summary_and_raw(args, out, cache) -> dict:
    """The summary sweep through the CLI (minus the fixed cost of a 64-trial run, same cache: warm)
    and raw mode without --out, each against the kernel."""
    from jaxfed import engine
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    width = experiment_width(gfvl_topologies.EXPERIMENT)  # the CLI's: the in-process runs below use it too

    small = cli_run(["run", "gfvl-topologies", "--trials", "64", "--keep", "summary", *out("sweep64")], cache("sweep"))
    big = cli_run(
        ["run", "gfvl-topologies", "--trials", str(args.sweep_trials), "--keep", "summary", *out("sweep")],
        cache("sweep"),
    )
    # The kernel on the same trials: by default in calls of the chunk size the engine chose.
    kernel_chunk = args.kernel_trials or big["engine"]["chunk_sizes"][0]
    kernel = kernel_throughput(kernel_chunk, args.repeats)
    rows = {"kernel_trials_per_s": kernel, "kernel_chunk": kernel_chunk}
    sweep_rate = (args.sweep_trials - 64) / max(big["seconds"] - small["seconds"], 1e-9)
    # Each run compiles its own chunk program (the sweep's is not the 64-trial run's), so the plain
    # ratio counts the sweep's compilation against it; the engine records both compile times.
    compiled_s = [sum(run["engine"]["compile_s"]) for run in (big, small)]
    warm_rate = (args.sweep_trials - 64) / max(big["seconds"] - small["seconds"] - compiled_s[0] + compiled_s[1], 1e-9)
    rows["summary_sweep"] = {
        "trials": args.sweep_trials,
        "seconds": big["seconds"],
        "fixed_s": small["seconds"],
        "compile_s": compiled_s,
        "trials_per_s": sweep_rate,
        "ratio_to_kernel": sweep_rate / kernel,
        "ratio_to_kernel_compile_excluded": warm_rate / kernel,
        # the device's busy share of the run: the kernel's time for the run's trials over its wall time
        "device_busy_fraction": args.sweep_trials / kernel / big["seconds"],
        "chunk_sizes": big["engine"]["chunk_sizes"],
    }
    print(
        f"summary sweep {args.sweep_trials} trials: {big['seconds']:.1f} s (fixed {small['seconds']:.1f} s), "
        f"{sweep_rate:.3g} trials/s = {sweep_rate / kernel:.2f} x kernel "
        f"({warm_rate / kernel:.2f} x without the two runs' compilations, {compiled_s[0]:.1f} and {compiled_s[1]:.1f} s); "
        f"device busy {rows['summary_sweep']['device_busy_fraction']:.2f} of the run's wall time"
    )

    # Raw without --out, in process: engine.run minus a 64-trial run, against the kernel doing the
    # same trials in calls of the raw run's own chunk size (dispatched back to back, like the
    # engine's). The three are timed in turn, median of 5 rounds: a drift of the machine's speed
    # over a minute (±5% here) then hits the run and its kernel alike.
    import jax

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    for n in (64, args.raw_trials):  # fills the cache: both timed runs below take their executables from it
        engine.run(sweep.trial, sweep.points, n, compilation_cache=cache("raw"), micro_batch=width)

    def timed_run(n):
        t0 = time.perf_counter()
        info = engine.run(sweep.trial, sweep.points, n, compilation_cache=cache("raw"), micro_batch=width).info
        return time.perf_counter() - t0, info["chunk_sizes"][0]

    raw_chunk = timed_run(args.raw_trials)[1]
    fn, fn_args = engine.testing.chunk_function(sweep.trial, sweep.points, raw_chunk, micro_batch=width)
    _, compiled = compile_time(fn, *fn_args)
    starts = range(0, args.raw_trials, raw_chunk)

    def timed_kernel():
        t0 = time.perf_counter()
        jax.block_until_ready([compiled(*at_first_trial(fn_args, start)) for start in starts])
        return time.perf_counter() - t0

    rounds = [(timed_kernel(), timed_run(64)[0], timed_run(args.raw_trials)[0]) for _ in range(max(args.repeats, 5))]
    kernel_s, fixed, raw_s = (statistics.median(r[i] for r in rounds) for i in range(3))
    raw_rate = (args.raw_trials - 64) / max(raw_s - fixed, 1e-9)
    raw_kernel = args.raw_trials / kernel_s  # (the last call's padding is the engine's too)
    # The link's own speed, measured here: raw mode moves every value off the device once.
    trial_bytes = raw_bytes_per_trial()
    link = device_to_host_bandwidth(min(2**30, max(2**24, args.raw_trials * trial_bytes // 4)))
    raw_bytes = raw_rate * trial_bytes
    per_round = paired_verdict(
        [(args.raw_trials - 64) / max(run - small, 1e-9) / (args.raw_trials / k) for k, small, run in rounds], 0.9
    )
    rows["raw_no_out"] = {
        "trials": args.raw_trials,
        "seconds": raw_s,
        "fixed_s": fixed,
        "chunk_size": raw_chunk,
        "kernel_seconds": kernel_s,
        "kernel_trials_per_s": raw_kernel,
        "trials_per_s": raw_rate,
        "ratio_to_kernel": raw_rate / raw_kernel,
        "ratio_per_round": per_round,
        "rounds_s": rounds,
        "bytes_per_s": raw_bytes,
        "device_to_host": link,
        "fraction_of_device_to_host": raw_bytes / link["bytes_per_s"],
    }
    print(
        f"raw without --out {args.raw_trials} trials: {raw_s:.1f} s, {raw_rate / raw_kernel:.2f} x kernel; "
        f"per round {per_round['median']:.2f} [{per_round['low']:.2f}, {per_round['high']:.2f}]: "
        f"{per_round['verdict']} (>= 0.9); {raw_bytes / 1e9:.2f} GB/s of values = "
        f"{raw_bytes / link['bytes_per_s']:.2f} of the measured device-to-host {link['bytes_per_s'] / 1e9:.2f} GB/s"
    )
    return rows


def summary_in_process(args, cache) -> dict:
    """The Fig. 3 summary sweep in one process: ``engine.run(keep="summary")`` of ``--sweep-trials``
    trials (the executables from a warm compilation cache, as a rerun in a notebook) against the
    bare kernel in calls of the run's chunk size, and a 64-trial run for the fixed cost; the three
    timed in turn, five rounds. Two ratios per round: the whole call (the run's wall time,
    tracing, cache loads and host work included) and the sweep's marginal throughput (the run
    minus the 64-trial run), each against the kernel's throughput on the same trials."""
    import jax

    from jaxfed import engine
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    width = experiment_width(gfvl_topologies.EXPERIMENT)
    go = dict(
        keep="summary",
        compilation_cache=cache("in-process"),
        progress=False,
        common_random_numbers=True,
        micro_batch=width,
    )
    chunk = engine.run(sweep.trial, sweep.points, args.sweep_trials, **go).info["chunk_sizes"][0]  # fills the cache
    engine.run(sweep.trial, sweep.points, 64, **go)
    fn, fn_args = engine.testing.chunk_function(sweep.trial, sweep.points, chunk, common=True, micro_batch=width)
    _, compiled = compile_time(fn, *fn_args)
    starts = range(0, args.sweep_trials, chunk)

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    def kernel():
        jax.block_until_ready([compiled(*at_first_trial(fn_args, start)) for start in starts])

    rounds = [
        (
            timed(kernel),
            timed(lambda: engine.run(sweep.trial, sweep.points, 64, **go)),
            timed(lambda: engine.run(sweep.trial, sweep.points, args.sweep_trials, **go)),
        )
        for _ in range(max(args.repeats, 5))
    ]
    whole = paired_verdict([k / run for k, _, run in rounds], 0.9)
    n = args.sweep_trials
    marginal = paired_verdict([(n - 64) / max(run - small, 1e-9) / (n / k) for k, small, run in rounds], 0.9)
    print(
        f"summary sweep in process, {n} trials in chunks of {chunk}: whole call {whole['median']:.2f} x kernel "
        f"[{whole['low']:.2f}, {whole['high']:.2f}] ({whole['verdict']}), marginal {marginal['median']:.2f} x "
        f"[{marginal['low']:.2f}, {marginal['high']:.2f}] ({marginal['verdict']}); rounds (kernel, 64, run) s: "
        + ", ".join(f"({k:.2f}, {f:.2f}, {r:.2f})" for k, f, r in rounds)
    )
    return {"trials": n, "chunk_size": chunk, "whole_call": whole, "marginal": marginal, "rounds_s": rounds}


def million_run(args, out, cache) -> dict:
    """A --million-trial summary run through the CLI: wall time and peak memory."""
    million = cli_run(
        ["run", "gfvl-topologies", "--trials", str(args.million), "--keep", "summary", *out("million")],
        cache("million"),
    )
    print(f"{args.million} trials summary: {million['seconds']:.1f} s, peak RSS {million['maxrss_mib']:.0f} MiB")
    return {
        "trials": args.million,
        "seconds": million["seconds"],
        "peak_rss_mib": million["maxrss_mib"],
        "chunk_sizes": million["engine"]["chunk_sizes"],
    }


def fixed_cost(out, cache, rounds: int = 5) -> dict:
    """Two 64-trial runs in a row on a fresh compilation cache, ``rounds`` times: the second's
    time over the first's, paired per round; one run with the cache off; and the floor, a process
    that only starts JAX's CPU backend and imports matplotlib's Figure (what any run pays)."""
    pairs, floors = [], []
    for i in range(rounds):
        first, second = (
            cli_run(["run", "gfvl-topologies", "--trials", "64", *out(f"fixed{i}-{j}")], cache(f"fixed{i}"))
            for j in range(2)
        )
        pairs.append((first, second))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import jax; jax.devices(); import matplotlib.figure"], check=True)
        floors.append(time.perf_counter() - start)
    off = cli_run(
        ["run", "gfvl-topologies", "--trials", "64", "--compilation-cache", "off", *out("fixed-off")], cache("fixed0")
    )
    ratio = paired_verdict([second["seconds"] / first["seconds"] for first, second in pairs], 0.4, at_least=False)
    first_s = statistics.median(first["seconds"] for first, _ in pairs)
    second_s = statistics.median(second["seconds"] for _, second in pairs)
    print(
        f"64-trial runs: first {first_s:.2f} s, second {second_s:.2f} s (medians of {rounds}), second/first "
        f"{ratio['median']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]: {ratio['verdict']} (<= 0.4); "
        f"start-up floor {statistics.median(floors):.2f} s; cache off {off['seconds']:.2f} s"
    )
    return {
        "first_s": first_s,
        "second_s": second_s,
        "rounds_s": [(first["seconds"], second["seconds"]) for first, second in pairs],
        "second_over_first": ratio,
        "floor_s": statistics.median(floors),
        "cache_off_s": off["seconds"],
        "compile_s": [[r["engine"]["compile_s"] for r in pair] for pair in pairs],
        "compile_cached": [[r["engine"]["compile_cached"] for r in pair] for pair in pairs],
    }


def paired_verdict(ratios: list, target: float, at_least: bool = True) -> dict:
    """The median of per-round ratios with their range, and whether the target holds: "met" when
    the whole range is on the right side of it, "not met" when the whole range is on the wrong
    side, else "inconclusive". The range of n rounds covers the median ratio with probability
    1 − 2^(1−n) (94% for 5 rounds; rounds are paired, so the machine's drift cancels within each)."""
    low, high = min(ratios), max(ratios)
    good = (lambda r: r >= target) if at_least else (lambda r: r <= target)
    verdict = "met" if good(low) and good(high) else "not met" if not good(low) and not good(high) else "inconclusive"
    return {
        "median": statistics.median(ratios),
        "low": low,
        "high": high,
        "ratios": ratios,
        "target": target,
        "verdict": verdict,
        "coverage": 1 - 2.0 ** (1 - len(ratios)),
    }


def target_comparison(args, out, cache, work) -> dict:
    """--target-se on kmeans-snr against the fixed count that reaches the same worst-point precision."""
    metric = f"loss@{args.snr_rounds - 1}"
    common = ["--set", f"n_rounds={args.snr_rounds}", "--chunk-size", str(args.snr_chunk)]
    targeted_run = cli_run(
        [
            "run",
            "kmeans-snr",
            *common,
            "--target-se",
            str(args.snr_target),
            "--target-metric",
            metric,
            "--max-trials",
            str(args.snr_max),
            *out("target"),
        ],
        cache("snr"),
    )
    targeted, targeted_seconds = targeted_run["engine"]["target"], targeted_run["seconds"]
    n_fixed = max(targeted["trials_per_point"])
    fixed_run = cli_run(
        ["run", "kmeans-snr", *common, "--trials", str(n_fixed), "--keep", "summary", *out("snr-fixed")], cache("snr")
    )
    from jaxfed.store.rundir import load_results

    _, metrics = load_results(os.path.join(work, "snr-fixed"))
    fixed_se = metrics["loss"].se[:, args.snr_rounds - 1]
    print(
        f"target se {args.snr_target}: {sum(targeted['trials_per_point'])} trials in all vs "
        f"{n_fixed * len(fixed_se)} for the fixed count"
    )
    return {
        "experiment": "kmeans-snr",
        "metric": metric,
        "target": args.snr_target,
        "trials_per_point": targeted["trials_per_point"],
        "se_reached": targeted["se_reached"],
        "trials_total": sum(targeted["trials_per_point"]),
        "fixed_trials_per_point": n_fixed,
        "fixed_trials_total": n_fixed * len(fixed_se),
        "fixed_worst_se": float(fixed_se.max()),
        "fixed_seconds": fixed_run["seconds"],
        "targeted_seconds": targeted_seconds,
    }


def ceiling_trial_fn(shape: tuple):
    """A trial that returns one metric ``values`` of ``shape`` float32, from the key's bits by a
    few integer operations per value (XLA cannot fold them away: they depend on the key), in
    [row, row + 1) for the point's ``row``."""
    import jax
    import jax.numpy as jnp

    n = math.prod(shape)

    def trial(key, point):
        bits = jax.random.key_data(key)
        mixed = (bits[0] ^ bits[1]) + jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9)
        values = (mixed >> 8).astype(jnp.float32) * jnp.float32(2.0**-24) + point["row"]
        return {"values": values.reshape(shape)}

    return trial


class HostTimers:
    """Timers around the engine's host work (see the module docstring): the sinks' ``handle``
    once the chunk's outputs are ready (``main``), less its waits for the writer (``waited``),
    and the store's writes (``writer``)."""

    def __init__(self):
        self.main, self.waited, self.writer, self.handled, self.writes = 0.0, 0.0, 0.0, 0, 0
        self.main_cpu, self.writer_cpu = 0.0, 0.0  # the same work in CPU seconds of its thread

    @contextlib.contextmanager
    def installed(self):
        import jax

        from jaxfed import store
        from jaxfed.engine import sinks

        def timed_handle(real):
            def handle(sink, chunk, device_out, *rest):
                jax.block_until_ready(device_out)  # the device's time is not the host's
                start, cpu = time.perf_counter(), time.thread_time()
                waited = self.waited
                real(sink, chunk, device_out, *rest)
                self.main += time.perf_counter() - start - (self.waited - waited)
                self.main_cpu += time.thread_time() - cpu  # (a wait for the writer takes no CPU)
                self.handled += 1

            return handle

        def timed_wait(real):
            def wait(writer):
                start = time.perf_counter()
                real(writer)
                self.waited += time.perf_counter() - start

            return wait

        def timed_save(real):
            def save(*args):
                start, cpu = time.perf_counter(), time.thread_time()
                real(*args)
                self.writer += time.perf_counter() - start
                self.writer_cpu += time.thread_time() - cpu
                self.writes += 1

            return save

        patched = [(sinks.RawSink, "handle", timed_handle), (sinks.SummarySink, "handle", timed_handle)]
        patched += [(sinks.Writer, "wait", timed_wait)]
        patched += [(store.Store, "save_raw", timed_save), (store.Store, "save_summary", timed_save)]
        originals = [(cls, name, getattr(cls, name)) for cls, name, _ in patched]
        for (cls, name, wrap), (_, _, real) in zip(patched, originals):
            setattr(cls, name, wrap(real))
        try:
            yield self
        finally:
            for cls, name, real in originals:
                setattr(cls, name, real)


def engine_ceiling(args, work: str) -> dict:
    """The engine's host time per chunk and per value on a trial that does almost nothing (see
    the module docstring), for raw and summary at each of ``args.ceiling_chunks``."""
    import jax
    import jax.numpy as jnp

    from jaxfed import engine
    from jaxfed.engine.compiled import make_chunk_fn, trial_halves
    from jaxfed.engine.devices import make_mesh
    from jaxfed.engine.points import group_points
    from jaxfed.engine.sinks import SummarySink
    from jaxfed.engine.sizing import micro_batch_width, round_up

    shape = tuple(args.ceiling_shape)
    trial = ceiling_trial_fn(shape)
    points = [{"row": jnp.float32(p)} for p in range(args.ceiling_points)]  # traced: one group
    cache_dir = os.path.join(work, "cache")
    rows = []
    for chunk in args.ceiling_chunks:
        k = min(16, max(4, 2**20 // chunk)) if args.ceiling_k is None else args.ceiling_k
        n_trials = k * chunk
        values_per_chunk = args.ceiling_points * chunk * math.prod(shape)
        for keep in ("raw", "summary"):
            summary = keep == "summary"

            def run_once(i, timers=None):
                out_dir = os.path.join(work, f"run-{keep}-{chunk}-{i}")
                start = time.perf_counter()
                with timers.installed() if timers is not None else contextlib.nullcontext():
                    info = engine.run(
                        trial, points, n_trials, chunk_size=chunk, keep=keep, out_dir=out_dir,
                        identity={"benchmark": "engine-ceiling"}, compilation_cache=cache_dir, progress=False,
                    ).info  # fmt: skip
                wall = time.perf_counter() - start
                shutil.rmtree(out_dir)
                return wall, info

            _, info = run_once("warm")  # fills the compilation cache (and the memory probe's figures)
            assert info["chunk_sizes"] == [chunk], info["chunk_sizes"]
            # The same chunks by the bare compiled chunk function, pipelined like the engine's.
            mesh = make_mesh(None)
            width = micro_batch_width(mesh)
            ((group, traced),) = group_points(points)
            fn = make_chunk_fn(trial, group, round_up(chunk, width * mesh.size), mesh, width, False, summary)
            fixed = (np.uint32(0), np.asarray(group.point_ids, np.uint32), traced)

            def extra(first):  # the summary's arguments after the first trial, as the engine's sink gives them
                return SummarySink.extra_args(None, (first, first + chunk)) if summary else ()  # (reads the chunk only)

            compiled = fn.lower(*fixed, trial_halves(0), *extra(0)).compile()

            def device_time():
                start, previous = time.perf_counter(), None
                for first in range(0, n_trials, chunk):
                    out = compiled(*fixed, trial_halves(first), *extra(first))
                    if previous is not None:
                        jax.block_until_ready(previous)
                    previous = out
                jax.block_until_ready(previous)
                return time.perf_counter() - start

            rounds = []
            for i in range(args.ceiling_runs):  # the device alone and the engine in turn: drift hits both
                device_s = device_time()
                timers = HostTimers()
                wall, info = run_once(i, timers)
                assert timers.handled == k, (timers.handled, k)
                compile_s = sum(info["compile_s"])
                rounds.append(
                    {
                        "wall_s": wall,
                        "compile_s": compile_s,
                        "device_s": device_s,
                        "main_s": timers.main,
                        "waited_s": timers.waited,
                        "writer_s": timers.writer,
                        "main_cpu_s": timers.main_cpu,
                        "writer_cpu_s": timers.writer_cpu,
                        "writes": timers.writes,
                        "unhidden_s": wall - compile_s - device_s,
                    }
                )
            med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            host = statistics.median((r["main_s"] + r["writer_s"]) / k for r in rounds)
            host_cpu = statistics.median((r["main_cpu_s"] + r["writer_cpu_s"]) / k for r in rounds)
            row = {
                "keep": keep,
                "chunk": chunk,
                "chunks": k,
                "values_per_chunk": values_per_chunk,
                "host_s_per_chunk": host,
                "host_ns_per_value": 1e9 * host / values_per_chunk,
                "host_cpu_s_per_chunk": host_cpu,
                "host_cpu_ns_per_value": 1e9 * host_cpu / values_per_chunk,
                "main_s_per_chunk": med["main_s"] / k,
                "waited_s_per_chunk": med["waited_s"] / k,
                "writer_s_per_chunk": med["writer_s"] / k,
                "writes_per_run": med["writes"],
                "device_s_per_chunk": med["device_s"] / k,
                "unhidden_s_per_chunk": med["unhidden_s"] / k,
                "rounds": rounds,
            }
            rows.append(row)
            print(
                f"{keep:>7} chunk {chunk:>8} x {k:>2}: host {host * 1e3:8.2f} ms/chunk = "
                f"{row['host_ns_per_value']:7.3f} ns/value; CPU {host_cpu * 1e3:8.2f} ms/chunk = "
                f"{row['host_cpu_ns_per_value']:7.3f} ns/value (main {row['main_s_per_chunk'] * 1e3:.2f}, writer "
                f"{row['writer_s_per_chunk'] * 1e3:.2f} ms, {med['writes']:.0f} writes, waited for the writer "
                f"{row['waited_s_per_chunk'] * 1e3:.2f}); device "
                f"{row['device_s_per_chunk'] * 1e3:.1f} ms/chunk; wall - compile - device "
                f"{row['unhidden_s_per_chunk'] * 1e3:.1f} ms/chunk"
            )
    return {"shape": list(shape), "points": args.ceiling_points, "rows": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-trials", type=int, default=1_000_000)
    parser.add_argument("--device-trials", type=int, default=20_000)
    add_common_arguments(parser, "scaling", repeats=3)
    parser.add_argument("--no-device-sweep", action="store_true", help="skip the 1/2/4 forced CPU devices sweep")
    parser.add_argument("--device-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--engine", action="store_true", help="the engine-overhead comparisons instead (see above)")
    parser.add_argument("--sweep-trials", type=int, default=262_144)
    parser.add_argument("--raw-trials", type=int, default=65_536)
    parser.add_argument(
        "--kernel-trials",
        type=int,
        default=None,
        help="trials per timed call of the bare kernel (default: the chunk size)",
    )
    parser.add_argument(
        "--sweep-seconds",
        type=float,
        default=None,
        help="size the sweep (and the raw run, a quarter of it) to about this many seconds of the kernel, "
        "measured first at --kernel-probe trials (for a GPU, whose speed is not known ahead)",
    )
    parser.add_argument("--kernel-probe", type=int, default=65_536)
    parser.add_argument(
        "--sweep-min",
        type=int,
        default=0,
        help="with --sweep-seconds: at least this many sweep trials (a target's size)",
    )
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--snr-target", type=float, default=1.0, help="target s.e. of kmeans-snr's final loss")
    parser.add_argument("--snr-max", type=int, default=2048)
    parser.add_argument("--snr-rounds", type=int, default=50)
    parser.add_argument("--snr-chunk", type=int, default=128)
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("sweep", "in-process", "million", "fixed", "target"),
        default=["sweep", "in-process", "million", "fixed", "target"],
        help="which engine comparisons to run (default all)",
    )
    parser.add_argument("--work-dir", default=None, help="where the runs' store directories go (default: the temp dir)")
    parser.add_argument("--engine-ceiling", action="store_true", help="the engine's own host time (see above)")
    parser.add_argument("--ceiling-chunks", type=int, nargs="+", default=[2**14, 2**18], help="chunk sizes (trials)")
    parser.add_argument("--ceiling-shape", type=int, nargs="+", default=[300], help="one trial's metric shape")
    parser.add_argument("--ceiling-points", type=int, default=3)
    parser.add_argument("--ceiling-runs", type=int, default=3, help="timed runs per case (median)")
    parser.add_argument(
        "--ceiling-k", type=int, default=None, help="chunks per run (default: 2**20 trials' worth, 4 to 16)"
    )
    args = parser.parse_args(argv)
    if args.engine_ceiling:
        if args.quick:
            args.ceiling_chunks, args.ceiling_runs = [1024, 4096], 2
        if args.out.endswith("scaling.json"):
            args.out = args.out.replace(
                "scaling.json", "engine_ceiling_quick.json" if args.quick else "engine_ceiling.json"
            )
        import tempfile

        head = {"benchmark": "engine-ceiling", "machine": machine(), "load_average": os.getloadavg()}
        with tempfile.TemporaryDirectory(prefix="jaxfed-ceiling-", dir=args.work_dir) as work:
            result = {**head, **engine_ceiling(args, work), "load_average_end": os.getloadavg()}
        write_json(args.out, result)
        return result
    if args.engine:
        if args.quick:
            args.sweep_trials, args.raw_trials, args.million = 2048, 1024, 4096
            args.snr_target, args.snr_max, args.snr_rounds, args.repeats = 0.5, 256, 5, 2
            if args.out.endswith("scaling.json"):
                args.out = args.out.replace("scaling.json", "engine_quick.json")
        elif args.out.endswith("scaling.json"):
            args.out = args.out.replace("scaling.json", "engine.json")
        import tempfile

        head = {"benchmark": "engine", "machine": machine(), "load_average": os.getloadavg()}

        def save(rows):
            write_json(args.out, {**head, **rows, "load_average_end": os.getloadavg()})

        with tempfile.TemporaryDirectory(prefix="jaxfed-bench-") as work:
            result = {**head, **engine_comparisons(args, work, save), "load_average_end": os.getloadavg()}
        write_json(args.out, result)
        return result
    if args.device_child:
        print(json.dumps(device_child(args.device_child, args.device_trials, args.repeats)))
        return None
    if args.quick:
        args.max_trials, args.device_trials, args.repeats = 10_000, 2_000, 2

    from jaxfed import engine
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    width = experiment_width(gfvl_topologies.EXPERIMENT)
    fn, fn_args = engine.testing.chunk_function(
        sweep.trial, sweep.points, width or engine.testing.micro_batch_width(None), micro_batch=width
    )
    t_compile, _ = compile_time(fn, *fn_args)

    by_trials = []
    n = 10
    while n <= args.max_trials:
        keep = "summary" if n >= 100_000 else "raw"
        start = time.perf_counter()
        info = engine.run(sweep.trial, sweep.points, n, keep=keep, micro_batch=width).info
        seconds = time.perf_counter() - start
        work = len(sweep.points) * n * 300
        by_trials.append(
            {
                "trials": n,
                "seconds": seconds,
                "keep": keep,
                "chunk_size": info["chunk_sizes"][0],
                "trial_slots_per_s": work / seconds,
            }
        )
        print(
            f"{n:>9} trials  {seconds:8.2f} s  {work / seconds:10.3e} trial·slots/s  ({keep}, chunk {info['chunk_sizes'][0]})"
        )
        n *= 10

    by_devices = []
    for d in () if args.no_device_sweep else (1, 2, 4):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={d}")
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--device-child",
                str(d),
                "--device-trials",
                str(args.device_trials),
                "--repeats",
                str(args.repeats),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        by_devices.append(row)
        print(
            f"{d} device(s)  {row['seconds']:8.3f} s  {row['trial_slots_per_s']:10.3e} trial·slots/s  compile {row['compile_s']:.2f} s"
        )

    result = {
        "benchmark": "scaling",
        "machine": machine(),
        "compile_s": t_compile,
        "by_trials": by_trials,
        "by_devices": by_devices,
    }
    result["summary"] = [
        {
            "case": f"{row['trials']} trials (wall, incl. compile)",
            "throughput": row["trial_slots_per_s"],
            "unit": "trial·slot/s",
            "vs_numpy": None,
            "vs_rng_limit": None,
            "compile_s": t_compile,
        }
        for row in by_trials
    ] + [
        {
            "case": f"{row['devices']} CPU device(s)",
            "throughput": row["trial_slots_per_s"],
            "unit": "trial·slot/s",
            "vs_numpy": None,
            "vs_rng_limit": None,
            "compile_s": row["compile_s"],
        }
        for row in by_devices
    ]
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    from jaxfed.engine import use_all_cores

    use_all_cores()  # as jaxfed run does: the kernel measured on as many host devices as the CLI's runs
    main()
