"""Exponential families q_η(θ) = h(θ) exp(ηᵀT(θ) − A(η)) as bundles of pure functions.

A family is an :class:`ExpFamily` (a NamedTuple of functions, hashable, usable as a static argument).
Its optional closed forms are fields, ``None`` where the family has none: ``kl_closed`` (the
divergence), ``sample_score`` (draws with their scores T(θ) − μ(η)) and ``fisher_solve``
(FIM(η)⁻¹ v); the generic operations fall back to definitions from the other fields.

- :func:`log_prob`: log q_η(θ);
- :func:`kl`: KL(q_η1 ‖ q_η2), accurate in float32 where posteriors concentrate (< 2e-5 relative in float32
  and < 1e-12 in float64 down to KL = 1e-9, see :func:`kl`; tests/gfvl/test_expfam.py and
  tests/gfvl/test_expfam_families.py measure it against mpmath);
- the Fisher matrix is ``family.fisher(η) = ∇²A(η)`` and the mean parameters ``family.mean(η) = ∇A(η)``.

Families (conjugate to the likelihood in brackets), registered by name (:func:`register`, :func:`get`,
:func:`names`; :mod:`jaxfed.registry`; a user's family is registered the same way):

- :data:`BETA` [Bernoulli]: T(θ) = (log θ, log(1−θ)), η = (a, b), h(θ) = 1/(θ(1−θ)) on (0, 1),
  A(η) = log B(a, b). (Not η = (a − 1, b − 1) with h = 1: in float32 the shift by one rounds away
  the differences between small shapes that the KL and natural-gradient steps depend on.)
- :data:`NORMAL` [Normal with known variance]: T(θ) = (θ, θ²), η = (m p, −p/2) for mean m and
  precision p, h = 1/√(2π), A(η) = η₁²/(2p) − ½ log p.
- :data:`GAMMA` [Poisson]: T(θ) = (log θ, θ), η = (a, −b) for shape a and rate b, h(θ) = 1/θ on
  θ > 0, A(η) = log Γ(a) − a log b.
- :func:`dirichlet` (C) [Categorical]: T(θ) = log θ, η = (α_1..α_C), h(θ) = 1/Π θ_c on the simplex,
  A(η) = Σ log Γ(α_c) − log Γ(α_0), α_0 = Σ α_c. C = 2 is the Beta family.
- :func:`mean_field_normal` (d): the product of d NORMAL families on θ ∈ R^d (the variational family of
  the non-conjugate logistic-regression model, :mod:`jaxfed.gfvl.logistic`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import digamma, gammaln, polygamma

from jaxfed import numerics, validation
from jaxfed.registry import Registry

__all__ = [
    "ExpFamily",
    "REPARAMETERISATIONS",
    "BETA",
    "NORMAL",
    "GAMMA",
    "dirichlet",
    "mean_field_normal",
    "register",
    "get",
    "names",
    "log_prob",
    "kl",
    "beta_natural",
    "normal_natural",
    "gamma_natural",
]


class ExpFamily(NamedTuple):
    """An exponential family; every function broadcasts over leading axes.

    Shapes: θ has the family's event shape per draw (a scalar, or (C,) for the Dirichlet); η, μ are
    (..., P); the Fisher matrix is (..., P, P). ``kl_closed``, ``sample_score`` and ``fisher_solve``
    are optional closed forms (``None``: the generic definition is used). ``reparameterisation``
    (optional) says that the family is a Gaussian whose draws are θ = m + ε/√p, so that
    :func:`jaxfed.gfvl.natgrad.reparameterisation_gradient` applies to it, and how θ is laid out: one of
    :data:`REPARAMETERISATIONS`, "normal" (θ a scalar, η = (m p, −p/2), as :data:`NORMAL`) or
    "mean_field_normal" (θ of shape (d,), η the d pairs (m_j p_j, −p_j/2), as :func:`mean_field_normal`);
    ``None``: the family has no reparameterisation gradient.
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
    # (η1, η2) -> KL(q_η1 ‖ q_η2) in closed form, accurate where the generic kl is not needed
    kl_closed: Callable | None = None
    # (key, η, S) -> (θ (S, *event), T(θ) − μ(η) (S, P)): draws and their scores without cancellation
    sample_score: Callable | None = None
    # (η, v) -> FIM(η)⁻¹ v (default: a P×P linear solve)
    fisher_solve: Callable | None = None
    # "normal" or "mean_field_normal" (REPARAMETERISATIONS): a Gaussian with the reparameterisation gradient
    reparameterisation: str | None = None


