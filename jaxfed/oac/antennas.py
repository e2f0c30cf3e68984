"""M receive antennas with energy combining: a channel model the paper does not have, added
through the registry (:func:`jaxfed.oac.channel.register`) without touching
:mod:`jaxfed.oac.channel` (docs/kmeans.md, "Adding a channel").

The ES has M antennas with independent Rayleigh fading and noise on each branch, and adds the
branches' energies:

    y_{l,m} = Σ_k h_{k,l,m} x_{k,l} + w_{l,m},   h ~ CN(0, 1), w ~ CN(0, σ²), i.i.d. over k, l, m;
    E_l = Σ_m |y_{l,m}|² = (E_s K_l + σ²) Σ_m X_{l,m},   X ~ Exp(1) i.i.d. (each branch as "aggregate");
    K̂_l = (E_l/M − σ²)/E_s,   E K̂_l = K_l,   Var K̂_l = (K_l + σ²/E_s)²/M.

Combining divides the detector's variance, self-noise included, by M: the estimate's floor at
high SNR falls M-fold. Registered as ``"combining-2"`` and ``"combining-4"``; another M is one
line: ``oac.channel.register(f"combining-{m}", *energy_combining(m))``.

Static: M. Traced: as for every channel (σ², E_s, the key, the active mask).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxfed import validation
from jaxfed.oac import channel
from jaxfed.oac.channel import ChannelModel, resource_counts

__all__ = ["energy_combining"]


def energy_combining(n_antennas: int) -> ChannelModel:
    """The :class:`~jaxfed.oac.channel.ChannelModel` of ``n_antennas`` = M branches (static int >= 1;
    M = 1 is the ``"aggregate"`` channel's law).

    Args:
        n_antennas: M >= 1 (static).

    Returns:
        The model, a :class:`~jaxfed.oac.channel.ChannelModel` (not registered).

    Raises:
        ValueError: ``n_antennas`` is not an integer >= 1.
    """
    validation.integer("n_antennas", n_antennas, 1)

    def energy(key, numerals, beta, noise_var, symbol_energy, active):
        """E_l = (E_s K_l + σ²) Σ_m X_{l,m}: each branch's |y_{l,m}|² drawn from its exact law given K_l."""
        dtype = jnp.result_type(noise_var, symbol_energy, jnp.float32)
        counts = resource_counts(numerals, beta, active)
        mean = jnp.asarray(symbol_energy, dtype) * counts.astype(dtype) + jnp.asarray(noise_var, dtype)
        branches = jax.random.exponential(key, (n_antennas,) + mean.shape, dtype)
        return mean * jnp.sum(branches, axis=0)

    def detect(energy, noise_var, symbol_energy):
        """K̂_l = (E_l/M − σ²)/E_s."""
        return (energy / n_antennas - noise_var) / symbol_energy

    def variance(counts, noise_var, symbol_energy):
        """Var K̂_l = (K_l + σ²/E_s)²/M."""
        return jnp.square(counts + noise_var / symbol_energy) / n_antennas

    return ChannelModel(energy, detect, variance)


for _m in (2, 4):
    channel.register(f"combining-{_m}", *energy_combining(_m))
