"""The G-FVL protocol: its state, one slot, whole runs, local solvers, unlearning, the conjugate KL trajectory.

The variational posterior is q(θ) ∝ p_0(θ) Π_k t_k(θ) with t_k = exp(λ_kᵀT(θ)) in the prior's
exponential family, so q has natural parameter η = η_0 + Σ_k λ_k. The state is η (it travels
with the token) and the per-agent factors λ_k (they stay at the agents). At each slot the
scheduled agent k

1. forms the cavity η_{−k} = η − λ_k,
2. solves its local free energy  min_q E_q[L_k] + α KL(q ‖ q_{η_{−k}})  → η_new,
3. updates λ_k ← λ_k + (η_new − η).

Step 2 is a *local solver* ``solve(key, agent, state) -> Δ`` returning the change Δ = η_new − η,
which steps 2–3 add to both η and λ_k; both cases use this one step API. Returning the increment
rather than η_new keeps the conjugate case exact in floating point: :func:`conjugate_solver`
returns Δ = s_k/α on the first visit (λ_k = 0, so λ_k then holds s_k/α bit for bit) and −0.0 on
every repeat visit, which leaves every bit of η and λ_k as it was (x + (−0.0) = x for every float x).
:func:`natgrad_solver` runs L natural-gradient iterations with REINFORCE gradients from the incoming η
and returns their total change.

Unlearning: after a request to forget agent u, :func:`unlearning_step` replaces u's next
scheduled slot by :func:`forget` (η ← η − λ_u, λ_u ← 0); u computes nothing afterwards but the token
still passes through it. The retrain-from-scratch baseline is :func:`learn` from :func:`init` on the
graph and data without u.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxfed import validation
from jaxfed.gfvl import expfam, gossip, likelihoods, natgrad

__all__ = [
    "GFVLState",
    "LocalSolver",
    "init",
    "step",
    "learn",
    "learn_by_iteration",
    "conjugate_natgrad_iteration",
    "conjugate_solver",
    "conjugate_natgrad_solver",
    "natgrad_solver",
    "forget",
    "unlearn",
    "posterior_eta",
    "conjugate_kl_trajectory",
]


class GFVLState(NamedTuple):
    """Protocol state of G-FVL."""

    eta: jax.Array  # (P,) natural parameter of the global q; travels with the token
    lam: jax.Array  # (K, P) approximate-likelihood factors λ_k; λ_k stays at agent k
    slot: jax.Array  # () int32 slots taken so far (i − 1 during slot i): indexes a learning-rate schedule ρ_i


LocalSolver = Callable[[jax.Array, jax.Array, GFVLState], jax.Array]
"""``solve(key, agent, state) -> Δ``: step 2 for the scheduled agent, as the increment η_new − η.

