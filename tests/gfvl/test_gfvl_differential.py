"""Differential tests of the G-FVL fast paths against the straightforward slot-by-slot computation.

Each shortcut is compared, in float64, with the computation it replaces: the step kernel run slot by
slot in NumPy (λ_k ← s_k/α at every visit, η = η_0 + Σ_k λ_k) and the Beta KL from its textbook
formula (SciPy), on adversarial cases — walks that do not cover the graph (star, line), K = 2,
α ≠ 1, agents holding no data, unlearning an agent never visited or visited last, the first and
the last slot — and on random (graph, slots, seed) drawn by Hypothesis.
"""

import functools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import betaln, digamma

from jaxfed import gfvl
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, natgrad, quadrature
from jaxfed.gfvl.expfam import BETA
from jaxfed.jaxcompat import enable_x64

PRIOR = np.array([2.0, 2.0])
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)


# --------------------------------------------------------------------------- references (NumPy float64)
def reference_etas(prior, stats, alpha, schedule, forget_agent=-1, request=0):
    """η after each slot, running the step kernel slot by slot: agent k sets λ_k = s_k/α; after the
    request, agent u = forget_agent instead removes λ_u (η ← η − λ_u, λ_u ← 0)."""
    eta, lam, out = np.array(prior, np.float64), np.zeros_like(stats, np.float64), []
    for slot, k in enumerate(np.asarray(schedule)):
        if slot >= request and k == forget_agent:
            eta, lam[k] = eta - lam[k], 0.0
        else:
            delta = stats[k] / alpha - lam[k]
            eta, lam[k] = eta + delta, lam[k] + delta
        out.append(eta.copy())
    return np.array(out)


def reference_kl(eta, target):
    """KL(Beta(a1, b1) ‖ Beta(a2, b2)), textbook formula."""
    (a1, b1), (a2, b2) = np.moveaxis(np.asarray(eta), -1, 0), target
    return (
        betaln(a2, b2)
        - betaln(a1, b1)
        + (a1 - a2) * digamma(a1)
        + (b1 - b2) * digamma(b1)
        + (a2 - a1 + b2 - b1) * digamma(a1 + b1)
    )


def _stats(seed, n_per_agent, theta=0.7):
    """Per-agent (n1, n0) with N_k from ``n_per_agent`` (zeros allowed)."""
    n = np.asarray(n_per_agent, np.float64)
    ones = np.random.default_rng(seed).binomial(n.astype(int), theta).astype(np.float64)
    return np.stack([ones, n - ones], axis=-1)


@functools.cache
def _fast_kl(n_slots: int):
    """The experiments' path: MH walk (visit counts carried in the scan) and the K-distinct-KL
    trajectory, with the carried counts and with counts recomputed from the schedule; jitted once per
    shape."""

    def run(key, adjacency, stats, alpha):
        walk = gossip.mh_walk(key, adjacency, n_slots)
        prior = jnp.asarray(PRIOR)
        kl = gfvl.conjugate_kl_trajectory(BETA, prior, stats, alpha, walk.schedule, walk.n_visited)
        return kl, gfvl.conjugate_kl_trajectory(BETA, prior, stats, alpha, walk.schedule), walk

    return jax.jit(run)


def _check_trajectory(adjacency, n_slots, stats, alpha, seed):
    target = PRIOR + stats.sum(0) / alpha  # the posterior given every agent's data
    with enable_x64(True):
        kl, kl_recount, walk = _fast_kl(n_slots)(
            jax.random.key(seed), jnp.asarray(adjacency), jnp.asarray(stats), alpha
        )
    schedule = np.asarray(walk.schedule)
    ref = reference_kl(reference_etas(PRIOR, stats, alpha, schedule), target)
    np.testing.assert_allclose(np.asarray(kl), ref, rtol=1e-7, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(kl), np.asarray(kl_recount))
    # exact 0 exactly from the slot at which every agent holding data has been visited
    holders = np.flatnonzero(stats.sum(1) > 0)
    seen = np.array([np.isin(holders, schedule[: i + 1]).all() for i in range(n_slots)])
    assert np.all((np.asarray(kl) == 0.0) == seen)
    return schedule


