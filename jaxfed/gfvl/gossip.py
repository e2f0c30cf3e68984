"""Metropolis–Hastings random-walk scheduling of gossip agents.

A token walks on the graph; the agent holding it at slot i is the scheduled agent k^(i).
From k the walk proposes a neighbour j uniformly and moves there with probability
min(1, deg(k)/deg(j)), else stays. The resulting transition matrix is
:func:`jaxfed.gfvl.graphs.mh_transition_matrix`.

All functions are pure and jit/vmap-compatible; the adjacency may be a traced array.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import validation

__all__ = [
    "Walk",
    "mh_walk",
    "mh_schedule",
    "cover_time",
    "hitting_time",
    "expected_hitting_times",
    "hitting_time_matrix",
    "expected_cover_time",
    "cover_time_bounds",
    "EXACT_COVER_MAX_AGENTS",
]


def _neighbour_table(adjacency: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Row k lists k's neighbours first (ascending), then the non-neighbours; plus deg(k)."""
    # A stable sort on (1 - A) puts the 1-entries of each row first in index order.
    table = jnp.argsort(1 - adjacency, axis=-1, stable=True).astype(jnp.int32)
    return table, jnp.sum(adjacency, axis=-1).astype(jnp.int32)


class Walk(NamedTuple):
    """An MH schedule with the running count of distinct agents visited."""

    schedule: jax.Array  # (n_slots,) int32 scheduled agent k^(i)
    n_visited: jax.Array  # (n_slots,) int32 distinct agents among k^(1..i)


PACKED_MAX_AGENTS = 32767
"""The most agents for which :func:`mh_walk` packs a proposal and its degree, and a slot's agent and
visit count, into one int32 (j + 2^16·deg(j) < 2^31 needs j < 2^16 and deg(j) < 2^15; likewise
k + 2^16·count with count ≤ K)."""

_PACK = 1 << 16

ACCELERATOR_UNROLL = 10
"""Slots per loop iteration of :func:`mh_walk`'s scan on a GPU or TPU (``lax.scan``'s ``unroll``) when
none is given. There a loop iteration costs a fixed launch and loop-condition overhead whatever the
batch width, which a 300-slot walk pays 300 times per micro-batch; unrolled, 30 times. A CPU's loop
iteration costs only its work, and unrolling made the walk slower there (XLA's CPU code runs each
operation over the micro-batch in turn, and a longer body does not fit the cache as well; measured in
docs/performance.md), so a CPU keeps one slot per iteration."""


