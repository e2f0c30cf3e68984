"""Throughput of G-FVL on Bayesian logistic regression (the ``gfvl-logistic`` learning workload) against a
plain-NumPy reference of the same algorithm, and the fraction of time spent drawing the samples.

Workload (defaults of ``gfvl-logistic``, point "learn complete/iid"): K = 10 agents on the complete graph,
the breast-cancer training split (455 points, d = 11), mean-field Gaussian q, n_slots = 200 slots × L = 5
natural-gradient iterations × S = 20 REINFORCE samples (leave-one-out baseline), KL to the float64
centralised optimum after every slot. Throughput is counted in trial·local-iterations per second.

Measured in one run on the same machine:
- jaxfed: the experiment's trial, vmapped over trials and jitted (compile timed apart, median of repeats,
  blocked until ready), its trial axis sharded over the host devices: by default one per core, as
  ``jaxfed run`` makes them (``--devices N``: N), and the same on one device (one core) for comparison;
- random-number limit: the same scan over slots and local iterations drawing only the S × d standard
  normals of each iteration (``numerics.standard_normal``, as the kernel does);
- NumPy loop: the same algorithm and maths one trial at a time (``Generator.standard_normal``, the same
  closed-form Fisher solve, projection and KL), timed on a few trials and scaled;
- NumPy vectorised: the same algorithm vectorised over trials (``numpy_vectorised``: leading trial axis,
  one batched ``matmul`` for the logits), what an expert would write in NumPy; the fair reference.
Both NumPy versions run in float64 and report their time in sampling; their median final KL is reported
next to jaxfed's as a check that all run the same algorithm.

Timings need a quiet machine (nothing else running); ``--quick`` is a smoke run.

    python benchmarks/gfvl_logistic.py [--trials 256] [--loop-trials 2] [--vector-trials 64] [--devices N]
        [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _host_devices_from_argv(argv) -> int | None:
    """``--devices N`` must set XLA's host device count before JAX starts."""
    for i, arg in enumerate(argv):
        if arg == "--devices" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--devices="):
            return int(arg.split("=", 1)[1])
    return None


