"""Gossip-based federated variational learning (G-FVL), SPEC A3–A4.

The variational posterior is q(θ) ∝ p_0(θ) Π_k t_k(θ) with t_k = exp(λ_kᵀT(θ)) in the prior's
exponential family, so q has natural parameter η = η_0 + Σ_k λ_k. The state is η (it travels
with the token) and the per-agent factors λ_k (they stay at the agents). At each slot the
scheduled agent k

1. forms the cavity η_{−k} = η − λ_k,
2. solves its local free energy  min_q E_q[L_k] + α KL(q ‖ q_{η_{−k}})  → η_new,
3. updates λ_k ← λ_k + (η_new − η).

Step 2 is a *local solver* ``solve(key, agent, state) -> Δ`` returning the change Δ = η_new − η,
which steps 2–3 add to both η and λ_k. Returning the increment rather than η_new keeps the
conjugate case exact in floating point: :func:`conjugate_solver` returns Δ = s_k/α − λ_k (SPEC A4),
which is exactly s_k/α on the first visit and exactly 0 on every repeat visit.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxfed import expfam, gossip

__all__ = [
    "GFVLState",
    "LocalSolver",
    "init",
    "step",
    "learn",
    "conjugate_solver",
    "posterior_eta",
    "conjugate_kl_trajectory",
]


class GFVLState(NamedTuple):
    """Protocol state of G-FVL."""

    eta: jax.Array  # (P,) natural parameter of the global q; travels with the token
    lam: jax.Array  # (K, P) approximate-likelihood factors λ_k; λ_k stays at agent k


LocalSolver = Callable[[jax.Array, jax.Array, GFVLState], jax.Array]
"""``solve(key, agent, state) -> Δ``: step 2 for the scheduled agent, as the increment η_new − η.

The cavity is ``state.eta - state.lam[agent]``."""


def init(prior_eta: jax.Array, n_agents: int) -> GFVLState:
    """q^(0) = p_0: η = η_0 and every λ_k = 0."""
    prior_eta = jnp.asarray(prior_eta)
    return GFVLState(eta=prior_eta, lam=jnp.zeros((n_agents,) + prior_eta.shape, prior_eta.dtype))


def step(key: jax.Array, state: GFVLState, agent: jax.Array, solve: LocalSolver) -> GFVLState:
    """One slot of G-FVL for the scheduled ``agent`` (SPEC A3): η ← η + Δ, λ_k ← λ_k + Δ."""
    delta = solve(key, agent, state)
    return GFVLState(eta=state.eta + delta, lam=state.lam.at[agent].add(delta))


def learn(key: jax.Array, state: GFVLState, schedule: jax.Array, solve: LocalSolver):
    """Runs :func:`step` over a schedule with ``lax.scan``.

    Returns:
        (final state, η after each slot of shape (n_slots, P)).
    """
    keys = jax.random.split(key, schedule.shape[0])

    def body(s, inputs):
        k, agent = inputs
        s = step(k, s, agent, solve)
        return s, s.eta

    return lax.scan(body, state, (keys, schedule))


def conjugate_solver(agent_stats: jax.Array, alpha) -> LocalSolver:
    """Exact local update of the conjugate case (SPEC A4): η_new = η_{−k} + s_k/α, i.e. Δ = s_k/α − λ_k.

    Args:
        agent_stats: (K, P) per-agent sums of the likelihood's natural statistics Σ_n [s(z_{k,n}), 1]
            expressed in the prior family's natural coordinates (e.g. (Σz, Σ(1−z)) for
            Beta–Bernoulli, see :func:`jaxfed.likelihoods.bernoulli_beta_stats`).
        alpha: temperature α > 0.
    """

    def solve(key, agent, state):
        del key
        return agent_stats[agent] / alpha - state.lam[agent]

    return solve


def posterior_eta(prior_eta: jax.Array, agent_stats: jax.Array, alpha) -> jax.Array:
    """Natural parameter of the generalized posterior in the conjugate case: η_0 + Σ_k s_k/α."""
    return prior_eta + jnp.sum(agent_stats, axis=-2) / alpha


def conjugate_kl_trajectory(
    family: expfam.ExpFamily,
    prior_eta: jax.Array,
    agent_stats: jax.Array,
    alpha,
    schedule: jax.Array,
    target_eta: jax.Array | None = None,
) -> jax.Array:
    """KL(q^(i) ‖ target) after each slot of conjugate G-FVL, without running the slots.

    In the conjugate case λ_k = s_k/α from agent k's first visit on and repeat visits change
    nothing (SPEC A4), so q^(i) depends only on how many agents have been visited by slot i:
    η after m first visits is η_0 + Σ_{first m visited} s_k/α. This evaluates the K + 1 distinct
    KL values and indexes them by the visit count of each slot: O(K) divergences per trial instead
    of O(n_slots). It equals running :func:`learn` with :func:`conjugate_solver` and taking the KL
    of every slot (tests/test_gfvl.py checks this).

    Args:
        family: the prior's exponential family.
        prior_eta: (P,) η_0.
        agent_stats: (K, P) per-agent statistics (see :func:`conjugate_solver`).
        alpha: temperature.
        schedule: (n_slots,) scheduled agents.
        target_eta: (P,) the reference; default the exact posterior :func:`posterior_eta`.

    Returns:
        (n_slots,) KL(q^(i) ‖ target), i = 1..n_slots.
    """
    n_agents = agent_stats.shape[0]
    if target_eta is None:
        target_eta = posterior_eta(prior_eta, agent_stats, alpha)
    first = gossip.first_visit_slots(schedule, n_agents)
    order = jnp.argsort(first)
    after_m_visits = prior_eta + jnp.concatenate(
        [jnp.zeros_like(prior_eta)[None], jnp.cumsum(agent_stats[order] / alpha, axis=0)]
    )  # (K + 1, P)
    kl_after_m = expfam.kl(family, after_m_visits, target_eta)
    slots = jnp.arange(schedule.shape[0], dtype=first.dtype)
    n_visited = jnp.sum(first[None, :] <= slots[:, None], axis=1)
    return kl_after_m[n_visited]