REPARAMETERISATIONS = ("normal", "mean_field_normal")
"""The values of :attr:`ExpFamily.reparameterisation`: a Gaussian family's layout of θ and η, that of
:data:`NORMAL` (θ a scalar) or of :func:`mean_field_normal` (θ of shape (d,))."""


def log_prob(family: ExpFamily, eta: jax.Array, theta: jax.Array) -> jax.Array:
    """log q_η(θ) = ηᵀT(θ) + log h(θ) − A(η)."""
    t = family.sufficient_stats(theta)
    return jnp.sum(eta * t, axis=-1) + family.log_base_measure(theta) - family.log_partition(eta)


# --------------------------------------------------------------------------- KL divergence
def _gauss_legendre_unit(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1.0), 0.5 * w


# Nodes per half-segment of the integral form, by itemsize of the dtype: < 2e-5 relative in float32 and
# < 1e-12 in float64 for boundary ratios up to _GRADED_LIMIT (Beta against mpmath, tests/gfvl/test_expfam.py:
# measured 9.6e-6 and 2.9e-14 at ratios up to 9e3, 5.3e-7 and 1.1e-13 below ratio e).
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
    """KL(q_η1 ‖ q_η2) to < 2e-5 relative in float32 and < 1e-12 in float64, for KL >= 1e-9.

    Measured against mpmath (worst relative error, float32 / float64): Beta (its closed form, :func:`_beta_kl`)
    4.1e-6 / 3.8e-14, and 5.6e-6 in float32 on JAX 0.12, whose XLA rounds float32 log and log1p differently
    (shapes 0.1 to 3e5, changing up to 9e3-fold; 4.3e-7 / 2.1e-15 where every shape is at least 4;
    tests/gfvl/test_expfam.py), Normal 5.0e-7 / 5.9e-16,
    Gamma 3.9e-7 / 3.4e-14, Dirichlet 1.0e-6 / 6.2e-14 (300 cases each, flat to concentrated,
    tests/gfvl/test_expfam_families.py).

    The cancellation-free integral form (:func:`kl_integral`) throughout, except where a boundary
    coordinate changes by more than 1e4 times its smaller end value: there the divergence is
    large and the direct Bregman form (:func:`kl_direct`) is both accurate and what the graded
    quadrature cannot resolve. A family's ``kl_closed`` replaces both where it is set. Returns
    exactly 0 for equal arguments and never a negative value.
    """
    eta1, eta2 = jnp.broadcast_arrays(jnp.asarray(eta1), jnp.asarray(eta2))
    if family.kl_closed is not None:
        return jnp.maximum(family.kl_closed(eta1, eta2), 0.0)
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
    # Not jax.scipy.special.betaln: it loses up to 2.4e-7 relative accuracy even in float64 (jax 0.10, at
    # shapes (11.3, 0.5)); the log-gamma sum is within 13 ulps of its terms' magnitude (tests/gfvl/test_expfam.py).
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


