"""Metropolis–Hastings random-walk scheduling of gossip agents (SPEC A2).

A token walks on the graph; the agent holding it at slot i is the scheduled agent k^(i).
From k the walk proposes a neighbour j uniformly and moves there with probability
min(1, deg(k)/deg(j)), else stays. The resulting transition matrix is
:func:`jaxfed.graphs.mh_transition_matrix`.

All functions are pure and jit/vmap-compatible; the adjacency may be a traced array.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "mh_schedule",
    "first_visit_slots",
    "cover_time",
    "hitting_time",
    "expected_hitting_times",
]


def _neighbour_table(adjacency: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Row k lists k's neighbours first (ascending), then the non-neighbours; plus deg(k)."""
    # A stable sort on (1 - A) puts the 1-entries of each row first in index order.
    table = jnp.argsort(1 - adjacency, axis=-1, stable=True).astype(jnp.int32)
    return table, jnp.sum(adjacency, axis=-1).astype(jnp.int32)


def mh_schedule(key: jax.Array, adjacency, n_slots: int) -> jax.Array:
    """Draws the MH random-walk schedule ``k^(1..n_slots)``.

    One uniform u per slot does both MH draws: with d = deg(k), the proposal is the
    ⌊u·d⌋-th neighbour j of k, and the fractional part v = u·d − ⌊u·d⌋ (uniform on [0, 1)
    and independent of the proposal) accepts the move iff v < min(1, d/deg(j)), i.e. v·deg(j) < d.
    The first agent is ⌊u_1·K⌋, uniform on the K agents.

    Args:
        key: a PRNG key.
        adjacency: (K, K) 0/1 adjacency of a connected graph (concrete or traced).
        n_slots: number of slots (static), >= 1.

    Returns:
        int32 array (n_slots,) of scheduled agents.
    """
    if n_slots < 1:
        raise ValueError(f"n_slots must be >= 1, got {n_slots}")
    adjacency = jnp.asarray(adjacency)
    n_agents = adjacency.shape[0]
    table, deg = _neighbour_table(adjacency)
    u = jax.random.uniform(key, (n_slots,))
    first = jnp.minimum((u[0] * n_agents).astype(jnp.int32), n_agents - 1)

    def move(k, u_slot):
        d = deg[k]
        x = u_slot * d.astype(u_slot.dtype)
        i = jnp.minimum(x.astype(jnp.int32), d - 1)
        j = table[k, i]
        accept = (x - i) * deg[j] < d
        k_next = jnp.where(accept, j, k)
        return k_next, k_next

    _, rest = lax.scan(move, first, u[1:])
    return jnp.concatenate([first[None], rest])


def first_visit_slots(schedule: jax.Array, n_agents: int) -> jax.Array:
    """Slot index (0-based) at which each agent is first scheduled; ``n_slots`` if never.

    Returns:
        int32 array (n_agents,).
    """
    n_slots = schedule.shape[-1]
    hit = schedule[:, None] == jnp.arange(n_agents, dtype=schedule.dtype)[None, :]
    slots = jnp.arange(n_slots, dtype=jnp.int32)[:, None]
    return jnp.min(jnp.where(hit, slots, n_slots), axis=0)


def cover_time(schedule: jax.Array, n_agents: int) -> jax.Array:
    """Number of slots (counting the first) until every agent has been scheduled; -1 if never.

    On the complete graph its mean is 1 + (K−1)·H_{K−1} (SPEC A2).
    """
    last = jnp.max(first_visit_slots(schedule, n_agents))
    return jnp.where(last < schedule.shape[-1], last + 1, -1).astype(jnp.int32)


def hitting_time(schedule: jax.Array, agent, after: int | jax.Array = 0) -> jax.Array:
    """Slots after slot ``after`` until ``agent`` is scheduled: min{m >= 1 : k^(after+m) = agent}.

    ``after`` is a 0-based slot index (may be traced); -1 if the agent is not scheduled again
    within the schedule.
    """
    n_slots = schedule.shape[-1]
    slots = jnp.arange(n_slots)
    hit = (schedule == agent) & (slots > after)
    first = jnp.min(jnp.where(hit, slots, n_slots))
    return jnp.where(first < n_slots, first - after, -1).astype(jnp.int32)


def expected_hitting_times(transition, target: int) -> jax.Array:
    """Exact expected hitting times h_k = E[min{m >= 1 : X_m = target} | X_0 = k] of a Markov chain.

    Solves h = 1 + P' h on the non-target states (P' = P with the target column zeroed), so that
    h_target is the mean return time. Used as the reference for Monte Carlo tests: on the
    complete graph with K agents, h_k = K − 1 for k ≠ target and h_target = K.
    """
    p = jnp.asarray(transition)
    n = p.shape[0]
    p_avoid = p.at[:, target].set(0.0)
    return jnp.linalg.solve(jnp.eye(n) - p_avoid, jnp.ones(n))
