"""The generic machinery of exponential families (a part of :mod:`jaxfed.gfvl.expfam`, which users import).

- :class:`ExpFamily`: a family as a bundle of pure functions (a NamedTuple: hashable, usable as a
  static argument), its optional closed forms ``None`` where it has none;
- :func:`log_prob`: log q_η(θ);
- :func:`kl`: KL(q_η1 ‖ q_η2) from any family's fields, accurate in float32 where posteriors
  concentrate: the cancellation-free integral form (:func:`kl_integral`, graded Gauss–Legendre
  quadrature) except where the direct Bregman form (:func:`kl_direct`) is accurate, or the
  family's closed form;
- the registry of families by name (:func:`register`, :func:`get`, :func:`names`) and
  :func:`check_natural`.

The built-in families are in :mod:`jaxfed.gfvl.expfam.beta` and :mod:`jaxfed.gfvl.expfam.families`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import validation
from jaxfed.registry import Registry


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
    """log q_η(θ) = ηᵀT(θ) + log h(θ) − A(η).

    Args:
        family: the exponential family.
        eta: (..., P) natural parameters.
        theta: draws (the family's event shape per draw), broadcast with ``eta``.

    Returns:
        (...) the log densities.
    """
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

    Args:
        family: the exponential family.
        eta1: (..., P) natural parameters of q_η1.
        eta2: (..., P) natural parameters of q_η2.

    Returns:
        (...) the divergences.
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

    Args:
        family: the exponential family.
        eta1: (..., P) natural parameters of q_η1.
        eta2: (..., P) natural parameters of q_η2.

    Returns:
        (...) the divergences, >= 0.
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

    Args:
        family: the exponential family.
        eta1: (..., P) natural parameters of q_η1.
        eta2: (..., P) natural parameters of q_η2.

    Returns:
        (...) the divergences, >= 0.
    """
    eta1, eta2 = jnp.broadcast_arrays(jnp.asarray(eta1), jnp.asarray(eta2))
    if family.kl_closed is not None:
        return jnp.maximum(family.kl_closed(eta1, eta2), 0.0)
    rho0, rho1 = _pole_distances(family, eta1, eta2)
    far_apart = jnp.minimum(rho0, rho1) < 1.0 / _GRADED_LIMIT
    value = jnp.where(far_apart, kl_direct(family, eta1, eta2), kl_integral(family, eta1, eta2))
    return jnp.maximum(value, 0.0)


# --------------------------------------------------------------------------- the registry and validation
_FAMILIES: Registry[ExpFamily] = Registry("family")


def register(family: ExpFamily) -> ExpFamily:
    """Adds ``family`` under ``family.name`` (replacing one of that name) and returns it. A user's family
    needs the required fields of :class:`ExpFamily`; the non-conjugate solver
    (:func:`jaxfed.gfvl.natgrad_solver`, REINFORCE) uses ``sample`` with the generic score and Fisher
    solve where ``sample_score`` and ``fisher_solve`` are None, and the reparameterisation gradient
    where ``reparameterisation`` names the family's Gaussian layout (:data:`REPARAMETERISATIONS`).

    Args:
        family: the :class:`ExpFamily`.

    Returns:
        ``family``.

    Raises:
        ValueError: ``family`` is not an ExpFamily, or its ``reparameterisation`` is not one of
            :data:`REPARAMETERISATIONS` (or None).
    """
    validation.check("family", type(family).__name__, isinstance(family, ExpFamily), "an ExpFamily")
    layouts = (None, *REPARAMETERISATIONS)
    validation.one_of(f"family {family.name!r}: reparameterisation", family.reparameterisation, layouts)
    return _FAMILIES.register(family.name, family)


def get(name: str) -> ExpFamily:
    """The family called ``name``; ValueError listing the registered ones otherwise.

    Args:
        name: a registered family's name.

    Returns:
        The :class:`ExpFamily`.

    Raises:
        ValueError: no family of that name is registered (the message lists those that are).

    Examples:
        >>> get("gamma").dim, names()
        (2, ('beta', 'normal', 'gamma', 'dirichlet'))
    """
    return _FAMILIES.get(name)


def names() -> tuple[str, ...]:
    """The registered families' names, built-ins first ("dirichlet" is C = 3; :func:`dirichlet` makes others).

    Returns:
        The names, in the order they were registered.
    """
    return _FAMILIES.names()


def check_natural(family: ExpFamily, eta, name: str = "eta") -> None:
    """ValueError unless the concrete ``eta`` has last axis of length P = ``family.dim``, is finite and lies
    inside the natural-parameter domain (every boundary coordinate > 0, which makes FIM(η) positive
    definite). Traced values are left alone.

    Args:
        family: the exponential family.
        eta: the natural parameters to check.
        name: the argument's name, in the message.

    Raises:
        ValueError: ``eta`` has the wrong shape, is not finite or lies outside the domain (one line).
    """
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