def _beta_kl(eta1, eta2):
    """KL(Beta(a₁, b₁) ‖ Beta(a₂, b₂)) in closed form, split into terms that do not cancel.

    With c = a + b, the KL is D(a) + D(b) − D(c) for D the Bregman divergence of log Γ from the first
    shape to the second. Writing log Γ(x) = x log x − x + G(x), the x log x parts of a, b and c combine
    exactly into c₂ times the Bernoulli divergence of the means p = a/c:
    c₂ KL(p₂ ‖ p₁) = (c₂/c₁)(a₁ ψ(δ/a₁) + b₁ ψ(−δ/b₁)) with ψ(r) = (1 + r) log(1 + r) − r
    (:func:`jaxfed.numerics.xlogx_bregman`) and δ = (Δa b₁ − Δb a₁)/c₂ (so that 1 + δ/a₁ = a₂c₁/(a₁c₂)),
    which holds the large terms; the rest is D_G(a) + D_G(b) − D_G(c)
    (:func:`jaxfed.numerics.log_gamma_remainder_bregman`), of the size of the Fisher quadratic's 1/x² part.
    Measured against 50-digit references (tests/gfvl/test_expfam.py): float32 within 4.1e-6 relative
    (5.6e-6 on JAX 0.12, whose XLA rounds float32 log and log1p differently; 4.3e-7 where every shape is at
    least 4), float64 within 3.8e-14. A few logarithms and polynomials,
    several times cheaper than the quadrature of :func:`kl_integral` (the conjugate G-FVL trial's KL).
    """
    a1, b1 = beta_shapes(eta1)
    a2, b2 = beta_shapes(eta2)
    c1, c2 = a1 + b1, a2 + b2
    da, db = a2 - a1, b2 - b1
    cross = da * b1 - db * a1  # a₂c₁ − a₁c₂ without forming either product
    # Each function below is evaluated once, on its arguments stacked along a new leading axis (the
    # two Bernoulli terms; the remainders of a, b and c): one copy of its series in the program
    # instead of one per call (the Beta KL was ~2,300 of the Fig. 3 trial's ~3,300 StableHLO lines).
    first, second = jnp.stack([a1, b1]), jnp.stack([a2, b2])
    psi = numerics.xlogx_bregman(jnp.stack([cross, -cross]) / (first * c2), (second * c1) / (first * c2))
    bernoulli = (c2 / c1) * (a1 * psi[0] + b1 * psi[1])
    r = numerics.log_gamma_remainder_bregman(
        jnp.stack([a1, b1, c1]), jnp.stack([a2, b2, c2]), jnp.stack([da, db, da + db])
    )
    return bernoulli + r[0] + r[1] - r[2]


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


_LOG4 = 1.3862943611198906  # log 4
# Proposals per round of beta_sample_score, R = ⌈S/0.88 + 6√(0.13 S)⌉: at the acceptance rate of Cheng's BB
# for large shapes (0.88) a round misses S acceptances with probability <= 3.6e-5 for S >= 10 (2.0e-5 at
# S = 10, 1.2e-6 at 100, 1.4e-7 at 1000; tests/gfvl/test_expfam.py), so a vmapped batch of 1000 trials at S = 10
# needs a second round about 2% of the time. BC (a shape <= 1) accepts less (0.33 at shapes (0.1, 5)) and
# takes more rounds.
_ACCEPT_RATE = 0.88


def _open_uniform(key: jax.Array, shape: tuple, dtype) -> jax.Array:
    """U ∈ (0, 1) strictly (so log U, log(1 − U) and logit U are finite): (k + 1/2)·2^-m with k uniform
    on m = mantissa bits (23 in float32), so that k + 1/2 is exact in the dtype."""
    nmant = jnp.finfo(dtype).nmant
    word = jnp.uint64 if jnp.dtype(dtype).itemsize == 8 else jnp.uint32
    bits = jax.random.bits(key, shape, word) >> (8 * jnp.dtype(word).itemsize - nmant)
    return (bits.astype(dtype) + 0.5) * jnp.asarray(2.0**-nmant, dtype)


def _cheng_proposals(key: jax.Array, a, b, n: int):
    """n proposals of Cheng's (1978) Beta(a, b) rejection samplers: BB if min(a, b) > 1, else BC.

    Both draw u1, u2 ~ U(0, 1), z = u1² u2, v = β logit(u1) and w = s e^v, and accept iff
        BB (β = √((α−2)/(2 lo hi − α)), γ = lo + 1/β, s = lo):  γ v − log 4 − α L >= log z,
        BC (β = 1/lo, s = hi):                                    α (v − L) − log 4 >= log z,
    with lo = min(a, b), hi = max(a, b), α = a + b and L = log((o + s e^v)/α), o the other shape.
    (Cheng's squeeze tests only short-cut these comparisons; a vectorised sampler does not need them.)
    The shape multiplied by e^v gets the sample s e^v/(o + s e^v), so its log deviation from the mean
    ratio s/α is v − L and the other's is −L; L is formed as log1p(s·expm1(v)/α) for v < 1 and as
    v + log1p(o·expm1(−v)/α) above, so neither cancels nor overflows.

    Returns:
        accept (n,), and the deviations log θ − log(a/α), log(1 − θ) − log(b/α) of each proposal (n,).
    """
    dtype = jnp.result_type(a, b)
    lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
    total = a + b
    bb = lo > 1.0
    u = _open_uniform(key, (2, n), dtype)
    u1, u2 = u[0], u[1]
    log_u1 = jnp.log(u1)
    log_z = 2.0 * log_u1 + jnp.log(u2)
    beta_bb = jnp.sqrt((total - 2.0) / jnp.where(bb, 2.0 * lo * hi - total, 1.0))
    v = jnp.where(bb, beta_bb, 1.0 / lo) * (log_u1 - jnp.log1p(-u1))
    s, o = jnp.where(bb, lo, hi), jnp.where(bb, hi, lo)
    low = v < 1.0
    log1p_term = jnp.log1p(jnp.where(low, s, o) * jnp.expm1(jnp.where(low, v, -v)) / total)
    dev_other = -jnp.where(low, log1p_term, v + log1p_term)  # −L
    dev_s = jnp.where(low, v - log1p_term, -log1p_term)  # v − L
    accept_bb = (lo + 1.0 / beta_bb) * v - _LOG4 + total * dev_other >= log_z
    accept_bc = total * dev_s - _LOG4 >= log_z
    accept = jnp.where(bb, accept_bb, accept_bc)
    a_is_s = jnp.where(bb, a <= b, a > b)
    return accept, jnp.where(a_is_s, dev_s, dev_other), jnp.where(a_is_s, dev_other, dev_s)


