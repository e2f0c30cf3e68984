"""Throughput of the over-the-air sum (jaxfed.oac.over_the_air_sum), explicit and aggregate modes.

For K ∈ {10, 100, 1000} EDs, Q = 20 values, β = 3, D = 4, a batch of trials × 8 SNR points
(−10 … 25 dB) runs as one jitted, doubly vmapped call per chunk (chunks bound the memory).
In the same run it times

- (a) a plain-NumPy reference of the explicit model, one trial at a time with the full K × L
  fading and QPSK matrices, as a researcher would write it (timed on a few trials, per sum);
- (b) the random-number limit: JAX drawing only the numbers an explicit simulation cannot
  avoid, one complex fading coefficient per (ED, value, digit) and one complex noise sample
  per resource, with the same batching and chunking.

Targets (issue 4): explicit ≥ 0.5 of the limit's speed; aggregate ≥ 20× the NumPy reference at
K = 100, growing with K. Each figure is the median of ``--repeats`` timed runs after a warm-up
call; compilation is timed separately. A run times the whole batch, or as many chunks as fit
in ``--seconds`` per repeat (the chunks are identical calls, so throughput does not depend on
how many are timed); the JSON records how many sums were timed.

    python benchmarks/oac_channel.py            # full sizes
    python benchmarks/oac_channel.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import add_common_arguments, machine, write_json

from jaxfed.oac import balanced, channel

N_VALUES, BETA, DIGITS, VMAX = 20, 3, 4, 1.0
SNRS_DB = np.linspace(-10.0, 25.0, 8)


# --------------------------------------------------------------------------- NumPy reference (a)
def numpy_explicit(rng, values, beta, digits, vmax, snr_db):
    """One over-the-air sum with NumPy: encode, dense K × L transmit and fading matrices, detect."""
    n_dev, n_val = values.shape
    xi = (beta**digits - 1) // 2
    n_res = n_val * digits * beta
    level = np.floor(xi * np.clip(values, -vmax, vmax) / vmax + xi + 0.5).astype(np.int64)
    offset = (level[..., None] // beta ** np.arange(digits)) % beta  # j = η + (β−1)/2
    resource = beta * digits * np.arange(n_val)[:, None] + beta * np.arange(digits) + offset  # (K, Q, D)
    x = np.zeros((n_dev, n_res), complex)
    qpsk = np.exp(1j * np.pi / 4 * (2 * rng.integers(0, 4, (n_dev, n_res)) + 1))
    rows = np.arange(n_dev)[:, None, None]
    x[rows, resource] = np.sqrt(beta) * qpsk[rows, resource]
    h = (rng.standard_normal((n_dev, n_res)) + 1j * rng.standard_normal((n_dev, n_res))) / np.sqrt(2)
    noise_var = 10 ** (-snr_db / 10)
    w = np.sqrt(noise_var / 2) * (rng.standard_normal(n_res) + 1j * rng.standard_normal(n_res))
    y = (h * x).sum(axis=0) + w
    k_hat = (np.abs(y) ** 2 - noise_var) / beta
    sigma_hat = (k_hat.reshape(n_val, digits, beta) * (np.arange(beta) - (beta - 1) // 2)).sum(-1)
    return vmax / xi * (sigma_hat * beta ** np.arange(digits)).sum(-1)


def prepare_numpy(n_dev, seconds, seed):
    """A callable running enough NumPy reference sums (over the SNR points) to last ~``seconds``."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1.2 * VMAX, 1.2 * VMAX, (n_dev, N_VALUES))
    start = time.perf_counter()
    numpy_explicit(rng, values, BETA, DIGITS, VMAX, SNRS_DB[0])
    n_sums = len(SNRS_DB) * max(1, math.ceil(seconds / (time.perf_counter() - start) / len(SNRS_DB)))

    def run():
        for i in range(n_sums):
            numpy_explicit(rng, values, BETA, DIGITS, VMAX, SNRS_DB[i % len(SNRS_DB)])

    return run, n_sums, {}


