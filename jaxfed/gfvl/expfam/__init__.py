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

This module is the one to import; it re-exports its parts: :mod:`jaxfed.gfvl.expfam.generic` (the
machinery above: :class:`ExpFamily`, :func:`log_prob`, :func:`kl`, the registry),
:mod:`jaxfed.gfvl.expfam.beta` (:data:`BETA`) and :mod:`jaxfed.gfvl.expfam.families` (the others,
and the registration of the built-ins).
"""


# ruff: noqa: F401 (a face: every import below is a re-export)

from jaxfed.gfvl.expfam.beta import (
    BETA,
    BETA_MIN_SHAPE,
    beta_fisher_solve,
    beta_kl,
    beta_natural,
    beta_sample_score,
    beta_shapes,
)
from jaxfed.gfvl.expfam.families import (
    GAMMA,
    GAMMA_MIN,
    NORMAL,
    NORMAL_MIN_PRECISION,
    dirichlet,
    dirichlet_fisher_solve,
    dirichlet_sample_score,
    gamma_fisher_solve,
    gamma_natural,
    gamma_sample_score,
    gamma_shape_rate,
    mean_field_fisher_solve,
    mean_field_moments,
    mean_field_natural,
    mean_field_normal,
    mean_field_sample_score,
    normal_fisher_solve,
    normal_mean_precision,
    normal_natural,
    normal_sample_score,
)
from jaxfed.gfvl.expfam.generic import (
    _FAMILIES,  # (the registry itself: tests unregister a family they added)
    REPARAMETERISATIONS,
    ExpFamily,
    check_natural,
    get,
    kl,
    kl_direct,
    kl_integral,
    log_prob,
    names,
    register,
)

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
