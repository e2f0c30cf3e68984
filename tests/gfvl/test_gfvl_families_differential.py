"""Conjugate G-FVL with every family (Beta–Bernoulli, Normal–Normal, Gamma–Poisson,
Dirichlet–Categorical): the step kernel and the fast trajectory path against a slot-by-slot float64
NumPy reference, on adversarial cases (walks that do not cover, K = 2, α ≠ 1, agents with N_k = 0),
and exactness at cover time: the KL is exactly 0 from the slot at which every agent holding data
has been visited (fast path), and 0 to rounding through the step kernel."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import digamma, gammaln

from jaxfed import gfvl, scenarios
from jaxfed.gfvl import expfam, gossip, graphs
from jaxfed.jaxcompat import enable_x64

PRIORS = {
    "beta": np.array([2.0, 2.0]),
    "normal": np.array([0.0, -0.05]),  # N(0, 10)
    "gamma": np.array([2.0, -1.0]),  # Gamma(2, 1)
    "dirichlet": np.array([1.0, 1.0, 1.0]),
}
THETA = {"beta": 0.7, "normal": 1.3, "gamma": 4.0, "dirichlet": np.array([0.2, 0.3, 0.5])}


# --------------------------------------------------------------------------- references (NumPy float64)
def reference_etas(prior, stats, alpha, schedule):
    """η after each slot by the step kernel, slot by slot: agent k sets λ_k = s_k/α."""
    eta, lam, out = np.array(prior, np.float64), np.zeros_like(stats), []
    for k in np.asarray(schedule):
        delta = stats[k] / alpha - lam[k]
        eta, lam[k] = eta + delta, lam[k] + delta
        out.append(eta.copy())
    return np.array(out)


def reference_kl(name, eta, target):
    """Textbook KL(q_η ‖ q_target) in float64 (accurate enough here: the test KLs are >= 1e-6)."""
    e1, e2 = np.asarray(eta, np.float64), np.broadcast_to(np.asarray(target, np.float64), np.shape(eta))
    if name == "normal":
        p1, p2 = -2 * e1[..., 1], -2 * e2[..., 1]
        m1, m2 = e1[..., 0] / p1, e2[..., 0] / p2
        return 0.5 * ((m1 - m2) ** 2 * p2 + p2 / p1 - 1 - np.log(p2 / p1))
    if name == "gamma":
        a1, b1, a2, b2 = e1[..., 0], -e1[..., 1], e2[..., 0], -e2[..., 1]
        return (
            (a1 - a2) * digamma(a1) - gammaln(a1) + gammaln(a2) + a2 * (np.log(b1) - np.log(b2)) + a1 * (b2 - b1) / b1
        )
    a0, b0 = e1.sum(-1), e2.sum(-1)
    return (
        gammaln(a0)
        - gammaln(e1).sum(-1)
        - gammaln(b0)
        + gammaln(e2).sum(-1)
        + ((e1 - e2) * (digamma(e1) - digamma(a0)[..., None])).sum(-1)
    )


def _stats(name, seed, sizes, spread=0.5):
    """Heterogeneous data drawn in NumPy: θ_k around the global θ (log/logit scale, spread τ), N_k from
    ``sizes`` (zeros allowed), statistics in the family's natural coordinates."""
    rng = np.random.default_rng(seed)
    n = np.asarray(sizes, np.float64)
    eps = rng.normal(size=(len(n),) + np.shape(THETA[name]))
    if name == "beta":
        theta = 1 / (1 + np.exp(-(np.log(THETA[name] / (1 - THETA[name])) + spread * eps)))
        ones = rng.binomial(n.astype(int), theta)
        return np.stack([ones, n - ones], -1).astype(np.float64)
    if name == "normal":  # σ² = 1
        total = rng.normal(n * (THETA[name] + spread * eps), np.sqrt(n))
        return np.stack([total, -0.5 * n], -1)
    if name == "gamma":
        return np.stack([rng.poisson(n * THETA[name] * np.exp(spread * eps)), -n], -1).astype(np.float64)
    p = THETA[name] * np.exp(spread * eps)
    return np.array([rng.multinomial(int(m), q / q.sum()) for m, q in zip(n, p)], np.float64)


@functools.cache
def _paths(name: str, n_slots: int):
    """The experiments' path (MH walk with carried visit counts, K-distinct-KL trajectory) and the step
    kernel (:func:`gfvl.learn` with :func:`gfvl.conjugate_solver`), jitted once per family and shape."""
    family = expfam.get(name)

    def run(key, adjacency, stats, alpha, prior):
        walk = gossip.mh_walk(key, adjacency, n_slots)
        fast = gfvl.conjugate_kl_trajectory(family, prior, stats, alpha, walk.schedule, walk.n_visited)
        state = gfvl.init(prior, stats.shape[0])
        _, etas = gfvl.learn(key, state, walk.schedule, gfvl.conjugate_solver(stats, alpha))
        kernel = expfam.kl(family, etas, gfvl.posterior_eta(prior, stats, alpha))
        return fast, kernel, etas, walk.schedule

    return jax.jit(run)


