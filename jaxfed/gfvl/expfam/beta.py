"""The Beta family (a part of :mod:`jaxfed.gfvl.expfam`, which users import): :data:`BETA`.

T(θ) = (log θ, log(1−θ)), η = (a, b), h(θ) = 1/(θ(1−θ)) on (0, 1), A(η) = log B(a, b), conjugate
to the Bernoulli likelihood. Its closed forms: the KL written so that nothing cancels
(``_beta_kl``, docs/gfvl.md A4b), draws with their scores by Cheng's rejection sampler
(:func:`beta_sample_score`) and the 2×2 Fisher solve (:func:`beta_fisher_solve`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import digamma, gammaln, polygamma

from jaxfed import numerics
from jaxfed.gfvl.expfam.generic import (
    ExpFamily,
    kl,
)


# --------------------------------------------------------------------------- Beta family
def beta_natural(a, b) -> jax.Array:
    """Natural parameter η = (a, b) of Beta(a, b) (base measure h(θ) = 1/(θ(1−θ))).

    Args:
        a: shape a > 0.
        b: shape b > 0 (broadcast with ``a``).

    Returns:
        (..., 2) natural parameters.
    """
    a, b = jnp.broadcast_arrays(jnp.asarray(a, dtype=float), jnp.asarray(b, dtype=float))
    return jnp.stack([a, b], axis=-1)


def beta_shapes(eta: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Shapes (a, b) = η of the Beta with natural parameter η.

    Args:
        eta: (..., P) natural parameters.

    Returns:
        (a, b), each (...).
    """
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
    two Marsaglia–Tsang gamma variates; under ``vmap`` it is faster than ``jax.random.beta``
    (which also splits a key per variate; measured by benchmarks/gfvl_nonconjugate.py).

    Args:
        key: PRNG key.
        eta: (..., P) natural parameters.
        n_samples: S, the number of draws (static).

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

    Args:
        eta: (..., 2) natural parameters.
        v: (..., 2) vectors.

    Returns:
        (..., 2) FIM(η)⁻¹ v.
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

    Args:
        a1: shape a of the first Beta.
        b1: shape b of the first Beta.
        a2: shape a of the second Beta.
        b2: shape b of the second Beta.

    Returns:
        The divergences, the arguments' broadcast shape.
    """
    return kl(BETA, beta_natural(a1, b1), beta_natural(a2, b2))
