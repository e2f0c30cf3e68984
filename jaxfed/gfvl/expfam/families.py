"""The other built-in families (a part of :mod:`jaxfed.gfvl.expfam`, which users import).

- :data:`NORMAL` [Normal with known variance]: T(θ) = (θ, θ²), η = (m p, −p/2);
- :data:`GAMMA` [Poisson]: T(θ) = (log θ, θ), η = (a, −b);
- :func:`dirichlet` (C) [Categorical]: T(θ) = log θ, η = (α_1..α_C);
- :func:`mean_field_normal` (d): the product of d NORMAL families on θ ∈ R^d.

The Gamma and Dirichlet scores share one unit-rate Gamma draw (``_log_gamma_ratio``). Importing
this module registers the built-in families (:data:`jaxfed.gfvl.expfam.beta.BETA` among them) by name.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln, polygamma

from jaxfed import numerics, validation
from jaxfed.gfvl.expfam.beta import BETA, BETA_MIN_SHAPE
from jaxfed.gfvl.expfam.generic import (
    ExpFamily,
    register,
)


# --------------------------------------------------------------------------- shared Gamma draws
def _log_gamma_ratio(key: jax.Array, shape_param: jax.Array, sample_shape: tuple) -> jax.Array:
    """r = log(G/a) for G ~ Gamma(a, 1), i.e. the log deviation of a unit-rate Gamma draw from its mean.

    For a >= 1, r is the log of the ratio: within 2 ulps of max(1, |r|) of the exact log(G/a) of the draw
    (measured worst 0.98, JAX 0.6.2 to 0.12.1) for a from 1 to 1e8, even when G/a ≈ 1 (concentrated
    posteriors), where log G − log a loses up to 10 (float32) or 16 (float64) ulps of 1
    (tests/gfvl/test_expfam_families.py); below 1, G can underflow in float32,
    so the draw is taken in log space (``jax.random.loggamma``). Both branches use the same key.
    """
    a = jnp.broadcast_to(shape_param, sample_shape + jnp.shape(shape_param))
    large = a >= 1.0
    g = jax.random.gamma(key, jnp.where(large, a, 1.0), dtype=a.dtype)
    log_g = jax.random.loggamma(key, jnp.where(large, 1.0, a), dtype=a.dtype)
    return jnp.where(large, jnp.log(g / a), log_g - jnp.log(a))


# --------------------------------------------------------------------------- Normal family (known variance)
NORMAL_MIN_PRECISION = 1e-8
"""Smallest precision p kept by :data:`NORMAL`'s ``project``: η₂ <= −p/2."""


def normal_natural(mean, variance) -> jax.Array:
    """Natural parameter η = (m/v, −1/(2v)) of N(m, v).

    Args:
        mean: the means m.
        variance: the variances v > 0 (broadcast with ``mean``).

    Returns:
        (..., 2) natural parameters.
    """
    mean, variance = jnp.broadcast_arrays(jnp.asarray(mean, dtype=float), jnp.asarray(variance, dtype=float))
    return jnp.stack([mean / variance, -0.5 / variance], axis=-1)