# --------------------------------------------------------------------------- JAX
def make_chunk(kind, n_dev, chunk_trials):
    """Jitted chunk: (root key, chunk index, values (C, S, K, Q), snrs (S,)) -> per-sum output (C, S, ...)."""

    def one_sum(key, values, snr_db):
        if kind == "limit":
            key_fading, key_noise = jax.random.split(key)
            fading = jax.random.normal(key_fading, (n_dev, N_VALUES, DIGITS), jnp.complex64)
            noise = jax.random.normal(key_noise, (channel.n_resources(N_VALUES, BETA, DIGITS),), jnp.complex64)
            # Returned as they are: reducing them instead is slower on CPU, where XLA fuses the
            # draws into the reduction's loop.
            return fading, noise
        return channel.over_the_air_sum(key, values, BETA, DIGITS, VMAX, snr_db, kind).estimate

    over_snrs = jax.vmap(one_sum, in_axes=(0, 0, 0))
    over_trials = jax.vmap(over_snrs, in_axes=(0, 0, None))

    @jax.jit
    def chunk(root, index, values, snrs):
        keys = jax.random.split(jax.random.fold_in(root, index), (chunk_trials, len(SNRS_DB)))
        return over_trials(keys, values, snrs)

    return chunk


def chunk_trials_for(n_dev, trials, chunk_mib):
    """Trials per chunk such that the per-sum working set (≈ 5 arrays of K·Q·D complex64) fits."""
    per_trial = len(SNRS_DB) * 5 * n_dev * N_VALUES * DIGITS * 8
    return max(1, min(trials, (chunk_mib * 2**20) // per_trial))


def prepare_jax(kind, n_dev, trials, chunk_mib, seconds, seed):
    """Compiles (timed) and warms up the chunk of ``kind``; returns a callable running the timed chunks."""
    chunk_trials = chunk_trials_for(n_dev, trials, chunk_mib)
    n_chunks = math.ceil(trials / chunk_trials)
    chunk = make_chunk(kind, n_dev, chunk_trials)
    rng = np.random.default_rng(seed)
    shape = (chunk_trials, len(SNRS_DB), n_dev, N_VALUES)
    values = jnp.asarray(rng.uniform(-1.2 * VMAX, 1.2 * VMAX, shape), jnp.float32)
    snrs = jnp.asarray(SNRS_DB, jnp.float32)
    root = jax.random.key(seed)

    start = time.perf_counter()
    compiled = chunk.lower(root, 0, values, snrs).compile()
    compile_s = time.perf_counter() - start

    start = time.perf_counter()
    jax.block_until_ready(compiled(root, 0, values, snrs))  # warm-up; estimates a chunk's time
    per_chunk = time.perf_counter() - start
    timed_chunks = n_chunks if seconds <= 0 else max(1, min(n_chunks, int(seconds / per_chunk)))

    def run():
        for i in range(timed_chunks):
            out = compiled(root, i, values, snrs)
        jax.block_until_ready(out)

    info = {
        "compile_s": compile_s,
        "chunk_trials": chunk_trials,
        "chunks_in_batch": n_chunks,
        "chunks_timed": timed_chunks,
    }
    return run, timed_chunks * chunk_trials * len(SNRS_DB), info


def measure(n_dev, args):
    """Times limit, explicit, aggregate and NumPy for one K; repeats interleave the four so that
    load from other processes on a shared machine affects them alike."""
    timers = {
        kind: prepare_jax(kind, n_dev, args.trials, args.chunk_mib, args.seconds, args.seed)
        for kind in ("limit", "explicit", "aggregate")
    }
    timers["numpy"] = prepare_numpy(n_dev, args.numpy_seconds, args.seed)
    times = {kind: [] for kind in timers}
    for _ in range(args.repeats):
        for kind, (run, n_sums, _) in timers.items():
            start = time.perf_counter()
            run()
            times[kind].append((time.perf_counter() - start) / n_sums)
    return {
        kind: {"seconds_per_sum": statistics.median(times[kind]), "sums_timed": n_sums, **info}
        for kind, (_, n_sums, info) in timers.items()
    }


# --------------------------------------------------------------------------- sanity check
def check_reference(n_sums=400, n_dev=10, snr_db=0.0, seed=1):
    """The NumPy reference and JAX's explicit mode must estimate with the same error:
    mean((v̂ − quantised sum)²) / predicted variance ≈ 1 for both (predicted variance from docs/kmeans.md §B4)."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-VMAX, VMAX, (n_dev, N_VALUES))
    xi = (BETA**DIGITS - 1) // 2
    level = np.floor(xi * values / VMAX + 0.5)
    truth = VMAX / xi * level.sum(0)
    numerals = np.asarray(jax.jit(lambda v: balanced.encode(v, BETA, DIGITS, VMAX))(jnp.asarray(values, jnp.float32)))
    counts = np.asarray(channel.resource_counts(jnp.asarray(numerals), BETA)).reshape(N_VALUES, DIGITS, BETA)
    c = VMAX / xi * (BETA ** np.arange(DIGITS))[:, None] * (np.arange(BETA) - (BETA - 1) // 2)
    predicted = np.sum((c * (counts + 10 ** (-snr_db / 10) / BETA)) ** 2, axis=(1, 2))
    ref = np.stack([numpy_explicit(rng, values, BETA, DIGITS, VMAX, snr_db) for _ in range(n_sums)])
    values32 = jnp.asarray(values, jnp.float32)
    one_sum = lambda k: channel.over_the_air_sum(k, values32, BETA, DIGITS, VMAX, snr_db, "explicit").estimate
    run = jax.jit(jax.vmap(one_sum))
    est = np.asarray(run(jax.random.split(jax.random.key(seed), n_sums)), np.float64)
    ratios = {name: float(np.mean((x - truth) ** 2 / predicted)) for name, x in (("numpy", ref), ("jax_explicit", est))}
    # Each ratio averages n_sums·Q normalised squared errors (variance <= 9 for sums of exponentials).
    tolerance = 5 * math.sqrt(9 / (n_sums * N_VALUES))
    assert all(abs(r - 1) < tolerance for r in ratios.values()), ratios
    return ratios


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser, "oac_channel", repeats=3)
    parser.add_argument("--devices", type=int, nargs="+", default=[10, 100, 1000], help="K values")
    parser.add_argument("--trials", type=int, default=10_000, help="trials per SNR point in the batch")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds of chunks timed per repeat (0: the whole batch)"
    )
    parser.add_argument("--numpy-seconds", type=float, default=2.0, help="seconds of NumPy reference sums per repeat")
    parser.add_argument("--chunk-mib", type=int, default=32, help="working set per chunk (small chunks stay in cache)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.trials, args.repeats = [10, 100], 64, 3
        args.seconds, args.numpy_seconds = 0.3, 0.2

    header = {
        "machine": machine(),
        "dtype": "float32 / complex64",
        "n_values": N_VALUES,
        "beta": BETA,
        "digits": DIGITS,
        "snrs_db": SNRS_DB.tolist(),
        "trials": args.trials,
        "repeats": args.repeats,
        "quick": args.quick,
    }
    print(json.dumps(header))
    header["reference_check"] = check_reference()
    print("reference check, mean squared error / predicted variance:", header["reference_check"])

    rows = []
    print(f"{'K':>5} {'what':>10} {'compile s':>10} {'µs/sum':>10} {'sums/s':>12} {'sums timed':>11}")
    for n_dev in args.devices:
        row = {"K": n_dev, **measure(n_dev, args)}
        numpy_s = row["numpy"]["seconds_per_sum"]
        row["explicit_vs_limit"] = row["limit"]["seconds_per_sum"] / row["explicit"]["seconds_per_sum"]
        row["aggregate_vs_numpy"] = numpy_s / row["aggregate"]["seconds_per_sum"]
        row["explicit_vs_numpy"] = numpy_s / row["explicit"]["seconds_per_sum"]
        for kind in ("limit", "explicit", "aggregate", "numpy"):
            r = row[kind]
            compile_s = f"{r['compile_s']:10.2f}" if "compile_s" in r else f"{'-':>10}"
            print(
                f"{n_dev:5d} {kind:>10} {compile_s} {1e6 * r['seconds_per_sum']:10.2f} "
                f"{1 / r['seconds_per_sum']:12.0f} {r['sums_timed']:11d}"
            )
        print(
            f"      explicit speed / limit speed = {row['explicit_vs_limit']:.2f} (target >= 0.5); "
            f"aggregate vs NumPy = {row['aggregate_vs_numpy']:.0f}x; "
            f"explicit vs NumPy = {row['explicit_vs_numpy']:.0f}x"
        )
        rows.append(row)

    summary = []
    for row in rows:
        for kind in ("explicit", "aggregate"):
            summary.append(
                {
                    "case": f"{kind}, K = {row['K']}",
                    "throughput": 1 / row[kind]["seconds_per_sum"],
                    "unit": "sums/s",
                    "vs_numpy": row[f"{kind}_vs_numpy"],
                    "vs_rng_limit": row["explicit_vs_limit"] if kind == "explicit" else None,
                    "compile_s": row[kind].get("compile_s", float("nan")),
                }
            )
    result = {**header, "results": rows, "summary": summary}
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
