"""A conjugate data model defined outside the package (tests/gfvl/test_models.py runs it through the plain
CLI): Exponential(λ) data with a Gamma prior on the rate λ, registered under "gamma-exponential"."""

import jax
import jax.numpy as jnp

from jaxfed.experiments.gfvl import heterogeneity as gfvl_heterogeneity
from jaxfed.gfvl import expfam, models


def exponential_stats(key, rates, sizes, variance):
    """(N_k, −Σz): Σz of N_k Exponential(λ_k) points ~ Gamma(N_k, rate λ_k); 0 for N_k = 0."""
    total = jax.random.gamma(key, jnp.maximum(sizes, 1.0), dtype=rates.dtype) / rates
    return jnp.stack([sizes, -jnp.where(sizes > 0, total, 0.0)], axis=-1)


def log_normal_rates(key, rate, n_agents, spread):
    return rate * jnp.exp(spread * jax.random.normal(key, (n_agents,)))


models.register(
    models.ConjugateModel(
        name="gamma-exponential",
        family=expfam.GAMMA,
        prior=lambda: expfam.gamma_natural(2.0, 1.0),
        theta=0.5,
        agent_thetas=log_normal_rates,
        sample_stats=exponential_stats,
        prior_text="Gamma(shape 2, rate 1)",
        link_text="log λ_k = log λ + τ ε_k (Exponential data)",
    )
)

EXPERIMENT = gfvl_heterogeneity.EXPERIMENT
