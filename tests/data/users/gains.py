"""Task 1 of issue 49: per-ED log-normal residual power-control gains in kmeans-snr, by name.

A channel whose per-ED gains g_k = 10^(s ε_k / 10), ε_k ~ N(0, 1), are drawn once per trial
(``per_trial``) and kept for every round; the spread s (dB) is a traced parameter, swept like the SNR:

    jaxfed run kmeans-snr --import gains.py --set channel=residual-gains --set channel_sweep=spread_db=0,4,8
"""

import jax
import jax.numpy as jnp

from jaxfed import oac


def residual_gain_energy(key, numerals, beta, noise_var, symbol_energy, active, gain, spread_db):
    """(E_s Σ_k g_k 1[k on l] + σ²)·Exp(1): the "aggregate" law with weighted counts (g = 1: that channel)."""
    weighted = jnp.broadcast_to(jnp.asarray(gain, noise_var.dtype), (numerals.shape[0],))
    counts = weighted @ oac.channel.activation(numerals, beta, active).astype(noise_var.dtype)
    return oac.channel.aggregate_energy(key, counts, noise_var, symbol_energy)


def draw_gains(key, n_devices, gain, spread_db):
    """The trial's gains, one per ED."""
    return {"gain": 10 ** (spread_db * jax.random.normal(key, (n_devices,)) / 10)}


oac.channel.register(
    "residual-gains",
    residual_gain_energy,
    variance=None,  # no formula: kmeans-snr's predicted centroid noise is undefined (NaN), as B7 allows
    params={"gain": 1.0, "spread_db": 0.0},
    per_trial=draw_gains,
)
