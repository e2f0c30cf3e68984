"""Natural-gradient machinery of non-conjugate G-FVL, pure and vmap-able.

For q_η in an exponential family (:mod:`jaxfed.expfam`) and a loss L(θ):

- :func:`reinforce_gradient`: the score-function (REINFORCE) estimate of ∇_η E_{q_η}[L],
      ĝ = (1/S) Σ_s (L(θ_s) − c_s) (T(θ_s) − μ(η)),   θ_s ~ q_η i.i.d.,
  with a constant baseline c_s = c or the leave-one-out mean c_s = (1/(S−1)) Σ_{s'≠s} L(θ_s');
  both keep ĝ unbiased because c_s does not depend on θ_s.
- :func:`fisher_solve`: FIM(η)⁻¹ v (the Beta family in closed form, others by a P×P solve).
- :func:`natural_gradient_step`: one step on the local free energy F(η) = E_q[L] + α KL(q_η ‖ q_{η_cav}),
      η ← Π(η − ρ (FIM(η)⁻¹ ĝ + α (η − η_cav))),
  where FIM(η)⁻¹ ∇_η F = FIM⁻¹ ĝ + α (η − η_cav) because ∇_η KL(q_η ‖ q_cav) = FIM(η)(η − η_cav).
- :func:`fisher_preconditioner`, :func:`keep_in_domain_updates`, :func:`natural_gradient_descent`: the
  same step as optax ``GradientTransformation``\\ s, to combine with optax schedules.

**Projection Π** (:func:`keep_in_domain`): the proposal is mapped into the natural-parameter domain by
``family.project`` (for Beta: each shape clipped to >= 1e-3, :data:`jaxfed.expfam.BETA_MIN_SHAPE`);
a proposal with a non-finite entry (only possible from a non-finite loss) is discarded and η kept.
So the state never holds a NaN or an infinity, whatever ĝ, ρ or α.

**Beta accuracy.** Near convergence the shapes are ~10³ and two things cancel in float32:
the score T(θ) − μ(η) (two numbers ≈ −0.36 differing by ~0.02) and the determinant of the Fisher
matrix (its leading 1/x terms cancel exactly). With c = 0 an error δμ in μ(η) biases ĝ by
−E[L]·δμ, and FIM⁻¹ (eigenvalue ~4·10⁵ along a + b at Beta(420, 180)) turns float32's
δμ ≈ 5e-7 (ψ(420) − ψ(600)) with E[L] ≈ 60 into a bias of ~10 in the natural gradient, as large as
its signal near convergence. The Beta closed forms here avoid both cancellations (see
:func:`beta_sample_score` and :func:`beta_fisher_solve`).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from jaxfed import expfam, numerics

__all__ = [
    "BASELINES",
    "beta_sample_score",
    "beta_fisher_solve",
    "sample_score",
    "fisher_solve",
    "reinforce_gradient",
    "keep_in_domain",
    "natural_gradient_step",
    "free_energy_gradient",
    "fisher_preconditioner",
    "keep_in_domain_updates",
    "natural_gradient_descent",
    "check_positive",
    "check_count",
    "RHO_SCHEDULES",
    "rho_schedule",
]

BASELINES = ("constant", "leave-one-out")
"""Baseline kinds of :func:`reinforce_gradient`; "constant" uses the value ``c``."""


# --------------------------------------------------------------------------- validation helpers
def check_positive(name: str, value) -> None:
    """ValueError unless ``value`` > 0; traced values (sweep points) are left to the config."""
    if isinstance(value, jax.core.Tracer):
        return
    if not float(value) > 0.0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_count(name: str, value, minimum: int = 1) -> None:
    """ValueError unless ``value`` is an integer >= ``minimum`` (a static size)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


# --------------------------------------------------------------------------- Beta closed forms
_LOG4 = 1.3862943611198906  # log 4
# Proposals per round of beta_sample_score: S acceptances at rate 0.88 (Cheng's BB for large
# shapes) are then missing with probability < 1e-6 for S >= 10, so a second round is rare even
# across a vmapped batch of 1000 trials.
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
    a, b = expfam.beta_shapes(eta)
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
    a, b = expfam.beta_shapes(eta)
    c = a + b
    # One call on (a, b, c): a single copy of the series in the compiled graph.
    ga, gb, gc = numerics.trigamma_minus_reciprocal(jnp.stack([a, b, c]))
    f11 = b / (a * c) + ga - gc
    f22 = a / (b * c) + gb - gc
    f12 = -1.0 / c - gc
    det = a * ga / (b * c) + b * gb / (a * c) - c * gc / (a * b) + ga * gb - gc * (ga + gb)
    v1, v2 = v[..., 0], v[..., 1]
    return jnp.stack([f22 * v1 - f12 * v2, f11 * v2 - f12 * v1], axis=-1) / det[..., None]


