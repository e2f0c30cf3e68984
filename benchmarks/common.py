"""Timing helpers shared by the benchmarks: compile separately, block, median of repeats, JSON."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

import jax


def experiment_width(exp) -> int | None:
    """The micro-batch width ``jaxfed run`` gives ``exp`` on this machine's platform where the
    experiment sets its own (``Experiment.micro_batch``), else None: the engine's rule. Pass it as
    ``micro_batch=`` to ``engine.run`` and ``engine.testing.chunk_function`` so that a benchmark times the
    program the CLI runs."""
    return exp.width_on(jax.devices()[0].platform)


def block(tree):
    """Waits for every array of a pytree (``block_until_ready``)."""
    return jax.tree.map(lambda x: x.block_until_ready() if hasattr(x, "block_until_ready") else x, tree)


def median_time(fn, repeats: int = 5) -> float:
    """Median wall time (s) of ``fn()`` over ``repeats`` calls, each blocked until its results are ready."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_times(fns: dict, repeats: int = 5) -> dict:
    """name -> wall times (s) of ``fns[name]()`` over ``repeats`` rounds, each round calling every
    function once in turn (blocked until its results are ready), so that ratios can be taken round
    by round: a shared machine's changing load then hits the compared programs alike."""
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            block(fn())
            times[name].append(time.perf_counter() - start)
    return times


def compile_time(jitted, *args) -> tuple[float, object]:
    """(seconds to lower and compile ``jitted`` for ``args``, the compiled executable)."""
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return time.perf_counter() - start, compiled


def device_to_host_bandwidth(n_bytes: int = 2**28, repeats: int = 5) -> dict:
    """Bytes per second from the default device into fresh host memory: the median over ``repeats``
    copies of a float32 array of ``n_bytes`` computed anew on the device each time (JAX keeps the
    host copy of an array it has transferred once, so a second transfer of the same array is free).

    On an accelerator the copy is ``np.asarray`` (the transfer over the link); on a CPU the array
    already lives in host memory and ``np.asarray`` may return it without copying, so the figure is
    ``np.array(copy=True)``, one host memory copy (what raw mode's values then still cost).
    """
    import jax.numpy as jnp
    import numpy as np

    make = jax.jit(lambda x: jnp.full((n_bytes // 4,), x, jnp.float32))
    on_cpu = jax.devices()[0].platform == "cpu"
    times = []
    for i in range(repeats + 1):  # the first compiles and warms the path: not counted
        values = make(np.float32(i)).block_until_ready()
        start = time.perf_counter()
        np.array(values, copy=True) if on_cpu else np.asarray(values)
        if i:
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"bytes": n_bytes, "seconds": seconds, "bytes_per_s": n_bytes / seconds, "host_copy": on_cpu}


def machine() -> dict:
    dev = jax.devices()[0]
    return {
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
        "n_devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "dtype": "float64" if jax.config.jax_enable_x64 else "float32",
    }


def write_json(path: str, payload: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")


def add_common_arguments(parser, name: str, repeats: int) -> None:
    """The options every benchmark takes: --repeats, --quick (smoke-run sizes) and --out
    (default ``benchmarks/results/<name>.json``)."""
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", f"{name}.json"))
