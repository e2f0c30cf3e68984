"""Natural-gradient machinery of non-conjugate G-FVL, pure and vmap-able.

For q_η in an exponential family (:mod:`jaxfed.gfvl.expfam`) and a loss L(θ):

- :func:`reinforce_gradient`: the score-function (REINFORCE) estimate of ∇_η E_{q_η}[L],
      ĝ = (1/S) Σ_s (L(θ_s) − c_s) (T(θ_s) − μ(η)),   θ_s ~ q_η i.i.d.,
  with a constant baseline c_s = c, the leave-one-out mean c_s = (1/(S−1)) Σ_{s'≠s} L(θ_s'), or a
  per-coordinate control variate through the score's known mean (``"control-variate"``); all keep ĝ
  unbiased because c_s does not depend on θ_s.
- :func:`reparameterisation_gradient`: the pathwise estimate for the Gaussian families (a family whose
  ``reparameterisation`` field names its layout, :data:`jaxfed.gfvl.expfam.REPARAMETERISATIONS`), and
  :func:`estimate_gradient` / :func:`estimator_variance` over every estimator (:data:`ESTIMATORS`).
- :func:`fisher_solve`: FIM(η)⁻¹ v (the family's closed form where it carries one, else a P×P solve).
- :func:`natural_gradient_step`: one step on the local free energy F(η) = E_q[L] + α KL(q_η ‖ q_{η_cav}),
      η ← Π(η − ρ (FIM(η)⁻¹ ĝ + α (η − η_cav))),
  where FIM(η)⁻¹ ∇_η F = FIM⁻¹ ĝ + α (η − η_cav) because ∇_η KL(q_η ‖ q_cav) = FIM(η)(η − η_cav).
- :func:`fisher_preconditioner`, :func:`keep_in_domain_updates`, :func:`natural_gradient_descent`: the
  same step as optax ``GradientTransformation``\\ s, to combine with optax schedules.

**Projection Π** (:func:`keep_in_domain`): the proposal is mapped into the natural-parameter domain by
``family.project`` (for Beta: each shape clipped to >= 1e-3, :data:`jaxfed.gfvl.expfam.BETA_MIN_SHAPE`);
a proposal with a non-finite entry (only possible from a non-finite loss) is discarded and η kept.
So the state never holds a NaN or an infinity, whatever ĝ, ρ or α.

**Beta accuracy.** Near convergence the shapes are ~10³ and two things cancel in float32:
the score T(θ) − μ(η) (two numbers ≈ −0.36 differing by ~0.02) and the determinant of the Fisher
matrix (its leading 1/x terms cancel exactly). With c = 0 an error δμ in μ(η) biases ĝ by
−E[L]·δμ, and FIM⁻¹ (eigenvalue ~4·10⁵ along a + b at Beta(420, 180)) turns float32's
δμ ≈ 5e-7 (ψ(420) − ψ(600)) with E[L] ≈ 60 into a bias of ~10 in the natural gradient, as large as
its signal near convergence. The Beta closed forms avoid both cancellations (see
:func:`beta_sample_score` and :func:`beta_fisher_solve`, the fields of :data:`jaxfed.gfvl.expfam.BETA`); the
other families carry their own (:mod:`jaxfed.gfvl.expfam`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxfed import numerics, validation
from jaxfed.gfvl import expfam

# The Beta closed forms live with the family (its ``sample_score`` and ``fisher_solve`` fields);
# re-exported here, where they are documented as the natural gradient's accuracy fixes.

__all__ = [
    "BASELINES",
    "ESTIMATORS",
    "reparameterisable",
    "estimate_gradient",
    "estimator_variance",
    "natural_gradient_estimate",
    "natural_step",
    "sample_score",
    "fisher_solve",
    "reinforce_gradient",
    "fisher_preconditioner",
    "keep_in_domain_updates",
    "natural_gradient_descent",
    "RHO_SCHEDULES",
    "rho_schedule",
]

BASELINES = ("constant", "leave-one-out", "control-variate")
"""Baseline kinds of :func:`reinforce_gradient`; "constant" uses the value ``c``."""
ESTIMATORS = BASELINES + ("reparameterisation",)
"""Gradient estimators of :func:`estimate_gradient`: REINFORCE with one of :data:`BASELINES`, or the
reparameterisation gradient (the Gaussian families only: :func:`reparameterisable`)."""


def _gaussian(family: expfam.ExpFamily) -> str | None:
    """The family's Gaussian layout, one of :data:`jaxfed.gfvl.expfam.REPARAMETERISATIONS` ("normal": θ a scalar,
    "mean_field_normal": θ of shape (d,)): its ``reparameterisation`` field, or for a family made without
    one but with the built-in Gaussians' closed-form draws (``sample_score``), theirs; None for another family."""
    if family.reparameterisation is not None:
        return family.reparameterisation
    if family.sample_score is expfam.normal_sample_score:
        return "normal"
    if family.sample_score is expfam.mean_field_sample_score:
        return "mean_field_normal"
    return None


