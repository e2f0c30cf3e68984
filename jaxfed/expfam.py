"""Exponential families q_η(θ) = h(θ) exp(ηᵀT(θ) − A(η)) as bundles of pure functions.

A family is an :class:`ExpFamily` (a NamedTuple of functions, hashable, usable as a static argument).
Generic operations built on it:

- :func:`log_prob`: log q_η(θ);
- :func:`kl`: KL(q_η1 ‖ q_η2), accurate to ~1e-5 relative in float32 down to 1e-9 and below,
  by a graded-quadrature integral form where the textbook formula cancels;
- the Fisher matrix is ``family.fisher(η) = ∇²A(η)`` and the mean parameters ``family.mean(η) = ∇A(η)``.

:data:`BETA` is complete: T(θ) = (log θ, log(1−θ)), η = (a, b), h(θ) = 1/(θ(1−θ)) on (0, 1),
A(η) = log B(a, b). (Not η = (a − 1, b − 1) with h = 1: in float32 the shift by one rounds away
the differences between small shapes that the KL and natural-gradient steps depend on.)
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln, polygamma

from jaxfed import numerics

__all__ = [
    "ExpFamily",
    "BETA",
    "log_prob",
    "kl",
    "kl_direct",
    "kl_integral",
    "beta_natural",
    "beta_shapes",
    "beta_kl",
]


class ExpFamily(NamedTuple):
    """An exponential family; every function broadcasts over leading axes.

    Shapes: θ is a scalar per draw for the families here; η, μ are (..., P); the Fisher matrix
    is (..., P, P).
    """

    name: str
    dim: int  # P, the size of η
    sufficient_stats: Callable  # T(θ) -> (..., P)
    log_base_measure: Callable  # log h(θ) -> (...)
    log_partition: Callable  # A(η) -> (...)
    mean: Callable  # μ(η) = ∇A(η) -> (..., P)
    fisher: Callable  # FIM(η) = ∇²A(η) -> (..., P, P)
    fisher_quadratic: Callable  # (η, d) -> dᵀ FIM(η) d, evaluated without cancellation
    boundary_distance: Callable  # η -> (..., M) coordinates, linear in η, positive inside the domain
    sample: Callable  # (key, η, shape) -> θ of shape `shape` (broadcast with η[..., 0])
    project: Callable  # η -> η clipped into the natural-parameter domain


def log_prob(family: ExpFamily, eta: jax.Array, theta: jax.Array) -> jax.Array:
    """log q_η(θ) = ηᵀT(θ) + log h(θ) − A(η)."""
    t = family.sufficient_stats(theta)
    return jnp.sum(eta * t, axis=-1) + family.log_base_measure(theta) - family.log_partition(eta)


# --------------------------------------------------------------------------- KL divergence
def _gauss_legendre_unit(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1.0), 0.5 * w


# Nodes per half-segment of the integral form, by itemsize of the dtype: ~1e-5 relative in
# float32 and ~1e-10 in float64 for boundary ratios up to _GRADED_LIMIT (tests/test_expfam.py).
_NODES_PER_HALF = {4: 8, 8: 24}
# Beyond this ratio between a boundary coordinate's change and its smaller end value the graded
# quadrature loses accuracy; such divergences are large (the shape of the density changes by
# orders of magnitude), which is where the direct formula is accurate.
_GRADED_LIMIT = 1e4


def kl_direct(family: ExpFamily, eta1: jax.Array, eta2: jax.Array) -> jax.Array:
    """Bregman form KL(q_η1 ‖ q_η2) = A(η2) − A(η1) − (η2 − η1)ᵀ μ(η1).

    Exact in exact arithmetic, but it subtracts log-partition values that can be thousands of
    times larger than the result: use :func:`kl`.
    """
    delta = eta2 - eta1
    return family.log_partition(eta2) - family.log_partition(eta1) - jnp.sum(delta * family.mean(eta1), -1)


def _pole_distances(family: ExpFamily, eta1: jax.Array, eta2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Distances ρ0, ρ1 from the ends t = 0 and t = 1 of the segment η1 + tΔ to the nearest zero
    of a boundary coordinate (a pole of the Fisher matrix), in units of the segment length.

    A coordinate b(t) = b1 + t (b2 − b1) vanishes at t = −b1/(b2 − b1) when it grows, and at
    t = 1 + b2/(b1 − b2) when it shrinks.
    """
    b1, b2 = family.boundary_distance(eta1), family.boundary_distance(eta2)
    db = b2 - b1
    far = jnp.asarray(1e8, db.dtype)
    rho0 = jnp.min(jnp.where(db > 0, b1 / jnp.where(db > 0, db, 1.0), far), axis=-1, initial=far)
    rho1 = jnp.min(jnp.where(db < 0, b2 / jnp.where(db < 0, -db, 1.0), far), axis=-1, initial=far)
    tiny = jnp.finfo(db.dtype).tiny
    return jnp.clip(rho0, tiny, far), jnp.clip(rho1, tiny, far)