def mh_walk(key: jax.Array, adjacency, n_slots: int, unroll: int | None = None) -> Walk:
    """Draws the MH random-walk schedule ``k^(1..n_slots)`` and counts the agents visited so far.

    One uniform u per slot does both MH draws: with d = deg(k), the proposal is the
    ⌊u·d⌋-th neighbour j of k, and the fractional part v = u·d − ⌊u·d⌋ (uniform on [0, 1)
    and independent of the proposal) accepts the move iff v < min(1, d/deg(j)), i.e. v·deg(j) < d.
    The first agent is ⌊u_1·K⌋, uniform on the K agents. The visited set is carried in the scan
    as a bit mask (K <= 31) or a boolean vector, a few integer operations per slot; this is
    cheaper than recovering it from the schedule afterwards (:func:`first_visit_slots`).

    A slot reads one entry, at the flat index k·K + i, of a (K·K,) table packing the proposal j and
    deg(j) into one int32, j + 2^16·deg(j), the scan carries deg(k) with k, and each slot stacks one
    int32, k + 2^16·(agents visited), unpacked after the loop (K ≤ :data:`PACKED_MAX_AGENTS`; two
    tables and two outputs beyond). So a slot does one gather and one stacked write, where looking up
    deg(k), j and deg(j) apart took three gathers; the arithmetic, and so the schedule, is the same
    bit for bit (the packed table and output made the walk faster: docs/performance.md). How many slots a loop iteration takes changes the speed only: every slot does the same
    operations.

    Args:
        key: a PRNG key.
        adjacency: (K, K) 0/1 adjacency of a connected graph (concrete or traced).
        n_slots: number of slots (static), >= 1.
        unroll: slots per iteration of the scan (static), >= 1; by default 1 on a CPU and
            :data:`ACCELERATOR_UNROLL` on other platforms (chosen when the program is lowered).

    Returns:
        The walk, a :class:`Walk`: (n_slots,) int32 ``schedule`` and (n_slots,) int32 ``n_visited``.

    Raises:
        ValueError: ``n_slots`` or ``unroll`` is not a positive integer.
    """
    validation.integer("n_slots", n_slots, 1)
    if unroll is not None:
        validation.integer("unroll", unroll, 1)
    adjacency = jnp.asarray(adjacency)
    n_agents = adjacency.shape[0]
    table, deg = _neighbour_table(adjacency)
    lookup, emit, unpack = _walk_tables(table, deg, n_agents)
    u = jax.random.uniform(key, (n_slots,))
    first = jnp.minimum((u[0] * n_agents).astype(jnp.int32), n_agents - 1)
    mark, visited0 = _visited_set(first, n_agents)
    move = _mh_move(n_agents, lookup, mark, emit)

    def walk(unroll):
        return lambda carry, slots: lax.scan(move, carry, slots, unroll=unroll)[1]

    carry = (first, deg[first], visited0, jnp.int32(1))
    if unroll is None:
        out = lax.platform_dependent(carry, u[1:], cpu=walk(1), default=walk(ACCELERATOR_UNROLL))
    else:
        out = walk(unroll)(carry, u[1:])
    rest, counts = unpack(out)
    return Walk(
        schedule=jnp.concatenate([first[None], rest]),
        n_visited=jnp.concatenate([jnp.ones((1,), jnp.int32), counts]),
    )


def _walk_tables(table: jax.Array, deg: jax.Array, n_agents: int):
    """:func:`mh_walk`'s reads and writes, ``(lookup, emit, unpack)``: ``lookup(k·K + i)`` is the proposal j
    = the i-th entry of k's row of ``table`` and deg(j); ``emit(k, count)`` is what a slot stacks and
    ``unpack`` turns the stacked outputs back into (agents, counts). Up to :data:`PACKED_MAX_AGENTS`, one
    packed int32 each (j + 2^16·deg(j) in one (K·K,) table, k + 2^16·count per slot); beyond, two of each."""
    if n_agents <= PACKED_MAX_AGENTS:
        packed = (table + deg[table] * _PACK).reshape(-1)  # at k·K + i: j + 2^16·deg(j)

        def lookup(flat):
            entry = packed[flat]
            return entry & (_PACK - 1), entry >> 16

        def emit(k, count):  # one stacked output per slot: k + 2^16·count (count <= K)
            return k + count * _PACK

        def unpack(out):
            return out & (_PACK - 1), out >> 16

        return lookup, emit, unpack
    proposal, proposal_deg = table.reshape(-1), deg[table].reshape(-1)

    def lookup_apart(flat):
        return proposal[flat], proposal_deg[flat]

    def emit_apart(k, count):
        return k, count

    def unpack_apart(out):
        return out

    return lookup_apart, emit_apart, unpack_apart


def _visited_set(first: jax.Array, n_agents: int):
    """``(mark, visited0)``: the visited set holding only ``first``, as a bit mask (K <= 31) or a boolean
    vector, and ``mark(visited, k) -> (visited with k, whether k is new)``."""
    if n_agents <= 31:

        def mark(visited, k):
            bit = jnp.left_shift(jnp.int32(1), k)
            return visited | bit, (visited & bit) == 0

        return mark, jnp.left_shift(jnp.int32(1), first)

    def mark_vector(visited, k):
        return visited.at[k].set(True), ~visited[k]

    return mark_vector, jnp.zeros(n_agents, bool).at[first].set(True)


