"""Where a summary chunk's device time goes (the engine's ``keep="summary"`` chunk function).

Workload: one chunk of gfvl-topologies (3 topologies × 300 slots per trial) of ``--chunk`` trials.
Each row is a jitted function of the same trials that returns only some outputs of the summarised
chunk (:func:`jaxfed.stats.summary.chunk_summary`, whose parts share one pass over the values,
:func:`jaxfed.stats.summary.summary_pass`); XLA drops what is not returned, so the difference to
``kernel_sum`` is what that part costs on the device:

- ``kernel``: the trials alone (``jit(vmap(vmap(trial)))``, the values returned, as in raw mode);
- ``kernel_sum``: the trials reduced to one float32 sum per cell, so that the values need not be
  written out: the baseline of the parts below (XLA fuses the trial into their reductions too);
- ``counts``: finite and non-finite counts per cell and point;
- ``block_sums``: the float64 sums (and sums of squares) per 64-trial block, by a fixed tree, and
  their O(log n) aligned dyadic sums (what the host receives);
- ``histogram``: the log-grid bin of every value and its count per cell, by the engine's method
  on this platform (:func:`jaxfed.engine.compiled.histogram_method`: scatter-add on a CPU);
- ``histogram_sort``: the same counts by sorting (the accelerators' method), to compare;
- ``summary``: the engine's whole summarised chunk function: since issue 24 every micro-batch is
  summarised inside the trial loop (the values never stored), so this row is compared with
  ``kernel``, not with the sum of the parts above (which summarise a stored chunk);
- ``to_host``: copying the summary's outputs to NumPy (``jax.device_get``), after they are ready.

Each is compiled separately and timed as the median of ``--repeats`` calls (``block_until_ready``).
On a GPU the summary sweep ran at 0.26× the kernel (benchmarks/README.md); this says which part
to change.

    python benchmarks/summary_parts.py [--chunk 32768] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed.jaxcompat import enable_x64

sys.path.insert(0, os.path.dirname(__file__))
from common import (  # noqa: E402
    add_common_arguments,
    compile_time,
    experiment_width,
    machine,
    median_time,
    write_json,
)

PARTS = {
    "counts": ("count", "nan_count", "nonfinite_trials"),
    "block_sums": ("sum_pieces", "sq_pieces"),
    "histogram": ("hist",),
    "histogram_sort": ("hist",),
}


def part_functions(chunk: int):
    """name -> (jitted function, its arguments) for the kernel, each summary part and the whole
    summarised chunk function, all over trials [0, ``chunk``) of gfvl-topologies."""
    from jaxfed import engine, stats
    from jaxfed.engine.compiled import histogram_method, make_chunk_fn
    from jaxfed.engine.devices import make_mesh
    from jaxfed.engine.points import group_points
    from jaxfed.engine.sizing import trial_width
    from jaxfed.experiments.gfvl import topologies as gfvl_topologies

    sweep = gfvl_topologies.build(gfvl_topologies.Config())
    # The width `jaxfed run gfvl-topologies` gives this run (the experiment's own, else the engine's rule), every row.
    width = experiment_width(gfvl_topologies.EXPERIMENT) or trial_width(sweep.trial, sweep.points, chunk)
    kernel, args = engine.testing.chunk_function(sweep.trial, sweep.points, chunk, micro_batch=width)
    batch = kernel.lower(*args).out_info["kl"].shape[1]  # the chunk rounded up to whole micro-batches
    n_valid = np.uint32(batch // stats.summary.SUMMARY_BLOCK * stats.summary.SUMMARY_BLOCK)

    def only(keys, histogram):
        def fn(*a):
            values = kernel(*a)
            with enable_x64(True):  # as in the engine: float64 block sums on any device
                return {
                    name: {k: stats.summary.chunk_summary(v, n_valid, jnp, histogram=histogram)[k] for k in keys}
                    for name, v in values.items()
                }

        return jax.jit(fn)

    functions = {
        "kernel": (kernel, args),
        "kernel_sum": (jax.jit(lambda *a: jax.tree.map(lambda v: v.sum(1), kernel(*a))), args),
    }
    for name, keys in PARTS.items():  # the engine's histogram method on this platform, and sorting
        method = "sort" if name == "histogram_sort" else histogram_method(jax.devices()[0].platform)
        functions[name] = (only(keys, method), args)
    group, _ = group_points(sweep.points)[0]
    summarised = make_chunk_fn(sweep.trial, group, batch, make_mesh(None), width, False, True)
    functions["summary"] = (summarised, (*args[:4], n_valid, np.uint32(0)))
    return functions, batch, width


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, "summary_parts", repeats=5)
    parser.add_argument("--chunk", type=int, default=32768, help="trials in the chunk (the engine's chunk size)")
    args = parser.parse_args(argv)
    if args.quick:
        args.chunk, args.repeats = 1024, 2
    functions, batch, width = part_functions(args.chunk)
    rows: dict = {}
    outputs = None
    for name, (fn, fn_args) in functions.items():
        seconds_compile, compiled = compile_time(fn, *fn_args)
        outputs = compiled(*fn_args)
        jax.block_until_ready(outputs)
        rows[name] = {"seconds": median_time(lambda c=compiled, a=fn_args: c(*a), args.repeats)}
        rows[name]["compile_s"] = seconds_compile
    to_host = []
    for _ in range(args.repeats):  # the summary's outputs, already on the device
        start = time.perf_counter()
        jax.device_get(outputs)
        to_host.append(time.perf_counter() - start)
    rows["to_host"] = {
        "seconds": float(np.median(to_host)),
        "bytes": int(sum(x.nbytes for x in jax.tree.leaves(outputs))),
    }
    kernel_s, baseline_s = rows["kernel"]["seconds"], rows["kernel_sum"]["seconds"]
    for name, row in rows.items():
        if name in PARTS or name == "summary":
            row["over_baseline_s"] = row["seconds"] - baseline_s
        extra = f"  ({row['over_baseline_s'] * 1e3:+.1f} ms over kernel_sum)" if "over_baseline_s" in row else ""
        print(f"{name:>10}: {row['seconds'] * 1e3:9.1f} ms{extra}")
    payload = {
        "benchmark": "summary_parts",
        "machine": machine(),
        "load_average": os.getloadavg(),
        "chunk": args.chunk,
        "batch": batch,
        "micro_batch": width,
        "repeats": args.repeats,
        "rows": rows,
        "summary_over_kernel": rows["summary"]["seconds"] / kernel_s,
        "summary_over_kernel_sum": rows["summary"]["seconds"] / baseline_s,
    }
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