class _ClosedForms(NamedTuple):
    sample_score: Callable  # (key, η, S) -> (θ (S,), T(θ) − μ(η) (S, P))
    fisher_solve: Callable  # (η, v) -> FIM(η)⁻¹ v


# Families with accurate closed forms; every other family uses the generic definitions.
_CLOSED_FORMS = {expfam.BETA: _ClosedForms(beta_sample_score, beta_fisher_solve)}


# --------------------------------------------------------------------------- generic operations
def sample_score(key: jax.Array, family: expfam.ExpFamily, eta: jax.Array, n_samples: int):
    """S draws θ_s ~ q_η and their scores T(θ_s) − μ(η) = ∇_η log q_η(θ_s).

    Returns:
        θ (n_samples, …) and scores (n_samples, P).
    """
    if family in _CLOSED_FORMS:
        return _CLOSED_FORMS[family].sample_score(key, eta, n_samples)
    theta = family.sample(key, eta, (n_samples,))
    return theta, family.sufficient_stats(theta) - family.mean(eta)


def fisher_solve(family: expfam.ExpFamily, eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v: Beta in closed form (:func:`beta_fisher_solve`), otherwise a P×P linear solve."""
    if family in _CLOSED_FORMS:
        return _CLOSED_FORMS[family].fisher_solve(eta, v)
    return jnp.linalg.solve(family.fisher(eta), v[..., None])[..., 0]


def reinforce_gradient(
    key: jax.Array,
    family: expfam.ExpFamily,
    eta: jax.Array,
    loss: Callable[[jax.Array], jax.Array],
    n_samples: int,
    baseline: str = "constant",
    c=0.0,
) -> jax.Array:
    """REINFORCE estimate of ∇_η E_{q_η}[L]: ĝ = (1/S) Σ_s (L(θ_s) − c_s)(T(θ_s) − μ(η)).

    Args:
        key: PRNG key.
        family: the exponential family of q.
        eta: (P,) natural parameter.
        loss: θ (S,) -> L(θ) (S,).
        n_samples: S (static), >= 1 (>= 2 for the leave-one-out baseline).
        baseline: "constant" (c_s = ``c``; the paper's Fig. 4 uses c = 0) or "leave-one-out"
            (c_s = mean of the other S − 1 losses; lower variance, needs no tuning).
        c: the constant baseline (may be traced); ignored by "leave-one-out".

    Returns:
        (P,) unbiased estimate of ∇_η E_q[L].
    """
    check_count("n_samples", n_samples, 2 if baseline == "leave-one-out" else 1)
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    theta, score = sample_score(key, family, eta, n_samples)
    losses = loss(theta)
    if baseline == "leave-one-out":
        # L_s − (Σ L − L_s)/(S − 1) = S/(S − 1) (L_s − mean L)
        centred = (losses - jnp.mean(losses)) * (n_samples / (n_samples - 1))
    else:
        centred = losses - c
    return jnp.mean(centred[:, None] * score, axis=0)


def keep_in_domain(family: expfam.ExpFamily, eta: jax.Array, proposal: jax.Array) -> jax.Array:
    """Π: ``family.project(proposal)``, or ``eta`` if the proposal has a non-finite entry."""
    finite = jnp.all(jnp.isfinite(proposal), axis=-1, keepdims=True)
    return jnp.where(finite, family.project(jnp.where(finite, proposal, eta)), eta)


def natural_gradient_step(
    family: expfam.ExpFamily, eta: jax.Array, grad: jax.Array, cavity: jax.Array, rho, alpha
) -> jax.Array:
    """η ← Π(η − ρ (FIM(η)⁻¹ ĝ + α (η − η_cav)))  (Π: :func:`keep_in_domain`).

    Args:
        family: the exponential family of q.
        eta: (P,) current natural parameter.
        grad: (P,) ĝ, an estimate of ∇_η E_{q_η}[L] (e.g. :func:`reinforce_gradient`).
        cavity: (P,) η_{−k}.
        rho: learning rate ρ > 0 (may be traced).
        alpha: temperature α > 0 (may be traced).
    """
    direction = fisher_solve(family, eta, grad) + alpha * (eta - cavity)
    return keep_in_domain(family, eta, eta - rho * direction)


# --------------------------------------------------------------------------- learning-rate schedules
RHO_SCHEDULES = ("constant", "cosine", "inverse:<t0>")
"""Named forms of :func:`rho_schedule` (for configs and the command line)."""


def rho_schedule(spec: str, rho: float, n_slots: int):
    """A learning-rate schedule ρ_i from a name, as an optax schedule ``count -> ρ`` (count = i − 1):

    - ``"constant"``: ρ_i = ρ (returned as the float ρ, the fixed-rate path);
    - ``"cosine"``: ``optax.cosine_decay_schedule(ρ, n_slots)``, ρ_i = ρ (1 + cos(π (i−1)/n_slots))/2,
      from ρ down to 0 at the last slot;
    - ``"inverse:<t0>"``: ρ_i = ρ t0/(t0 + i − 1), a Robbins–Monro decay (Σ ρ_i = ∞, Σ ρ_i² < ∞) that
      halves the rate after t0 slots; t0 > 0.

    Raises:
        ValueError naming the parameter, the value and the allowed forms.
    """
    allowed = f"one of {', '.join(RHO_SCHEDULES)} (t0 > 0)"
    if spec == "constant":
        return rho
    if spec == "cosine":
        return optax.cosine_decay_schedule(rho, max(int(n_slots), 1))
    head, _, tail = str(spec).partition(":")
    try:
        t0 = float(tail) if head == "inverse" else float("nan")
    except ValueError:
        t0 = float("nan")
    if not (math.isfinite(t0) and t0 > 0):
        raise ValueError(f"rho_schedule must be {allowed}, got {spec!r}")

    def inverse(count):
        return rho * t0 / (t0 + count)

    return inverse


# --------------------------------------------------------------------------- optax
def free_energy_gradient(
    family: expfam.ExpFamily, eta: jax.Array, grad: jax.Array, cavity: jax.Array, alpha
) -> jax.Array:
    """Euclidean gradient of F(η) = E_q[L] + α KL(q_η ‖ q_cav): ĝ + α FIM(η)(η − η_cav).

    This is the gradient to feed :func:`natural_gradient_descent`.
    """
    return grad + alpha * jnp.einsum("...ij,...j->...i", family.fisher(eta), eta - cavity)


def _params_transformation(name: str, transform) -> optax.GradientTransformation:
    """Stateless optax transformation updates ← transform(updates, params); ``params`` required."""

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError(f"{name} needs params (the natural parameters η)")
        return transform(updates, params), state

    return optax.GradientTransformation(init_fn, update_fn)


def fisher_preconditioner(family: expfam.ExpFamily) -> optax.GradientTransformation:
    """optax transformation: updates ← FIM(params)⁻¹ updates (params are natural parameters η).

    Stateless; ``update`` requires ``params``. Put it first in a chain so that the scalings after it
    (learning rate, schedules) act on the natural gradient.
    """
    return _params_transformation(
        "fisher_preconditioner", lambda updates, params: fisher_solve(family, params, updates)
    )


def keep_in_domain_updates(family: expfam.ExpFamily) -> optax.GradientTransformation:
    """optax transformation: updates ← Π(params + updates) − params (Π: :func:`keep_in_domain`).

    Put it last in a chain so that ``optax.apply_updates`` lands inside the domain (up to the
    rounding of params + (Π − params), one ulp of the floor).
    """
    return _params_transformation(
        "keep_in_domain_updates", lambda updates, params: keep_in_domain(family, params, params + updates) - params
    )


def natural_gradient_descent(family: expfam.ExpFamily, learning_rate) -> optax.GradientTransformation:
    """Fisher-preconditioned gradient descent on η as an optax optimizer.

    ``chain(fisher_preconditioner, sgd(learning_rate), keep_in_domain_updates)``: fed the Euclidean
    gradient of :func:`free_energy_gradient`, one update is exactly :func:`natural_gradient_step`,
    η ← Π(η − ρ (FIM⁻¹ ĝ + α (η − η_cav))). ``learning_rate`` is a float or an optax schedule
    (``optax.exponential_decay`` etc.); the schedule counts updates, i.e. local iterations.
    """
    return optax.chain(fisher_preconditioner(family), optax.sgd(learning_rate), keep_in_domain_updates(family))
