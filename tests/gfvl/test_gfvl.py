import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import gfvl, scenarios
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, protocol
from jaxfed.gfvl.expfam import BETA, beta_natural
from jaxfed.jaxcompat import enable_x64


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


def _family_stats(name: str, seed: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(prior η, (K, P) statistics) with one agent holding no data. The Normal data have mixed signs, so that
    η₁ = Σ_k Σz_k/α is small next to the single λ_k: there a rounding error in Δ is not absorbed by η."""
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 50, k).astype(np.float64)
    n[3] = 0.0
    if name == "normal":
        sums = rng.normal(0.0, 3.0 * np.sqrt(n))
        return np.array([0.0, -0.05]), np.asarray(likelihoods.normal_normal_stats(sums, n, 1.0))
    if name == "beta":
        return np.array([2.0, 3.0]), np.asarray(likelihoods.bernoulli_beta_stats(rng.binomial(n.astype(int), 0.3), n))
    if name == "gamma":
        return np.array([2.0, -1.0]), np.asarray(likelihoods.poisson_gamma_stats(rng.poisson(4.0 * n), n))
    counts = np.array([rng.multinomial(int(m), [0.2, 0.3, 0.5]) for m in n])
    return np.ones(3), np.asarray(likelihoods.categorical_dirichlet_stats(counts))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("family", ["normal", "beta", "gamma", "dirichlet"])
def test_conjugate_repeat_visits_leave_every_bit_of_eta_and_lambda(family, dtype):
    """Adversarial: K = 10 on a ring, 4,000 slots, α in {2.5, 0.7, 3} closed over (XLA turns s/α into
    s · (1/α)) and traced under vmap (4 walks), one agent without data. Every slot whose agent has been
    visited before leaves η and λ bit-identical, and λ_k = s_k/α (to the rounding of the quotient, which
    XLA may form differently outside the scan). With Δ = s_k/α − λ_k, fused into a multiply-subtract,
    1,208 of the 3,990 repeat visits of the float32 Normal case at α = 2.5 moved η, by up to 8 ulps (728
    in float64), and the float32 Dirichlet case moved a λ_k."""
    k, n_slots = 10, 4000
    with enable_x64(dtype == jnp.float64):
        prior_np, stats_np = _family_stats(family, 7, k)
        prior, stats = jnp.asarray(prior_np, dtype), jnp.asarray(stats_np, dtype)
        adjacency = jnp.asarray(graphs.ring(k))

        def run(key, alpha):
            """gfvl.learn's scan of gfvl.step, recording λ too."""
            schedule = gossip.mh_schedule(key, adjacency, n_slots)
            solve = gfvl.conjugate_solver(stats, alpha)

            def body(state, inputs):
                state = gfvl.step(inputs[0], state, inputs[1], solve)
                return state, (state.eta, state.lam)

            keys = jax.random.split(key, n_slots)
            _, (etas, lams) = jax.lax.scan(body, gfvl.init(prior, k), (keys, schedule))
            return schedule, etas, lams, stats / alpha

        runs = [jax.jit(lambda key, a=alpha: run(key, a))(jax.random.key(1)) for alpha in (2.5, 0.7, 3.0)]
        keys = jax.random.split(jax.random.key(2), 4)
        traced = jax.jit(jax.vmap(run, in_axes=(0, None)))(keys, jnp.asarray(2.5, dtype))
        runs += [jax.tree.map(lambda a, i=i: a[i], traced) for i in range(len(keys))]
    bits = np.int32 if dtype == jnp.float32 else np.int64
    for schedule, etas, lams, target in runs:
        schedule, etas, lams = np.asarray(schedule), np.asarray(etas), np.asarray(lams)
        assert etas.dtype == lams.dtype == dtype
        first = np.asarray(gossip.first_visit_slots(jnp.asarray(schedule), k))
        repeat = first[schedule] < np.arange(n_slots)
        assert repeat.sum() > 0.9 * n_slots and np.all(first < n_slots)
        eta_before = np.concatenate([np.asarray(prior_np, dtype)[None], etas[:-1]])
        lam_before = np.concatenate([np.zeros((1,) + lams.shape[1:], dtype), lams[:-1]])
        np.testing.assert_array_equal(etas[repeat].view(bits), eta_before[repeat].view(bits))
        np.testing.assert_array_equal(lams[repeat].view(bits), lam_before[repeat].view(bits))
        np.testing.assert_allclose(lams[-1], np.asarray(target), rtol=float(jnp.finfo(dtype).eps), atol=0)


@pytest.mark.parametrize("n", [1, 2, 10, gfvl.RANK_SORT_MAX, gfvl.RANK_SORT_MAX + 1])
def test_the_order_by_ranks_is_the_stable_argsort(n):
    """conjugate_kl_trajectory orders agents by first visit through _stable_order: the same
    permutation as a stable argsort, ties (agents never visited) by index, under vmap and jit."""
    rng = np.random.default_rng(n)
    keys = np.concatenate(
        [
            rng.integers(0, 4, (50, n)),  # many ties
            np.stack([rng.permutation(n) for _ in range(10)]),  # none
            np.full((2, n), 300),  # all tied (nothing visited)
        ]
    ).astype(np.int32)
    got = jax.jit(jax.vmap(protocol._stable_order))(jnp.asarray(keys))
    np.testing.assert_array_equal(np.asarray(got), np.argsort(keys, axis=1, kind="stable"))
