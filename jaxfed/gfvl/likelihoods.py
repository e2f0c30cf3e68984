"""Observation models for G-FVL: per-agent losses L_k(θ) and, where conjugate, their statistics.

A model is a :class:`Likelihood`: pure functions of one agent's *data summary* and θ. The per-agent
loss is the weighted log-loss

    L_k(θ) = −Σ_n w_n log p(z_{k,n} | θ),

with weights w_n = 1 (the sum, so that α = 1 gives the ordinary posterior) or
w_n = 1/N_k (the mean; see :func:`loss_weight`).

Data layouts (leaves carry a leading agent axis K when they hold every agent's data):

- count models (:func:`bernoulli`, :func:`noisy_bernoulli`): a (…, 2) array of weighted counts
  (n1, n0) = (Σ_n w_n z_n, Σ_n w_n (1 − z_n)). Losses cost O(1) per θ, not O(N_k).
- :func:`from_log_lik`: a :class:`PaddedData` of points z (K, N_max, …) and weights (K, N_max); padding
  has weight 0. Losses cost O(N_max) per θ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import numerics, validation

__all__ = [
    "Likelihood",
    "PaddedData",
    "LOSS_NORMALISATIONS",
    "bernoulli",
    "noisy_bernoulli",
    "from_log_lik",
    "bernoulli_beta_stats",
    "loss_weight",
    "without_agent",
]

LOSS_NORMALISATIONS = ("sum", "mean")


class Likelihood(NamedTuple):
    """An observation model on θ ∈ (0, 1), seen through one agent's data summary."""

    name: str
    # (data, θ) -> L(θ) = −Σ_n w_n log p(z_n|θ); θ of any shape, θ ∈ (0, 1).
    loss: Callable
    # (data, θ_ref, t) -> L(θ_ref + t) − L(θ_ref). Count models evaluate it as a linear term in t plus a
    # non-negative remainder, so its error scales with the result and |t| even when the two losses are 1000
    # times larger (the quadrature of :mod:`jaxfed.gfvl.quadrature` relies on it): for 1000 points in float32
    # within 2e-6 of the result plus 2e-4·|t| (the linear coefficient, a difference of two ~10³ terms),
    # where the plain difference of the two losses is off by up to 4e-4 at every t (tests/gfvl/test_likelihoods.py).
    loss_change: Callable
    # data with a leading agent axis -> one data summary holding every agent's points (for Σ_k L_k).
    pool: Callable


class PaddedData(NamedTuple):
    """Raw data points for :func:`from_log_lik`; padded entries carry weight 0."""

    z: jax.Array  # (…, N_max, *point_shape) data points
    weight: jax.Array  # (…, N_max) weight w_n of each point in L_k (0 for padding)


def loss_weight(normalisation: str, n_points):
    """Weight w_n of each point in L_k: 1 for ``"sum"`` (α = 1 then gives the Bayesian posterior), 1/N_k for ``"mean"``.

    An agent with N_k = 0 holds no data and contributes nothing to the loss whatever the weight; its
    weight is 0 under the mean (rather than 1/0, which would turn its zero counts into NaN).

    Args:
        normalisation: "sum" or "mean".
        n_points: N_k, a number (a float is returned) or an array of per-agent counts (an array of
            weights is returned), >= 0.

    Returns:
        The weight w_n, a Python float for a number of points, a float JAX array of their shape for an array.

    Raises:
        ValueError: an unknown ``normalisation`` or a negative count.

    Examples:
        >>> loss_weight("mean", 4)
        0.25
    """
    validation.one_of("loss_normalisation", normalisation, LOSS_NORMALISATIONS)
    if isinstance(n_points, (int, float, np.integer, np.floating)):
        validation.non_negative("n_points", n_points, finite=False)
        if normalisation == "sum":
            return 1.0
        return 1.0 / n_points if n_points > 0 else 0.0
    n = jnp.asarray(n_points, dtype=float)
    if normalisation == "sum":
        return jnp.ones_like(n)
    return jnp.where(n > 0, 1.0 / jnp.where(n > 0, n, 1.0), 0.0)


