"""Federated Bayesian logistic regression, a d-dimensional non-conjugate model for G-FVL.

Model: y ∈ {0, 1} with p(y | x, θ) = σ((2y − 1) xᵀθ), θ ∈ R^d, prior N(0, σ₀² I); agent k's loss is
L_k(θ) = Σ_n w_n softplus(−(2y_n − 1) x_nᵀθ) over its N_k points (the sum convention, w_n = 1). The
variational family is the mean-field Gaussian (:func:`jaxfed.gfvl.expfam.mean_field_normal`), so the local
update is the paper's natural-gradient step with the REINFORCE estimator in d dimensions, with the
Gaussian Fisher matrix in closed form (block diagonal, O(d) per solve): :func:`jaxfed.gfvl.natgrad_solver`.

Reference: the **centralised optimum** q* of the same family, min_q E_q[Σ_k L_k] + α KL(q ‖ p₀), which is
also the fixed point of G-FVL with exact gradients (each λ_k = −∇_μ E_q[L_k]/α at q*). :func:`centralised_optimum`
computes it by deterministic natural-gradient iterations in float64,

    η ← (1 − ρ) η + ρ (η₀ − ∇_μ E_q[L]/α),

where E_q[L] is exact to rounding: each term depends on θ only through a = xᵀθ ~ N(xᵀm, Σ_j x_j² v_j),
and E[softplus(a)] has a closed form plus an accelerated series truncated below 2e-16 relative
(:func:`normal_softplus_mean`, :func:`expected_loss`); ∇_μ follows from ∇_(m, v) by the chain rule
μ = (m, m² + v). The held-out metrics use the predictive p(y | x, q) = E_q[σ((2y − 1) a)] from the same terms
(:func:`normal_sigmoid_means`, :func:`predictive_metrics`).

Data: the Breast Cancer Wisconsin (Diagnostic) set shipped in ``jaxfed/data`` (source and licence in
``jaxfed/data/breast_cancer.md``), standardised with the training split's mean and deviation, plus an
intercept column; split over K agents i.i.d. (:func:`split_iid`) or with label skew (:func:`split_label_skew`).
"""

from __future__ import annotations

import functools
import importlib.resources
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import jaxcompat, validation
from jaxfed.gfvl import expfam, likelihoods

__all__ = [
    "Dataset",
    "load_breast_cancer",
    "train_test_split",
    "split_iid",
    "split_label_skew",
    "to_padded",
    "likelihood",
    "predictive_metrics",
]


class Dataset(NamedTuple):
    """Features with an intercept column and labels."""

    x: np.ndarray  # (N, d) standardised features, last column 1
    y: np.ndarray  # (N,) labels in {0, 1}


def load_breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    """The shipped data set: features (569, 30) float64 and labels (569,) (1 = benign, 0 = malignant).

    Returns:
        ``(x, y)``: (569, 30) float64 features and (569,) float64 labels.
    """
    with importlib.resources.files("jaxfed.data").joinpath("breast_cancer.csv").open() as f:
        table = np.loadtxt(f, delimiter=",", skiprows=1)
    return table[:, :-1], table[:, -1]