def _beta_deviations(key: jax.Array, a, b, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """n_samples exact Beta(a, b) draws as (log θ − log(a/α), log(1 − θ) − log(b/α)).

    Rounds of R proposals (R sized for the usual acceptance rate) run in a ``while_loop`` until
    n_samples are accepted; the first accepted proposals in draw order are kept (the proposals are
    i.i.d., so the kept ones are i.i.d. Beta). Round i uses the key ``fold_in(key, i)``.
    """
    dtype = jnp.result_type(a, b)
    per_round = int(math.ceil(n_samples / _ACCEPT_RATE + 6.0 * math.sqrt(0.13 * n_samples)))

    def more(carry):
        return carry[1] < n_samples

    def round_(carry):
        i, filled, devs = carry
        accept, da, db = _cheng_proposals(jax.random.fold_in(key, i), a, b, per_round)
        rank = filled + jnp.cumsum(accept, dtype=jnp.int32) - 1
        slot = jnp.where(accept & (rank < n_samples), rank, n_samples)  # n_samples: dropped
        devs = devs.at[slot].set(jnp.stack([da, db], axis=-1), mode="drop")
        return i + 1, jnp.minimum(filled + jnp.sum(accept, dtype=jnp.int32), n_samples), devs

    empty = jnp.zeros((n_samples, 2), dtype)
    _, _, devs = lax.while_loop(more, round_, (jnp.int32(0), jnp.int32(0), empty))
    return devs[:, 0], devs[:, 1]


def beta_sample_score(key: jax.Array, eta: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """S exact draws θ_s ~ Beta(a, b), η = (a, b), and their scores T(θ_s) − μ(η), without cancellation.

    The sampler (Cheng's BB/BC, :func:`_cheng_proposals`) returns each draw as its log deviations
    from the mean ratios, log θ − log(a/c) and log(1 − θ) − log(b/c) (c = a + b), and
    μ(η) − (log(a/c), log(b/c)) = (g(a) − g(c), g(b) − g(c)) with g(x) = ψ(x) − log x
    (:func:`jaxfed.numerics.digamma_minus_log`), so the score is a difference of small numbers.
    Two uniforms per proposal and about 1.13 proposals per draw, half the random bits of a ratio of
    two Marsaglia–Tsang gamma variates; under ``vmap`` it is 7–9× faster than ``jax.random.beta``
    (which also splits a key per variate), see benchmarks/gfvl_nonconjugate.py.

    Returns:
        θ of shape (n_samples,), clipped into the open interval (0, 1) so that losses stay finite,
        and the scores (n_samples, 2).
    """
    a, b = beta_shapes(eta)
    c = a + b
    dev_a, dev_b = _beta_deviations(key, a, b, n_samples)
    g_a, g_b, g_c = numerics.digamma_minus_log(jnp.stack([a, b, c]))  # one copy of the series
    score = jnp.stack([dev_a - (g_a - g_c), dev_b - (g_b - g_c)], axis=-1)
    eps = jnp.finfo(eta.dtype).eps
    theta = jnp.clip(jnp.exp(jnp.log(a / c) + dev_a), jnp.finfo(eta.dtype).tiny, 1.0 - eps / 2)
    return theta, score


def beta_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v for Beta(a, b) in closed form, without the cancellation of the determinant.

    With g(x) = ψ′(x) − 1/x (:func:`jaxfed.numerics.trigamma_minus_reciprocal`) and c = a + b:
    F₁₁ = b/(ac) + g(a) − g(c), F₂₂ = a/(bc) + g(b) − g(c), F₁₂ = −1/c − g(c), and the 1/x parts of
    det F cancel exactly, leaving
        det F = a g(a)/(bc) + b g(b)/(ac) − c g(c)/(ab) + g(a) g(b) − g(c)(g(a) + g(b)) > 0,
    a sum of O(1/(abc)) terms instead of a difference of O(1/(ab)) ones. Then
    F⁻¹ v = (F₂₂ v₁ − F₁₂ v₂, F₁₁ v₂ − F₁₂ v₁)/det F.
    """
    a, b = beta_shapes(eta)
    c = a + b
    # One call on (a, b, c): a single copy of the series in the compiled graph.
    ga, gb, gc = numerics.trigamma_minus_reciprocal(jnp.stack([a, b, c]))
    f11 = b / (a * c) + ga - gc
    f22 = a / (b * c) + gb - gc
    f12 = -1.0 / c - gc
    det = a * ga / (b * c) + b * gb / (a * c) - c * gc / (a * b) + ga * gb - gc * (ga + gb)
    v1, v2 = v[..., 0], v[..., 1]
    return jnp.stack([f22 * v1 - f12 * v2, f11 * v2 - f12 * v1], axis=-1) / det[..., None]


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
    kl_closed=_beta_kl,
    sample_score=beta_sample_score,
    fisher_solve=beta_fisher_solve,
)


@jax.jit
def beta_kl(a1, b1, a2, b2) -> jax.Array:
    """KL(Beta(a1, b1) ‖ Beta(a2, b2)), elementwise with broadcasting (see :func:`kl`).

    Direct form: log B(a2, b2) − log B(a1, b1) + (a1 − a2)ψ(a1) + (b1 − b2)ψ(b1)
    + (a2 − a1 + b2 − b1)ψ(a1 + b1).
    """
    return kl(BETA, beta_natural(a1, b1), beta_natural(a2, b2))


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
    """Natural parameter η = (m/v, −1/(2v)) of N(m, v)."""
    mean, variance = jnp.broadcast_arrays(jnp.asarray(mean, dtype=float), jnp.asarray(variance, dtype=float))
    return jnp.stack([mean / variance, -0.5 / variance], axis=-1)


def normal_mean_precision(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(m, p): mean m = η₁/p and precision p = −2η₂ of the Normal with natural parameter η (not its
    moments: the second is 1/variance)."""
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
    (the textbook θ² − (m² + 1/p) cancels the m² when the posterior concentrates)."""
    m, p = normal_mean_precision(eta)
    s = 1.0 / jnp.sqrt(p)
    eps = jax.random.normal(key, (n_samples,), eta.dtype)
    score = jnp.stack([eps * s, 2.0 * m * eps * s + (eps * eps - 1.0) * s * s], axis=-1)
    return m + eps * s, score


def normal_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v = (p v₁ + m p² (2m v₁ − v₂), p² (v₂/2 − m v₁)), from the closed-form inverse
    [[2m²p² + p, −m p²], [−m p², p²/2]] (det FIM = 2/p³, never formed)."""
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
    """Natural parameter η = (a, −b) of Gamma(shape a, rate b) (base measure h(θ) = 1/θ)."""
    a, b = jnp.broadcast_arrays(jnp.asarray(shape_a, dtype=float), jnp.asarray(rate_b, dtype=float))
    return jnp.stack([a, -b], axis=-1)


def gamma_shape_rate(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(a, b) = (η₁, −η₂)."""
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
    """
    a, b = gamma_shape_rate(eta)
    r = _log_gamma_ratio(key, a, (n_samples,))
    score = jnp.stack([r - numerics.digamma_minus_log(a), a * jnp.expm1(r) / b], axis=-1)
    return a * jnp.exp(r) / b, score


def gamma_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v = ((a v₁ − b v₂)/(a g(a)), b (−v₁ + b ψ′(a) v₂)/(a g(a))), using det FIM = a g(a)/b²
    with g(x) = ψ′(x) − 1/x (the 1/b² parts of ψ′(a)·a/b² − 1/b² cancel exactly)."""
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
    (a log-sum-exp where that sum approaches −1, i.e. every G_c far below its mean)."""
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
    O(1/α) terms (for large α, E/α_0 ≈ C/(2α_0) against g(α_0) Σh ≈ 1/(2α_0))."""
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
    (ε s, 2m ε s + (ε² − 1) s²), flattened to (S, 2d)."""
    m, p = normal_mean_precision(_pairs(eta))
    s = 1.0 / jnp.sqrt(p)
    eps = numerics.standard_normal(key, (n_samples,) + m.shape, eta.dtype)
    score = jnp.stack([eps * s, 2.0 * m * eps * s + (eps * eps - 1.0) * s * s], axis=-1)
    return m + eps * s, _flat(score)


def mean_field_fisher_solve(eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v block by block (:func:`normal_fisher_solve` per coordinate): O(d), no d×d solve."""
    return _flat(normal_fisher_solve(_pairs(eta), _pairs(v)))


@functools.cache
def mean_field_normal(n_dims: int, min_precision: float = NORMAL_MIN_PRECISION) -> ExpFamily:
    """q(θ) = Π_j N(θ_j; m_j, 1/p_j) on θ ∈ R^d, d = ``n_dims`` (static): the product of d :data:`NORMAL`
    families, η = (m_1 p_1, −p_1/2, …, m_d p_d, −p_d/2) of length P = 2d, FIM block diagonal with the
    NORMAL 2×2 blocks, so the natural gradient and the KL cost O(d). ``project`` floors each precision at
    ``min_precision`` > 0 (a model may know a better floor: e.g. the prior's precision when the loss is
    convex, since then the optimum is at least as precise as the prior). The same object for equal
    arguments (cached), so jit caches are shared.
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
    """η of length 2d for Π_j N(m_j, v_j), from (..., d) means and variances."""
    return _flat(normal_natural(mean, variance))


def mean_field_moments(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(m, v): the (..., d) means and variances of the mean-field Gaussian with natural parameter η."""
    m, p = normal_mean_precision(_pairs(eta))
    return m, 1.0 / p


# --------------------------------------------------------------------------- the registry and validation
_FAMILIES: Registry[ExpFamily] = Registry("family")


def register(family: ExpFamily) -> ExpFamily:
    """Adds ``family`` under ``family.name`` (replacing one of that name) and returns it. A user's family
    needs the required fields of :class:`ExpFamily`; the non-conjugate solver
    (:func:`jaxfed.gfvl.natgrad_solver`, REINFORCE) uses ``sample`` with the generic score and Fisher
    solve where ``sample_score`` and ``fisher_solve`` are None, and the reparameterisation gradient
    where ``reparameterisation`` names the family's Gaussian layout (:data:`REPARAMETERISATIONS`)."""
    validation.check("family", type(family).__name__, isinstance(family, ExpFamily), "an ExpFamily")
    layouts = (None, *REPARAMETERISATIONS)
    validation.one_of(f"family {family.name!r}: reparameterisation", family.reparameterisation, layouts)
    return _FAMILIES.register(family.name, family)


def get(name: str) -> ExpFamily:
    """The family called ``name``; ValueError listing the registered ones otherwise.

    >>> get("gamma").dim, names()
    (2, ('beta', 'normal', 'gamma', 'dirichlet'))
    """
    return _FAMILIES.get(name)


def names() -> tuple[str, ...]:
    """The registered families' names, built-ins first ("dirichlet" is C = 3; :func:`dirichlet` makes others)."""
    return _FAMILIES.names()


for _family in (BETA, NORMAL, GAMMA, dirichlet(3)):
    register(_family)


def check_natural(family: ExpFamily, eta, name: str = "eta") -> None:
    """ValueError unless the concrete ``eta`` has last axis of length P = ``family.dim``, is finite and lies
    inside the natural-parameter domain (every boundary coordinate > 0, which makes FIM(η) positive
    definite). Traced values are left alone."""
    if validation.is_traced(eta):
        return
    eta = np.asarray(eta, dtype=float)
    ok = eta.ndim > 0 and eta.shape[-1] == family.dim
    validation.check(name, eta.shape, ok, f"an array of shape (..., {family.dim}) for family {family.name!r}")
    validation.finite_array(name, eta)
    with jax.ensure_compile_time_eval():  # concrete even when called while tracing (e.g. inside a trial)
        inside = np.asarray(family.boundary_distance(jnp.asarray(eta))) > 0
    allowed = f"inside the natural-parameter domain of {family.name!r} (where its Fisher matrix is positive definite)"
    validation.check(name, eta.tolist(), bool(np.all(inside)), allowed)
