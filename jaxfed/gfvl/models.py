"""Conjugate data models for G-FVL studies: values in a registry (:mod:`jaxfed.registry`), like the channels of :mod:`jaxfed.oac`.

A :class:`ConjugateModel` holds everything an experiment needs about a family and its data: q's
exponential family, a weak prior, the global data parameter θ, how agents' θ_k spread around it,
how their sufficient statistics are drawn, and the text a report states. ``gfvl-heterogeneity
--set family=NAME`` takes any registered name, so a model defined in a user's file (registered with
:func:`register`) runs without editing the package::

    register(ConjugateModel(name="gamma-exponential", family=expfam.GAMMA, ...))

Built in: "beta" (Bernoulli data), "normal" (Normal data, known variance), "gamma" (Poisson data),
"dirichlet" (categorical data, C = 3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxfed import validation
from jaxfed.gfvl import expfam, likelihoods
from jaxfed.registry import Registry

__all__ = ["ConjugateModel", "register", "get", "names"]


class ConjugateModel(NamedTuple):
    """A conjugate data model (every callable is a pure JAX function).

    - ``prior()`` -> η₀ (P,), built when called so that it takes the run's dtype;
    - ``agent_thetas(key, theta, n_agents, spread)`` -> θ_k (K, …): per-agent data parameters around
      θ, θ_k = θ for every agent at spread τ = 0 (may be traced);
    - ``sample_stats(key, thetas, sizes, variance)`` -> (K, P) sufficient statistics of N_k = ``sizes``
      points from each θ_k in η's coordinates (0 for N_k = 0); ``variance`` is a per-agent noise
      variance, for models that have one (others ignore it).
    """

    name: str
    family: expfam.ExpFamily  # q's family (the prior's)
    prior: Callable[[], jax.Array]
    theta: Any  # the global θ: a scalar, or e.g. the (C,) category probabilities
    agent_thetas: Callable
    sample_stats: Callable
    prior_text: str  # e.g. "Beta(2, 2)", stated in reports
    link_text: str  # how θ_k spreads around θ, e.g. "logit(θ_k) = logit(θ) + τ ε_k"


_MODELS: Registry[ConjugateModel] = Registry("conjugate model")


def register(model: ConjugateModel) -> ConjugateModel:
    """Adds ``model`` under ``model.name`` (replacing one of that name) and returns it.

    Args:
        model: a :class:`ConjugateModel`.

    Returns:
        ``model``.

    Raises:
        ValueError: ``model`` is not a :class:`ConjugateModel`.
    """
    validation.check("model", type(model).__name__, isinstance(model, ConjugateModel), "a ConjugateModel")
    return _MODELS.register(model.name, model)


def names() -> tuple[str, ...]:
    """The registered model names, built-ins first.

    Returns:
        A tuple of names.

    Examples:
        >>> names()[:3]
        ('beta', 'normal', 'gamma')
    """
    return _MODELS.names()


def get(name: str) -> ConjugateModel:
    """The model called ``name``; ValueError listing the registered ones otherwise (:mod:`jaxfed.registry`).

    Args:
        name: a registered model's name.

    Returns:
        The model, a :class:`ConjugateModel`.

    Raises:
        ValueError: no model is registered as ``name``.
    """
    return _MODELS.get(name)


# --------------------------------------------------------------------------- built-in models
def _around(combine):
    """``agent_thetas`` from ``combine(θ, τ ε_k)`` -> θ_k, with ε_k ~ N(0, 1) i.i.d. of θ's shape."""

    def agent_thetas(key, theta, n_agents, spread):
        theta = jnp.asarray(theta, dtype=float)
        eps = jax.random.normal(key, (n_agents,) + theta.shape, theta.dtype)
        return combine(theta, spread * eps)

    return agent_thetas


def _bernoulli_stats(key, thetas, sizes, variance):
    ones = jax.random.binomial(key, sizes, thetas).astype(thetas.dtype)
    return likelihoods.bernoulli_beta_stats(ones, sizes)


def _normal_stats(key, thetas, sizes, variance):
    variance = jnp.asarray(variance, thetas.dtype)
    total = sizes * thetas + jnp.sqrt(sizes * variance) * jax.random.normal(key, thetas.shape, thetas.dtype)
    return likelihoods.normal_normal_stats(total, sizes, variance)


def _poisson_stats(key, thetas, sizes, variance):
    return likelihoods.poisson_gamma_stats(jax.random.poisson(key, sizes * thetas).astype(thetas.dtype), sizes)


def _categorical_stats(key, thetas, sizes, variance):
    return likelihoods.categorical_dirichlet_stats(jax.random.multinomial(key, sizes, thetas).astype(thetas.dtype))


register(
    ConjugateModel(
        "beta",
        expfam.BETA,
        lambda: expfam.beta_natural(2.0, 2.0),
        0.7,
        _around(lambda theta, shift: jax.nn.sigmoid(jnp.log(theta) - jnp.log1p(-theta) + shift)),
        _bernoulli_stats,
        "Beta(2, 2)",
        "logit(θ_k) = logit(θ) + τ ε_k (Bernoulli data)",
    )
)
register(
    ConjugateModel(
        "normal",
        expfam.NORMAL,
        lambda: expfam.normal_natural(0.0, 100.0),
        1.0,
        _around(lambda theta, shift: theta + shift),
        _normal_stats,
        "N(0, 100)",
        "θ_k = θ + τ ε_k (Normal data, noise variance σ_k²)",
    )
)
register(
    ConjugateModel(
        "gamma",
        expfam.GAMMA,
        lambda: expfam.gamma_natural(1.0, 0.1),
        4.0,
        _around(lambda theta, shift: theta * jnp.exp(shift)),
        _poisson_stats,
        "Gamma(shape 1, rate 0.1)",
        "log θ_k = log θ + τ ε_k (Poisson data)",
    )
)
register(
    ConjugateModel(
        "dirichlet",
        expfam.dirichlet(3),
        lambda: jnp.ones(3),
        (0.2, 0.3, 0.5),
        _around(lambda theta, shift: jax.nn.softmax(jnp.log(theta) + shift, axis=-1)),
        _categorical_stats,
        "Dir(1, 1, 1)",
        "θ_k = softmax(log θ + τ ε_k) (categorical data: a label skew)",
    )
)
