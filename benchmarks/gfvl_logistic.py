"""Throughput of G-FVL on Bayesian logistic regression (the ``gfvl-logistic`` learning workload) against a
plain-NumPy reference of the same algorithm, and the fraction of time spent drawing the samples.

Workload (defaults of ``gfvl-logistic``, point "learn complete/iid"): K = 10 agents on the complete graph,
the breast-cancer training split (455 points, d = 11), mean-field Gaussian q, n_slots = 200 slots × L = 5
natural-gradient iterations × S = 20 REINFORCE samples (leave-one-out baseline), KL to the float64
centralised optimum after every slot. Throughput is counted in trial·local-iterations per second.

Measured in one run on the same machine:
- jaxfed: the experiment's trial, vmapped over trials and jitted (compile timed apart);
- sampling only: the same scan over slots and local iterations drawing only the S samples and their scores
  (``expfam.mean_field_sample_score``) at a fixed η;
- NumPy: the same algorithm and maths one trial at a time (``Generator.standard_normal``, the same
  closed-form Fisher solve, projection and KL), timed on a few trials and scaled; its time in sampling is
  measured too. Its median final KL is reported next to jaxfed's as a check that both run the same algorithm.

Timings need a quiet machine (nothing else running); ``--quick`` is a smoke run.

    python benchmarks/gfvl_logistic.py [--trials 256] [--loop-trials 2] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, compile_time, machine, median_time, write_json  # noqa: E402

from jaxfed import expfam, graphs  # noqa: E402
from jaxfed.experiments import gfvl_logistic  # noqa: E402


# --------------------------------------------------------------------------- NumPy reference
def numpy_trial(rng, cfg, problem, timers):
    """One trial of the learning workload (complete graph, i.i.d. split): MH walk, L natural-gradient
    iterations per slot with S-sample REINFORCE (leave-one-out), KL to q* after every slot."""
    k_agents, d = cfg.n_agents, cfg.n_features + 1
    z, w = np.asarray(problem["data"]["iid"].z, float), np.asarray(problem["data"]["iid"].weight, float)
    x, sign = z[..., :-1], 2.0 * z[..., -1] - 1.0
    prior, target = np.asarray(problem["prior"], float), np.asarray(problem["target"]["iid"], float)
    min_precision = 1.0 / cfg.prior_var
    adjacency = graphs.complete(k_agents)
    neighbours = [np.flatnonzero(adjacency[k]) for k in range(k_agents)]
    deg = adjacency.sum(1)
    eta, lam = prior.copy(), np.zeros((k_agents, 2 * d))
    k = rng.integers(k_agents)
    kl = np.empty(cfg.n_slots)
    s_count = cfg.n_samples
    for i in range(cfg.n_slots):
        if i > 0:
            j = rng.choice(neighbours[k])
            if rng.random() < min(1.0, deg[k] / deg[j]):
                k = j
        cavity, start = eta - lam[k], eta.copy()
        for _ in range(cfg.local_iters):
            pairs = eta.reshape(d, 2)
            p = -2.0 * pairs[:, 1]
            m, sd = pairs[:, 0] / p, 1.0 / np.sqrt(p)
            t0 = time.perf_counter()
            eps = rng.standard_normal((s_count, d))
            timers["sampling"] += time.perf_counter() - t0
            theta = m + eps * sd
            score = np.stack([eps * sd, 2 * m * eps * sd + (eps * eps - 1) * sd * sd], -1).reshape(s_count, 2 * d)
            losses = (w[k] * np.logaddexp(0.0, -sign[k] * (theta @ x[k].T))).sum(1)
            centred = (losses - losses.mean()) * s_count / (s_count - 1)
            g = (centred[:, None] * score).mean(0).reshape(d, 2)
            nat = np.stack(
                [p * g[:, 0] + m * p * p * (2 * m * g[:, 0] - g[:, 1]), p * p * (0.5 * g[:, 1] - m * g[:, 0])], -1
            )
            proposal = eta - cfg.rho * (nat.reshape(-1) + cfg.alpha * (eta - cavity))
            if np.all(np.isfinite(proposal)):
                pairs = proposal.reshape(d, 2)
                pairs[:, 1] = np.minimum(pairs[:, 1], -0.5 * min_precision)
                eta = pairs.reshape(-1)
        lam[k] += eta - start
        # KL(q ‖ q*) per coordinate: ½ [(m1 − m2)² p2 + p2/p1 − 1 − log(p2/p1)]
        e1, e2 = eta.reshape(d, 2), target.reshape(d, 2)
        p1, p2 = -2 * e1[:, 1], -2 * e2[:, 1]
        kl[i] = 0.5 * np.sum((e1[:, 0] / p1 - e2[:, 0] / p2) ** 2 * p2 + p2 / p1 - 1 - np.log(p2 / p1))
    return kl


# --------------------------------------------------------------------------- jaxfed
def jaxfed_runner(cfg, problem, n_trials):
    trial = gfvl_logistic.make_trial(cfg, problem)
    point = {"mode": "learn", "adjacency": jnp.asarray(graphs.complete(cfg.n_agents)), "split": "iid"}
    keys = jax.random.split(jax.random.key(0), n_trials)
    run = jax.jit(jax.vmap(lambda key: trial(key, point)["kl"]))
    return run, keys


def sampling_runner(cfg, problem, n_trials):
    """Only the draws and scores of the workload (same counts), at a fixed η."""
    family = expfam.mean_field_normal(cfg.n_features + 1, 1.0 / cfg.prior_var)
    eta = jnp.asarray(np.asarray(problem["target"]["iid"]), float)
    n_iters = cfg.n_slots * cfg.local_iters

    def one(key):
        def body(acc, i):
            theta, score = family.sample_score(jax.random.fold_in(key, i), eta, cfg.n_samples)
            return acc + jnp.sum(theta) + jnp.sum(score), None

        return lax.scan(body, jnp.zeros(()), jnp.arange(n_iters))[0]

    return jax.jit(jax.vmap(one)), jax.random.split(jax.random.key(1), n_trials)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--loop-trials", type=int, default=2, help="NumPy trials timed (then scaled)")
    add_common_arguments(parser, "gfvl_logistic", repeats=3)
    args = parser.parse_args(argv)
    overrides = {"n_slots": "20"} if args.quick else {}
    if args.quick:
        args.trials, args.loop_trials, args.repeats = 8, 1, 1
    from jaxfed.experiments import make_config

    cfg = make_config(gfvl_logistic.Config, overrides)
    problem = gfvl_logistic.prepare(cfg)
    work = cfg.n_slots * cfg.local_iters  # local iterations per trial

    run, keys = jaxfed_runner(cfg, problem, args.trials)
    compile_s, compiled = compile_time(run, keys)
    t_jax = median_time(lambda: compiled(keys), args.repeats)
    kl_jax = np.asarray(compiled(keys))
    sample, skeys = sampling_runner(cfg, problem, args.trials)
    _, sample_compiled = compile_time(sample, skeys)
    t_sample = median_time(lambda: sample_compiled(skeys), args.repeats)

    rng = np.random.default_rng(0)
    timers = {"sampling": 0.0}
    start = time.perf_counter()
    kl_np = np.array([numpy_trial(rng, cfg, problem, timers) for _ in range(args.loop_trials)])
    t_np_trial = (time.perf_counter() - start) / args.loop_trials

    jax_rate = args.trials * work / t_jax
    np_rate = work / t_np_trial
    result = {
        "workload": {
            "trials": args.trials,
            "n_slots": cfg.n_slots,
            "local_iters": cfg.local_iters,
            "n_samples": cfg.n_samples,
            "n_agents": cfg.n_agents,
            "d": cfg.n_features + 1,
        },
        "jaxfed": {
            "seconds": t_jax,
            "compile_seconds": compile_s,
            "trial_local_iters_per_s": jax_rate,
            "sampling_seconds": t_sample,
            "sampling_fraction": t_sample / t_jax,
            "median_final_kl": float(np.median(kl_jax[:, -1])),
        },
        "numpy": {
            "seconds_per_trial": t_np_trial,
            "trial_local_iters_per_s": np_rate,
            "sampling_fraction": timers["sampling"] / (t_np_trial * args.loop_trials),
            "median_final_kl": float(np.median(kl_np[:, -1])),
        },
        "speedup": jax_rate / np_rate,
        "machine": machine(),
        "summary": [
            {
                "case": f"gfvl-logistic learning (d = {cfg.n_features + 1}, L = {cfg.local_iters})",
                "throughput": jax_rate,
                "unit": "trial·local-iteration/s",
                "vs_numpy": jax_rate / np_rate,
                "vs_rng_limit": t_sample / t_jax,
                "compile_s": compile_s,
            }
        ],
    }
    print(
        f"jaxfed {jax_rate:.3g} trial·local-iter/s (compile {compile_s:.1f} s, sampling {t_sample / t_jax:.0%}); "
        f"NumPy {np_rate:.3g}; speed-up {jax_rate / np_rate:.1f}x; final KL median jaxfed "
        f"{result['jaxfed']['median_final_kl']:.3g}, NumPy {result['numpy']['median_final_kl']:.3g}"
    )
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