def reparameterisable(family: expfam.ExpFamily) -> bool:
    """True for a family the reparameterisation gradient handles: a Gaussian whose draws are θ = m + ε/√p,
    declared by its ``reparameterisation`` field (:attr:`jaxfed.gfvl.expfam.ExpFamily.reparameterisation`;
    :data:`jaxfed.gfvl.expfam.NORMAL` and :func:`jaxfed.gfvl.expfam.mean_field_normal` set it, and so may a
    registered family).

    Args:
        family: an :class:`jaxfed.gfvl.expfam.ExpFamily`.

    Returns:
        A Python bool.
    """
    return _gaussian(family) in expfam.REPARAMETERISATIONS


def check_reparameterisable(family: expfam.ExpFamily) -> None:
    """ValueError naming the family unless :func:`reparameterisable`, for ``baseline='reparameterisation'``."""
    validation.check(
        "family",
        family.name,
        reparameterisable(family),
        "a Gaussian family with a reparameterisation (ExpFamily.reparameterisation one of "
        f"{expfam.REPARAMETERISATIONS}) for baseline='reparameterisation'",
    )


# --------------------------------------------------------------------------- generic operations
def sample_score(key: jax.Array, family: expfam.ExpFamily, eta: jax.Array, n_samples: int):
    """S draws θ_s ~ q_η and their scores T(θ_s) − μ(η) = ∇_η log q_η(θ_s): the family's closed
    form where it has one (``family.sample_score``), otherwise ``family.sample`` and the textbook score.

    Args:
        key: a PRNG key (traced).
        family: the exponential family of q.
        eta: (P,) natural parameter η (traced).
        n_samples: S (static).

    Returns:
        θ (n_samples, …) and scores (n_samples, P).
    """
    if family.sample_score is not None:
        return family.sample_score(key, eta, n_samples)
    theta = family.sample(key, eta, (n_samples,))
    return theta, family.sufficient_stats(theta) - family.mean(eta)