def _graded_half(rho: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Map u ∈ [0, 1] → t ∈ [0, 1/2], t = ρ((1 + 1/(2ρ))^u − 1), and dt/du.

    The nodes cluster geometrically toward t = 0 when the integrand has a pole at t = −ρ close
    to the segment, and tend to the linear map for large ρ. Since t + ρ = ρ R^u, a factor
    (t + ρ)^-k becomes smooth in u.
    """
    log_r = jnp.log1p(0.5 / rho)
    return rho * jnp.expm1(u * log_r), rho * log_r * jnp.exp(u * log_r)


def kl_integral(family: ExpFamily, eta1: jax.Array, eta2: jax.Array) -> jax.Array:
    """Integral form KL = ∫₀¹ (1 − t) Δᵀ FIM(η1 + tΔ) Δ dt with Δ = η2 − η1.

    The integrand is non-negative and evaluated by ``family.fisher_quadratic`` without
    cancellation. Each half of [0, 1] uses Gauss–Legendre nodes (8 per half in float32, 24 in
    float64) graded toward the end nearest a pole (see :func:`_pole_distances`).
    """
    eta1, eta2 = jnp.broadcast_arrays(eta1, eta2)
    delta = eta2 - eta1
    dtype = delta.dtype
    u, w = (jnp.asarray(x, dtype) for x in _gauss_legendre_unit(_NODES_PER_HALF[dtype.itemsize]))
    rho0, rho1 = _pole_distances(family, eta1, eta2)
    t0, jac0 = _graded_half(rho0[..., None], u)
    s1, jac1 = _graded_half(rho1[..., None], u)
    t = jnp.concatenate([t0, 1.0 - s1], axis=-1)  # (..., 2n)
    weight = jnp.concatenate([jac0 * w, jac1 * w], axis=-1) * (1.0 - t)
    path = eta1[..., None, :] + t[..., None] * delta[..., None, :]  # (..., 2n, P)
    quad = family.fisher_quadratic(path, delta[..., None, :])  # (..., 2n)
    return jnp.sum(weight * quad, axis=-1)


@functools.partial(jax.jit, static_argnums=0)
def kl(family: ExpFamily, eta1: jax.Array, eta2: jax.Array) -> jax.Array:
    """KL(q_η1 ‖ q_η2), accurate to ~1e-5 relative in float32 (1e-9 in float64), down to 1e-9.

    The cancellation-free integral form (:func:`kl_integral`) throughout, except where a boundary
    coordinate changes by more than 1e4 times its smaller end value: there the divergence is
    large and the direct Bregman form (:func:`kl_direct`) is both accurate and what the graded
    quadrature cannot resolve. Returns exactly 0 for equal arguments and never a negative value.
    """
    eta1, eta2 = jnp.broadcast_arrays(jnp.asarray(eta1), jnp.asarray(eta2))
    rho0, rho1 = _pole_distances(family, eta1, eta2)
    far_apart = jnp.minimum(rho0, rho1) < 1.0 / _GRADED_LIMIT
    value = jnp.where(far_apart, kl_direct(family, eta1, eta2), kl_integral(family, eta1, eta2))
    return jnp.maximum(value, 0.0)


# --------------------------------------------------------------------------- Beta family
def beta_natural(a, b) -> jax.Array:
    """Natural parameter η = (a, b) of Beta(a, b) (base measure h(θ) = 1/(θ(1−θ)))."""
    a, b = jnp.broadcast_arrays(jnp.asarray(a, dtype=float), jnp.asarray(b, dtype=float))
    return jnp.stack([a, b], axis=-1)


def beta_shapes(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Shapes (a, b) = η of the Beta with natural parameter η."""
    return eta[..., 0], eta[..., 1]


def _beta_stats(theta):
    return jnp.stack([jnp.log(theta), jnp.log1p(-theta)], axis=-1)


def _beta_log_base(theta):
    return -jnp.log(theta) - jnp.log1p(-theta)


def _beta_log_partition(eta):
    # Not jax.scipy.special.betaln: it loses ~1e-8 relative accuracy (even in float64) when one
    # shape is small; the log-gamma sum is accurate to a few ulps of its terms.
    a, b = beta_shapes(eta)
    return gammaln(a) + gammaln(b) - gammaln(a + b)


def _beta_mean(eta):
    """μ = E[T(θ)] = (ψ(a) − ψ(a+b), ψ(b) − ψ(a+b))."""
    a, b = beta_shapes(eta)
    psi_ab = digamma(a + b)
    return jnp.stack([digamma(a) - psi_ab, digamma(b) - psi_ab], axis=-1)


def _beta_fisher(eta):
    """FIM = [[ψ′(a) − ψ′(a+b), −ψ′(a+b)], [−ψ′(a+b), ψ′(b) − ψ′(a+b)]]."""
    a, b = beta_shapes(eta)
    ta, tb, tab = polygamma(1, a), polygamma(1, b), polygamma(1, a + b)
    row0 = jnp.stack([ta - tab, -tab], axis=-1)
    row1 = jnp.stack([-tab, tb - tab], axis=-1)
    return jnp.stack([row0, row1], axis=-2)


def _beta_fisher_quadratic(eta, d):
    """dᵀ FIM d = d₁²ψ′(a) + d₂²ψ′(b) − (d₁+d₂)²ψ′(a+b), rearranged to avoid cancellation.

    With ψ′(x) = 1/x + g(x): the 1/x parts combine exactly into (d₁b − d₂a)²/(ab(a+b)) ≥ 0,
    and the g parts are O(1/x²), so no term is much larger than the result.
    """
    a, b = beta_shapes(eta)
    d1, d2 = d[..., 0], d[..., 1]
    g = numerics.trigamma_minus_reciprocal
    return (d1 * b - d2 * a) ** 2 / (a * b * (a + b)) + d1**2 * g(a) + d2**2 * g(b) - (d1 + d2) ** 2 * g(a + b)


def _beta_boundary(eta):
    """The shapes (a, b) = η: the domain is a, b > 0."""
    return eta


def _beta_sample(key, eta, shape=()):
    a, b = beta_shapes(eta)
    return jax.random.beta(key, a, b, shape=shape, dtype=eta.dtype)


BETA_MIN_SHAPE = 1e-3
"""Smallest Beta shape kept by :data:`BETA`'s ``project``: a, b >= 1e-3."""


def _beta_project(eta):
    """Clips each shape to >= BETA_MIN_SHAPE (never NaN)."""
    return jnp.maximum(eta, BETA_MIN_SHAPE)


BETA = ExpFamily(
    name="beta",
    dim=2,
    sufficient_stats=_beta_stats,
    log_base_measure=_beta_log_base,
    log_partition=_beta_log_partition,
    mean=_beta_mean,
    fisher=_beta_fisher,
    fisher_quadratic=_beta_fisher_quadratic,
    boundary_distance=_beta_boundary,
    sample=_beta_sample,
    project=_beta_project,
)


@jax.jit
def beta_kl(a1, b1, a2, b2) -> jax.Array:
    """KL(Beta(a1, b1) ‖ Beta(a2, b2)), elementwise with broadcasting (see :func:`kl`).

    Direct form: log B(a2, b2) − log B(a1, b1) + (a1 − a2)ψ(a1) + (b1 − b2)ψ(b1)
    + (a2 − a1 + b2 − b1)ψ(a1 + b1).
    """
    return kl(BETA, beta_natural(a1, b1), beta_natural(a2, b2))