if __name__ == "__main__":
    from jaxfed.engine import devices as _devices

    if _host_devices_from_argv(sys.argv[1:]) is None:
        _devices.use_all_cores()  # as jaxfed run does
    else:
        _devices.ask_host_devices(_host_devices_from_argv(sys.argv[1:]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from common import add_common_arguments, machine, median_time, write_json  # noqa: E402

from jaxfed import numerics
from jaxfed.experiments import gfvl_logistic  # noqa: E402
from jaxfed.gfvl import graphs  # noqa: E402


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


def numpy_vectorised(rng, cfg, problem, n_trials, timers):
    """The same algorithm vectorised over trials, as an expert would write it in NumPy: every array carries
    a leading trial axis (T, ...), one ``standard_normal((T, S, d))`` per local iteration, the S × N logits
    of all trials by one batched ``matmul``; the Python loop runs over slots and local iterations only.
    Returns the KL (T, n_slots)."""
    k_agents, d, s_count = cfg.n_agents, cfg.n_features + 1, cfg.n_samples
    z, w = np.asarray(problem["data"]["iid"].z, float), np.asarray(problem["data"]["iid"].weight, float)
    x_t, sign = np.swapaxes(z[..., :-1], 1, 2), 2.0 * z[..., -1] - 1.0  # (K, d, N), (K, N)
    prior, target = np.asarray(problem["prior"], float), np.asarray(problem["target"]["iid"], float)
    min_precision = 1.0 / cfg.prior_var
    adjacency = graphs.complete(k_agents).astype(float)
    deg = adjacency.sum(1)
    cum = np.cumsum(adjacency / deg[:, None], axis=1)  # row k: the neighbour CDF of agent k
    trials = np.arange(n_trials)
    eta = np.tile(prior, (n_trials, 1))
    lam = np.zeros((n_trials, k_agents, 2 * d))
    k = rng.integers(k_agents, size=n_trials)
    p2 = -2 * target.reshape(d, 2)[:, 1]
    m2 = target.reshape(d, 2)[:, 0] / p2
    kl = np.empty((n_trials, cfg.n_slots))
    for i in range(cfg.n_slots):
        if i > 0:
            j = np.minimum((rng.random(n_trials)[:, None] >= cum[k]).sum(1), k_agents - 1)
            k = np.where(rng.random(n_trials) < np.minimum(1.0, deg[k] / deg[j]), j, k)
        xk, signk, wk = x_t[k], sign[k][:, None, :], w[k][:, None, :]
        cavity, start = eta - lam[trials, k], eta.copy()
        for _ in range(cfg.local_iters):
            pairs = eta.reshape(n_trials, d, 2)
            p = -2.0 * pairs[..., 1]
            m, sd = pairs[..., 0] / p, 1.0 / np.sqrt(p)
            t0 = time.perf_counter()
            eps = rng.standard_normal((n_trials, s_count, d))
            timers["sampling"] += time.perf_counter() - t0
            theta = m[:, None] + eps * sd[:, None]
            losses = (wk * np.logaddexp(0.0, -signk * np.matmul(theta, xk))).sum(-1)  # (T, S)
            centred = (losses - losses.mean(1, keepdims=True)) * s_count / (s_count - 1)
            es = eps * sd[:, None]
            g1 = np.einsum("ts,tsd->td", centred, es) / s_count
            g2 = np.einsum("ts,tsd->td", centred, 2 * m[:, None] * es + (eps * eps - 1) * (sd * sd)[:, None]) / s_count
            nat = np.stack([p * g1 + m * p * p * (2 * m * g1 - g2), p * p * (0.5 * g2 - m * g1)], -1)
            proposal = eta - cfg.rho * (nat.reshape(n_trials, -1) + cfg.alpha * (eta - cavity))
            ok = np.all(np.isfinite(proposal), axis=1)
            pairs = proposal.reshape(n_trials, d, 2)
            pairs[..., 1] = np.minimum(pairs[..., 1], -0.5 * min_precision)
            eta = np.where(ok[:, None], pairs.reshape(n_trials, -1), eta)
        lam[trials, k] += eta - start
        e1 = eta.reshape(n_trials, d, 2)
        p1 = -2 * e1[..., 1]
        kl[:, i] = 0.5 * np.sum((e1[..., 0] / p1 - m2) ** 2 * p2 + p2 / p1 - 1 - np.log(p2 / p1), axis=1)
    return kl


# --------------------------------------------------------------------------- jaxfed
def on_devices(fn, keys, n_devices: int):
    """``fn`` (vmapped over keys) on ``n_devices`` host devices, each running its own jitted copy on
    its share of the keys, as the engine does (one single-device program per device, dispatched
    asynchronously): (run() -> the outputs of every share, seconds to lower and compile them all)."""
    if len(keys) % n_devices:
        raise SystemExit(f"--trials {len(keys)} is not a multiple of the {n_devices} devices")
    start = time.perf_counter()
    shares = []
    for device, share in zip(jax.devices()[:n_devices], np.split(np.arange(len(keys)), n_devices)):
        placed = jax.device_put(keys[share], device)
        shares.append((jax.jit(fn).lower(placed).compile(), placed))
    seconds = time.perf_counter() - start
    return (lambda: [compiled(placed) for compiled, placed in shares]), seconds


def jaxfed_runner(cfg, problem, n_trials, n_devices=1):
    """The experiment's trial vmapped over trials, on ``n_devices`` host devices (:func:`on_devices`)."""
    trial = gfvl_logistic.make_trial(cfg, problem)
    point = {"mode": "learn", "adjacency": jnp.asarray(graphs.complete(cfg.n_agents)), "split": "iid"}
    keys = jax.random.split(jax.random.key(0), n_trials)
    return on_devices(jax.vmap(lambda key: trial(key, point)["kl"]), keys, n_devices)


def sampling_runner(cfg, problem, n_trials, n_devices=1):
    """Only the random numbers of the workload: the same scan over slots × local iterations drawing the
    S × d standard normals of each iteration (``numerics.standard_normal``, as the kernel does, from
    ``fold_in`` keys), summed so that nothing is dead code: the random-number limit of the kernel."""
    shape = (cfg.n_samples, cfg.n_features + 1)
    n_iters = cfg.n_slots * cfg.local_iters

    def one(key):
        def body(acc, i):
            return acc + jnp.sum(numerics.standard_normal(jax.random.fold_in(key, i), shape)), None

        return lax.scan(body, jnp.zeros(()), jnp.arange(n_iters))[0]

    return on_devices(jax.vmap(one), jax.random.split(jax.random.key(1), n_trials), n_devices)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--loop-trials", type=int, default=2, help="NumPy loop trials timed (then scaled)")
    parser.add_argument("--vector-trials", type=int, default=64, help="trials of the vectorised NumPy run")
    parser.add_argument(
        "--devices", type=int, default=None, help="host devices to shard jaxfed's trials over (default: one per core)"
    )
    add_common_arguments(parser, "gfvl_logistic", repeats=3)
    args = parser.parse_args(argv)
    # The recorded figures' workload (the experiment's defaults before its unlearning settings changed):
    # 200 slots at ρ = 0.03; ρ changes no cost, the slots set the work.
    overrides = {"n_slots": "20" if args.quick else "200", "rho": "0.03"}
    if args.quick:
        args.trials, args.loop_trials, args.vector_trials, args.repeats = 8, 1, 4, 1
    from jaxfed.experiment import make_config

    cfg = make_config(gfvl_logistic.Config, overrides)
    problem = gfvl_logistic.prepare(cfg)
    work = cfg.n_slots * cfg.local_iters  # local iterations per trial

    args.devices = args.devices or len(jax.devices())
    if args.devices > len(jax.devices()):
        raise SystemExit(f"--devices {args.devices}: only {len(jax.devices())} device(s) present")
    run, compile_s = jaxfed_runner(cfg, problem, args.trials, args.devices)
    t_jax = median_time(run, args.repeats)
    kl_jax = np.concatenate([np.asarray(x) for x in run()])
    one_run, _ = jaxfed_runner(cfg, problem, args.trials, 1)
    t_one = median_time(one_run, args.repeats)
    sample, _ = sampling_runner(cfg, problem, args.trials, args.devices)
    t_sample = median_time(sample, args.repeats)

    rng = np.random.default_rng(0)
    timers = {"sampling": 0.0}
    start = time.perf_counter()
    kl_np = np.array([numpy_trial(rng, cfg, problem, timers) for _ in range(args.loop_trials)])
    t_np_trial = (time.perf_counter() - start) / args.loop_trials

    vec_timers = {"sampling": 0.0}
    start = time.perf_counter()
    kl_vec = numpy_vectorised(np.random.default_rng(1), cfg, problem, args.vector_trials, vec_timers)
    t_vec = time.perf_counter() - start

    jax_rate = args.trials * work / t_jax
    np_rate = work / t_np_trial
    vec_rate = args.vector_trials * work / t_vec
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
        "numpy_vectorised": {
            "trials": args.vector_trials,
            "seconds": t_vec,
            "trial_local_iters_per_s": vec_rate,
            "sampling_fraction": vec_timers["sampling"] / t_vec,
            "median_final_kl": float(np.median(kl_vec[:, -1])),
        },
        "one_device": {"seconds": t_one, "trial_local_iters_per_s": args.trials * work / t_one},
        "speedup_vs_one_device": t_one / t_jax,
        "speedup": jax_rate / np_rate,
        "speedup_vs_vectorised": jax_rate / vec_rate,
        "devices": args.devices,
        "load_average": os.getloadavg(),
        "machine": machine(),
        "summary": [
            {
                "case": f"gfvl-logistic learning (d = {cfg.n_features + 1}, L = {cfg.local_iters})",
                "throughput": jax_rate,
                "unit": "trial·local-iteration/s",
                "vs_numpy": jax_rate / vec_rate,  # the expert's reference: NumPy vectorised over trials
                "vs_numpy_loop": jax_rate / np_rate,
                "vs_rng_limit": t_sample / t_jax,
                "compile_s": compile_s,
            }
        ],
    }
    print(
        f"jaxfed {jax_rate:.3g} trial·local-iter/s (compile {compile_s:.1f} s, sampling {t_sample / t_jax:.0%}); "
        f"NumPy loop {np_rate:.3g} ({jax_rate / np_rate:.1f}x), NumPy vectorised over trials {vec_rate:.3g} "
        f"({jax_rate / vec_rate:.1f}x, sampling {vec_timers['sampling'] / t_vec:.0%}); {args.devices} device(s), "
        f"{t_one / t_jax:.2f}x one device; "
        f"final KL median jaxfed {result['jaxfed']['median_final_kl']:.3g}, NumPy loop "
        f"{result['numpy']['median_final_kl']:.3g}, vectorised {result['numpy_vectorised']['median_final_kl']:.3g}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    write_json(args.out, result)
    return result


if __name__ == "__main__":
    main()
