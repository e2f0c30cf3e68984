"""Task 3 of issue 49: a user's exponential family and conjugate model in one file, loaded with ``--import``.

The family is the inverse gamma on a variance θ > 0, q(θ) ∝ θ^(−a−1) e^(−b/θ): sufficient statistics
T(θ) = (log θ, 1/θ), natural parameter η = (−a − 1, −b), base measure 1 and log-partition
A(η) = log Γ(a) − a log b. It is conjugate to Normal data of known mean μ₀ and unknown variance θ: each
point z adds (−1/2, −(z − μ₀)²/2) to η, so the posterior is IG(a + N/2, b + Σ(z − μ₀)²/2).

    jaxfed run gfvl-heterogeneity --import tests/data/users/inverse_gamma.py --set family=inverse-gamma-normal --set topologies=ring --set n_agents=12
"""

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln, polygamma

from jaxfed import numerics
from jaxfed.gfvl import expfam, models

IG_MIN = 1e-3  # the smallest shape and scale kept by ``project``
PRIOR = (3.0, 2.0)  # IG(shape 3, scale 2): prior mean of the variance 1
VARIANCE = 2.0  # the global θ, the data's variance
MEAN = 0.0  # μ₀, the known mean of the data


def natural(shape_a, scale_b):
    """η = (−a − 1, −b) of IG(a, b)."""
    a, b = jnp.broadcast_arrays(jnp.asarray(shape_a, dtype=float), jnp.asarray(scale_b, dtype=float))
    return jnp.stack([-a - 1.0, -b], axis=-1)


def shape_scale(eta):
    """(a, b) of η."""
    return -eta[..., 0] - 1.0, -eta[..., 1]


def _mean(eta):  # μ = ∇A = (E log θ, E 1/θ) = (log b − ψ(a), a/b)
    a, b = shape_scale(eta)
    return jnp.stack([jnp.log(b) - digamma(a), a / b], axis=-1)


def _fisher(eta):  # ∇²A = [[ψ′(a), −1/b], [−1/b, a/b²]]
    a, b = shape_scale(eta)
    return jnp.stack([jnp.stack([polygamma(1, a), -1.0 / b], -1), jnp.stack([-1.0 / b, a / (b * b)], -1)], axis=-2)


def _fisher_quadratic(eta, d):  # dᵀ FIM d = (a d₂ − b d₁)²/(a b²) + d₁² (ψ′(a) − 1/a), both terms >= 0
    a, b = shape_scale(eta)
    d1, d2 = d[..., 0], d[..., 1]
    return (a * d2 - b * d1) ** 2 / (a * b * b) + d1 * d1 * numerics.trigamma_minus_reciprocal(a)


def _sample(key, eta, shape=()):
    a, b = shape_scale(eta)
    return b / jax.random.gamma(key, a, shape, eta.dtype)


def _project(eta):
    a, b = shape_scale(eta)
    return natural(jnp.maximum(a, IG_MIN), jnp.maximum(b, IG_MIN))


INVERSE_GAMMA = expfam.register(
    expfam.ExpFamily(
        name="inverse-gamma",
        dim=2,
        sufficient_stats=lambda theta: jnp.stack([jnp.log(theta), 1.0 / theta], axis=-1),
        log_base_measure=jnp.zeros_like,
        log_partition=lambda eta: gammaln(shape_scale(eta)[0]) - shape_scale(eta)[0] * jnp.log(shape_scale(eta)[1]),
        mean=_mean,
        fisher=_fisher,
        fisher_quadratic=_fisher_quadratic,
        boundary_distance=lambda eta: jnp.stack(shape_scale(eta), axis=-1),
        sample=_sample,
        project=_project,
    )
)


def normal_variance_stats(z, weight, mean=MEAN):
    """(…, 2) statistics of points z (…, N) with weights w (0: padding) of N(μ₀, θ): (−Σw/2, −Σw(z − μ₀)²/2)."""
    w = jnp.asarray(weight, dtype=float)
    return jnp.stack([-0.5 * jnp.sum(w, -1), -0.5 * jnp.sum(w * (z - mean) ** 2, -1)], axis=-1)


def draw_stats(key, thetas, sizes, variance):
    """Σ(z − μ₀)² of N_k points of N(μ₀, θ_k) is θ_k χ²_{N_k} = 2 θ_k Gamma(N_k/2); 0 for N_k = 0."""
    squares = 2.0 * thetas * jax.random.gamma(key, jnp.maximum(sizes, 1.0) / 2.0, dtype=thetas.dtype)
    return jnp.stack([-0.5 * sizes, -0.5 * jnp.where(sizes > 0, squares, 0.0)], axis=-1)


def log_normal_variances(key, theta, n_agents, spread):
    return theta * jnp.exp(spread * jax.random.normal(key, (n_agents,)))


MODEL = models.register(
    models.ConjugateModel(
        name="inverse-gamma-normal",
        family=INVERSE_GAMMA,
        prior=lambda: natural(*PRIOR),
        theta=VARIANCE,
        agent_thetas=log_normal_variances,
        sample_stats=draw_stats,
        prior_text=f"InvGamma(shape {PRIOR[0]:g}, scale {PRIOR[1]:g})",
        link_text="log θ_k = log θ + τ ε_k (Normal data of known mean, variance θ_k)",
    )
)