def normal_mean_precision(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(m, p): mean m = η₁/p and precision p = −2η₂ of the Normal with natural parameter η (not its
    moments: the second is 1/variance).

    Args:
        eta: (..., P) natural parameters.

    Returns:
        (m, p), each (...).
    """
    p = -2.0 * eta[..., 1]
    return eta[..., 0] / p, p


def _normal_stats(theta):
    return jnp.stack([theta, theta * theta], axis=-1)


def _normal_log_base(theta):
    return jnp.full(jnp.shape(theta), -0.5 * math.log(2.0 * math.pi), jnp.result_type(theta, float))


def _normal_log_partition(eta):
    """A(η) = η₁²/(2p) − ½ log p, p = −2η₂."""
    p = -2.0 * eta[..., 1]
    return eta[..., 0] ** 2 / (2.0 * p) - 0.5 * jnp.log(p)


def _normal_mean(eta):
    """μ = (E θ, E θ²) = (m, m² + 1/p)."""
    m, p = normal_mean_precision(eta)
    return jnp.stack([m, m * m + 1.0 / p], axis=-1)


def _normal_fisher(eta):
    """FIM = [[1/p, 2m/p], [2m/p, 4m²/p + 2/p²]]."""
    m, p = normal_mean_precision(eta)
    row0 = jnp.stack([1.0 / p, 2.0 * m / p], axis=-1)
    row1 = jnp.stack([2.0 * m / p, 4.0 * m * m / p + 2.0 / (p * p)], axis=-1)
    return jnp.stack([row0, row1], axis=-2)


def _normal_fisher_quadratic(eta, d):
    """dᵀ FIM d = (d₁ + 2m d₂)²/p + 2d₂²/p², a sum of non-negative terms."""
    m, p = normal_mean_precision(eta)
    d1, d2 = d[..., 0], d[..., 1]
    return (d1 + 2.0 * m * d2) ** 2 / p + 2.0 * d2 * d2 / (p * p)


def _normal_boundary(eta):
    """The precision p = −2η₂: the domain is p > 0."""
    return -2.0 * eta[..., 1:2]


def _normal_sample(key, eta, shape=()):
    m, p = normal_mean_precision(eta)
    return m + jax.random.normal(key, shape, eta.dtype) / jnp.sqrt(p)


def _normal_project(eta):
    """Clips the precision to >= NORMAL_MIN_PRECISION (never NaN)."""
    return eta.at[..., 1].set(jnp.minimum(eta[..., 1], -0.5 * NORMAL_MIN_PRECISION))


def _normal_kl(eta1, eta2):
    """KL(N(m₁, 1/p₁) ‖ N(m₂, 1/p₂)) = ½ [(δ₁ − m₁ δp)²/p₂ + φ(δp/p₁)], φ(x) = x − log1p(x),

    with δ = η2 − η1 and δp = p₂ − p₁: the textbook ½[(m₁ − m₂)² p₂ + p₂/p₁ − 1 − log(p₂/p₁)]
    with m₂ − m₁ = (δ₁ − m₁ δp)/p₂ formed from the parameter differences, and φ evaluated
    without cancellation (:func:`jaxfed.numerics.x_minus_log1p`). Relative error < 2e-6 in float32 and
    < 1e-12 in float64 (measured against mpmath: 5.0e-7 and 5.9e-16, i.e. 4 and 3 ulps, over 300 cases with
    KL from 1.6e-9 to 1e7; tests/gfvl/test_expfam_families.py).
    """
    m1, p1 = normal_mean_precision(eta1)
    p2 = -2.0 * eta2[..., 1]
    d1 = eta2[..., 0] - eta1[..., 0]
    dp = -2.0 * (eta2[..., 1] - eta1[..., 1])
    return 0.5 * ((d1 - m1 * dp) ** 2 / p2 + numerics.x_minus_log1p(dp / p1))


def normal_sample_score(key: jax.Array, eta: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """θ_s = m + ε_s/√p, ε_s ~ N(0, 1), and the scores T(θ) − μ = (ε s, 2m ε s + (ε² − 1) s²), s = 1/√p
    (the textbook θ² − (m² + 1/p) cancels the m² when the posterior concentrates).

    Args:
        key: PRNG key.
        eta: (..., P) natural parameters.
        n_samples: S, the number of draws (static).

    Returns:
        (θ, scores): the draws (S, *event) and their scores (S, P).
    """
    m, p = normal_mean_precision(eta)
    s = 1.0 / jnp.sqrt(p)
    eps = jax.random.normal(key, (n_samples,), eta.dtype)
    score = jnp.stack([eps * s, 2.0 * m * eps * s + (eps * eps - 1.0) * s * s], axis=-1)
    return m + eps * s, score


def normal_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v = (p v₁ + m p² (2m v₁ − v₂), p² (v₂/2 − m v₁)), from the closed-form inverse
    [[2m²p² + p, −m p²], [−m p², p²/2]] (det FIM = 2/p³, never formed).

    Args:
        eta: (..., P) natural parameters.
        v: (..., P) vectors.

    Returns:
        (..., P) FIM(η)⁻¹ v.
    """
    m, p = normal_mean_precision(eta)
    v1, v2 = v[..., 0], v[..., 1]
    p2 = p * p
    return jnp.stack([p * v1 + m * p2 * (2.0 * m * v1 - v2), p2 * (0.5 * v2 - m * v1)], axis=-1)


NORMAL = ExpFamily(
    name="normal",
    dim=2,
    sufficient_stats=_normal_stats,
    log_base_measure=_normal_log_base,
    log_partition=_normal_log_partition,
    mean=_normal_mean,
    fisher=_normal_fisher,
    fisher_quadratic=_normal_fisher_quadratic,
    boundary_distance=_normal_boundary,
    sample=_normal_sample,
    project=_normal_project,
    kl_closed=_normal_kl,
    sample_score=normal_sample_score,
    fisher_solve=normal_fisher_solve,
    reparameterisation="normal",
)


# --------------------------------------------------------------------------- Gamma family (Poisson rates)
GAMMA_MIN = 1e-3
"""Smallest shape a and rate b kept by :data:`GAMMA`'s ``project``."""


def gamma_natural(shape_a, rate_b) -> jax.Array:
    """Natural parameter η = (a, −b) of Gamma(shape a, rate b) (base measure h(θ) = 1/θ).

    Args:
        shape_a: shape a > 0.
        rate_b: rate b > 0 (broadcast with ``shape_a``).

    Returns:
        (..., 2) natural parameters.
    """
    a, b = jnp.broadcast_arrays(jnp.asarray(shape_a, dtype=float), jnp.asarray(rate_b, dtype=float))
    return jnp.stack([a, -b], axis=-1)


def gamma_shape_rate(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(a, b) = (η₁, −η₂).

    Args:
        eta: (..., P) natural parameters.

    Returns:
        (a, b), each (...).
    """
    return eta[..., 0], -eta[..., 1]


def _gamma_stats(theta):
    return jnp.stack([jnp.log(theta), theta], axis=-1)


def _gamma_log_base(theta):
    return -jnp.log(theta)


def _gamma_log_partition(eta):
    """A(η) = log Γ(a) − a log b."""
    a, b = gamma_shape_rate(eta)
    return gammaln(a) - a * jnp.log(b)


def _gamma_mean(eta):
    """μ = (E log θ, E θ) = (ψ(a) − log b, a/b)."""
    a, b = gamma_shape_rate(eta)
    return jnp.stack([digamma(a) - jnp.log(b), a / b], axis=-1)


def _gamma_fisher(eta):
    """FIM = [[ψ′(a), 1/b], [1/b, a/b²]]."""
    a, b = gamma_shape_rate(eta)
    row0 = jnp.stack([polygamma(1, a), 1.0 / b], axis=-1)
    row1 = jnp.stack([1.0 / b, a / (b * b)], axis=-1)
    return jnp.stack([row0, row1], axis=-2)


def _gamma_fisher_quadratic(eta, d):
    """dᵀ FIM d = (d₁ b + a d₂)²/(a b²) + d₁² g(a), g(x) = ψ′(x) − 1/x > 0: no cancellation."""
    a, b = gamma_shape_rate(eta)
    d1, d2 = d[..., 0], d[..., 1]
    return (d1 * b + a * d2) ** 2 / (a * b * b) + d1 * d1 * numerics.trigamma_minus_reciprocal(a)


def _gamma_boundary(eta):
    """(a, b): the domain is a, b > 0."""
    return jnp.stack(gamma_shape_rate(eta), axis=-1)


def _gamma_sample(key, eta, shape=()):
    a, b = gamma_shape_rate(eta)
    return jax.random.gamma(key, a, shape, eta.dtype) / b


def _gamma_project(eta):
    """Clips a to >= GAMMA_MIN and b to >= GAMMA_MIN (never NaN)."""
    return jnp.stack([jnp.maximum(eta[..., 0], GAMMA_MIN), jnp.minimum(eta[..., 1], -GAMMA_MIN)], axis=-1)


def gamma_sample_score(key: jax.Array, eta: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """θ_s = G_s/b, G_s ~ Gamma(a, 1), and the scores T(θ) − μ = (log(G/a) − (ψ(a) − log a), (G − a)/b),

    both differences of small numbers: log(G/a) from :func:`_log_gamma_ratio` and ψ(a) − log a from
    :func:`jaxfed.numerics.digamma_minus_log` (the textbook log θ − ψ(a) + log b cancels for large a).

    Args:
        key: PRNG key.
        eta: (..., P) natural parameters.
        n_samples: S, the number of draws (static).

    Returns:
        (θ, scores): the draws (S, *event) and their scores (S, P).
    """
    a, b = gamma_shape_rate(eta)
    r = _log_gamma_ratio(key, a, (n_samples,))
    score = jnp.stack([r - numerics.digamma_minus_log(a), a * jnp.expm1(r) / b], axis=-1)
    return a * jnp.exp(r) / b, score


def gamma_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v = ((a v₁ − b v₂)/(a g(a)), b (−v₁ + b ψ′(a) v₂)/(a g(a))), using det FIM = a g(a)/b²
    with g(x) = ψ′(x) − 1/x (the 1/b² parts of ψ′(a)·a/b² − 1/b² cancel exactly).

    Args:
        eta: (..., P) natural parameters.
        v: (..., P) vectors.

    Returns:
        (..., P) FIM(η)⁻¹ v.
    """
    a, b = gamma_shape_rate(eta)
    g = numerics.trigamma_minus_reciprocal(a)
    v1, v2 = v[..., 0], v[..., 1]
    ag = a * g
    return jnp.stack([(a * v1 - b * v2) / ag, b * (b * (1.0 / a + g) * v2 - v1) / ag], axis=-1)


GAMMA = ExpFamily(
    name="gamma",
    dim=2,
    sufficient_stats=_gamma_stats,
    log_base_measure=_gamma_log_base,
    log_partition=_gamma_log_partition,
    mean=_gamma_mean,
    fisher=_gamma_fisher,
    fisher_quadratic=_gamma_fisher_quadratic,
    boundary_distance=_gamma_boundary,
    sample=_gamma_sample,
    project=_gamma_project,
    sample_score=gamma_sample_score,
    fisher_solve=gamma_fisher_solve,
)


# --------------------------------------------------------------------------- Dirichlet family (categorical)
def _dirichlet_stats(theta):
    return jnp.log(theta)


def _dirichlet_log_base(theta):
    return -jnp.sum(jnp.log(theta), axis=-1)


def _dirichlet_log_partition(eta):
    """A(η) = Σ_c log Γ(α_c) − log Γ(α_0) (the log-gamma sum, as for the Beta)."""
    return jnp.sum(gammaln(eta), axis=-1) - gammaln(jnp.sum(eta, axis=-1))


def _dirichlet_mean(eta):
    """μ_c = ψ(α_c) − ψ(α_0)."""
    return digamma(eta) - digamma(jnp.sum(eta, axis=-1, keepdims=True))


def _dirichlet_fisher(eta):
    """FIM = diag(ψ′(α)) − ψ′(α_0) 11ᵀ."""
    diag = polygamma(1, eta)
    total = polygamma(1, jnp.sum(eta, axis=-1))
    return diag[..., :, None] * jnp.eye(eta.shape[-1], dtype=eta.dtype) - total[..., None, None]


def _dirichlet_fisher_quadratic(eta, d):
    """dᵀ FIM d = Σ_c α_c (d_c/α_c − D/α_0)² + Σ_c d_c² g(α_c) − D² g(α_0), D = Σ_c d_c.

    With ψ′(x) = 1/x + g(x) the 1/x parts combine exactly into the first (non-negative) sum; the g
    parts are O(1/x²) (for C = 2 this is the Beta's form)."""
    total = jnp.sum(eta, axis=-1, keepdims=True)
    dsum = jnp.sum(d, axis=-1, keepdims=True)
    spread = jnp.sum(eta * (d / eta - dsum / total) ** 2, axis=-1)
    g = numerics.trigamma_minus_reciprocal(jnp.concatenate([eta, total], axis=-1))
    return spread + jnp.sum(d * d * g[..., :-1], axis=-1) - dsum[..., 0] ** 2 * g[..., -1]


def _dirichlet_boundary(eta):
    """The concentrations α: the domain is α_c > 0."""
    return eta


def _dirichlet_sample(key, eta, shape=()):
    return jax.random.dirichlet(key, eta, shape, eta.dtype)


def dirichlet_sample_score(key: jax.Array, eta: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """θ = G/Σ G with G_c ~ Gamma(α_c, 1), and the scores without cancellation:

        log θ_c − μ_c = [r_c − (ψ(α_c) − log α_c)] − [R − (ψ(α_0) − log α_0)],

    r_c = log(G_c/α_c) (:func:`_log_gamma_ratio`) and R = log(Σ G/α_0) = log1p(Σ_c (α_c/α_0) expm1(r_c))
    (a log-sum-exp where that sum approaches −1, i.e. every G_c far below its mean).

    Args:
        key: PRNG key.
        eta: (..., P) natural parameters.
        n_samples: S, the number of draws (static).

    Returns:
        (θ, scores): the draws (S, *event) and their scores (S, P).
    """
    total = jnp.sum(eta, axis=-1)
    r = _log_gamma_ratio(key, eta, (n_samples,))  # (S, C)
    w = eta / total
    near = jnp.log1p(jnp.sum(w * jnp.expm1(r), axis=-1))
    far = jax.nn.logsumexp(r, axis=-1, b=w)
    big_r = jnp.where(far > -0.5, near, far)
    g = numerics.digamma_minus_log(jnp.concatenate([eta, total[None]]))
    score = (r - g[:-1]) - (big_r - g[-1])[:, None]
    theta = jnp.exp(r - big_r[:, None] + jnp.log(w))
    return theta, score


def dirichlet_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v by Sherman–Morrison on diag(ψ′(α)) − ψ′(α_0) 11ᵀ:

        FIM⁻¹ v = h ⊙ v + ψ′(α_0) (hᵀv)/den · h,   h_c = 1/ψ′(α_c) = α_c/(1 + α_c g(α_c)),
        den = 1 − ψ′(α_0) Σ h_c = E/α_0 − g(α_0) Σ h_c,   E = Σ_c α_c² g(α_c)/(1 + α_c g(α_c)),

    with g(x) = ψ′(x) − 1/x: the 1/α_0 · α_0 parts of den cancel exactly, so it is formed from
    O(1/α) terms (for large α, E/α_0 ≈ C/(2α_0) against g(α_0) Σh ≈ 1/(2α_0)).

    Args:
        eta: (..., P) natural parameters.
        v: (..., P) vectors.

    Returns:
        (..., P) FIM(η)⁻¹ v.
    """
    total = jnp.sum(eta, axis=-1, keepdims=True)
    g = numerics.trigamma_minus_reciprocal(jnp.concatenate([eta, total], axis=-1))
    gc, g0 = g[..., :-1], g[..., -1:]
    h = eta / (1.0 + eta * gc)
    big_e = jnp.sum(eta * eta * gc / (1.0 + eta * gc), axis=-1, keepdims=True)
    sum_h = jnp.sum(h, axis=-1, keepdims=True)
    den = big_e / total - g0 * sum_h
    trigamma_total = 1.0 / total + g0
    return h * v + trigamma_total * jnp.sum(h * v, axis=-1, keepdims=True) / den * h


def _dirichlet_project(eta):
    """Clips each concentration to >= BETA_MIN_SHAPE (never NaN)."""
    return jnp.maximum(eta, BETA_MIN_SHAPE)


def dirichlet(n_categories: int) -> ExpFamily:
    """The Dirichlet family over C = ``n_categories`` categories (static), η = α ∈ (0, ∞)^C.

    Equal for equal C (the fields are module-level functions), so jit caches are shared.

    Args:
        n_categories: C >= 2.

    Returns:
        The :class:`~jaxfed.gfvl.expfam.ExpFamily` (named ``"dirichlet"``, of dimension C).

    Raises:
        ValueError: C is not an integer >= 2.
    """
    validation.integer("n_categories", n_categories, 2)
    return ExpFamily(
        name="dirichlet",
        dim=int(n_categories),
        sufficient_stats=_dirichlet_stats,
        log_base_measure=_dirichlet_log_base,
        log_partition=_dirichlet_log_partition,
        mean=_dirichlet_mean,
        fisher=_dirichlet_fisher,
        fisher_quadratic=_dirichlet_fisher_quadratic,
        boundary_distance=_dirichlet_boundary,
        sample=_dirichlet_sample,
        project=_dirichlet_project,
        sample_score=dirichlet_sample_score,
        fisher_solve=dirichlet_fisher_solve,
    )


# --------------------------------------------------------------------------- mean-field Gaussian on R^d
def _pairs(eta):
    """(..., 2d) natural parameters → (..., d, 2): coordinate j has the NORMAL parameters η[..., 2j:2j+2]."""
    return eta.reshape(eta.shape[:-1] + (-1, 2))


def _flat(x):
    return x.reshape(x.shape[:-2] + (-1,))


def _mf_stats(theta):
    return _flat(_normal_stats(theta))


def _mf_log_base(theta):
    return jnp.sum(_normal_log_base(theta), axis=-1)


def _mf_log_partition(eta):
    return jnp.sum(_normal_log_partition(_pairs(eta)), axis=-1)


def _mf_mean(eta):
    return _flat(_normal_mean(_pairs(eta)))


def _mf_fisher(eta):
    """Block diagonal: coordinate j's 2×2 NORMAL Fisher matrix in rows/columns 2j, 2j + 1."""
    blocks = _normal_fisher(_pairs(eta))  # (..., d, 2, 2)
    d = blocks.shape[-3]
    full = jnp.einsum("...iab,ij->...iajb", blocks, jnp.eye(d, dtype=blocks.dtype))
    return full.reshape(full.shape[:-4] + (2 * d, 2 * d))


def _mf_fisher_quadratic(eta, v):
    return jnp.sum(_normal_fisher_quadratic(_pairs(eta), _pairs(v)), axis=-1)


def _mf_boundary(eta):
    """The precisions p_j: the domain is p_j > 0."""
    return -2.0 * _pairs(eta)[..., 1]


def _mf_sample(key, eta, shape=()):
    m, p = normal_mean_precision(_pairs(eta))
    return m + numerics.standard_normal(key, shape + m.shape, eta.dtype) / jnp.sqrt(p)


def _mf_project(eta, min_precision=NORMAL_MIN_PRECISION):
    """Clips each precision to >= min_precision (never NaN)."""
    pairs = _pairs(eta)
    return _flat(pairs.at[..., 1].set(jnp.minimum(pairs[..., 1], -0.5 * min_precision)))


def _mf_kl(eta1, eta2):
    """Σ_j KL of coordinate j (the NORMAL closed form)."""
    return jnp.sum(_normal_kl(_pairs(eta1), _pairs(eta2)), axis=-1)


def mean_field_sample_score(key: jax.Array, eta: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """θ_s = m + ε_s ⊙ s (s_j = p_j^(−1/2), ε_s ~ N(0, I_d)) and per coordinate the NORMAL scores
    (ε s, 2m ε s + (ε² − 1) s²), flattened to (S, 2d).

    Args:
        key: PRNG key.
        eta: (..., P) natural parameters.
        n_samples: S, the number of draws (static).

    Returns:
        (θ, scores): the draws (S, *event) and their scores (S, P).
    """
    m, p = normal_mean_precision(_pairs(eta))
    s = 1.0 / jnp.sqrt(p)
    eps = numerics.standard_normal(key, (n_samples,) + m.shape, eta.dtype)
    score = jnp.stack([eps * s, 2.0 * m * eps * s + (eps * eps - 1.0) * s * s], axis=-1)
    return m + eps * s, _flat(score)


def mean_field_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v block by block (:func:`normal_fisher_solve` per coordinate): O(d), no d×d solve.

    Args:
        eta: (..., P) natural parameters.
        v: (..., P) vectors.

    Returns:
        (..., P) FIM(η)⁻¹ v.
    """
    return _flat(normal_fisher_solve(_pairs(eta), _pairs(v)))


@functools.cache
def mean_field_normal(n_dims: int, min_precision: float = NORMAL_MIN_PRECISION) -> ExpFamily:
    """q(θ) = Π_j N(θ_j; m_j, 1/p_j) on θ ∈ R^d, d = ``n_dims`` (static): the product of d :data:`NORMAL`
    families, η = (m_1 p_1, −p_1/2, …, m_d p_d, −p_d/2) of length P = 2d, FIM block diagonal with the
    NORMAL 2×2 blocks, so the natural gradient and the KL cost O(d). ``project`` floors each precision at
    ``min_precision`` > 0 (a model may know a better floor: e.g. the prior's precision when the loss is
    convex, since then the optimum is at least as precise as the prior). The same object for equal
    arguments (cached), so jit caches are shared.

    Args:
        n_dims: d >= 1.
        min_precision: the floor of each precision in ``project``.

    Returns:
        The :class:`~jaxfed.gfvl.expfam.ExpFamily`.
    """
    validation.integer("n_dims", n_dims, 1)
    validation.positive("min_precision", min_precision)
    return ExpFamily(
        name="mean_field_normal",
        dim=2 * int(n_dims),
        sufficient_stats=_mf_stats,
        log_base_measure=_mf_log_base,
        log_partition=_mf_log_partition,
        mean=_mf_mean,
        fisher=_mf_fisher,
        fisher_quadratic=_mf_fisher_quadratic,
        boundary_distance=_mf_boundary,
        sample=_mf_sample,
        project=_mf_project
        if min_precision == NORMAL_MIN_PRECISION
        else functools.partial(_mf_project, min_precision=min_precision),
        kl_closed=_mf_kl,
        sample_score=mean_field_sample_score,
        fisher_solve=mean_field_fisher_solve,
        reparameterisation="mean_field_normal",
    )


def mean_field_natural(mean, variance) -> jax.Array:
    """η of length 2d for Π_j N(m_j, v_j), from (..., d) means and variances.

    Args:
        mean: (..., d) means.
        variance: (..., d) variances > 0.

    Returns:
        (..., 2d) natural parameters.
    """
    return _flat(normal_natural(mean, variance))


def mean_field_moments(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(m, v): the (..., d) means and variances of the mean-field Gaussian with natural parameter η.

    Args:
        eta: (..., 2d) natural parameters.

    Returns:
        (m, v), each (..., d).
    """
    m, p = normal_mean_precision(_pairs(eta))
    return m, 1.0 / p


# the built-in families, registered when jaxfed.gfvl.expfam is imported
for _family in (BETA, NORMAL, GAMMA, dirichlet(3)):
    register(_family)
