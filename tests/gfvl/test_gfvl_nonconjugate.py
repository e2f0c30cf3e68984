import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import gfvl, scenarios
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods
from jaxfed.gfvl.expfam import BETA, beta_natural

K, N = 10, 100
PRIOR = beta_natural(2.0, 2.0)


def _stats(key):
    return likelihoods.bernoulli_beta_stats(scenarios.bernoulli_counts(key, K, N, 0.7), N)


def test_both_solvers_use_the_same_step_and_keep_eta_equal_to_prior_plus_factors():
    stats = _stats(jax.random.key(0))
    walk = gossip.mh_schedule(jax.random.key(1), graphs.complete(K), 30)
    solvers = {
        "conjugate": gfvl.conjugate_solver(stats, 1.0),
        "natgrad": gfvl.natgrad_solver(BETA, likelihoods.bernoulli(), stats, 1.0, 0.05, 3, 16, "leave-one-out"),
    }
    for solve in solvers.values():
        final, etas = jax.jit(lambda key, s=solve: gfvl.learn(key, gfvl.init(PRIOR, K), walk, s))(jax.random.key(2))
        np.testing.assert_allclose(final.eta, PRIOR + final.lam.sum(0), rtol=1e-5)
        assert etas.shape == (30, 2) and np.all(np.isfinite(etas))
        unvisited = np.setdiff1d(np.arange(K), np.asarray(walk))
        np.testing.assert_array_equal(final.lam[unvisited], 0.0)


def test_reinforce_gfvl_converges_to_the_exact_posterior_on_the_conjugate_model():
    """Bernoulli data (conjugate, so p(θ|D) is an exact Beta) through the REINFORCE path: K = 10,
    N_k = 100 (sum loss), L = 5, S = 30, ρ = 0.05, leave-one-out baseline (the gfvl-unlearning
    settings). After 300 slots the median KL over 64 trials is below 1e-2 (measured: below 1e-2 from
    slot 91 on, 1.5e-3 at slot 300; the REINFORCE noise sets that floor)."""
    adjacency = jnp.asarray(graphs.complete(K))

    def trial(key):
        key_data, key_walk, key_learn = jax.random.split(key, 3)
        stats = _stats(key_data)
        solve = gfvl.natgrad_solver(BETA, likelihoods.bernoulli(), stats, 1.0, 0.05, 5, 30, "leave-one-out")
        final, _ = gfvl.learn(key_learn, gfvl.init(PRIOR, K), gossip.mh_schedule(key_walk, adjacency, 300), solve)
        return expfam.kl(BETA, final.eta, gfvl.posterior_eta(PRIOR, stats, 1.0))

    kl = np.asarray(jax.jit(jax.vmap(trial))(jax.random.split(jax.random.key(4), 64)))
    assert np.all(np.isfinite(kl))
    assert np.median(kl) < 1e-2, np.median(kl)


def test_user_log_likelihood_drives_the_solver_like_the_count_model():
    """The same data as padded 0/1 points through ``from_log_lik`` give the same trajectory as the
    counts (the losses agree to rounding, so the natural-gradient steps agree closely)."""
    n = 20
    ones = np.array([14, 9, 17])
    z = (np.arange(n)[None, :] < ones[:, None]).astype(np.float32)
    padded = likelihoods.PaddedData(z=jnp.asarray(z), weight=jnp.ones((3, n)))
    eps = 0.1

    def log_lik(zn, theta):
        p = eps + (1 - 2 * eps) * theta
        return zn * jnp.log(p) + (1 - zn) * jnp.log1p(-p)

    stats = likelihoods.bernoulli_beta_stats(jnp.asarray(ones, jnp.float32), n)
    walk = jnp.array([0, 1, 2, 1, 0, 2], jnp.int32)
    etas = []
    for lik, data in [(likelihoods.from_log_lik(log_lik), padded), (likelihoods.noisy_bernoulli(eps), stats)]:
        solve = gfvl.natgrad_solver(BETA, lik, data, 1.0, 0.05, 4, 16, "leave-one-out")
        etas.append(jax.jit(lambda key, s=solve: gfvl.learn(key, gfvl.init(PRIOR, 3), walk, s)[1])(jax.random.key(9)))
    np.testing.assert_allclose(etas[0], etas[1], rtol=1e-3)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(rho=0.0), "rho"),
        (dict(rho=-1e-3), "rho"),
        (dict(alpha=0.0), "alpha"),
        (dict(n_iters=0), "n_iters"),
        (dict(n_iters=2.5), "n_iters"),
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=1, baseline="leave-one-out"), "n_samples"),
        (dict(baseline="mean"), "baseline"),
    ],
)
def test_bad_solver_settings_are_refused(kwargs, name):
    args = dict(alpha=1.0, rho=5e-3, n_iters=5, n_samples=30, baseline="constant")
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        gfvl.natgrad_solver(BETA, likelihoods.noisy_bernoulli(0.1), jnp.ones((K, 2)), **args)


def test_learning_rate_schedule_is_evaluated_at_the_slot_index():
    """A schedule ρ_i (any ``count -> ρ``, e.g. an optax schedule) is evaluated at the number of slots
    taken before, ``state.slot``: slot by slot it gives the η of a float ρ_i. One compilation serves both
    (``by_schedule`` selects the schedule or the float); the slot counter also counts unlearning slots."""
    stats = _stats(jax.random.key(3))
    walk = jnp.array([0, 1, 0, 2], jnp.int32)
    rates = jnp.array([0.05, 0.02, 0.01, 0.005])
    lik = likelihoods.bernoulli()

    @jax.jit
    def one_slot(key, state, agent, rho, by_schedule):
        def schedule(count):
            return jnp.where(by_schedule, rates[count], rho)

        return gfvl.step(key, state, agent, gfvl.natgrad_solver(BETA, lik, stats, 1.0, schedule, 1, 4, "leave-one-out"))

    keys = jax.random.split(jax.random.key(4), 4)
    scheduled, fixed = gfvl.init(PRIOR, K), gfvl.init(PRIOR, K)
    for i in range(4):
        scheduled = one_slot(keys[i], scheduled, walk[i], 1.0, True)  # ρ = 1 would be far off if used
        fixed = one_slot(keys[i], fixed, walk[i], rates[i], False)
        np.testing.assert_allclose(scheduled.eta, fixed.eta, rtol=1e-6)
    assert int(scheduled.slot) == 4
    unlearned, _ = gfvl.unlearn(jax.random.key(5), scheduled, walk, gfvl.conjugate_solver(stats, 1.0), 0, request=1)
    assert int(unlearned.slot) == 8


@pytest.mark.parametrize("spec", ["cosine", "inverse:50"])
def test_named_schedules(spec):
    from jaxfed.gfvl import natgrad

    schedule = natgrad.rho_schedule(spec, 0.1, 100)
    values = np.asarray([schedule(i) for i in (0, 50, 99)])
    assert values[0] == pytest.approx(0.1) and np.all(np.diff(values) < 0) and np.all(values > 0)
    assert natgrad.rho_schedule("constant", 0.1, 100) == 0.1
