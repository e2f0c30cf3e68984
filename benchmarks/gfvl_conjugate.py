"""Throughput of conjugate G-FVL (Fig. 3 workload) against plain-NumPy references.

Workload: 10,000 trials × 300 slots × 3 topologies (star, ring, complete), K = 10, N_k = 100,
per trial: Binomial data, an MH schedule and KL(q^(i) ‖ p(θ|D)) for every slot.

Measured in one run on the same machine:
- jaxfed: the engine's jitted chunk function over all trials and topologies (compile timed apart);
- plain vmap: ``jax.jit(jax.vmap(jax.vmap(trial)))`` of the same trial on the same trials (the keys
  the engine gives them), what a researcher writes without the engine: the engine's kernel over it
  is the issue's "chunk function >= 0.9x a plain jit(vmap)";
- (a) NumPy, one trial at a time, a Python loop over slots (as a researcher would first write it);
- (b) NumPy vectorised over trials, a loop over slots only (as an expert would write it), on
  ``--numpy-trials`` trials and scaled to ``--trials``;
- the random-number limit: JAX drawing only the uniforms the simulation needs (K + n_slots per trial);
- the MH walk alone (its visit counts returned), at the platform's unroll (``gossip.mh_walk``'s
  default: :data:`jaxfed.gfvl.gossip.ACCELERATOR_UNROLL` slots per loop iteration off a CPU) and at one
  slot per iteration: whether the unroll pays on this platform.
Throughput is trial·slots per second; ratios are jaxfed over each reference.

    python benchmarks/gfvl_conjugate.py [--trials 10000] [--numpy-trials N] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import digamma, gammaln

sys.path.insert(0, os.path.dirname(__file__))
from common import (  # noqa: E402
    add_common_arguments,
    compile_time,
    experiment_width,
    interleaved_times,
    machine,
    write_json,
)

from jaxfed import engine  # noqa: E402
from jaxfed.experiments import gfvl_topologies  # noqa: E402
from jaxfed.gfvl import gossip, graphs


# --------------------------------------------------------------------------- NumPy references
def numpy_beta_kl(a1, b1, a2, b2):
    """Textbook KL(Beta(a1,b1) ‖ Beta(a2,b2)) in float64."""
    return (
        gammaln(a2)
        + gammaln(b2)
        - gammaln(a2 + b2)
        - gammaln(a1)
        - gammaln(b1)
        + gammaln(a1 + b1)
        + (a1 - a2) * digamma(a1)
        + (b1 - b2) * digamma(b1)
        + (a2 - a1 + b2 - b1) * digamma(a1 + b1)
    )


def numpy_loop(rng, adjacency, cfg, n_trials):
    """(a): one trial at a time, a Python loop over slots, MH step as in docs/gfvl.md §A2."""
    k_agents = adjacency.shape[0]
    neighbours = [np.flatnonzero(adjacency[k]) for k in range(k_agents)]
    deg = adjacency.sum(1)
    out = np.empty((n_trials, cfg.n_slots))
    for t in range(n_trials):
        ones = rng.binomial(cfg.n_per_agent, cfg.theta_true, k_agents)
        stats = np.stack([ones, cfg.n_per_agent - ones], 1) / cfg.alpha
        post = np.array([cfg.prior_a, cfg.prior_b]) + stats.sum(0)
        eta = np.array([cfg.prior_a, cfg.prior_b], float)
        lam = np.zeros((k_agents, 2))
        k = rng.integers(k_agents)
        for i in range(cfg.n_slots):
            if i > 0:
                j = rng.choice(neighbours[k])
                if rng.random() < min(1.0, deg[k] / deg[j]):
                    k = j
            delta = stats[k] - lam[k]
            eta += delta
            lam[k] += delta
            out[t, i] = numpy_beta_kl(eta[0], eta[1], post[0], post[1])
    return out


def numpy_vectorised(rng, adjacency, cfg, n_trials):
    """(b): vectorised over trials, a loop over slots; one uniform per slot for the MH step."""
    k_agents = adjacency.shape[0]
    deg = adjacency.sum(1)
    table = np.argsort(1 - adjacency, axis=1, kind="stable")
    rows = np.arange(n_trials)
    ones = rng.binomial(cfg.n_per_agent, cfg.theta_true, (n_trials, k_agents))
    stats = np.stack([ones, cfg.n_per_agent - ones], -1) / cfg.alpha
    post = np.array([cfg.prior_a, cfg.prior_b]) + stats.sum(1)
    eta = np.tile([cfg.prior_a, cfg.prior_b], (n_trials, 1)).astype(float)
    lam = np.zeros((n_trials, k_agents, 2))
    k = rng.integers(k_agents, size=n_trials)
    out = np.empty((n_trials, cfg.n_slots))
    for i in range(cfg.n_slots):
        if i > 0:
            x = rng.random(n_trials) * deg[k]
            idx = x.astype(int)
            j = table[k, idx]
            k = np.where((x - idx) * deg[j] < deg[k], j, k)
        delta = stats[rows, k] - lam[rows, k]
        eta += delta
        lam[rows, k] += delta
        out[:, i] = numpy_beta_kl(eta[:, 0], eta[:, 1], post[:, 0], post[:, 1])
    return out


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--loop-trials", type=int, default=30, help="trials per topology for reference (a)")
    parser.add_argument("--numpy-trials", type=int, default=None, help="trials for reference (b) (default --trials)")
    add_common_arguments(parser, "gfvl_conjugate", repeats=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.loop_trials, args.repeats = 500, 3, 2
    numpy_trials = min(args.numpy_trials or args.trials, args.trials)

    cfg = gfvl_topologies.Config()
    sweep = gfvl_topologies.build(cfg)
    n_points = len(sweep.points)
    work = n_points * args.trials * cfg.n_slots  # trial·slots

    width = experiment_width(gfvl_topologies.EXPERIMENT)  # as `jaxfed run gfvl-topologies` runs it
    fn, fn_args = engine.testing.chunk_function(sweep.trial, sweep.points, args.trials, micro_batch=width)
    t_compile, compiled = compile_time(fn, *fn_args)

    # The plain jit(vmap) of the same trial on the same trials: keys as the engine's, no micro-batches.
    adjacency = jnp.stack([point["adjacency"] for point in sweep.points])

    def plain(seed, point_ids, first):
        def one(p, a, t):
            return sweep.trial(jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), p), t), {"adjacency": a})

        trials = first + jnp.arange(args.trials, dtype=jnp.uint32)
        return jax.vmap(lambda p, a: jax.vmap(lambda t: one(p, a, t))(trials))(point_ids, adjacency)

    # The engine takes the first trial as its (high, low) 32-bit halves; these trials are below 2^32,
    # where the engine's key is fold_in of the low half, as here.
    first_low = np.uint32(np.asarray(fn_args[3])[-1])
    plain_args = (fn_args[0], fn_args[1], first_low)
    t_plain_compile, plain_compiled = compile_time(jax.jit(plain), *plain_args)
    same_values = bool(
        np.array_equal(
            np.asarray(plain_compiled(*plain_args)["kl"]), np.asarray(compiled(*fn_args)["kl"])[:, : args.trials]
        )
    )

    # The random-number limit: only the K + n_slots uniforms per trial, keyed as the engine does.
    def draws(seed, point_ids, first):
        def one(p, t):
            key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), p), t)
            return jax.random.uniform(key, (cfg.n_agents + cfg.n_slots,))

        trials = first + jnp.arange(args.trials, dtype=jnp.uint32)
        return jax.vmap(lambda p: jax.vmap(lambda t: one(p, t))(trials))(point_ids)

    rng_fn = jax.jit(draws)
    rng_args = plain_args
    _, rng_compiled = compile_time(rng_fn, *rng_args)

    def walk(unroll):
        def visits(seed, point_ids, first):
            def one(p, a, t):
                key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), p), t)
                return gossip.mh_walk(key, a, cfg.n_slots, unroll).n_visited

            trials = first + jnp.arange(args.trials, dtype=jnp.uint32)
            return jax.vmap(lambda p, a: jax.vmap(lambda t: one(p, a, t))(trials))(point_ids, adjacency)

        return compile_time(jax.jit(visits), *plain_args)[1]

    walk_compiled, walk_one_compiled = walk(None), walk(1)
    # Timed in turn, round by round: the ratios are per round (a loaded machine's drift hits all alike).
    times = interleaved_times(
        {
            "jaxfed": lambda: compiled(*fn_args),
            "plain": lambda: plain_compiled(*plain_args),
            "rng": lambda: rng_compiled(*rng_args),
            "walk": lambda: walk_compiled(*plain_args),
            "walk_one": lambda: walk_one_compiled(*plain_args),
        },
        args.repeats,
    )
    t_jax, t_plain, t_rng, t_walk, t_walk_one = (
        statistics.median(times[name]) for name in ("jaxfed", "plain", "rng", "walk", "walk_one")
    )

    def per_round(over, under):
        return statistics.median(a / b for a, b in zip(times[over], times[under]))

    rng = np.random.default_rng(0)
    adjacencies = [graphs.build(name, cfg.n_agents) for name in cfg.topologies]
    start = time.perf_counter()
    for a in adjacencies:
        numpy_loop(rng, a, cfg, args.loop_trials)
    t_loop = (time.perf_counter() - start) * args.trials / args.loop_trials
    start = time.perf_counter()
    for a in adjacencies:
        numpy_vectorised(rng, a, cfg, numpy_trials)
    t_vec = (time.perf_counter() - start) * args.trials / numpy_trials

    result = {
        "benchmark": "gfvl_conjugate",
        "machine": machine(),
        "sizes": {"trials": args.trials, "slots": cfg.n_slots, "topologies": list(cfg.topologies), "K": cfg.n_agents},
        "micro_batch": width,  # the experiment's own on this platform; None: the engine's rule
        "compile_s": t_compile,
        "jaxfed_s": t_jax,
        "plain_vmap_s": t_plain,
        "plain_vmap_compile_s": t_plain_compile,
        "plain_vmap_same_values": same_values,
        "kernel_over_plain_vmap": per_round("plain", "jaxfed"),
        "rng_limit_s": t_rng,
        "walk_s": t_walk,
        "walk_one_slot_per_iteration_s": t_walk_one,
        "walk_unroll_speedup": per_round("walk_one", "walk"),
        "numpy_loop_s": t_loop,
        "numpy_loop_measured_trials_per_topology": args.loop_trials,
        "numpy_vectorised_s": t_vec,
        "numpy_vectorised_measured_trials": numpy_trials,
        "throughput_trial_slots_per_s": work / t_jax,
        "speedup_vs_numpy_loop": t_loop / t_jax,
        "speedup_vs_numpy_vectorised": t_vec / t_jax,
        "fraction_of_rng_limit": per_round("rng", "jaxfed"),
        "rounds_s": times,
    }
    result["summary"] = [
        {
            "case": "Fig. 3 workload",
            "throughput": work / t_jax,
            "unit": "trial·slot/s",
            "vs_numpy": t_vec / t_jax,
            "vs_rng_limit": result["fraction_of_rng_limit"],
            "compile_s": t_compile,
        },
    ]
    print(f"{result['machine']['device']}  {args.trials} trials x {cfg.n_slots} slots x {n_points} topologies")
    print(f"compile            {t_compile:8.3f} s")
    print(f"jaxfed             {t_jax:8.3f} s   {work / t_jax:12.3e} trial·slots/s")
    vs_plain, vs_rng = result["kernel_over_plain_vmap"], result["fraction_of_rng_limit"]
    print(
        f"plain jit(vmap)    {t_plain:8.3f} s   (jaxfed at {vs_plain:.2f}x it, per round; same values: {same_values})"
    )
    print(f"RNG limit          {t_rng:8.3f} s   (jaxfed at {vs_rng:.2f} of the limit, per round)")
    print(f"MH walk alone      {t_walk:8.3f} s   (one slot per loop iteration: {t_walk_one:.3f} s)")
    print(f"NumPy loop (a)     {t_loop:8.3f} s   ratio {t_loop / t_jax:8.1f}x  (scaled from {args.loop_trials} trials)")
    print(f"NumPy vector (b)   {t_vec:8.3f} s   ratio {t_vec / t_jax:8.1f}x  (scaled from {numpy_trials} trials)")
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
