"""Throughput of OAC federated k-means on the mall (the ``kmeans-snr`` sweep) vs plain NumPy.

Workload: the kmeans-snr sweep for D = 4, β = 3: 1,000 trials × 9 SNR points (−10 … 30 dB) ×
50 rounds, K = 100 EDs, C = 10, N = 2,000 customers, initial centroids uniform in the mall (the
experiments' server-side default), adaptive v_max and re-initialisation, for both channel modes. jaxfed runs the experiment's trial through the engine's jitted chunk function
(compile timed apart; median of repeats of one chunk, scaled to the sweep). In the same run:

- the NumPy reference: the same OAC k-means with the explicit channel, one trial at a time, a
  Python loop over rounds, ``np.add.at`` for the per-ED sums and the dense K × L fading and QPSK
  matrices of ``benchmarks/oac_channel.py``, with the experiment's two metrics per round (loss,
  and the adjusted Rand index from an ``np.bincount`` contingency table, and the count of
  re-initialised centroids) (timed on a few trials and scaled);
- the random-number limit of the explicit model: JAX drawing only one complex fading coefficient
  per (ED, value, digit) and one complex noise sample per resource, every round;
- peak memory: the whole sweep once through ``jaxfed.engine.run`` (aggregate channel), whose chunk
  size comes from its memory budget, with the process's peak resident memory.

Targets (issue 5): aggregate ≥ 50× the reference; explicit ≥ 0.5 of its random-number limit.

    python benchmarks/kmeans_oac.py [--trials 1000] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (  # noqa: E402
    add_common_arguments,
    compile_time,
    experiment_width,
    machine,
    median_time,
    write_json,
)
from oac_channel import numpy_explicit  # noqa: E402

from jaxfed import engine  # noqa: E402
from jaxfed.experiments import kmeans_trials  # noqa: E402
from jaxfed.experiments.kmeans import mall as kmeans_mall

DIGITS = 4


def numpy_mall(rng, cfg):
    """Mall customers with NumPy: truncated Gaussian mixture by rejection, tile owners."""
    centres = rng.uniform(0, cfg.side, (cfg.n_components, 2))
    labels = rng.integers(0, cfg.n_components, cfg.n_points)
    points = centres[labels] + cfg.spread * rng.standard_normal((cfg.n_points, 2))
    outside = np.any((points < 0) | (points > cfg.side), axis=1)
    while outside.any():
        points[outside] = centres[labels[outside]] + cfg.spread * rng.standard_normal((outside.sum(), 2))
        outside = np.any((points < 0) | (points > cfg.side), axis=1)
    col = np.minimum((points[:, 0] // (cfg.side / cfg.cols)).astype(int), cfg.cols - 1)
    row = np.minimum((points[:, 1] // (cfg.side / cfg.rows)).astype(int), cfg.rows - 1)
    return points, col + cfg.cols * row, labels


def numpy_ari(a, b, n_a, n_b):
    """Adjusted Rand index of two labelings from their contingency table (np.bincount)."""
    table = np.bincount(a * n_b + b, minlength=n_a * n_b).reshape(n_a, n_b).astype(float)
    pairs = lambda x: x * (x - 1) / 2  # noqa: E731
    index, rows, cols = pairs(table).sum(), pairs(table.sum(1)).sum(), pairs(table.sum(0)).sum()
    expected = rows * cols / pairs(len(a))
    return (index - expected) / (0.5 * (rows + cols) - expected)


def numpy_trial(rng, cfg, snr_db):
    """One trial of OAC federated k-means (explicit channel) from centroids uniform in the mall,
    with its per-round loss, adjusted Rand index against the mixture labels and number of
    re-initialised centroids (the experiment's three metrics)."""
    points, owner, labels = numpy_mall(rng, cfg)
    c = rng.uniform(0.0, cfg.side, (cfg.n_clusters, 2))
    k, n_c = cfg.n_devices, cfg.n_clusters
    losses, ari, reinits = np.empty(cfg.n_rounds), np.empty(cfg.n_rounds), np.zeros(cfg.n_rounds)
    for r in range(cfg.n_rounds):
        a = ((points[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        counts = np.zeros((k, n_c))
        np.add.at(counts, (owner, a), 1)
        deltas = np.zeros((k, n_c, 2))
        np.add.at(deltas, (owner, a), points - c[a])
        values = deltas.reshape(k, n_c * 2)
        active = counts.sum(1) > 0
        vmax = max(np.abs(values).max(), 1e-30)
        estimate = numpy_explicit(rng, values[active], cfg.beta, DIGITS, vmax, snr_db)
        sizes = counts.sum(0)
        new = np.where(sizes[:, None] > 0, c + cfg.mu * estimate.reshape(n_c, 2) / np.maximum(sizes, 1)[:, None], c)
        small = sizes < cfg.s_min
        if small.any() and (~small).any():
            donors = np.flatnonzero(~small)
            new[small] = c[rng.choice(donors, small.sum())] + cfg.sigma_c * rng.standard_normal((small.sum(), 2))
            reinits[r] = small.sum()
        c = new
        a = ((points[:, None, :] - c[None]) ** 2).sum(-1).argmin(1)
        means = np.array([points[a == j].mean(0) if (a == j).any() else c[j] for j in range(n_c)])
        losses[r] = ((points - means[a]) ** 2).sum() / cfg.n_points
        ari[r] = numpy_ari(a, labels, n_c, cfg.n_components)
    return losses, ari, reinits


def sweep_run(trials: int) -> dict:
    """The whole kmeans-snr (D = 4) sweep through ``engine.run`` with its default memory budget."""
    cfg = kmeans_mall.SnrConfig(digits_list=(DIGITS,))
    labels = [lab for lab in kmeans_mall._snr_labels(cfg) if lab["method"] == "oac" and not lab.get("noise_free")]
    sweep = kmeans_trials.mall_sweep(cfg, labels)
    start = time.perf_counter()
    width = experiment_width(kmeans_mall.SNR)  # as `jaxfed run kmeans-snr` runs it
    info = engine.run(sweep.trial, sweep.points, trials, common_random_numbers=True, micro_batch=width).info
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "wall_s": wall,
        "chunk_sizes": info["chunk_sizes"],
        "budget_bytes": info["budget_bytes"],
        "peak_rss_bytes": peak,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=128, help="trials per timed chunk")
    parser.add_argument("--numpy-trials", type=int, default=3)
    add_common_arguments(parser, "kmeans_oac", repeats=3)
    parser.add_argument("--skip-sweep", action="store_true", help="skip the full engine run (peak memory)")
    parser.add_argument("--sweep-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sweep_child:
        print(json.dumps(sweep_run(args.trials)))
        return None
    if args.quick:
        args.trials, args.chunk, args.numpy_trials, args.repeats = 128, 64, 1, 2

    cfg = kmeans_mall.SnrConfig(digits_list=(DIGITS,))
    labels = [lab for lab in kmeans_mall._snr_labels(cfg) if lab["method"] == "oac" and not lab.get("noise_free")]
    n_points = len(labels)
    work = n_points * args.trials  # trial-points of the sweep
    result = {
        "benchmark": "kmeans_oac",
        "machine": machine(),
        "sizes": {
            "trials": args.trials,
            "snrs_db": list(cfg.snrs_db),
            "rounds": cfg.n_rounds,
            "K": cfg.n_devices,
            "C": cfg.n_clusters,
            "N": cfg.n_points,
            "beta": cfg.beta,
            "digits": DIGITS,
        },
    }

    # Independent draws per (point, trial), as the NumPy reference makes them; the experiment itself
    # uses common random numbers (one scene and one set of channel draws per trial, shared by the
    # SNR points), timed as well. Each at the width `jaxfed run kmeans-snr` gives it.
    width = experiment_width(kmeans_mall.SNR)
    for mode in ("aggregate", "explicit"):
        for common in (False, True):
            mcfg = kmeans_mall.SnrConfig(digits_list=(DIGITS,), channel=mode)
            sweep = kmeans_trials.mall_sweep(mcfg, labels)
            fn, fn_args = engine.testing.chunk_function(
                sweep.trial, sweep.points, args.chunk, common=common, micro_batch=width
            )
            t_compile, compiled = compile_time(fn, *fn_args)
            t_chunk = median_time(lambda: compiled(*fn_args), args.repeats)
            batch = compiled(*fn_args)["loss"].shape[1]
            t_sweep = t_chunk * args.trials / batch
            name = mode + (" (common random numbers)" if common else "")
            result[name] = {
                "compile_s": t_compile,
                "chunk_s": t_chunk,
                "chunk_trials": batch,
                "sweep_s": t_sweep,
                "trial_points_per_s": work / t_sweep,
            }
            print(
                f"{name:36s} compile {t_compile:6.2f} s  sweep {t_sweep:8.2f} s  {work / t_sweep:10.1f} trial-points/s"
            )

    # Random numbers an explicit simulation cannot avoid, per trial-point and round.
    q = 2 * cfg.n_clusters

    def draws(root, first):
        def one(p, t):
            # Round by round as the simulation draws them, each round's numbers written over the
            # last (materialising all rounds of a chunk would time memory traffic; reducing them
            # would fuse the reduction into the generator and slow it down).
            key = jax.random.fold_in(jax.random.fold_in(root, p), t)

            def round_draws(_, k):
                k_fading, k_noise = jax.random.split(k)
                fading = jax.random.normal(k_fading, (cfg.n_devices, q, DIGITS), jnp.complex64)
                noise = jax.random.normal(k_noise, (q * cfg.beta * DIGITS,), jnp.complex64)
                return (fading, noise), None

            init = (
                jnp.zeros((cfg.n_devices, q, DIGITS), jnp.complex64),
                jnp.zeros(q * cfg.beta * DIGITS, jnp.complex64),
            )
            return jax.lax.scan(round_draws, init, jax.random.split(key, cfg.n_rounds))[0]

        trials = first + jnp.arange(args.chunk, dtype=jnp.uint32)
        return jax.vmap(lambda p: jax.vmap(lambda t: one(p, t))(trials))(jnp.arange(n_points, dtype=jnp.uint32))

    rng_args = (jax.random.key(0), jnp.uint32(0))
    _, rng_compiled = compile_time(jax.jit(draws), *rng_args)
    t_rng = median_time(lambda: rng_compiled(*rng_args), args.repeats) * args.trials / args.chunk
    result["rng_limit_explicit_s"] = t_rng

    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(args.numpy_trials):
        numpy_trial(rng, cfg, cfg.snrs_db[i % n_points])
    t_numpy = (time.perf_counter() - start) / args.numpy_trials * work
    result["numpy_s"] = t_numpy
    result["numpy_measured_trials"] = args.numpy_trials
    agg, exp = result["aggregate"], result["explicit"]
    result["aggregate_vs_numpy"] = t_numpy / agg["sweep_s"]
    result["explicit_vs_numpy"] = t_numpy / exp["sweep_s"]
    result["explicit_fraction_of_rng_limit"] = t_rng / exp["sweep_s"]
    print(f"NumPy ref {t_numpy:10.1f} s (scaled from {args.numpy_trials} trials)")
    print(
        f"aggregate {result['aggregate_vs_numpy']:8.1f}x NumPy; explicit {result['explicit_vs_numpy']:8.1f}x NumPy, "
        f"{result['explicit_fraction_of_rng_limit']:.2f} of its random-number limit ({t_rng:.2f} s)"
    )
    crn = result["explicit (common random numbers)"]
    result["explicit_crn_fraction_of_rng_limit"] = t_rng / n_points / crn["sweep_s"]
    print(
        f"with common random numbers the explicit sweep draws per trial, not per point: "
        f"{result['explicit_crn_fraction_of_rng_limit']:.2f} of that limit ({t_rng / n_points:.2f} s)"
    )

    if not args.skip_sweep:
        # In a fresh process, so that its peak resident memory is the sweep's alone.
        out = subprocess.run(
            [sys.executable, __file__, "--sweep-child", "--trials", str(args.trials)],
            capture_output=True,
            text=True,
            check=True,
        )
        run = json.loads(out.stdout.strip().splitlines()[-1])
        result["sweep_run"] = run
        print(
            f"engine.run sweep: {run['wall_s']:.1f} s wall (incl. compile), chunk {run['chunk_sizes']}, "
            f"peak RSS {run['peak_rss_bytes'] / 2**30:.2f} GiB (budget {run['budget_bytes'] / 2**30:.2f} GiB)"
        )

    agg_crn = result["aggregate (common random numbers)"]
    result["summary"] = [
        {
            "case": "kmeans-snr aggregate",
            "throughput": agg["trial_points_per_s"],
            "unit": "trial·pt/s",
            "vs_numpy": result["aggregate_vs_numpy"],
            "vs_rng_limit": None,
            "compile_s": agg["compile_s"],
        },
        {
            "case": "kmeans-snr explicit",
            "throughput": exp["trial_points_per_s"],
            "unit": "trial·pt/s",
            "vs_numpy": result["explicit_vs_numpy"],
            "vs_rng_limit": result["explicit_fraction_of_rng_limit"],
            "compile_s": exp["compile_s"],
        },
        {
            "case": "kmeans-snr aggregate, CRN",
            "throughput": agg_crn["trial_points_per_s"],
            "unit": "trial·pt/s",
            "vs_numpy": t_numpy / agg_crn["sweep_s"],
            "vs_rng_limit": None,
            "compile_s": agg_crn["compile_s"],
        },
        {
            "case": "kmeans-snr explicit, CRN",
            "throughput": crn["trial_points_per_s"],
            "unit": "trial·pt/s",
            "vs_numpy": t_numpy / crn["sweep_s"],
            "vs_rng_limit": result["explicit_crn_fraction_of_rng_limit"],
            "compile_s": crn["compile_s"],
        },
    ]
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