def _mh_move(n_agents: int, lookup, mark, emit):
    """One slot of :func:`mh_walk`'s scan: ``move((k, deg(k), visited, count), u) -> (carry, emit(k', count'))``,
    the proposal and its acceptance both from the one uniform u."""

    def move(carry, u_slot):
        k, d, visited, count = carry  # d = deg(k)
        x = u_slot * d.astype(u_slot.dtype)
        # (An isolated k, d = 0, reads the entry before its row, wrapping at k = 0: any j, refused
        # since 1·deg(j) < 0 never holds.)
        i = jnp.minimum(x.astype(jnp.int32), d - 1)
        j, d_j = lookup(k * n_agents + i)
        accept = (x - i) * d_j < d
        k_next, d_next = jnp.where(accept, j, k), jnp.where(accept, d_j, d)
        visited, new = mark(visited, k_next)
        count = count + new.astype(jnp.int32)
        return (k_next, d_next, visited, count), emit(k_next, count)

    return move


def mh_schedule(key: jax.Array, adjacency, n_slots: int) -> jax.Array:
    """The schedule of :func:`mh_walk` alone: int32 (n_slots,) scheduled agents.

    (The visit count is dead code here and removed by XLA.)

    Args:
        key: a PRNG key (traced).
        adjacency: (K, K) 0/1 adjacency of a connected graph (concrete or traced).
        n_slots: number of slots (static), >= 1.

    Returns:
        (n_slots,) int32 scheduled agents.
    """
    return mh_walk(key, adjacency, n_slots).schedule


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

    On the complete graph its mean is 1 + (K−1)·H_{K−1}.

    Args:
        schedule: (n_slots,) int32 scheduled agents (e.g. from :func:`mh_schedule`).
        n_agents: K (static).

    Returns:
        int32 scalar: the cover time in slots, or −1.

    Examples:
        >>> import jax.numpy as jnp
        >>> int(cover_time(jnp.array([0, 1, 1, 2, 0]), 3))
        4
    """
    last = jnp.max(first_visit_slots(schedule, n_agents))
    return jnp.where(last < schedule.shape[-1], last + 1, -1).astype(jnp.int32)


def hitting_time(schedule: jax.Array, agent, after: int | jax.Array = 0) -> jax.Array:
    """Slots after slot ``after`` until ``agent`` is scheduled: min{m >= 1 : k^(after+m) = agent}.

    ``after`` is a 0-based slot index (may be traced); -1 if the agent is not scheduled again
    within the schedule.

    Args:
        schedule: (n_slots,) int32 scheduled agents.
        agent: the agent to hit (may be traced).
        after: the 0-based slot to count from (may be traced).

    Returns:
        int32 scalar: the hitting time in slots, or −1.
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

    Args:
        transition: (K, K) transition matrix P.
        target: the target state's index (static).

    Returns:
        (K,) expected hitting times, a JAX array.
    """
    p = jnp.asarray(transition)
    n = p.shape[0]
    p_avoid = p.at[:, target].set(0.0)
    return jnp.linalg.solve(jnp.eye(n) - p_avoid, jnp.ones(n))


# --------------------------------------------------------------------------- exact references (host, float64)
EXACT_COVER_MAX_AGENTS = 16
"""Largest K for which :func:`expected_cover_time` solves the chain on (visited set, position): K·2^(K−1)
states, 2^K small linear systems (K = 16: under a second)."""


def _transition64(transition) -> np.ndarray:
    p = np.asarray(transition, np.float64)
    validation.check("transition", p.shape, p.ndim == 2 and p.shape[0] == p.shape[1], "a square (K, K) matrix")
    return p


def hitting_time_matrix(transition) -> np.ndarray:
    """H[i, j] = E[min{m >= 1 : X_m = j} | X_0 = i] for every pair, in float64 on the host (the
    diagonal holds the mean return times, K for a doubly stochastic P). :func:`expected_hitting_times`
    is the same per target, in JAX.

    Args:
        transition: (K, K) transition matrix P.

    Returns:
        (K, K) float64 NumPy array H.
    """
    p = _transition64(transition)
    n = p.shape[0]
    h = np.empty((n, n))
    for j in range(n):
        avoid = p.copy()
        avoid[:, j] = 0.0
        h[:, j] = np.linalg.solve(np.eye(n) - avoid, np.ones(n))
    return h


def expected_cover_time(transition, start=None) -> float:
    """Exact expected cover time of a Markov chain in slots, counting the first: E[min{i : {X_1 … X_i}
    = every state}], X_1 = ``start`` or, when None, uniform on the K states (as :func:`mh_walk` starts).

    The chain on (visited set S, position v ∈ S) is solved set by set, from the full set down: with
    E(S, v) the expected moves still needed, E(full, ·) = 0 and

        E(S, v) = 1 + Σ_{u ∈ S} P_vu E(S, u) + Σ_{u ∉ S} P_vu E(S ∪ {u}, u),

    Args:
        transition: (K, K) transition matrix P, K <= :data:`EXACT_COVER_MAX_AGENTS`.
        start: the first state's index, or None for a uniform start.

    Returns:
        The expected cover time as a Python float.

    Raises:
        ValueError: for K above :data:`EXACT_COVER_MAX_AGENTS` (memory and time grow as K·2^K; use
            :func:`cover_time_bounds`), a matrix that is not square, or a bad ``start``.

    Examples:
        a |S| × |S| linear system per S whose right side involves larger sets only; the sets of one size
        are solved together. The cover time is 1 + E({X_1}, X_1). On the complete graph it is
        1 + (K − 1) H_{K−1}:

        >>> round(expected_cover_time(np.full((10, 10), 1 / 9) - np.eye(10) / 9), 4)
        26.4607
    """
    p = _transition64(transition)
    n = p.shape[0]
    validation.integer("K (states of transition)", n, 1, EXACT_COVER_MAX_AGENTS)
    if start is not None:
        validation.index("start", start, n, "a state index")
    # value[S, v]: expected moves still needed from position v with visited set S (0 where v ∉ S)
    value = np.zeros((1 << n, n))
    masks = np.arange(1 << n)
    bits = (masks[:, None] >> np.arange(n)[None, :]) & 1  # (2^K, K) membership
    size = bits.sum(1)
    for c in range(n - 1, 0, -1):
        sets = masks[size == c]
        member = bits[sets].astype(bool)  # (m, K)
        idx = np.nonzero(member)[1].reshape(len(sets), c)  # (m, c) the members of each set, ascending
        # right side: 1 + Σ_{u ∉ S} P[v, u] value[S | u, u]
        outside = ~member
        grown = sets[:, None] | (1 << np.arange(n))[None, :]  # (m, K) S ∪ {u}
        next_value = np.where(outside, value[grown, np.arange(n)[None, :]], 0.0)  # (m, K)
        p_rows = p[idx]  # (m, c, K) rows P[v, ·] for v ∈ S
        rhs = 1.0 + np.einsum("mck,mk->mc", p_rows, next_value)
        inner = np.take_along_axis(p_rows, idx[:, None, :], axis=2)  # (m, c, c) P[v, u], u ∈ S
        sol = np.linalg.solve(np.eye(c)[None] - inner, rhs[..., None])[..., 0]
        value[sets[:, None], idx] = sol
    singles = value[1 << np.arange(n), np.arange(n)]  # E({v}, v)
    return float(1.0 + (singles.mean() if start is None else singles[int(start)]))


def cover_time_bounds(transition) -> tuple[float, float]:
    """Matthews' bounds on the expected cover time in slots (counting the first) for any start:
    1 + H_{K−1} min_{i≠j} H[i, j] <= cover time <= 1 + H_{K−1} max_{i≠j} H[i, j], with H the hitting
    times (:func:`hitting_time_matrix`) and H_{K−1} the harmonic number; for any K (the exact
    value, :func:`expected_cover_time`, needs K <= :data:`EXACT_COVER_MAX_AGENTS`).

    Args:
        transition: (K, K) transition matrix P.

    Returns:
        ``(lower, upper)``, two Python floats.
    """
    h = hitting_time_matrix(transition)
    n = h.shape[0]
    off = h[~np.eye(n, dtype=bool)]
    harmonic = float(np.sum(1.0 / np.arange(1, n)))
    return 1.0 + harmonic * float(off.min()), 1.0 + harmonic * float(off.max())