# --------------------------------------------------------------------------- K-distinct-KL trajectory
# Shapes (K, n_slots) are shared between the cases so that few compilations serve them all; every case
# compares every slot, the first and the last included.
@pytest.mark.parametrize(
    "graph, k, n_slots, alpha, n_per_agent",
    [
        ("star", 10, 12, 1.0, 100),  # the star needs ~2K slots at best: never covers
        ("line", 6, 12, 2.5, 40),  # a line of 6 rarely covers in 12 slots
        ("line", 2, 12, 0.5, 30),  # K = 2: one agent missing at the first slot
        ("line", 2, 12, 1.0, (30, 0)),  # K = 2, the other agent holds no data
        ("ring", 6, 12, 0.7, (10, 0, 25, 0, 3, 8)),  # agents without data, α ≠ 1
    ],
)
def test_kl_trajectory_matches_the_slot_by_slot_reference(graph, k, n_slots, alpha, n_per_agent):
    stats = _stats(k, np.broadcast_to(n_per_agent, (k,)))
    schedule = _check_trajectory(graphs.build(graph, k), n_slots, stats, alpha, seed=k + n_slots)
    if graph == "star" and n_slots == 12:
        assert len(set(schedule.tolist())) < k  # the case that matters: the walk has not covered the graph


@SETTINGS
@given(
    graph=st.sampled_from(["star", "line", "ring", "complete"]),
    k=st.sampled_from([2, 6, 10]),
    alpha=st.sampled_from([0.5, 1.0, 3.0]),
    empty=st.integers(0, 2**10 - 1),  # bit k set: agent k holds no data
    seed=st.integers(0, 2**31 - 1),
)
def test_kl_trajectory_property(graph, k, alpha, empty, seed):
    """Random graphs, data (some agents without any) and walks of 12 slots (covering or not)."""
    n_per_agent = np.where((empty >> np.arange(k)) & 1, 0, 20 + np.arange(k))
    _check_trajectory(graphs.build(graph, k), 12, _stats(seed, n_per_agent), alpha, seed)


# --------------------------------------------------------------------------- visit counts carried in the scan
_walk = jax.jit(lambda key, adjacency: gossip.mh_walk(key, adjacency, 50))  # one compilation per K


@SETTINGS
@given(graph=st.sampled_from(["star", "line", "ring"]), k=st.sampled_from([2, 5, 40]), seed=st.integers(0, 2**31 - 1))
def test_visit_counts_carried_in_the_scan_match_the_schedule(graph, k, seed):
    """Both branches of the carried visited set (bit mask for K <= 31, boolean vector above)."""
    adjacency = jnp.asarray(graphs.build(graph, k))
    walk = _walk(jax.random.key(seed), adjacency)
    schedule = np.asarray(walk.schedule)
    counts = [len(set(schedule[: i + 1].tolist())) for i in range(len(schedule))]
    np.testing.assert_array_equal(np.asarray(walk.n_visited), counts)


# --------------------------------------------------------------------------- closed-form Fisher solve
@SETTINGS
@given(
    log_a=st.floats(np.log(expfam.BETA_MIN_SHAPE), np.log(1e6)),
    log_b=st.floats(np.log(expfam.BETA_MIN_SHAPE), np.log(1e6)),
    v=st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3)),
)
def test_closed_form_fisher_solve_matches_a_30_digit_solve(log_a, log_b, v):
    """FIM(η)⁻¹ v in closed form against mpmath's trigamma and a 30-digit 2×2 solve, for shapes from
    the projection's floor to 1e6 (very unequal shapes included)."""
    a, b = np.exp(log_a), np.exp(log_b)
    with mp.workdps(30):
        ma, mb = mp.mpf(a), mp.mpf(b)
        tc = mp.psi(1, ma + mb)
        f11, f22, f12 = mp.psi(1, ma) - tc, mp.psi(1, mb) - tc, -tc
        det = f11 * f22 - f12 * f12
        ref = np.array([float((f22 * v[0] - f12 * v[1]) / det), float((f11 * v[1] - f12 * v[0]) / det)])
    with enable_x64(True):
        got = np.asarray(natgrad.fisher_solve(BETA, jnp.array([a, b]), jnp.asarray(v, jnp.float64)))
    scale = np.abs(ref).max() + 1e-300
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8 * scale)


