"""Observation models for G-FVL: per-agent losses L_k(θ) and, where conjugate, their statistics.

Bernoulli data z ∈ {0, 1} enter every model here only through the per-agent counts
(n1_k, n0_k) = (Σ_n z_{k,n}, Σ_n (1 − z_{k,n})), so losses cost O(1) per θ, not O(N_k).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["bernoulli_beta_stats"]


def bernoulli_beta_stats(n_ones: jax.Array, n_total) -> jax.Array:
    """Per-agent Bernoulli statistics in Beta natural coordinates: (..., 2) = (n1, n_total − n1).

    The Bernoulli likelihood θ^z (1−θ)^(1−z) = exp(z log θ + (1−z) log(1−θ)) adds (z, 1 − z) to the
    Beta natural parameter η = (a, b) (SPEC A4).
    """
    n_ones = jnp.asarray(n_ones, dtype=float)
    return jnp.stack([n_ones, n_total - n_ones], axis=-1)