def bernoulli_beta_stats(n_ones: jax.Array, n_total) -> jax.Array:
    """Per-agent Bernoulli statistics in Beta natural coordinates: (..., 2) = (n1, n_total − n1).

    The Bernoulli likelihood θ^z (1−θ)^(1−z) = exp(z log θ + (1−z) log(1−θ)) adds (z, 1 − z) to the
    Beta natural parameter η = (a, b). The same array is the data summary of the count
    models :func:`bernoulli` and :func:`noisy_bernoulli` (multiply it by :func:`loss_weight`).

    Args:
        n_ones: (...,) number of ones n1 per agent.
        n_total: number of points per agent, broadcastable with ``n_ones``.

    Returns:
        (..., 2) float array (n1, n_total − n1).

    Examples:
        >>> bernoulli_beta_stats([3, 1], 4).tolist()
        [[3.0, 1.0], [1.0, 3.0]]
    """
    n_ones = jnp.asarray(n_ones, dtype=float)
    return jnp.stack([n_ones, n_total - n_ones], axis=-1)


def normal_normal_stats(sum_z: jax.Array, n_total, variance) -> jax.Array:
    """Per-agent statistics of z ~ N(θ, σ²) (σ² known) in the :data:`jaxfed.gfvl.expfam.NORMAL` natural
    coordinates: (..., 2) = (Σz/σ², −N/(2σ²)).

    exp(−(z − θ)²/(2σ²)) ∝ exp(θ z/σ² − θ²/(2σ²)) adds (z/σ², −1/(2σ²)) to η = (m p, −p/2). With
    weights w_n (the loss convention) pass the weighted sum and count. ``variance`` may differ per
    agent (agents whose likelihoods differ).
    """
    sum_z, n_total, variance = jnp.broadcast_arrays(*(jnp.asarray(x, dtype=float) for x in (sum_z, n_total, variance)))
    return jnp.stack([sum_z / variance, -0.5 * n_total / variance], axis=-1)


def poisson_gamma_stats(sum_z: jax.Array, n_total) -> jax.Array:
    """Per-agent statistics of z ~ Poisson(θ) in the :data:`jaxfed.gfvl.expfam.GAMMA` natural coordinates:
    (..., 2) = (Σz, −N); θ^z e^(−θ)/z! adds (z, −1) to η = (a, −b)."""
    sum_z, n_total = jnp.broadcast_arrays(jnp.asarray(sum_z, dtype=float), jnp.asarray(n_total, dtype=float))
    return jnp.stack([sum_z, -n_total], axis=-1)


def categorical_dirichlet_stats(counts: jax.Array) -> jax.Array:
    """Per-agent statistics of categorical z in the :func:`jaxfed.gfvl.expfam.dirichlet` natural coordinates:
    the category counts (..., C); θ_z = exp(Σ_c [z = c] log θ_c) adds the indicator of z to η = α."""
    return jnp.asarray(counts, dtype=float)


# --------------------------------------------------------------------------- count models
def _check_epsilon(epsilon) -> None:
    validation.number("epsilon", epsilon, 0.0, 0.5, high_open=True)  # traced: checked by the experiment config


def noisy_bernoulli(epsilon=0.1) -> Likelihood:
    """Noisy Bernoulli: z is a Bernoulli(θ) bit flipped with probability ε,

        p(z = 1 | θ) = ε + (1 − 2ε) θ,   p(z = 0 | θ) = ε + (1 − 2ε)(1 − θ),

    so L(θ) = −n1 log(ε + (1−2ε)θ) − n0 log(ε + (1−2ε)(1−θ)) from the weighted counts (n1, n0).
    Not conjugate to the Beta prior for ε > 0; ε = 0 is :func:`bernoulli`.

    Args:
        epsilon: flip probability ε ∈ [0, 0.5) (may be traced; a concrete value is validated).

    Returns:
        The likelihood, a :class:`Likelihood` named "noisy_bernoulli" over the (..., 2) counts (n1, n0).

    Raises:
        ValueError: a concrete ``epsilon`` outside [0, 0.5).
    """
    _check_epsilon(epsilon)

    def loss(data, theta):
        theta = jnp.asarray(theta, dtype=float)
        eps = jnp.asarray(epsilon, theta.dtype)
        n1, n0 = data[..., 0], data[..., 1]
        slope = 1.0 - 2.0 * eps
        # xlogy: a zero count contributes 0 even where its probability is 0 (ε = 0, θ at a bound).
        xlogy = jax.scipy.special.xlogy
        return -(xlogy(n1, eps + slope * theta) + xlogy(n0, eps + slope * (1.0 - theta)))

    def loss_change(data, theta_ref, t):
        # With x1 = (1−2ε)t/p_r and x0 = −(1−2ε)t/(1−p_r):
        #   L(θ_r + t) − L(θ_r) = −n1 log1p(x1) − n0 log1p(x0)
        #                       = −(n1 x1 + n0 x0) + n1 φ(x1) + n0 φ(x0),   φ(x) = x − log1p(x) >= 0.
        # The linear part cancels between the counts near the maximum likelihood; writing it as one
        # coefficient times t leaves only O(t²) terms of one sign to round.
        t = jnp.asarray(t, dtype=float)
        eps = jnp.asarray(epsilon, t.dtype)
        n1, n0 = data[..., 0], data[..., 1]
        slope = 1.0 - 2.0 * eps
        p_ref = eps + slope * theta_ref
        q_ref = eps + slope * (1.0 - theta_ref)
        linear = -slope * t * (n1 / p_ref - n0 / q_ref)
        x1, x0 = jnp.broadcast_arrays(slope * t / p_ref, -slope * t / q_ref)
        phi1, phi0 = numerics.x_minus_log1p(jnp.stack([x1, x0]))  # one copy of φ in the graph
        return linear + n1 * phi1 + n0 * phi0

    def pool(data):
        return jnp.sum(data, axis=0)

    return Likelihood(name="noisy_bernoulli", loss=loss, loss_change=loss_change, pool=pool)


