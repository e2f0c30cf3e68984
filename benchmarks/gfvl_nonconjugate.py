"""Throughput of non-conjugate G-FVL (Fig. 4 workload) against a plain-NumPy reference.

Workload: 1,000 trials × 400 slots × L = 5 local natural-gradient iterations × S = 30 REINFORCE
samples, K = 10 agents on the complete graph, N_k = 100 noisy-Bernoulli points each (the
``gfvl-local-iters`` trial at L = 5, 2,000 local iterations, KL to the exact posterior by quadrature
every 20 local iterations).

Measured in one run on the same machine:
- jaxfed: the engine's jitted chunk function for the ``gfvl-local-iters`` trial (compile timed apart);
- sampling only: the same scan over slots and local iterations drawing only the S Beta variates and
  their scores (``expfam.beta_sample_score``, Cheng's BB/BC) at the η of a real run, and the same
  with ``jax.random.beta`` (two Marsaglia–Tsang gammas) and the digamma score;
- NumPy: the same algorithm and maths one trial at a time (``Generator.beta``, ``scipy.special``, the
  same Gauss–Legendre windows for the KL in float64), timed on a few trials and scaled.

    python benchmarks/gfvl_nonconjugate.py [--trials 1000] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from scipy.special import digamma, logsumexp, polygamma

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, compile_time, machine, median_time, write_json  # noqa: E402

from jaxfed import engine, gfvl  # noqa: E402
from jaxfed.experiments import gfvl_local_iters  # noqa: E402
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, natgrad, quadrature

N_ITERS, N_SLOTS = 5, 400


# --------------------------------------------------------------------------- NumPy reference
@functools.cache
def _gl(n):
    """Gauss–Legendre nodes and weights, computed once per size."""
    return np.polynomial.legendre.leggauss(n)


def _standard_nodes(mode, scale, lo, hi, limit):
    """The composite rule of jaxfed.gfvl.quadrature: Gauss–Legendre on the core ±W s and on each tail."""
    w_core = quadrature.CORE_WIDTH
    xc, wc = _gl(quadrature.CORE_NODES)
    xt, wt = _gl(quadrature.TAIL_NODES)
    xt01, wt01 = 0.5 * (xt + 1.0), 0.5 * wt
    left = max((mode - max(lo, -limit)) / scale - w_core, 0.0)
    right = max((min(hi, limit) - mode) / scale - w_core, 0.0)
    y = np.concatenate([w_core * xc, -w_core - left * xt01, w_core + right * xt01])
    w = np.concatenate([w_core * wc, left * wt01, right * wt01])
    u = np.clip(mode + scale * y, -limit, limit)
    with np.errstate(divide="ignore"):
        return u, np.log(w)


def _log_sigmoid(u):
    return -np.logaddexp(0.0, -u)


class NumpyTarget:
    """q* ∝ Beta(a0, b0)·exp(−L/α) on u = logit θ: mode by grid and zooms, scale by the fixed point,
    tails from the grid (as jaxfed.gfvl.quadrature.make_target), plain float64 log densities."""

    def __init__(self, a0, b0, n1, n0, eps, alpha, limit):
        self.a0, self.b0, self.n1, self.n0, self.eps, self.alpha, self.limit = a0, b0, n1, n0, eps, alpha, limit
        grid = np.linspace(-limit, limit, 64)
        spacing = grid[1] - grid[0]
        on_grid = self.psi(grid)
        u, width = grid[np.argmax(on_grid)], spacing
        for _ in range(7):
            h = width * np.linspace(-1, 1, 17)
            u = np.clip(u + h[np.argmax(self.psi(u + h))], -limit, limit)
            width /= 8
        s = spacing
        for _ in range(5):
            curv = -(self.psi(u + s) + self.psi(u - s) - 2 * self.psi(u)) / s**2
            s = curv**-0.5 if curv > 0 else 2 * s
        high = grid[on_grid >= on_grid.max() - quadrature.TAIL_DROP]
        core = quadrature.CORE_WIDTH * s
        self.mode, self.scale = u, s
        lo, hi = min(high.min() - spacing, u - core), max(high.max() + spacing, u + core)
        nodes, log_w = _standard_nodes(u, s, lo, hi, limit)
        self.log_sum = logsumexp(self.psi(nodes) + log_w)

    def psi(self, u):
        p = self.eps + (1 - 2 * self.eps) * np.exp(_log_sigmoid(u))
        q = self.eps + (1 - 2 * self.eps) * np.exp(_log_sigmoid(-u))
        prior = self.a0 * _log_sigmoid(u) + self.b0 * _log_sigmoid(-u)
        return prior + (self.n1 * np.log(p) + self.n0 * np.log(q)) / self.alpha

    def kl(self, a, b):
        mode, scale = np.log(a / b), np.sqrt(1 / a + 1 / b)
        core = quadrature.CORE_WIDTH * scale
        tail = quadrature.TAIL_DROP
        u, log_w = _standard_nodes(mode, scale, mode - core - tail / a, mode + core + tail / b, self.limit)
        ell = a * _log_sigmoid(u) + b * _log_sigmoid(-u)
        weights = np.exp(ell + log_w - logsumexp(ell + log_w))
        value = weights @ (ell - self.psi(u)) + np.log(self.scale / scale) + self.log_sum - logsumexp(ell + log_w)
        return max(value, 0.0)


def numpy_trial(rng, cfg, limit, timers):
    """One trial of the gfvl-local-iters workload: data, MH walk, L natural-gradient iterations per
    slot with S-sample REINFORCE gradients, KL every ``record_every`` local iterations."""
    k_agents, n = cfg.n_agents, cfg.n_per_agent
    eps, alpha, rho, c = cfg.epsilon, cfg.alpha, cfg.rho, cfg.c
    weight = likelihoods.loss_weight(cfg.loss_normalisation, n)
    ones = rng.binomial(n, eps + (1 - 2 * eps) * cfg.theta_true, k_agents)
    data = np.stack([ones, n - ones], 1) * weight
    adjacency = graphs.complete(k_agents)
    neighbours = [np.flatnonzero(adjacency[k]) for k in range(k_agents)]
    deg = adjacency.sum(1)
    target = NumpyTarget(cfg.prior_a, cfg.prior_b, data[:, 0].sum(), data[:, 1].sum(), eps, alpha, limit)
    eta = np.array([cfg.prior_a, cfg.prior_b])
    lam = np.zeros((k_agents, 2))
    k = rng.integers(k_agents)
    every = cfg.record_every // N_ITERS
    out = []
    for i in range(N_SLOTS):
        if i > 0:
            j = rng.choice(neighbours[k])
            if rng.random() < min(1.0, deg[k] / deg[j]):
                k = j
        cavity = eta - lam[k]
        start_eta = eta.copy()
        for _ in range(N_ITERS):
            a, b = eta
            t0 = time.perf_counter()
            theta = np.clip(rng.beta(a, b, cfg.n_samples), np.finfo(float).tiny, 1 - np.finfo(float).eps / 2)
            timers["sampling"] += time.perf_counter() - t0
            stats = np.stack([np.log(theta), np.log1p(-theta)], 1)
            mu = digamma([a, b]) - digamma(a + b)
            p_one = eps + (1 - 2 * eps) * theta
            losses = -(data[k, 0] * np.log(p_one) + data[k, 1] * np.log(1 - p_one))
            grad = ((losses - c)[:, None] * (stats - mu)).mean(0)
            tri = polygamma(1, [a, b, a + b])
            fisher = np.array([[tri[0] - tri[2], -tri[2]], [-tri[2], tri[1] - tri[2]]])
            proposal = eta - rho * (np.linalg.solve(fisher, grad) + alpha * (eta - cavity))
            if np.all(np.isfinite(proposal)):
                eta = np.maximum(proposal, expfam.BETA_MIN_SHAPE)
        lam[k] += eta - start_eta
        if (i + 1) % every == 0:
            out.append(target.kl(*eta))
    return np.array(out)


def check_reference_kl(cfg, limit):
    """The NumPy reference's KL equals jaxfed.gfvl.quadrature's (float32) on a few q's: same maths."""
    weight = likelihoods.loss_weight(cfg.loss_normalisation, 100)
    n1, n0 = 663.0 * weight, 337.0 * weight
    ref = NumpyTarget(cfg.prior_a, cfg.prior_b, n1, n0, cfg.epsilon, cfg.alpha, limit)
    lik = likelihoods.noisy_bernoulli(cfg.epsilon)

    def loss_change(theta_ref, t):
        return lik.loss_change(jnp.array([n1, n0]), theta_ref, t)

    target = quadrature.make_target(expfam.beta_natural(cfg.prior_a, cfg.prior_b), loss_change, cfg.alpha)
    for eta in [(2.0, 2.0), (10.0, 5.0), (400.0, 180.0), (6.5, 3.0)]:
        got = float(quadrature.kl_to_target(jnp.array(eta), target, loss_change, cfg.alpha))
        want = ref.kl(*eta)
        assert abs(got - want) <= 1e-5 * (1 + want), (eta, got, want)