# Two shapes (K = 6 and K = 2, 8 slots) keep the compilations to two per family.
CASES = [
    ("star", 6, 1.0, (100,) * 6),  # the star needs 2K − 3 = 9 slots at best: never covers in 8
    ("line", 2, 0.5, (30, 45)),  # K = 2, α < 1
    ("line", 2, 1.0, (30, 0)),  # K = 2, the other agent holds no data
    ("ring", 6, 2.5, (10, 0, 25, 0, 3, 80)),  # agents without data, α > 1, unequal N_k
    ("complete", 6, 0.7, (5, 50, 0, 20, 20, 1)),
]


# Beta–Bernoulli is also covered by tests/gfvl/test_gfvl_differential.py; here it runs with the slow tests.
@pytest.mark.parametrize("name", [pytest.param("beta", marks=pytest.mark.slow), "normal", "gamma", "dirichlet"])
def test_fast_path_and_step_kernel_match_the_reference_and_are_exact_at_cover_time(name):
    n_slots = 8
    covered_some = False
    for case, (graph, k, alpha, sizes) in enumerate(CASES):
        stats = _stats(name, seed=case, sizes=sizes)
        target = PRIORS[name] + stats.sum(0) / alpha  # the posterior given every agent's data
        with enable_x64(True):
            fast, kernel, etas, schedule = _paths(name, n_slots)(
                jax.random.key(case),
                jnp.asarray(graphs.build(graph, k)),
                jnp.asarray(stats),
                alpha,
                jnp.asarray(PRIORS[name]),
            )
        schedule, fast, kernel = np.asarray(schedule), np.asarray(fast), np.asarray(kernel)
        ref_etas = reference_etas(PRIORS[name], stats, alpha, schedule)
        np.testing.assert_allclose(np.asarray(etas), ref_etas, rtol=1e-13, atol=1e-13)
        ref = reference_kl(name, ref_etas, target)
        holders = np.flatnonzero(np.abs(stats).sum(1) > 0)
        seen = np.array([np.isin(holders, schedule[: i + 1]).all() for i in range(n_slots)])
        # before cover: both paths equal the reference at every slot, the first and the last included
        np.testing.assert_allclose(fast[~seen], ref[~seen], rtol=1e-7)
        np.testing.assert_allclose(kernel[~seen], ref[~seen], rtol=1e-7)
        assert np.all(ref[~seen] > 1e-6), (graph, ref[~seen].min())
        # at and after cover: the fast path is exactly 0, the step kernel 0 to rounding of Σ_k λ_k
        assert np.all((fast == 0.0) == seen), (graph, fast)
        assert np.all(kernel[seen] < 1e-20), (graph, kernel[seen].max())
        covered_some |= bool(seen.any())
        if graph == "star":
            assert not seen.any()
    assert covered_some


@pytest.mark.slow
@pytest.mark.parametrize("name", ["normal", "gamma", "dirichlet"])
def test_float32_fast_path_is_exact_at_cover_time(name):
    """In float32 the fast path is exactly 0 from the covering slot and positive before it."""
    stats = _stats(name, seed=7, sizes=(40, 0, 60, 10)).astype(np.float32)
    kl, _, _, schedule = _paths(name, 8)(
        jax.random.key(7),
        jnp.asarray(graphs.build("complete", 4)),
        jnp.asarray(stats),
        1.0,
        jnp.asarray(PRIORS[name], jnp.float32),
    )
    schedule = np.asarray(schedule)
    seen = np.array([np.isin([0, 2, 3], schedule[: i + 1]).all() for i in range(8)])
    assert seen.any() and not seen.all()
    assert np.all((np.asarray(kl) == 0.0) == seen)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: gfvl.conjugate_kl_trajectory(expfam.NORMAL, jnp.ones(3), jnp.ones((2, 2)), 1.0, jnp.zeros(4, int)),
            r"prior_eta must be an array of shape \(\.\.\., 2\) for family 'normal', got \(3,\)",
        ),
        (
            lambda: gfvl.conjugate_kl_trajectory(
                expfam.GAMMA, jnp.array([2.0, 1.0]), jnp.ones((2, 2)), 1.0, jnp.zeros(4, int)
            ),
            r"prior_eta must be inside the natural-parameter domain of 'gamma' \(where its Fisher matrix is positive definite\), got \[2.0, 1.0\]",
        ),
        (
            lambda: gfvl.conjugate_kl_trajectory(
                expfam.dirichlet(3), jnp.ones(3), jnp.ones((2, 2)), 1.0, jnp.zeros(4, int)
            ),
            r"agent_stats must have shape \(K, 3\) for family 'dirichlet', got \(2, 2\)",
        ),
        (
            lambda: scenarios.conjugate_stats(jax.random.key(0), "gamma", jnp.ones(3), jnp.ones(2)),
            r"sizes must have shape \(3,\) \(one entry per agent\), got \(2,\)",
        ),
        (
            lambda: scenarios.agent_thetas(jax.random.key(0), "poisson", 1.0, 3, 0.5),
            "^unknown conjugate model 'poisson'; choose one of: beta, normal, gamma, dirichlet",
        ),
    ],
)
def test_bad_shapes_and_names_are_one_line_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
