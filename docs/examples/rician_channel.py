"""A channel with a parameter: Rician fading with K-factor κ, swept like the SNR.

Each ED's coefficient on its active resource is h = √(κ/(κ+1)) e^{iφ} + √(1/(κ+1)) g, φ uniform and
g ~ CN(0, 1): unit mean power, a line-of-sight part of share κ/(κ+1) (κ = 0 is Rayleigh, κ → ∞ no
fading). Contributions √E_s h r (r a QPSK symbol) are superposed per resource as in the built-in
"explicit" channel, so E|y_l|² = E_s K_l + σ² and the ES's energy detector stays unbiased. The
channel is registered with a parameter (``params={"k_factor": 0.0}``); nothing in the package
changes. (The package's own ``"rician-fading"`` channel is this model with the detector's variance
formula; this file shows how a user writes one, under a name of its own.) Run the paper's SNR experiment through it, sweeping κ over traced points:

    jaxfed run docs/examples/rician_channel.py:EXPERIMENT --set channel=rician \\
        --set channel_sweep=k_factor=0,3,30 --trials 100 --out results/rician

or fix κ with ``--set channel=rician:k_factor=10``. In Python:
``oac.resolve_channel("rician").with_params(k_factor=jnp.float32(3.0))`` works wherever a channel
name does (``over_the_air_sum``, ``aggregators.oac``).
"""

import jax
import jax.numpy as jnp

from jaxfed import oac
from jaxfed.oac.channel import qpsk, resource_index
from jaxfed.runs import find


def rician_energy(key, numerals, beta, noise_var, symbol_energy, active, k_factor):
    """|y_l|² with y_l = Σ_k √E_s h_{k,l} r_{k,l} x_{k,l} + w_l, h Rician with K-factor κ (traced)."""
    _, n_values, digits = numerals.shape
    dtype = jnp.result_type(noise_var, symbol_energy, jnp.float32)
    cdtype = jnp.result_type(dtype, jnp.complex64)
    key_phase, key_scatter, key_symbols, key_noise = jax.random.split(key, 4)
    kappa = jnp.asarray(k_factor, dtype)
    phase = jax.random.uniform(key_phase, numerals.shape, dtype, 0.0, 2 * jnp.pi)
    line_of_sight = jnp.sqrt(kappa / (kappa + 1)) * jnp.exp(1j * phase)
    scatter = jnp.sqrt(1 / (kappa + 1)) * jax.random.normal(key_scatter, numerals.shape, cdtype)
    received = jnp.sqrt(symbol_energy) * (line_of_sight + scatter) * qpsk(key_symbols, numerals.shape, cdtype)
    if active is not None:
        received = jnp.where(active[:, None, None], received, 0)
    q = jnp.arange(n_values)[:, None]
    resource = resource_index(q, jnp.arange(digits), numerals + (beta - 1) // 2, beta, digits)
    noise = jnp.sqrt(noise_var) * jax.random.normal(key_noise, (n_values * digits * beta,), cdtype)
    y = noise.at[resource.reshape(-1)].add(received.reshape(-1))
    return jnp.square(y.real) + jnp.square(y.imag)


# The detector is the built-in unbiased one; the Rayleigh variance formula does not hold for κ > 0.
oac.channel.register("rician", rician_energy, variance=None, params={"k_factor": 0.0})

EXPERIMENT = find("kmeans-snr")