def bernoulli() -> Likelihood:
    """Bernoulli: p(z|θ) = θ^z (1−θ)^(1−z), so L(θ) = −n1 log θ − n0 log(1−θ) (conjugate to Beta).

    The conjugate path uses :func:`bernoulli_beta_stats` with :func:`jaxfed.gfvl.conjugate_solver`;
    this :class:`Likelihood` runs the same model through the non-conjugate machinery (REINFORCE,
    quadrature), which must then agree with the exact conjugate answer.

    Returns:
        The likelihood, a :class:`Likelihood` named "bernoulli" over the (..., 2) counts (n1, n0).
    """
    return noisy_bernoulli(0.0)._replace(name="bernoulli")


# --------------------------------------------------------------------------- user log-likelihoods
def from_log_lik(log_lik: Callable, name: str = "log_lik") -> Likelihood:
    """Any log-likelihood ``log_lik(z, theta)`` written in JAX, for one point z and a scalar θ.

    The data summary is :class:`PaddedData`; L(θ) = −Σ_n w_n log_lik(z_n, θ) over the padded
    points (entries of weight 0 are masked, so padding may hold any value). ``loss_change`` is the
    plain difference L(θ_ref + t) − L(θ_ref): its absolute rounding error is that of L itself (about
    |L| times the dtype's epsilon: measured 2.4 |L| ε for 1000 points in float32, tests/gfvl/test_likelihoods.py),
    so for KL values near 1e-6 in float32 prefer a count model or float64.

    Args:
        log_lik: ``log_lik(z, theta) -> scalar``, JAX-traceable, for one point z and a scalar θ.
        name: the likelihood's name.

    Returns:
        The likelihood, a :class:`Likelihood` whose data summary is :class:`PaddedData`.
    """

    def per_theta(data, theta):
        values = jax.vmap(log_lik, in_axes=(0, None))(data.z, theta)
        return -jnp.sum(jnp.where(data.weight > 0, data.weight * values, 0.0))

    def loss(data, theta):
        theta = jnp.asarray(theta)
        flat = jax.vmap(per_theta, in_axes=(None, 0))(data, theta.reshape(-1))
        return flat.reshape(theta.shape)

    def loss_change(data, theta_ref, t):
        return loss(data, theta_ref + t) - loss(data, theta_ref)

    def pool(data):
        n_agents, n_max = data.weight.shape[:2]
        return PaddedData(
            z=data.z.reshape((n_agents * n_max,) + data.z.shape[2:]), weight=data.weight.reshape(n_agents * n_max)
        )

    return Likelihood(name=name, loss=loss, loss_change=loss_change, pool=pool)


# --------------------------------------------------------------------------- data selection
def agent_data(data, agent):
    """One agent's summary from data with a leading agent axis (``agent`` may be traced)."""
    return jax.tree.map(lambda x: x[agent], data)


def without_agent(data, agent: int):
    """The data of every agent except ``agent`` (static), agent axis K − 1: D_{−u}.

    Args:
        data: a pytree of arrays whose leading axis is the agent (K, …).
        agent: the agent to leave out (static int).

    Returns:
        The same pytree with leading axis K − 1.
    """
    return jax.tree.map(lambda x: jnp.delete(x, agent, axis=0), data)
