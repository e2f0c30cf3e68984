import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import gfvl, scenarios
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods
from jaxfed.gfvl.expfam import BETA, beta_natural


def test_forget_removes_the_factor_and_u_then_only_relays():
    stats = jnp.array([[3.0, 1.0], [5.0, 2.0], [4.0, 4.0]])
    solve = gfvl.conjugate_solver(stats, 1.0)
    state = gfvl.init(beta_natural(2.0, 2.0), 3)
    for agent in (0, 1, 2):
        state = gfvl.step(jax.random.key(0), state, agent, solve)
    forgotten = gfvl.forget(state, 1)
    np.testing.assert_array_equal(forgotten.eta, state.eta - state.lam[1])
    np.testing.assert_array_equal(forgotten.lam[1], 0.0)
    np.testing.assert_array_equal(forgotten.lam[jnp.array([0, 2])], state.lam[jnp.array([0, 2])])
    # u's first slot after the request forgets; its later slots change nothing
    once = gfvl.unlearning_step(jax.random.key(1), state, 1, solve, 1)
    np.testing.assert_array_equal(once.eta, forgotten.eta)
    twice = gfvl.unlearning_step(jax.random.key(2), once, 1, solve, 1)
    np.testing.assert_array_equal(twice.eta, once.eta)
    np.testing.assert_array_equal(twice.lam, once.lam)
    # every other agent takes an ordinary step
    other = gfvl.unlearning_step(jax.random.key(3), once, 0, solve, 1)
    np.testing.assert_array_equal(other.eta, gfvl.step(jax.random.key(3), once, 0, solve).eta)


def test_conjugate_unlearning_is_exact_from_the_slot_at_which_u_is_scheduled():
    """KL(q^(i) ‖ p(θ|D_−u)) < 1e-9 from u's first scheduled slot after the request, and > 1e-9
    before it (256 trials; 200 learning slots visit every agent with probability 1 − 6e-10)."""
    k, n, u, learn_slots, after_slots = 10, 100, 9, 200, 120
    prior = beta_natural(2.0, 2.0)
    adjacency = jnp.asarray(graphs.complete(k))

    def trial(key):
        key_data, key_walk = jax.random.split(key)
        stats = likelihoods.bernoulli_beta_stats(scenarios.bernoulli_counts(key_data, k, n, 0.7), n)
        solve = gfvl.conjugate_solver(stats, 1.0)
        walk = gossip.mh_schedule(key_walk, adjacency, learn_slots + after_slots)
        _, etas = gfvl.unlearn(key, gfvl.init(prior, k), walk, solve, u, request=learn_slots)
        etas = etas[learn_slots:]
        target = gfvl.posterior_eta(prior, likelihoods.without_agent(stats, u), 1.0)
        return expfam.kl(BETA, etas, target), gossip.hitting_time(walk, u, learn_slots - 1)

    kl, hit = jax.jit(jax.vmap(trial))(jax.random.split(jax.random.key(0), 256))
    kl, hit = np.asarray(kl), np.asarray(hit)
    assert np.all(hit >= 1)  # every trial schedules u within the recorded slots
    slots = np.arange(1, after_slots + 1)
    after = slots[None, :] >= hit[:, None]
    assert np.all(kl[after] < 1e-9)
    assert np.all(kl[~after] > 1e-9)


def test_hitting_time_of_u_after_the_request():
    """Slots from the request (after slot i_u) until u is next scheduled, h = min{m >= 1 : k^(i_u+m) = u}.

    The MH walk on the complete graph starts uniformly and P is doubly stochastic, so k^(i_u) is
    uniform. From k ≠ u the walk moves to a uniform other agent every slot, so h is geometric with
    p = 1/(K − 1) and mean K − 1 = 9 (the issue's "K − 1 = 9", the paper's "≈ 10 iterations");
    from k = u it must first leave, so E[h] = 1 + 9 = K = 10; unconditionally
    E[h] = (9·9 + 10)/10 = 9.1. The exact values come from ``gossip.expected_hitting_times``; the
    Monte Carlo means (20,000 walks) must agree within 4 standard errors.
    """
    k, u, request = 10, 9, 49  # the request arrives after 0-based slot 49
    p = graphs.mh_transition_matrix(graphs.complete(k))
    expected = np.asarray(gossip.expected_hitting_times(p, u), np.float64)
    np.testing.assert_allclose(expected[:u], k - 1, rtol=1e-6)
    np.testing.assert_allclose(expected[u], k, rtol=1e-6)

    def one(key):
        walk = gossip.mh_schedule(key, graphs.complete(k), request + 400)
        return walk[request], gossip.hitting_time(walk, u, request)

    at_request, hit = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(7), 20_000))
    at_request, hit = np.asarray(at_request), np.asarray(hit, np.float64)
    assert np.all(hit >= 1)
    for mask, mean in [
        (np.ones_like(hit, bool), expected.mean()),
        (at_request != u, expected[:u].mean()),
        (at_request == u, expected[u]),
    ]:
        h = hit[mask]
        assert abs(h.mean() - mean) <= 4 * h.std() / np.sqrt(len(h)), (h.mean(), mean)


@pytest.mark.parametrize("bad", [10, -1, True, 2.5, "9"])
def test_unknown_agent_to_forget_is_refused(bad):
    state = gfvl.init(beta_natural(2.0, 2.0), 10)
    solve = gfvl.conjugate_solver(jnp.ones((10, 2)), 1.0)
    with pytest.raises(ValueError, match="forget_agent"):
        gfvl.unlearn(jax.random.key(0), state, jnp.zeros(5, jnp.int32), solve, bad)