def check_data(x, y) -> None:
    """ValueError unless x is a finite (N, d) array and y holds N labels in {0, 1}."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n_points, _ = validation.shape("x", x, (None, None), "(N, d)")
    validation.shape("y", y, (n_points,), f"(N,) = ({n_points},)")
    validation.finite_array("x", x)
    bad = ~np.isin(y, (0.0, 1.0))
    validation.check("y", sorted(set(y[bad].tolist()))[:5], not np.any(bad), "labels in {0, 1}")


def train_test_split(x, y, test_fraction: float, seed: int, n_features: int | None = None) -> tuple[Dataset, Dataset]:
    """A seeded random split; features (the first ``n_features`` columns) standardised with the training
    rows' mean and standard deviation, and an intercept column appended (d = n_features + 1).

    Args:
        x: (N, d) finite features.
        y: (N,) labels in {0, 1}.
        test_fraction: share of the rows in the test set, in (0, 1).
        seed: integer seed of the permutation.
        n_features: keep the first ``n_features`` columns; None keeps all.

    Returns:
        ``(train, test)``, two :class:`Dataset`.

    Raises:
        ValueError: bad data (shape, non-finite, labels not 0/1) or ``test_fraction``.
    """
    check_data(x, y)
    validation.probability("test_fraction", test_fraction, low_open=True, high_open=True)
    x = np.asarray(x, float)[:, :n_features]
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = max(1, int(round(test_fraction * len(y))))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(0), x[train].std(0)
    std = np.where(std > 0, std, 1.0)

    def prepare(rows):
        return Dataset(np.hstack([(x[rows] - mean) / std, np.ones((len(rows), 1))]), np.asarray(y, float)[rows])

    return prepare(train), prepare(test)


def split_iid(n_points: int, n_agents: int, seed: int) -> np.ndarray:
    """Owner of each point: a random permutation dealt round-robin (sizes differ by at most one).

    Args:
        n_points: N.
        n_agents: K.
        seed: integer seed.

    Returns:
        (N,) int owner in [0, K).

    Examples:
        >>> sorted(split_iid(5, 2, 0).tolist())
        [0, 0, 0, 1, 1]
    """
    owner = np.empty(n_points, int)
    owner[np.random.default_rng(seed).permutation(n_points)] = np.arange(n_points) % n_agents
    return owner


def split_label_skew(y, n_agents: int, concentration: float, seed: int) -> np.ndarray:
    """Owner of each point with label skew: for each class, the agents' shares ~ Dirichlet(β 1_K), β =
    ``concentration`` > 0 (small β: each agent holds mostly one class; some agents may hold no point).

    Args:
        y: (N,) labels in {0, 1}.
        n_agents: K.
        concentration: β > 0.
        seed: integer seed.

    Returns:
        (N,) int owner in [0, K).

    Raises:
        ValueError: ``concentration`` is not > 0.
    """
    validation.positive("concentration", concentration)
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    owner = np.empty(len(y), int)
    for label in (0.0, 1.0):
        rows = rng.permutation(np.flatnonzero(y == label))
        shares = rng.dirichlet(np.full(n_agents, concentration))
        cuts = np.round(np.cumsum(shares)[:-1] * len(rows)).astype(int)
        for k, part in enumerate(np.split(rows, cuts)):
            owner[part] = k
    return owner


def to_padded(data: Dataset, owner, n_agents: int) -> likelihoods.PaddedData:
    """Per-agent padded points z = [x, y] (K, N_max, d + 1) with weight 1 on real points, 0 on padding.

    Args:
        data: the :class:`Dataset` (x (N, d), y (N,)).
        owner: (N,) owner of each point in [0, K).
        n_agents: K.

    Returns:
        :class:`jaxfed.gfvl.likelihoods.PaddedData` with z (K, N_max, d + 1) and weight (K, N_max).

    Raises:
        ValueError: ``owner`` does not have one entry per point.
    """
    owner = np.asarray(owner)
    validation.shape("owner", owner, data.y.shape, f"{data.y.shape} (one entry per point)")
    counts = np.bincount(owner, minlength=n_agents)
    n_max = max(1, int(counts.max()))
    z = np.zeros((n_agents, n_max, data.x.shape[1] + 1))
    weight = np.zeros((n_agents, n_max))
    for k in range(n_agents):
        rows = np.flatnonzero(owner == k)
        z[k, : len(rows), :-1], z[k, : len(rows), -1] = data.x[rows], data.y[rows]
        weight[k, : len(rows)] = 1.0
    return likelihoods.PaddedData(z=jnp.asarray(z), weight=jnp.asarray(weight))


def _signed_logits(z, theta):
    """(2y − 1) xᵀθ for points z = [x, y] (..., N, d + 1) and θ (S, d): (S, N)."""
    x, y = z[..., :-1], z[..., -1]
    return (2.0 * y - 1.0) * jnp.einsum("nd,sd->sn", x, theta)


@jax.custom_jvp
def _softplus(a):
    """log(1 + eᵃ) = max(a, 0) + log1p(e^(−|a|)): ``jax.nn.softplus``'s formula without its NaN branch
    (the same values, NaN in, NaN out; derivative σ(a), defined explicitly so that it is ½ at a = 0),
    which XLA's CPU backend runs about 1.7x faster on the (S, N) logits of a local iteration
    (benchmarks/gfvl_logistic.py)."""
    return jnp.maximum(a, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(a)))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (a,), (t,) = primals, tangents
    return _softplus(a), jax.nn.sigmoid(a) * t


def likelihood() -> likelihoods.Likelihood:
    """L(θ) = Σ_n w_n softplus(−(2y_n − 1) x_nᵀθ) on one agent's :class:`jaxfed.gfvl.likelihoods.PaddedData`;
    θ of shape (..., d).

    Returns:
        The logistic-regression :class:`jaxfed.gfvl.likelihoods.Likelihood`.
    """

    def loss(data, theta):
        theta = jnp.asarray(theta)
        flat = theta.reshape((-1, theta.shape[-1]))
        values = jnp.sum(data.weight * _softplus(-_signed_logits(data.z, flat)), axis=-1)
        return values.reshape(theta.shape[:-1])

    def loss_change(data, theta_ref, t):
        return loss(data, theta_ref + t) - loss(data, theta_ref)

    def pool(data):
        n_agents, n_max = data.weight.shape[:2]
        return likelihoods.PaddedData(z=data.z.reshape((n_agents * n_max, -1)), weight=data.weight.reshape(-1))

    return likelihoods.Likelihood(name="logistic", loss=loss, loss_change=loss_change, pool=pool)


# --------------------------------------------------------------------------- Gaussian expectations
# E[softplus(a)], E[σ(a)] and E[σ′(a)] for a ~ N(μ, s²) in closed form plus one accelerated series, rather than
# by a quadrature in t = (a − μ)/s: softplus(μ + st) has poles at distance π/s from the real t axis, so a fixed
# t-rule loses accuracy as s grows (32-node Gauss–Hermite, worst over μ: 4.6e-8 relative at s = 2, 1.7e-4 at
# s = 4, 2.0e-2 at s = 8).
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SERIES_TERMS = {4: 10, 8: 21}
"""Terms n of the accelerated alternating series by dtype itemsize: relative error <= 2/(3 + √8)^n, 4e-8 in
float32 and 2e-16 in float64 (:func:`_alternating_weights`)."""
# Beyond this argument erfcx(x) = e^(x²) erfc(x) comes from its asymptotic series (to k = 8; the first omitted
# term is 5e-13 relative at x = 9, 2e-21 at 26; tests/gfvl/test_logistic.py): erfc(x) underflows past it
# (jax.scipy.special.erfcx returns 0 on [9.1, 9.42] in float32, jax 0.10).
_ERFCX_ASYMPTOTIC_FROM = {4: 9.0, 8: 26.0}
_ERFCX_SERIES = (1.0, -0.5, 0.75, -1.875, 6.5625, -29.53125, 162.421875, -1055.7421875, 7918.06640625)
# ψ(y) = 1 − y R(y) by Laplace's continued fraction from this y on (40 levels: < 2e-9 relative at y = 2,
# < 2e-16 at y = 4), below by the plain difference, which cancels less there (tests/gfvl/test_logistic.py against
# mpmath: within 11 ulps in float32 and 34 ulps in float64 for all y >= 0).
_MILLS_FRACTION_FROM = {4: 2.0, 8: 4.0}
_MILLS_FRACTION_DEPTH = 40


@functools.cache
def _alternating_weights(n: int) -> np.ndarray:
    """Weights c_j of Cohen, Rodriguez Villegas and Zagier's acceleration (Experimental Math. 9, 2000,
    algorithm 1): Σ_{j>=0} (−1)^j a_j ≈ Σ_{j<n} c_j a_j (the signs are in c_j), with relative error
    <= 2/(3 + √8)^n whenever a_j = ∫₀¹ x^j dν(x) for a positive measure ν (their Proposition 1)."""
    d = (3.0 + math.sqrt(8.0)) ** n
    d = (d + 1.0 / d) / 2.0
    b, c, weights = -1.0, -d, []
    for j in range(n):
        c = b - c
        weights.append(c / d)
        b = (j + n) * (j - n) * b / ((j + 0.5) * (j + 1))
    return np.array(weights)


def _erfcx_large(x):
    """erfcx(x) ~ (1 + Σ_k (−1)^k (2k − 1)!!/(2x²)^k)/(x √π), k <= 8, for x past _ERFCX_ASYMPTOTIC_FROM."""
    t = 1.0 / (x * x)
    p = jnp.zeros_like(x)
    for c in _ERFCX_SERIES[::-1]:
        p = c + t * p
    return p / (x * math.sqrt(math.pi))


def _tail_means(mu, s):
    """(..., 2n): T_k⁺ = E[e^(−ka); a > 0] then T_k⁻ = E[e^(ka); a < 0], k = 1..n, for a ~ N(μ, s²).

    T_k^± = e^(k²s²/2 ∓ kμ) Φ(±z − ks) = ½ e^(−z²/2) erfcx(x), x = (ks ∓ z)/√2, z = μ/s. For x >= 0 that
    form (e^(−z²/2) <= 1, erfcx <= 1); for x < 0 the exponent ks(ks/2 ∓ z) <= 0 with erfc(x) ∈ [1, 2] (the
    erfcx form would round the larger exponents x² and z²/2 apart). One erfc and one exp per term serve
    both; e^(x²) erfc(x) keeps erfc's accuracy because erfc forms its e^(−x²) from the same rounded x².
    """
    n = _SERIES_TERMS[mu.dtype.itemsize]
    z = mu / s
    k = jnp.asarray(np.tile(np.arange(1.0, n + 1.0), 2), mu.dtype)
    sign = jnp.asarray(np.repeat([1.0, -1.0], n), mu.dtype)
    ks = k * s[..., None]
    zs = sign * z[..., None]
    x = (ks - zs) / _SQRT2
    far, large = x >= 0.0, x > _ERFCX_ASYMPTOTIC_FROM[mu.dtype.itemsize]
    ax = jnp.where(large, 0.0, jnp.abs(x))  # the other branches' arguments kept finite
    e = jax.scipy.special.erfc(ax)  # erfc(|x|); erfc(x) = 2 − erfc(|x|) for x < 0
    ex = jnp.exp(jnp.where(far, ax * ax, ks * (0.5 * ks - zs)))
    erfcx = jnp.where(large, _erfcx_large(jnp.where(large, x, 1.0)), ex * e)
    return 0.5 * jnp.where(far, jnp.exp(-0.5 * z * z)[..., None] * erfcx, ex * (2.0 - e))


def _mills_complement(y):
    """ψ(y) = 1 − y R(y) = e^(y²/2) ∫_y^∞ (t − y) e^(−t²/2) dt for y >= 0, R(y) = Φ(−y)/φ(y) the Mills ratio.

    ψ(y) ~ 1/y²: the difference cancels for large y, so from _MILLS_FRACTION_FROM on ψ = qR with Laplace's
    continued fraction R = 1/(y + q), q = 1/(y + 2/(y + 3/(y + …))) (then 1 − yR = q/(y + q)).
    """
    big = y >= _MILLS_FRACTION_FROM[y.dtype.itemsize]
    yb = jnp.where(big, y, _MILLS_FRACTION_FROM[y.dtype.itemsize])
    tail = jnp.zeros_like(yb)
    for j in range(_MILLS_FRACTION_DEPTH, 1, -1):
        tail = j / (yb + tail)
    q = 1.0 / (yb + tail)
    ys = jnp.where(big, 0.0, y)
    direct = 1.0 - ys * math.sqrt(math.pi / 2.0) * jaxcompat.erfcx(ys / _SQRT2)
    return jnp.where(big, q / (yb + q), direct)


def _positive_part_mean(mu, s):
    """E[max(a, 0)] = μΦ(z) + sφ(z), z = μ/s; for z < 0 as sφ(z) ψ(−z) (:func:`_mills_complement`), where the
    two terms cancel."""
    z = mu / s
    density = s * jnp.exp(-0.5 * z * z) / _SQRT_2PI
    return jnp.where(z >= 0.0, mu * jax.scipy.special.ndtr(z) + density, density * _mills_complement(jnp.abs(z)))


@functools.cache
def _series_weights(n: int) -> np.ndarray:
    """(2n, 3) weights on [T⁺, T⁻] (:func:`_tail_means`) for the three alternating series, columns
    Σ (−1)^(k+1) (T_k⁺ + T_k⁻)/k, Σ (−1)^(k+1) (T_k⁻ − T_k⁺) and Σ (−1)^(k+1) k (T_k⁺ + T_k⁻)."""
    c, k = _alternating_weights(n), np.arange(1.0, n + 1.0)
    return np.stack([np.tile(c / k, 2), np.concatenate([-c, c]), np.tile(c * k, 2)], axis=-1)


def _series(mu, s, columns):
    """The chosen columns of :func:`_series_weights` summed against the tail means: (..., len(columns)).

    Several columns by one matrix product, so that the (..., 2n) terms are computed once (XLA would otherwise
    fuse them into each sum: 4× the time in float64); one column by an elementwise product and a sum over the
    last axis, whose order does not depend on the leading (trial) axes."""
    weights = jnp.asarray(_series_weights(_SERIES_TERMS[mu.dtype.itemsize])[:, columns], mu.dtype)
    terms = _tail_means(mu, s)
    if len(columns) == 1:
        return jnp.sum(terms * weights[:, 0], axis=-1, keepdims=True)
    return terms @ weights


def _as_float_pair(mu, s):
    mu, s = jnp.asarray(mu), jnp.asarray(s)
    dtype = jnp.result_type(mu, s, float)
    return jnp.broadcast_arrays(mu.astype(dtype), s.astype(dtype))


@jax.custom_jvp
def _softplus_mean(mu, s):
    return _positive_part_mean(mu, s) + _series(mu, s, [0])[..., 0]


@_softplus_mean.defjvp
def _softplus_mean_jvp(primals, tangents):
    (mu, s), (d_mu, d_s) = primals, tangents
    terms = _series(mu, s, [0, 1, 2])
    value = _positive_part_mean(mu, s) + terms[..., 0]
    sigmoid = jax.scipy.special.ndtr(mu / s) + terms[..., 1]
    return value, sigmoid * d_mu + s * terms[..., 2] * d_s


def normal_softplus_mean(mu, s) -> jax.Array:
    """E[softplus(a)] = E[log(1 + eᵃ)] for a ~ N(μ, s²), s > 0, elementwise (broadcast), by

        E[softplus(a)] = E[max(a, 0)] + E[log1p(e^(−|a|))],
        E[max(a, 0)] = μΦ(z) + sφ(z),  z = μ/s,
        E[log1p(e^(−|a|))] = Σ_{k>=1} (−1)^(k+1) (T_k⁺ + T_k⁻)/k,  T_k⁺ = E[e^(−ka); a > 0], T_k⁻ = E[e^(ka); a < 0]

    (the series of log1p(x) at x = e^(−|a|) <= 1), with T_k^± = ½ e^(−z²/2) erfcx((ks ∓ z)/√2) in closed form
    (:func:`_tail_means`). The series is summed by Cohen–Rodriguez Villegas–Zagier acceleration: its terms
    E[X^k]/k, X = e^(−|a|) ∈ (0, 1], are moments of a positive measure on [0, 1], so n terms are within
    2/(3 + √8)^n relative of the sum for every μ and s (n = 10 in float32, 21 in float64).

    Accuracy (tests/gfvl/test_logistic.py against mpmath, |μ| <= 400, 1/64 <= s <= 50, results above 1e-30 in
    float32 and 1e-280 in float64): relative error < 5e-6 in float32 and < 3e-14 in float64 (measured worst
    2.0e-6 and 1.1e-14, both at |μ| >= 50, where rounding μ itself moves the result by |μ| ulps; below
    |μ| = 10, 9e-7 and 1.3e-15). The experiments reach |μ| <= 337 and 0.15 <= s <= 20 (gfvl-logistic with up
    to 30 features, prior variance 1; the points with |μ| > 50 have a negligible share of the loss).

    Differentiable (jvp): ∂/∂μ = E[σ(a)] = Φ(z) − Σ_k (−1)^(k+1) (T_k⁺ − T_k⁻) and ∂/∂s = s E[σ′(a)] with
    E[σ′(a)] = Σ_k (−1)^(k+1) k (T_k⁺ + T_k⁻) (σ′(a) = Σ_k (−1)^(k+1) k e^(−k|a|); its terms are not moments
    of a positive measure, so it has no a-priori bound: relative error < 1e-13 in float64 and < 1e-5 in
    float32 over the same grid, measured worst 3.3e-14 and 2.4e-6, at s <= 1/4), from the same terms.

    Cost: 2n erfc and exp per element, no more than the 32-node Gauss–Hermite rule it replaces
    (docs/performance.md).
    """
    return _softplus_mean(*_as_float_pair(mu, s))


def normal_sigmoid_means(mu, s) -> tuple[jax.Array, jax.Array]:
    """(E[σ(a)], E[σ(−a)]) = (E[σ(a)], 1 − E[σ(a)]) for a ~ N(μ, s²), s > 0, each to relative accuracy:

        E[σ(a)] = Φ(z) − S⁺ + S⁻,  E[σ(−a)] = Φ(−z) + S⁺ − S⁻,
        S^± = Σ_{k>=1} (−1)^(k+1) T_k^± (S⁺ = E[σ(−a); a > 0], S⁻ = E[σ(a); a < 0]),

    with T_k^± as in :func:`normal_softplus_mean` (moments again, the same bound); neither difference
    cancels by more than a factor 2 (Φ(z) − S⁺ = E[σ(a); a > 0] >= Φ(z)/2). Accuracy (tests/gfvl/test_logistic.py
    against mpmath, the grid of :func:`normal_softplus_mean`): relative error < 5e-6 in float32 and < 3e-14 in
    float64 (measured worst 2.5e-6 and 1.3e-14, at |μ| >= 100).
    """
    mu, s = _as_float_pair(mu, s)
    z = mu / s
    difference = _series(mu, s, [1])[..., 0]
    return jax.scipy.special.ndtr(z) + difference, jax.scipy.special.ndtr(-z) - difference


def expected_loss(data: likelihoods.PaddedData, mean, variance) -> jax.Array:
    """E_q[L(θ)] = Σ_n w_n E[softplus(−a_n)], a_n = (2y_n − 1) x_nᵀθ ~ N((2y_n − 1) x_nᵀm, Σ_j x_nj² v_j),
    by :func:`normal_softplus_mean` (data: one pooled :class:`jaxfed.gfvl.likelihoods.PaddedData`)."""
    x, y = data.z[..., :-1], data.z[..., -1]
    mu = (2.0 * y - 1.0) * (x @ mean)
    # padding rows (weight 0, x = 0) would put sqrt's infinite derivative at 0 into the gradient
    s = jnp.sqrt(jnp.where(data.weight > 0, (x * x) @ variance, 1.0))
    return jnp.sum(data.weight * normal_softplus_mean(-mu, s))


def centralised_optimum(data: likelihoods.PaddedData, prior_eta, alpha: float, n_iters: int = 4000, rho: float = 0.2):
    """q* = argmin over the mean-field Gaussian family of E_q[L] + α KL(q ‖ p₀), L the loss of the pooled
    ``data``, by ``n_iters`` deterministic natural-gradient iterations η ← (1 − ρ) η + ρ (η₀ − ∇_μ E_q[L]/α)
    from the prior, in float64 (run it under ``jax.enable_x64``). Mean-field coordinates of correlated
    features are coupled, so a full step (ρ = 1) oscillates: on the shipped data (10 features) ρ = 0.5
    ends in a limit cycle, ρ = 0.2 converges to a relative change of 0 in float64 within 4,000 iterations.

    Returns:
        (η*, the largest |Δη| of the last iteration relative to max |η*|: the convergence check).
    """
    prior_eta = jnp.asarray(prior_eta)

    def grad_mu(eta):
        m, v = expfam.mean_field_moments(eta)
        g_m, g_v = jax.grad(expected_loss, argnums=(1, 2))(data, m, v)
        # μ = (m, m² + v): ∂/∂μ₁ = ∂/∂m − 2m ∂/∂v, ∂/∂μ₂ = ∂/∂v
        return jnp.stack([g_m - 2.0 * m * g_v, g_v], axis=-1).reshape(eta.shape)

    def update(eta):
        return (1.0 - rho) * eta + rho * (prior_eta - grad_mu(eta) / alpha)

    eta = lax.fori_loop(0, n_iters - 1, lambda i, e: update(e), prior_eta)
    last = update(eta)
    return last, jnp.max(jnp.abs(last - eta)) / jnp.max(jnp.abs(last))


def predictive_metrics(eta, test: Dataset) -> tuple[jax.Array, jax.Array]:
    """Held-out mean log predictive density (1/N) Σ_n log E_q[σ((2y_n − 1) x_nᵀθ)] (:func:`normal_sigmoid_means`;
    log1p(−E[σ(−a)]) where E[σ(a)] > ½, so that confident correct predictions keep their digits) and the
    accuracy of the predictive's decision (1[xᵀm > 0], since the predictive exceeds ½ exactly when the
    mean logit is positive), for η (..., 2d).

    Args:
        eta: (..., 2d) mean-field Gaussian natural parameter.
        test: the held-out :class:`Dataset`.

    Returns:
        ``(log_predictive, accuracy)``, each of shape (...).
    """
    m, v = expfam.mean_field_moments(eta)
    x, y = jnp.asarray(test.x, m.dtype), jnp.asarray(test.y, m.dtype)
    sign = 2.0 * y - 1.0
    mu = sign * (m @ x.T)  # (..., N)
    s = jnp.sqrt(v @ (x * x).T)
    right, wrong = normal_sigmoid_means(mu, s)
    log_pred = jnp.where(right > 0.5, jnp.log1p(-wrong), jnp.log(right))
    return jnp.mean(log_pred, axis=-1), jnp.mean((mu > 0).astype(mu.dtype), axis=-1)
