import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import expfam, gfvl, gossip, graphs, likelihoods, scenarios
from jaxfed.expfam import BETA, beta_natural


def _data(seed=0, k=6, n=40, theta=0.3):
    ones = scenarios.bernoulli_counts(jax.random.key(seed), k, n, theta)
    return ones, likelihoods.bernoulli_beta_stats(ones, n)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 3.0])
def test_conjugate_gfvl_reaches_the_posterior_and_repeat_visits_change_nothing(alpha):
    k, n, a, b = 6, 40, 2.0, 3.0
    ones, stats = _data(k=k, n=n)
    schedule = gossip.mh_schedule(jax.random.key(1), graphs.ring(k), 400)
    assert int(gossip.cover_time(schedule, k)) > 0
    cover = int(gossip.cover_time(schedule, k))
    state = gfvl.init(beta_natural(a, b), k)
    final, etas = gfvl.learn(jax.random.key(2), state, schedule, gfvl.conjugate_solver(stats, alpha))
    ones = np.asarray(ones, np.float64)
    expected = [a + ones.sum() / alpha, b + (n * k - ones.sum()) / alpha]  # the conjugate update
    np.testing.assert_allclose(final.eta, expected, rtol=1e-6)
    # From the covering slot on, η never changes again.
    etas = np.asarray(etas)
    np.testing.assert_array_equal(etas[cover - 1 :], np.broadcast_to(etas[cover - 1], etas[cover - 1 :].shape))
    # λ_k = s_k/α for every agent and η = η_0 + Σ λ_k.
    np.testing.assert_allclose(final.lam, np.asarray(stats) / alpha, rtol=1e-6)
    np.testing.assert_allclose(final.eta, np.asarray(beta_natural(a, b)) + np.asarray(final.lam).sum(0), rtol=1e-6)
    np.testing.assert_allclose(final.eta, gfvl.posterior_eta(beta_natural(a, b), stats, alpha), rtol=1e-6)


def test_kl_trajectory_equals_stepwise_kernel():
    k = 5
    _, stats = _data(k=k, n=100, theta=0.7)
    prior = beta_natural(2.0, 2.0)
    schedule = gossip.mh_schedule(jax.random.key(3), graphs.star(k), 120)
    _, etas = gfvl.learn(jax.random.key(0), gfvl.init(prior, k), schedule, gfvl.conjugate_solver(stats, 1.0))
    target = gfvl.posterior_eta(prior, stats, 1.0)
    stepwise = expfam.kl(BETA, etas, target)
    fast = gfvl.conjugate_kl_trajectory(BETA, prior, stats, 1.0, schedule)
    np.testing.assert_allclose(fast, stepwise, rtol=1e-5, atol=1e-12)
    assert np.all(np.diff(np.asarray(fast)) <= 1e-6 * np.asarray(fast)[:-1])  # KL never increases here


def test_step_updates_only_the_scheduled_agent():
    _, stats = _data(k=4)
    state = gfvl.init(beta_natural(1.0, 1.0), 4)
    state = gfvl.step(jax.random.key(0), state, jnp.int32(2), gfvl.conjugate_solver(stats, 2.0))
    lam = np.asarray(state.lam)
    np.testing.assert_allclose(lam[2], np.asarray(stats[2]) / 2.0)
    assert np.all(lam[[0, 1, 3]] == 0)


def test_jit_and_vmap_agree_with_unbatched():
    k = 5
    _, stats = _data(k=k)
    prior = beta_natural(2.0, 2.0)
    adjacency = jnp.asarray(graphs.complete(k))

    def trial(key):
        schedule = gossip.mh_schedule(key, adjacency, 60)
        return gfvl.conjugate_kl_trajectory(BETA, prior, stats, 1.0, schedule)

    keys = jax.random.split(jax.random.key(9), 4)
    batched = jax.jit(jax.vmap(trial))(keys)
    for i in range(4):
        np.testing.assert_allclose(batched[i], trial(keys[i]), rtol=1e-6)


def test_kl_trajectory_with_walk_counts_is_exactly_zero_after_cover():
    k = 6
    _, stats = _data(k=k, n=30, theta=0.4)
    walk = gossip.mh_walk(jax.random.key(4), graphs.ring(k), 200)
    prior = beta_natural(2.0, 2.0)
    kl = np.asarray(gfvl.conjugate_kl_trajectory(BETA, prior, stats, 0.7, walk.schedule, walk.n_visited))
    slow = np.asarray(gfvl.conjugate_kl_trajectory(BETA, prior, stats, 0.7, walk.schedule))
    np.testing.assert_array_equal(kl, slow)
    cover = int(gossip.cover_time(walk.schedule, k))
    assert np.all(kl[cover - 1 :] == 0.0) and np.all(kl[: cover - 1] > 0.0)