The cavity is ``state.eta - state.lam[agent]``."""


def init(prior_eta: jax.Array, n_agents: int) -> GFVLState:
    """q^(0) = p_0: η = η_0, every λ_k = 0, no slot taken.

    Args:
        prior_eta: (P,) the prior's natural parameter η_0.
        n_agents: K, the number of agents.

    Returns:
        The :class:`GFVLState` before the first slot.
    """
    prior_eta = jnp.asarray(prior_eta)
    lam = jnp.zeros((n_agents,) + prior_eta.shape, prior_eta.dtype)
    return GFVLState(eta=prior_eta, lam=lam, slot=jnp.zeros((), jnp.int32))


def step(key: jax.Array, state: GFVLState, agent: jax.Array, solve: LocalSolver) -> GFVLState:
    """One slot of G-FVL for the scheduled ``agent``: η ← η + Δ, λ_k ← λ_k + Δ.

    Args:
        key: PRNG key of this slot.
        state: the state before the slot.
        agent: the scheduled agent k (an index in [0, K), may be traced).
        solve: the local solver (:data:`LocalSolver`).

    Returns:
        The state after the slot.
    """
    delta = solve(key, agent, state)
    return GFVLState(eta=state.eta + delta, lam=state.lam.at[agent].add(delta), slot=state.slot + 1)


def learn(key: jax.Array, state: GFVLState, schedule: jax.Array, solve: LocalSolver):
    """Runs :func:`step` over a schedule with ``lax.scan``.

    Args:
        key: PRNG key (split into one key per slot).
        state: the state before the first slot.
        schedule: (n_slots,) scheduled agents.
        solve: the local solver (:data:`LocalSolver`).

    Returns:
        (final state, η after each slot of shape (n_slots, P)).
    """
    keys = jax.random.split(key, schedule.shape[0])

    def body(s, inputs):
        k, agent = inputs
        s = step(k, s, agent, solve)
        return s, s.eta

    return lax.scan(body, state, (keys, schedule))


LocalIteration = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]
"""``iterate(key, agent, eta, cavity, slot) -> eta``: one local iteration of the scheduled agent from the
iterate ``eta`` with its cavity η_{−k}; ``slot`` is the number of slots taken before this one (for a
learning-rate schedule). :func:`learn_by_iteration` runs L of them per slot."""


def learn_by_iteration(
    key: jax.Array, state: GFVLState, schedule: jax.Array, n_iters, iterate: LocalIteration, n_total: int
):
    """G-FVL (:func:`learn`) run one local iteration at a time, for ``n_total`` local iterations: slot s holds
    iterations s·L … s·L + L − 1 of agent ``schedule[s]``, which forms its cavity at the first, runs ``iterate``
    from the incoming η, and at the last adds the change Δ = η^[L] − η to η and λ_k (as :func:`step` does).

    The scan has ``n_total`` steps whatever L, so L (``n_iters``) may be traced: points that differ only in L
    share one compiled program (and a ``vmap``), where :func:`learn` with a solver of L iterations needs a
    static L and ``n_total/L`` slots. Iteration l of slot s uses the key ``fold_in(split(key, n_slots)[s], l)``,
    the keys of :func:`learn` with :func:`natgrad_solver` (``jax.random.split`` gives the same first keys for
    any count), so with :func:`natgrad_iteration` and a schedule whose first n_total/L slots are the same
    this runs the same computation as ``learn(key, state, schedule[:n_total // L], natgrad_solver(…, L, …))``
    (tests/experiments/test_gfvl_studies.py).

    Args:
        key: PRNG key.
        state: the state before the first slot.
        schedule: (n_slots,) scheduled agents, n_slots >= ceil(n_total / L).
        n_iters: L >= 1 local iterations per slot (int or traced integer).
        iterate: one local iteration (:data:`LocalIteration`, e.g. :func:`natgrad_iteration`).
        n_total: local iterations in all (static), >= 1.

    Returns:
        (final state, η after each local iteration of shape (n_total, P): the protocol's η, which changes at
        the last iteration of each slot; a slot ends after iteration m when L divides m).
    """
    validation.integer("n_total", n_total, 1)
    if not validation.is_traced(n_iters):
        validation.integer("n_iters", n_iters, 1)
        validation.check(
            "schedule", schedule.shape[0], schedule.shape[0] * int(n_iters) >= n_total, ">= n_total/L slots"
        )
    keys = jax.random.split(key, schedule.shape[0])

    def body(carry, t):
        s, eta_run, cavity = carry
        slot, l = t // n_iters, t % n_iters
        agent = schedule[slot]
        first = l == 0
        cavity = jnp.where(first, s.eta - s.lam[agent], cavity)
        eta_run = iterate(jax.random.fold_in(keys[slot], l), agent, jnp.where(first, s.eta, eta_run), cavity, s.slot)
        delta = eta_run - s.eta
        last = l == n_iters - 1
        s = GFVLState(
            eta=jnp.where(last, s.eta + delta, s.eta),
            lam=jnp.where(last, s.lam.at[agent].add(delta), s.lam),
            slot=s.slot + last.astype(s.slot.dtype),
        )
        return (s, eta_run, cavity), s.eta

    (final, _, _), etas = lax.scan(body, (state, state.eta, state.eta), jnp.arange(n_total))
    return final, etas


def conjugate_solver(agent_stats: jax.Array, alpha) -> LocalSolver:
    """Exact local update of the conjugate case: η_new = η_{−k} + s_k/α, i.e. Δ = s_k/α − λ_k.

    A repeat visit is neutral by construction: where λ_k equals s_k/α bit for bit (it holds the first
    visit's Δ = s_k/α − 0) the solver returns −0.0 instead of the difference, a compare-and-select. The
    difference itself is not reliably 0: XLA rewrites s_k/α as s_k · (1/α) and may contract
    s_k · (1/α) − λ_k into one fused multiply-subtract, whose result is the rounding error of s_k/α
    (measured on the CPU: float32, Normal family, α = 2.5, ring graph, data of mixed sign so that η₁ is
    small next to the λ_k: 1,208 of 3,990 repeat visits moved η, by up to 8 ulps; 728 in float64;
    tests/gfvl/test_gfvl.py). The first visit is exact either way: a fused s_k · (1/α) − 0 rounds once, like
    the product the comparison sees.

    Args:
        agent_stats: (K, P) per-agent sums of the likelihood's natural statistics Σ_n [s(z_{k,n}), 1]
            expressed in the prior family's natural coordinates (e.g. (Σz, Σ(1−z)) for
            Beta–Bernoulli, see :func:`jaxfed.gfvl.likelihoods.bernoulli_beta_stats`).
        alpha: temperature α > 0.

    Returns:
        The :data:`LocalSolver`.
    """

    def solve(key, agent, state):
        del key
        target, lam = agent_stats[agent] / alpha, state.lam[agent]
        return jnp.where(lam == target, -0.0, target - lam)

    return solve


def conjugate_natgrad_solver(agent_stats: jax.Array, alpha, rho, n_iters: int) -> LocalSolver:
    """Conjugate case, solved by L natural-gradient iterations with the *exact* gradient instead of the
    closed form: the local update of :func:`natgrad_solver` with FIM⁻¹∇_η E_q[L_k] known (no sampling).

    For a conjugate L_k(θ) = −s_kᵀT(θ) + const, E_q[L_k] = −s_kᵀμ(η) and FIM(η)⁻¹∇_η E_q[L_k] = −s_k, so one
    iteration η ← η − ρ(−s_k + α(η − η_{−k})) moves η a fraction ρα of the way to the exact update
    η* = η_{−k} + s_k/α, and L iterations leave (1 − ρα)^L of the gap:

        Δ = (1 − (1 − ρα)^L) (η* − η) = (1 − (1 − ρα)^L) (s_k/α − λ_k)

    (docs/gfvl.md §A10). ρα = 1 is :func:`conjugate_solver` in one iteration; for 0 < ρα <= 1 every λ_k
    stays between 0 and s_k/α, so η stays in the family's domain without a projection.

    Args:
        agent_stats: (K, P) per-agent statistics, as for :func:`conjugate_solver`.
        alpha: temperature α > 0 (may be traced).
        rho: learning rate ρ with 0 < ρα <= 1 (may be traced; a concrete value is validated), or a
            schedule ρ_i evaluated at the slots taken before this one, as for :func:`natgrad_solver`.
        n_iters: local iterations L per scheduled slot (static), >= 1.

    Returns:
        The :data:`LocalSolver`.

    Raises:
        ValueError: for L < 1, α <= 0, or a concrete ρ outside (0, 1/α].
    """
    validation.integer("n_iters", n_iters, 1)
    validation.positive("alpha", alpha)
    if not callable(rho):
        validation.positive("rho", rho)
        if not (validation.is_traced(rho) or validation.is_traced(alpha)):
            validation.check("rho", rho, float(rho) * float(alpha) <= 1.0, f"<= 1/alpha = {1.0 / float(alpha):g}")

    def solve(key, agent, state):
        del key
        rate = rho(state.slot) if callable(rho) else rho
        remaining = (1.0 - rate * alpha) ** n_iters
        return (1.0 - remaining) * (agent_stats[agent] / alpha - state.lam[agent])

    return solve


def natgrad_solver(
    family: expfam.ExpFamily,
    likelihood: likelihoods.Likelihood,
    agent_data,
    alpha,
    rho,
    n_iters: int,
    n_samples: int,
    baseline: str = "constant",
    c=0.0,
) -> LocalSolver:
    """Non-conjugate local update: L natural-gradient iterations on the local free energy
    F_k(η) = E_q[L_k] + α KL(q_η ‖ q_{η_{−k}}), starting from the incoming η,

        η ← Π(η − ρ (FIM(η)⁻¹ ĝ + α (η − η_{−k}))),   ĝ: REINFORCE with S samples

    (:func:`jaxfed.gfvl.natgrad.natural_gradient_step`, :func:`jaxfed.gfvl.natgrad.reinforce_gradient`),
    returning Δ = η^[L] − η. Iteration l uses the key ``fold_in(key, l)``.

    Args:
        family: the prior's exponential family (q's family).
        likelihood: the observation model (:mod:`jaxfed.gfvl.likelihoods`).
        agent_data: every agent's data summary, leading axis K (e.g. weighted counts (K, 2)).
        alpha: temperature α > 0 (may be traced).
        rho: learning rate ρ > 0 (may be traced), or a schedule ρ_i (an optax schedule, any
            ``count -> ρ``; see :func:`jaxfed.gfvl.natgrad.rho_schedule`) evaluated at the number of slots
            taken before this one (``state.slot``), so slot i uses ``rho(i − 1)`` for all its L iterations.
        n_iters: local iterations L per scheduled slot (static), >= 1.
        n_samples: samples S per iteration (static), >= 1 (>= 2 for "leave-one-out" and "control-variate").
        baseline: the gradient estimator, one of :data:`jaxfed.gfvl.natgrad.ESTIMATORS`: REINFORCE with a
            "constant" baseline (value ``c``; the paper uses c = 0), "leave-one-out" or "control-variate"
            (:func:`jaxfed.gfvl.natgrad.reinforce_gradient`), or "reparameterisation" for the Gaussian families
            (:func:`jaxfed.gfvl.natgrad.reparameterisable`).
        c: constant baseline (may be traced).

    Returns:
        The :data:`LocalSolver`.
    """
    validation.integer("n_iters", n_iters, 1)
    validation.one_of("baseline", baseline, natgrad.ESTIMATORS)
    validation.integer("n_samples", n_samples, 2 if baseline in ("leave-one-out", "control-variate") else 1)
    if baseline == "reparameterisation":
        natgrad.check_reparameterisable(family)
    if not callable(rho):
        validation.positive("rho", rho)
    validation.positive("alpha", alpha)

    def solve(key, agent, state):
        data = likelihoods.agent_data(agent_data, agent)
        cavity = state.eta - state.lam[agent]
        rate = rho(state.slot) if callable(rho) else rho

        def loss(theta):
            return likelihood.loss(data, theta)

        def iteration(l, eta):
            k = jax.random.fold_in(key, l)
            natural = natgrad.natural_gradient_estimate(k, family, eta, loss, n_samples, baseline, c)
            return natgrad.natural_step(family, eta, natural, cavity, rate, alpha)

        return lax.fori_loop(0, n_iters, iteration, state.eta) - state.eta

    return solve


def natgrad_iteration(
    family: expfam.ExpFamily,
    likelihood: likelihoods.Likelihood,
    agent_data,
    alpha,
    rho,
    n_samples: int,
    baseline: str = "constant",
    c=0.0,
) -> LocalIteration:
    """One local iteration of :func:`natgrad_solver`, η ← Π(η − ρ (FIM(η)⁻¹ ĝ + α (η − η_{−k}))), as a
    :data:`LocalIteration` for :func:`learn_by_iteration` (the same estimator and step; the arguments are
    those of :func:`natgrad_solver` without L).

    Args:
        family: the prior's exponential family (q's family).
        likelihood: the observation model.
        agent_data: every agent's data summary, leading axis K.
        alpha: temperature α > 0.
        rho: learning rate ρ > 0, or a schedule ρ_i.
        n_samples: samples S per iteration (static), >= 1.
        baseline: the gradient estimator (:data:`jaxfed.gfvl.natgrad.ESTIMATORS`).
        c: constant baseline.

    Returns:
        The :data:`LocalIteration`.
    """
    validation.one_of("baseline", baseline, natgrad.ESTIMATORS)
    validation.integer("n_samples", n_samples, 2 if baseline in ("leave-one-out", "control-variate") else 1)
    if not callable(rho):
        validation.positive("rho", rho)
    validation.positive("alpha", alpha)

    def iterate(key, agent, eta, cavity, slot):
        data = likelihoods.agent_data(agent_data, agent)
        rate = rho(slot) if callable(rho) else rho

        def loss(theta):
            return likelihood.loss(data, theta)

        natural = natgrad.natural_gradient_estimate(key, family, eta, loss, n_samples, baseline, c)
        return natgrad.natural_step(family, eta, natural, cavity, rate, alpha)

    return iterate


def conjugate_natgrad_iteration(agent_stats: jax.Array, alpha, rho) -> LocalIteration:
    """One exact-gradient natural-gradient iteration of the conjugate case, η ← η − ρ(−s_k + α(η − η_{−k}))
    (:func:`conjugate_natgrad_solver` runs L of them in closed form), as a :data:`LocalIteration`; ρ as there.

    Args:
        agent_stats: (K, P) per-agent statistics, as for :func:`conjugate_solver`.
        alpha: temperature α > 0.
        rho: learning rate ρ with 0 < ρα <= 1, or a schedule ρ_i.

    Returns:
        The :data:`LocalIteration`.
    """
    validation.positive("alpha", alpha)
    if not callable(rho):
        validation.positive("rho", rho)

    def iterate(key, agent, eta, cavity, slot):
        del key
        rate = rho(slot) if callable(rho) else rho
        return eta - rate * (alpha * (eta - cavity) - agent_stats[agent])

    return iterate


def forget(state: GFVLState, agent) -> GFVLState:
    """Removes agent u's factor: η ← η − λ_u, λ_u ← 0.

    In the conjugate case the result is the posterior given D_{−u} (once every other agent has been
    visited): exactly in exact arithmetic, to rounding in floating point (η_0 + Σ_k λ_k − λ_u is summed
    in another order than η_0 + Σ_{k≠u} λ_k); otherwise a warm start for G-FVL on the remaining agents.

    Args:
        state: the protocol state.
        agent: u, the agent to forget (an index in [0, K), may be traced).

    Returns:
        The state without u's factor.
    """
    return state._replace(eta=state.eta - state.lam[agent], lam=state.lam.at[agent].set(0.0))


def unlearning_step(key: jax.Array, state: GFVLState, agent, solve: LocalSolver, forget_agent) -> GFVLState:
    """One slot after a request to forget ``forget_agent`` = u.

    When u is scheduled it does not compute: it applies :func:`forget`, which changes η the first
    time and nothing afterwards (λ_u is then 0), so u only relays the token. Every other agent takes
    an ordinary :func:`step`.

    Args:
        key: PRNG key of this slot.
        state: the state before the slot.
        agent: the scheduled agent.
        solve: the local solver of the other agents.
        forget_agent: u, the agent to forget.

    Returns:
        The state after the slot.
    """
    return lax.cond(
        agent == forget_agent,
        lambda: forget(state, forget_agent)._replace(slot=state.slot + 1),
        lambda: step(key, state, agent, solve),
    )


def unlearn(
    key: jax.Array,
    state: GFVLState,
    schedule: jax.Array,
    solve: LocalSolver,
    forget_agent,
    request: int | jax.Array = 0,
):
    """Runs G-FVL over a schedule in which agent u = ``forget_agent`` asks to be forgotten after
    ``request`` slots (a ``lax.scan``): slots 1..request are ordinary steps (:func:`step`), later
    ones :func:`unlearning_step`. With ``request = 0`` the request precedes the first slot.

    Learning and unlearning in one scan keep one copy of the local solver in the compiled graph.

    Args:
        key: PRNG key.
        state: the state before the first slot of ``schedule``.
        schedule: (n_slots,) scheduled agents.
        solve: the local solver.
        forget_agent: u, an agent index in [0, K) (may be traced; a concrete value is validated).
        request: number of slots of ``schedule`` before the request (may be traced).

    Returns:
        (final state, η after each slot of shape (n_slots, P)).
    """
    n_agents = state.lam.shape[0]
    validation.index("forget_agent", forget_agent, n_agents, "an agent index")
    keys = jax.random.split(key, schedule.shape[0])
    slots = jnp.arange(schedule.shape[0])

    def body(s, inputs):
        k, agent, slot = inputs
        # Before the request no agent is forgotten: −1 matches no scheduled agent.
        s = unlearning_step(k, s, agent, solve, jnp.where(slot >= request, forget_agent, -1))
        return s, s.eta

    return lax.scan(body, state, (keys, schedule, slots))


def posterior_eta(prior_eta: jax.Array, agent_stats: jax.Array, alpha) -> jax.Array:
    """Natural parameter of the generalized posterior in the conjugate case: η_0 + Σ_k s_k/α.

    Args:
        prior_eta: (P,) η_0.
        agent_stats: (K, P) per-agent statistics (see :func:`conjugate_solver`).
        alpha: temperature α > 0.

    Returns:
        (P,) the posterior's natural parameter.
    """
    return prior_eta + jnp.sum(agent_stats, axis=-2) / alpha


def conjugate_kl_trajectory(
    family: expfam.ExpFamily,
    prior_eta: jax.Array,
    agent_stats: jax.Array,
    alpha,
    schedule: jax.Array,
    n_visited: jax.Array | None = None,
) -> jax.Array:
    """KL(q^(i) ‖ p(θ|D)) after each slot of conjugate G-FVL, without running the slots.

    In the conjugate case λ_k = s_k/α from agent k's first visit on and repeat visits change
    nothing (the paper's eqs. (13)–(14)), so q^(i) depends only on which agents have been visited by slot i:
    η after m first visits is η_m = η_0 + Σ_{j<=m} s_{π_j}/α, where π orders the K agents by
    first-visit slot (agents never visited within the schedule last, by index). This evaluates the
    K − 1 distinct non-zero values KL(η_m ‖ η_K), m = 1..K−1 (slot 1 visits an agent, so the prior's,
    m = 0, is never needed), and indexes them by the visit count of each slot: O(K) divergences per
    trial instead of O(n_slots). Because π is a permutation of
    all K agents, the target η_K is the posterior given *every* agent's data, η_0 + Σ_k s_k/α,
    whether or not the walk has covered the graph; it is summed in visit order, so the KL is
    exactly 0 from the covering slot on. It equals running :func:`learn` with
    :func:`conjugate_solver` and taking the KL of every slot to :func:`posterior_eta`
    (tests/gfvl/test_gfvl_differential.py checks this, in float64, on walks that do not cover).

    Args:
        family: the prior's exponential family.
        prior_eta: (P,) η_0.
        agent_stats: (K, P) per-agent statistics (see :func:`conjugate_solver`).
        alpha: temperature.
        schedule: (n_slots,) scheduled agents.
        n_visited: (n_slots,) distinct agents visited by each slot, as returned by
            :func:`jaxfed.gfvl.gossip.mh_walk`; computed from ``schedule`` when omitted.

    Returns:
        (n_slots,) KL(q^(i) ‖ p(θ|D)), i = 1..n_slots.

    Raises:
        ValueError: for a concrete ``prior_eta`` of the wrong length or outside the family's domain
            (where its Fisher matrix is not positive definite), and for ``agent_stats`` not of shape (K, P).
    """
    expfam.check_natural(family, prior_eta, "prior_eta")
    validation.shape("agent_stats", agent_stats, (None, family.dim), f"(K, {family.dim}) for family {family.name!r}")
    n_agents, n_slots = agent_stats.shape[0], schedule.shape[0]
    if n_visited is None:
        first = gossip.first_visit_slots(schedule, n_agents)
        slots = jnp.arange(n_slots, dtype=first.dtype)
        n_visited = jnp.sum(first[None, :] <= slots[:, None], axis=1)
    else:
        # The m-th distinct agent is the one scheduled where the count first reaches m; counts never
        # reached give n_slots, whose scatter is dropped, so unvisited agents keep first = n_slots.
        where_new = jnp.searchsorted(n_visited, jnp.arange(1, n_agents + 1), side="left").astype(jnp.int32)
        reached = where_new < n_slots
        agents = jnp.where(reached, schedule[jnp.minimum(where_new, n_slots - 1)], n_agents)
        first = jnp.full((n_agents,), n_slots, jnp.int32).at[agents].set(where_new, mode="drop")
    order = _stable_order(first)  # a permutation: visited agents by first visit, then the rest
    after_m_visits = prior_eta + jnp.concatenate(
        [jnp.zeros_like(prior_eta)[None], jnp.cumsum(agent_stats[order] / alpha, axis=0)]
    )  # (K + 1, P); row K is the posterior given every agent's data
    # m = 0 (the prior) is never indexed: slot 1 visits an agent. Its place holds NaN, not a divergence.
    kl_before_all = expfam.kl(family, after_m_visits[1:-1], after_m_visits[-1])
    nan, zero = jnp.full((1,), jnp.nan, kl_before_all.dtype), jnp.zeros((1,), kl_before_all.dtype)
    return _materialized(jnp.concatenate([nan, kl_before_all, zero]))[n_visited]


RANK_SORT_MAX = 64
"""The longest vector :func:`_stable_order` ranks by comparing every pair instead of sorting."""


def _stable_order(keys: jax.Array) -> jax.Array:
    """``jnp.argsort(keys, stable=True)`` of a 1-D int vector, the same permutation.

    For n ≤ :data:`RANK_SORT_MAX` it is the inverse of the ranks r_a = #{b : (keys_b, b) < (keys_a, a)},
    by n² vector comparisons and one scatter: XLA's CPU sort calls a comparator per comparison, and
    under ``vmap`` over a micro-batch the comparisons are cheaper (measured in benchmarks/README.md). Longer
    vectors are sorted.
    """
    n = keys.shape[0]
    if n > RANK_SORT_MAX:
        return jnp.argsort(keys, stable=True)
    index = jnp.arange(n, dtype=jnp.int32)
    earlier = (keys[None, :] < keys[:, None]) | ((keys[None, :] == keys[:, None]) & (index[None, :] < index[:, None]))
    rank = jnp.sum(earlier, axis=1, dtype=jnp.int32)
    return jnp.zeros(n, jnp.int32).at[rank].set(index, unique_indices=True)


def _materialized(x: jax.Array) -> jax.Array:
    """``x`` (1-D) unchanged, but computed before its consumers read it.

    XLA fuses elementwise work into a consumer such as a gather, and a gather of K + 1 divergences by
    the visit count of each slot then evaluates them once per slot (n_slots times; measured in benchmarks/README.md).
    A sort is never fused; sorting by an already ascending
    key returns ``x`` bit for bit. (``lax.optimization_barrier`` does not help: XLA's CPU pipeline
    removes it before fusion.)
    """
    return lax.sort((jnp.arange(x.shape[0]), x), num_keys=1)[1]