def fisher_solve(family: expfam.ExpFamily, eta: jax.Array, v: jax.Array) -> jax.Array:
    """FIM(η)⁻¹ v: the family's closed form where it has one (``family.fisher_solve``, e.g.
    :func:`beta_fisher_solve`), otherwise a P×P linear solve.

    Args:
        family: the exponential family.
        eta: (..., P) natural parameter η (traced).
        v: (..., P) vector to solve for.

    Returns:
        (..., P) FIM(η)⁻¹ v.
    """
    if family.fisher_solve is not None:
        return family.fisher_solve(eta, v)
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
        baseline: "constant" (c_s = ``c``; the paper's Fig. 4 uses c = 0), "leave-one-out"
            (c_s = mean of the other S − 1 losses; lower variance, needs no tuning) or "control-variate":
            a control variate through the score's known mean E[T(θ) − μ] = 0, one coefficient per
            coordinate, ĝ_j = (1/S) Σ_s (L_s − β_{−s,j}) score_sj with the variance-minimising
            β_j = E[L score_j²]/E[score_j²] fitted on the other S − 1 samples (so ĝ stays unbiased).
        c: the constant baseline (may be traced); ignored by "leave-one-out".

    Returns:
        (P,) unbiased estimate of ∇_η E_q[L].

    Raises:
        ValueError: ``n_samples`` below its minimum, or an unknown ``baseline``.
    """
    validation.integer("n_samples", n_samples, 1 if baseline == "constant" else 2)
    validation.one_of("baseline", baseline, BASELINES)
    theta, score = sample_score(key, family, eta, n_samples)
    losses = loss(theta)
    if baseline == "control-variate":
        weighted, squares = losses[:, None] * score * score, score * score
        others = jnp.sum(squares, axis=0) - squares
        beta = (jnp.sum(weighted, axis=0) - weighted) / jnp.where(others > 0, others, 1.0)
        return jnp.mean((losses[:, None] - beta) * score, axis=0)
    if baseline == "leave-one-out":
        # L_s − (Σ L − L_s)/(S − 1) = S/(S − 1) (L_s − mean L)
        centred = (losses - jnp.mean(losses)) * (n_samples / (n_samples - 1))
    else:
        centred = losses - c
    return jnp.mean(centred[:, None] * score, axis=0)


def reparameterisation_gradient(
    key: jax.Array, family: expfam.ExpFamily, eta: jax.Array, loss: Callable[[jax.Array], jax.Array], n_samples: int
) -> jax.Array:
    """Reparameterisation estimate of ∇_η E_{q_η}[L] for the Gaussian families (θ = m + s ε, s = p^(−1/2)):

        ĝ_m = (1/S) Σ_s ∇L(θ_s),   ĝ_v = (1/S) Σ_s ∇L(θ_s) ε_s/(2s),
        ∇_μ ≈ (ĝ_m − 2m ĝ_v, ĝ_v) per coordinate (μ = (m, m² + v)),   ∇_η = FIM(η) ∇_μ,

    which needs a differentiable loss; the returned ∇_η estimate plugs into :func:`natural_gradient_step`
    like :func:`reinforce_gradient`'s. Unbiased; its variance does not scale with the loss's magnitude.
    """
    check_reparameterisable(family)
    validation.integer("n_samples", n_samples, 1)
    pairs = eta.reshape(-1, 2)
    m, p = expfam.normal_mean_precision(pairs)
    s = 1.0 / jnp.sqrt(p)
    eps = numerics.standard_normal(key, (n_samples,) + m.shape, eta.dtype)
    theta = m + eps * s
    as_input = (lambda t: t[..., 0]) if _gaussian(family) == "normal" else (lambda t: t)  # NORMAL's θ is a scalar
    per_sample = jax.grad(lambda t: jnp.sum(loss(as_input(t))))(theta)  # (S, d): ∇L(θ_s), samples independent
    g_m = jnp.mean(per_sample, axis=0)
    g_v = jnp.mean(per_sample * eps / (2.0 * s), axis=0)
    u1, u2 = g_m - 2.0 * m * g_v, g_v
    # FIM ∇_μ with the NORMAL block [[1/p, 2m/p], [2m/p, 4m²/p + 2/p²]]
    grad_eta = jnp.stack([(u1 + 2.0 * m * u2) / p, (2.0 * m * u1 + (4.0 * m * m + 2.0 / p) * u2) / p], axis=-1)
    return grad_eta.reshape(eta.shape)


def estimate_gradient(key, family, eta, loss, n_samples: int, estimator: str = "constant", c=0.0) -> jax.Array:
    """ĝ ≈ ∇_η E_q[L] by ``estimator`` (one of :data:`ESTIMATORS`): REINFORCE with that baseline
    (:func:`reinforce_gradient`) or the reparameterisation gradient (:func:`reparameterisation_gradient`).

    Args:
        key: a PRNG key (traced).
        family: the exponential family of q.
        eta: (P,) natural parameter η.
        loss: θ (S, …) -> L(θ) (S,), JAX-traceable (differentiable for "reparameterisation").
        n_samples: S (static).
        estimator: one of :data:`ESTIMATORS`.
        c: the constant baseline of the "constant" estimator (may be traced).

    Returns:
        (P,) estimate ĝ of ∇_η E_q[L].

    Raises:
        ValueError: a bad ``n_samples`` or ``estimator``, or "reparameterisation" for a family without one.
    """
    if estimator == "reparameterisation":
        return reparameterisation_gradient(key, family, eta, loss, n_samples)
    return reinforce_gradient(key, family, eta, loss, n_samples, estimator, c)


def estimator_variance(key, family, eta, loss, n_samples: int, estimator: str = "constant", c=0.0, n_repeats: int = 2):
    """tr Cov[FIM(η)⁻¹ ĝ]: the total variance of the natural-gradient estimate (the step direction before ρ),
    as the unbiased sample variance over ``n_repeats`` (static, >= 2) independent estimates, summed over
    coordinates. Cost: ``n_repeats`` gradient estimates.

    Args:
        key: a PRNG key (traced).
        family: the exponential family of q.
        eta: (P,) natural parameter η.
        loss: θ (S, …) -> L(θ) (S,).
        n_samples: S per estimate (static).
        estimator: one of :data:`ESTIMATORS`.
        c: the constant baseline (may be traced).
        n_repeats: number of independent estimates (static), >= 2.

    Returns:
        Scalar total variance (a JAX array).

    Raises:
        ValueError: ``n_repeats`` < 2 or a bad ``n_samples``/``estimator``.
    """
    validation.integer("n_repeats", n_repeats, 2)
    keys = jax.random.split(key, n_repeats)
    nat = jax.vmap(lambda k: natural_gradient_estimate(k, family, eta, loss, n_samples, estimator, c))(keys)
    return jnp.sum(jnp.var(nat, axis=0, ddof=1))


def mean_field_reinforce_natural_gradient(
    key: jax.Array, eta: jax.Array, loss: Callable[[jax.Array], jax.Array], n_samples: int, baseline: str, c=0.0
) -> jax.Array:
    """FIM(η)⁻¹ ĝ for the mean-field Gaussian and REINFORCE with the "constant" or "leave-one-out" baseline,
    from the same draws as :func:`reinforce_gradient` (θ_s = m + ε_s s, s = p^(−1/2), ε_s from
    :func:`jaxfed.numerics.standard_normal`), without forming the (S, 2d) scores or the Fisher solve.

    With weights w_s (w_s = (L_s − c)/S, or (L_s − mean L)/(S − 1) for leave-one-out), per coordinate
    A = Σ_s w_s ε_s and B = Σ_s w_s (ε_s² − 1); then ĝ = (s A, 2m s A + s² B) and the closed-form
    FIM⁻¹ of :func:`jaxfed.gfvl.expfam.normal_fisher_solve` give

        FIM⁻¹ ĝ = (√p A − m p B,  p B / 2)

    (the 2m ĝ₁ − ĝ₂ = −s² B of the generic solve cancels exactly here instead of in floating point).
    The same estimator as ``fisher_solve(family, eta, reinforce_gradient(...))`` on the same draws, equal
    up to rounding (tests/gfvl/test_natgrad.py compares them in float64 on adversarial η and losses); about
    twice as fast vmapped over trials on the CPU (benchmarks/gfvl_logistic.py).
    """
    m, p = expfam.normal_mean_precision(eta.reshape(-1, 2))
    s = 1.0 / jnp.sqrt(p)
    eps = numerics.standard_normal(key, (n_samples,) + m.shape, eta.dtype)
    losses = loss(m + eps * s)
    if baseline == "leave-one-out":
        weights = (losses - jnp.mean(losses)) / (n_samples - 1)
    else:
        weights = (losses - c) / n_samples
    a = weights @ eps
    b = weights @ (eps * eps - 1.0)
    return jnp.stack([jnp.sqrt(p) * a - m * p * b, 0.5 * p * b], axis=-1).reshape(eta.shape)


def natural_gradient_estimate(key, family, eta, loss, n_samples: int, estimator: str = "constant", c=0.0) -> jax.Array:
    """FIM(η)⁻¹ ĝ, the natural-gradient estimate of ∇_η E_q[L] by ``estimator`` (:func:`estimate_gradient`
    and :func:`fisher_solve`); for the mean-field Gaussian with REINFORCE and the constant or leave-one-out
    baseline, the same estimate on the same draws by :func:`mean_field_reinforce_natural_gradient`.

    Args:
        key: a PRNG key (traced).
        family: the exponential family of q.
        eta: (P,) natural parameter η.
        loss: θ (S, …) -> L(θ) (S,).
        n_samples: S (static).
        estimator: one of :data:`ESTIMATORS`.
        c: the constant baseline (may be traced).

    Returns:
        (P,) natural-gradient estimate FIM(η)⁻¹ ĝ.

    Raises:
        ValueError: a bad ``n_samples`` or ``estimator``, or "reparameterisation" for a family without one.
    """
    if family.sample_score is expfam.mean_field_sample_score and estimator in ("constant", "leave-one-out"):
        validation.integer("n_samples", n_samples, 1 if estimator == "constant" else 2)
        return mean_field_reinforce_natural_gradient(key, eta, loss, n_samples, estimator, c)
    return fisher_solve(family, eta, estimate_gradient(key, family, eta, loss, n_samples, estimator, c))


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
    return natural_step(family, eta, fisher_solve(family, eta, grad), cavity, rho, alpha)


def natural_step(family: expfam.ExpFamily, eta: jax.Array, natural_grad: jax.Array, cavity: jax.Array, rho, alpha):
    """η ← Π(η − ρ (ν + α (η − η_cav))) for a natural-gradient estimate ν = FIM(η)⁻¹ ĝ
    (:func:`natural_gradient_estimate`); :func:`natural_gradient_step` from ĝ.

    Args:
        family: the exponential family of q.
        eta: (P,) current natural parameter η.
        natural_grad: (P,) natural-gradient estimate ν.
        cavity: (P,) η_cav.
        rho: learning rate ρ > 0 (may be traced).
        alpha: temperature α > 0 (may be traced).

    Returns:
        (P,) the next η, inside the family's domain.
    """
    return keep_in_domain(family, eta, eta - rho * (natural_grad + alpha * (eta - cavity)))


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

    Args:
        spec: "constant", "cosine" or "inverse:<t0>".
        rho: the initial rate ρ.
        n_slots: number of slots (for "cosine").

    Returns:
        The float ρ for "constant", else an optax schedule ``count -> ρ``.

    Raises:
        ValueError: naming the parameter, the value and the allowed forms.
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
    validation.check("rho_schedule", spec, math.isfinite(t0) and t0 > 0, allowed)

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

    Args:
        family: the exponential family whose Fisher matrix preconditions.

    Returns:
        An ``optax.GradientTransformation``.
    """
    return _params_transformation(
        "fisher_preconditioner", lambda updates, params: fisher_solve(family, params, updates)
    )


def keep_in_domain_updates(family: expfam.ExpFamily) -> optax.GradientTransformation:
    """optax transformation: updates ← Π(params + updates) − params (Π: :func:`keep_in_domain`).

    Put it last in a chain so that ``optax.apply_updates`` lands inside the domain (up to the
    rounding of params + (Π − params), one ulp of the floor).

    Args:
        family: the exponential family whose domain Π projects onto.

    Returns:
        An ``optax.GradientTransformation``.
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

    Args:
        family: the exponential family of q.
        learning_rate: ρ, a float or an optax schedule.

    Returns:
        An ``optax.GradientTransformation``.
    """
    return optax.chain(fisher_preconditioner(family), optax.sgd(learning_rate), keep_in_domain_updates(family))