# --------------------------------------------------------------------------- quadrature target
@jax.jit
def _quadrature_kl(pooled, alpha, q):
    """KL(Beta(q) ‖ q*) with q* ∝ Beta(prior) exp(−L/α), L the Bernoulli loss of the pooled counts."""
    lik = likelihoods.bernoulli()

    def loss_change(theta_ref, t):
        return lik.loss_change(pooled, theta_ref, t)

    target = quadrature.make_target(jnp.asarray(PRIOR), loss_change, alpha)
    return quadrature.kl_to_target(q, target, loss_change, alpha)


@pytest.mark.parametrize(
    "n_per_agent, normalisation, alpha",
    [((100, 0, 100), "sum", 1.0), ((40, 0), "mean", 2.0), ((0, 7), "mean", 0.5), ((100,) * 10, "mean", 1.0)],
)
def test_quadrature_target_in_the_conjugate_case_is_the_closed_form_posterior(n_per_agent, normalisation, alpha):
    """With ε = 0 the quadrature target is the Beta posterior η_0 + Σ_k w_k s_k/α: its KL from the
    prior (the first slot's q before any visit) and from the posterior itself (the last slot after
    covering) must be the closed-form values, with agents of N_k = 0 and the mean loss."""
    n = np.asarray(n_per_agent, np.float64)
    weight = np.asarray(likelihoods.loss_weight(normalisation, n))
    assert np.all(np.isfinite(weight))
    data = _stats(3, n) * weight[:, None]
    posterior = PRIOR + data.sum(0) / alpha
    with enable_x64(True):
        got = [float(_quadrature_kl(jnp.asarray(data.sum(0)), alpha, jnp.asarray(q))) for q in (PRIOR, posterior)]
    np.testing.assert_allclose(got[0], reference_kl(PRIOR, posterior), rtol=1e-8)
    assert got[1] < 1e-9


# --------------------------------------------------------------------------- conjugate unlearning
@pytest.mark.parametrize(
    "schedule, at, case",
    [
        ([0, 1, 2, 0, 3, 2], 3, "u never visited before the request, scheduled after it"),
        ([0, 1, 3, 2, 3, 0], 4, "u visited last before the request"),
        ([3, 0, 1, 2, 3], 0, "request before the first slot, u scheduled at it"),
        ([0, 3, 1, 2, 3], 5, "request after the last slot: nothing forgotten"),
        ([0, 1, 2, 1, 0], 2, "u never scheduled at all"),
        ([0, 1], 1, "K agents, two slots, u absent"),
    ],
)
def test_conjugate_unlearning_matches_the_slot_by_slot_reference(schedule, at, case):
    request = at  # slots before the unlearning request
    k, u, alpha = 4, 3, 1.5
    stats = _stats(5, (30, 0, 20, 50))  # agent 1 holds no data
    rest = np.delete(stats, u, axis=0)
    with enable_x64(True):
        solve = gfvl.conjugate_solver(jnp.asarray(stats), alpha)
        state = gfvl.init(jnp.asarray(PRIOR), k)
        _, etas = gfvl.unlearn(jax.random.key(0), state, jnp.asarray(schedule, jnp.int32), solve, u, request)
        kl = np.asarray(expfam.kl(BETA, etas, gfvl.posterior_eta(jnp.asarray(PRIOR), jnp.asarray(rest), alpha)))
    ref = reference_etas(PRIOR, stats, alpha, schedule, u, request)
    np.testing.assert_allclose(np.asarray(etas), ref, rtol=1e-13, atol=0)
    # the retrained answer p(θ | D_−u) is exact once u's factor is gone and every other holder visited
    target = PRIOR + rest.sum(0) / alpha
    np.testing.assert_allclose(kl, reference_kl(ref, target), rtol=1e-7, atol=1e-12)
    for i in range(len(schedule)):
        seen = schedule[: i + 1]
        u_gone = u not in seen[:request] or u in seen[request:]
        others = all(j in seen for j in range(k) if j != u and stats[j].sum() > 0)
        assert (kl[i] < 1e-12) == (u_gone and others), (case, i)