# --------------------------------------------------------------------------- JAX variants
def trajectories(cfg, n_trials):
    """η after every slot of n_trials real runs (the shapes the samplers see), (n_trials, N_SLOTS, 2)."""
    prior = expfam.beta_natural(cfg.prior_a, cfg.prior_b)
    lik = likelihoods.noisy_bernoulli(cfg.epsilon)
    adjacency = jnp.asarray(graphs.complete(cfg.n_agents))

    def run(key):
        key_data, key_walk, key_learn = jax.random.split(key, 3)
        data = gfvl_local_iters.noisy_data(key_data, cfg)
        solve = gfvl.natgrad_solver(
            expfam.BETA, lik, data, cfg.alpha, cfg.rho, N_ITERS, cfg.n_samples, cfg.baseline, cfg.c
        )
        walk = gossip.mh_schedule(key_walk, adjacency, N_SLOTS)
        return gfvl.learn(key_learn, gfvl.init(prior, cfg.n_agents), walk, solve)[1]

    return jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(1), n_trials))


def sampling_only(family, n_samples):
    """The scan over slots and local iterations drawing only S variates and their scores per iteration."""

    def trial(key, etas):
        def slot(total, inputs):
            key_slot, eta = inputs

            def iteration(l, total):
                _, score = natgrad.sample_score(jax.random.fold_in(key_slot, l), family, eta, n_samples)
                return total + jnp.sum(score)

            return lax.fori_loop(0, N_ITERS, iteration, total), None

        return lax.scan(slot, jnp.zeros(()), (jax.random.split(key, N_SLOTS), etas))[0]

    return jax.jit(jax.vmap(trial))


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--loop-trials", type=int, default=4, help="NumPy reference trials timed per repeat")
    add_common_arguments(parser, "gfvl_nonconjugate", repeats=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.loop_trials, args.repeats = 64, 1, 1

    # The paper's settings (ρ = 5e-3, c = 0, mean loss), the workload these figures were measured on.
    settings = dict(gfvl_local_iters.Config.PRESETS["paper"], preset="paper")
    settings.update(local_iters=(N_ITERS,), total_iters=N_ITERS * N_SLOTS, record_every=20)
    cfg = gfvl_local_iters.Config(**settings)
    sweep = gfvl_local_iters.build(cfg)
    work = args.trials * N_SLOTS * N_ITERS  # trial·local iterations
    fn, fn_args = engine.testing.chunk_function(sweep.trial, sweep.points, args.trials, common=True)
    t_compile, compiled = compile_time(fn, *fn_args)
    kl = np.asarray(compiled(*fn_args)["kl"])
    assert np.all(np.isfinite(kl))

    etas = trajectories(cfg, args.trials)
    keys = jax.random.split(jax.random.key(2), args.trials)
    # jax.random.beta is ~10x slower: timed on at most 200 trials and scaled.
    variants = {
        "cheng": (expfam.BETA, args.trials),
        "jax_random_beta": (expfam.BETA._replace(name="beta (jax.random.beta)"), min(args.trials, 200)),
    }
    sampling = {}
    for name, (family, n) in variants.items():
        _, compiled_s = compile_time(sampling_only(family, cfg.n_samples), keys[:n], etas[:n])
        sampling[name] = (compiled_s, n)

    rng = np.random.default_rng(0)
    limit = float(np.log(2.0 / np.finfo(np.float32).eps) - 1.0)
    check_reference_kl(cfg, limit)
    # Interleaved repeats, so that load from other processes hits every variant alike.
    runs = {"jaxfed": [], "numpy": [], "numpy_sampling": [], **{name: [] for name in sampling}}
    for _ in range(args.repeats):
        runs["jaxfed"].append(median_time(lambda: compiled(*fn_args), 1))
        for name, (compiled_s, n) in sampling.items():
            runs[name].append(median_time(lambda c=compiled_s, n=n: c(keys[:n], etas[:n]), 1) * args.trials / n)
        timers = {"sampling": 0.0}
        start = time.perf_counter()
        for _ in range(args.loop_trials):
            numpy_trial(rng, cfg, limit, timers)
        elapsed = time.perf_counter() - start
        runs["numpy"].append(elapsed * args.trials / args.loop_trials)
        runs["numpy_sampling"].append(timers["sampling"] / elapsed)
    med = {name: float(np.median(v)) for name, v in runs.items()}
    t_jax, t_numpy = med["jaxfed"], med["numpy"]
    speedup = float(np.median(np.array(runs["numpy"]) / np.array(runs["jaxfed"])))  # per repeat, then median
    times = {name: med[name] for name in sampling}
    t_sampling = times["cheng"] * kl.shape[1] / args.trials  # per the engine's (padded) batch

    result = {
        "benchmark": "gfvl_nonconjugate",
        "machine": machine(),
        "sizes": {
            "trials": args.trials,
            "engine_batch": int(kl.shape[1]),
            "slots": N_SLOTS,
            "local_iters": N_ITERS,
            "samples": cfg.n_samples,
            "K": cfg.n_agents,
            "kl_records": int(kl.shape[2]),
            "loss_normalisation": cfg.loss_normalisation,
        },
        "compile_s": t_compile,
        "jaxfed_s": t_jax,
        "sampling_only_cheng_s": times["cheng"],
        "sampling_only_jax_random_beta_s": times["jax_random_beta"],
        "sampling_fraction": t_sampling / t_jax,
        "cheng_vs_jax_random_beta": times["jax_random_beta"] / times["cheng"],
        "numpy_loop_s": t_numpy,
        "numpy_loop_measured_trials_per_repeat": args.loop_trials,
        "repeats": args.repeats,
        "all_runs_s": runs,
        "numpy_sampling_fraction": med["numpy_sampling"],
        "throughput_trial_iterations_per_s": work / t_jax,
        "speedup_vs_numpy_loop": speedup,
    }
    result["summary"] = [
        {
            "case": "Fig. 4 workload (L = 5)",
            "throughput": work / t_jax,
            "unit": "trial·local-iteration/s",
            "vs_numpy": speedup,
            "vs_rng_limit": t_sampling / t_jax,
            "compile_s": t_compile,
        },
    ]
    print(f"{result['machine']['device']}  {args.trials} trials x {N_SLOTS} slots x L={N_ITERS} x S={cfg.n_samples}")
    print(f"compile              {t_compile:8.2f} s")
    print(f"jaxfed               {t_jax:8.2f} s   {work / t_jax:12.3e} trial·iterations/s")
    print(f"sampling only        {times['cheng']:8.2f} s   ({100 * t_sampling / t_jax:.0f}% of jaxfed)")
    slower = times["jax_random_beta"] / times["cheng"]
    print(f"  with random.beta   {times['jax_random_beta']:8.2f} s   ({slower:.1f}x Cheng)")
    print(
        f"NumPy loop           {t_numpy:8.2f} s   ratio {speedup:8.1f}x  (scaled, {args.loop_trials} trials/repeat;"
        f" {100 * med['numpy_sampling']:.0f}% in Generator.beta)"
    )
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
