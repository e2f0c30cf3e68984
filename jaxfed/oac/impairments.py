"""Channels the OAC k-means paper assumes away (docs/kmeans.md §B10): imperfect power control,
Rician fading and block fading, registered at import through
:func:`jaxfed.oac.channel.register` like :mod:`jaxfed.oac.antennas`, each with the mean
and variance of the energy detector K̂_l = (|y_l|² − σ²)/E_s given the count K_l of EDs active on
resource l (a = σ²/E_s below).

- ``"power-control"`` (parameters ``spread_db`` = s >= 0, ``gain``): channel inversion leaves ED k a
  residual energy gain g_k² = 10^(s ε_k/10), ε_k ~ N(0, 1) (log-normal, s dB), on top of Rayleigh
  fading: |y_l|² = (E_s G_l + σ²)·Exp(1) with G_l = Σ_{k on l} g_k². The detector estimates G_l,
  not K_l: E[K̂_l | g] = G_l, Var[K̂_l | g] = (G_l + a)²; over the gains, with σ_g = s ln(10)/10,
  m₁ = E g² = exp(σ_g²/2) and m₂ = E g⁴ = exp(2σ_g²),

      E K̂_l = m₁ K_l   (bias (m₁ − 1) K_l),     Var K̂_l = 2 K_l (m₂ − m₁²) + (m₁ K_l + a)².

  ``gain=None`` (default) draws the gains afresh in every call (every round); a scalar or a (K,)
  array of energy gains fixes them (per-trial gains: :func:`power_control_gains` in the k-means
  trial's ``channel_for`` hook). ``spread_db`` sets the draws and the variance formula.
- ``"rician-fading"`` (parameter ``k_factor`` = κ >= 0): h = √(κ/(κ+1)) e^{iφ} + √(1/(κ+1)) g,
  φ uniform (non-coherent: the ES knows no phase), g ~ CN(0, 1), per ED and active resource; the
  detector stays unbiased, E K̂_l = K_l, and with p = κ/(κ+1)

      Var K̂_l = (K_l + a)² − p² K_l,

  so the line-of-sight part lowers the fading self-noise from K_l² only to K_l² − p² K_l: the
  random phases of the K_l direct paths still add up to a random walk (κ = 0 is Rayleigh).
- ``"block-fading"`` (parameter ``block`` = B, an integer >= 1 dividing the L = QβD resources): one
  coefficient h_{k,b} ~ CN(0, 1) per ED and coherence block b of B consecutive resources
  (l = βDq + βd + j, so B = β shares a digit's resources, B = βD a value's, B = L the round's); a
  fresh QPSK symbol per resource. Each resource's law is Rayleigh's, E K̂_l = K_l and
  Var K̂_l = (K_l + a)², but resources of one block are correlated:
  Cov(K̂_l, K̂_l′) = n_{ll′}, the number of EDs active on both (0 across blocks), which
  :func:`jaxfed.oac.channel.estimate_variance` (a sum over independent resources) leaves out.
  B = 1 is the i.i.d. Rayleigh channel.

Static: β, the shapes, ``block`` when it is a Python number (checked to divide L). Traced: s, κ,
the gains, and a traced ``block`` (a value that is not an integer >= 1 dividing L makes the energies
NaN). Bad concrete values raise a one-line ValueError naming the parameter (a negative s or κ, a
block that is not an integer >= 1 or does not divide the resources).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxfed import validation
from jaxfed.oac import channel as _channel
from jaxfed.oac import physical
from jaxfed.oac.channel import activation, aggregate_energy, qpsk, resource_counts, resource_index

__all__ = [
    "power_control_gains",
    "rician_energy",
    "block_fading_energy",
    "check_block",
]

_DB = math.log(10.0) / 10.0  # natural-log units per dB


def _dtypes(noise_var, symbol_energy):
    dtype = jnp.result_type(noise_var, symbol_energy, jnp.float32)
    return dtype, jnp.result_type(dtype, jnp.complex64)


def _superpose(noise, received, numerals, beta: int):
    """noise (L,) + the per-ED contributions received (K, Q, D) on their active resources, by a
    scatter-add on CPU and a one-hot reduction elsewhere (as :func:`jaxfed.oac.channel.explicit_energy`)."""
    _, n_values, digits = numerals.shape
    if physical.default_superposition() == "scatter":
        q = jnp.arange(n_values, dtype=numerals.dtype)[:, None]
        d = jnp.arange(digits, dtype=numerals.dtype)
        resource = resource_index(q, d, numerals + (beta - 1) // 2, beta, digits)
        return noise.at[resource.reshape(-1)].add(received.reshape(-1), mode="promise_in_bounds")
    onehot = numerals[..., None] == (jnp.arange(beta, dtype=numerals.dtype) - (beta - 1) // 2)
    return noise + jnp.sum(jnp.where(onehot, received[..., None], 0), axis=0).reshape(-1)


# --------------------------------------------------------------------------- power control
def power_control_gains(key, n_devices: int, spread_db, dtype=jnp.float32) -> jax.Array:
    """(K,) residual energy gains g_k² = 10^(s ε_k/10), ε_k ~ N(0, 1): log-normal, s dB, median 1.

    Args:
        key: a PRNG key (traced).
        n_devices: K (static).
        spread_db: s >= 0 in dB (traced).
        dtype: the float dtype of the gains.

    Returns:
        (K,) gains g_k².

    Raises:
        ValueError: a concrete ``spread_db`` < 0.
    """
    validation.non_negative("spread_db", spread_db)
    return jnp.exp(jnp.asarray(spread_db, dtype) * _DB * jax.random.normal(key, (n_devices,), dtype))


def power_control_energy(key, numerals, beta, noise_var, symbol_energy, active, spread_db=0.0, gain=None):
    """|y_l|² = (E_s G_l + σ²)·Exp(1), G_l = Σ_{k on l} g_k² (Rayleigh fading of EDs received with
    energy gains g_k²); ``gain`` None draws the gains from ``key`` with spread s = ``spread_db``."""
    dtype, _ = _dtypes(noise_var, symbol_energy)
    key_gain, key_fading = jax.random.split(key)
    n_devices = numerals.shape[0]
    if gain is None:
        gain = power_control_gains(key_gain, n_devices, spread_db, dtype)
    weights = jnp.broadcast_to(jnp.asarray(gain, dtype), (n_devices,))
    gained = weights @ activation(numerals, beta, active).astype(dtype)  # G_l (a product, not a scatter)
    return aggregate_energy(key_fading, gained, noise_var, symbol_energy)


def power_control_mean(counts, spread_db):
    """E K̂_l = m₁ K_l, m₁ = exp(σ_g²/2), σ_g = s ln(10)/10: the detector's bias factor over the gains."""
    sigma = jnp.asarray(spread_db) * _DB
    return jnp.exp(sigma**2 / 2) * counts


def power_control_variance(counts, noise_var, symbol_energy, spread_db=0.0, gain=None):
    """Var K̂_l = 2 K_l (m₂ − m₁²) + (m₁ K_l + σ²/E_s)² over the gains' law (whatever ``gain`` holds)."""
    sigma2 = jnp.square(jnp.asarray(spread_db, jnp.result_type(counts, jnp.float32)) * _DB)
    m1, m2 = jnp.exp(sigma2 / 2), jnp.exp(2 * sigma2)
    return 2 * counts * (m2 - m1**2) + jnp.square(m1 * counts + noise_var / symbol_energy)


def _check_power_control(spread_db=0.0, gain=None):
    validation.non_negative("spread_db", spread_db)
    if gain is not None:
        validation.non_negative("gain", gain)


# --------------------------------------------------------------------------- Rician
def rician_energy(key, numerals, beta, noise_var, symbol_energy, active, k_factor=0.0):
    """|y_l|² with y_l = Σ_{k on l} √(E_s p) e^{iφ_k} + n_l, n_l ~ CN(0, E_s (1 − p) K_l + σ²),
    p = κ/(κ+1): each ED's direct path with a uniform phase (which absorbs its QPSK symbol), the
    scattered paths and the noise of the resource drawn together from their exact Gaussian law.

    Args:
        key: a PRNG key (traced).
        numerals: (K, Q, D) int numerals of each ED's values.
        beta: base β (static).
        noise_var: σ² (traced).
        symbol_energy: E_s (traced).
        active: (K,) bool, the EDs that transmit, or None for all.
        k_factor: κ >= 0, the Rician K-factor (traced); 0 is Rayleigh fading.

    Returns:
        (L,) = (β·D·Q,) received energies.
    """
    dtype, cdtype = _dtypes(noise_var, symbol_energy)
    key_phase, key_scatter = jax.random.split(key)
    kappa = jnp.asarray(k_factor, dtype)
    share = kappa / (kappa + 1)  # p, the direct path's share of the mean power
    e_s = jnp.asarray(symbol_energy, dtype)
    phase = jax.random.uniform(key_phase, numerals.shape, dtype, 0.0, 2 * math.pi)
    direct = jnp.sqrt(e_s * share) * lax.complex(jnp.cos(phase), jnp.sin(phase))
    if active is not None:
        direct = jnp.where(jnp.asarray(active, bool)[:, None, None], direct, 0)
    counts = resource_counts(numerals, beta, active).astype(dtype)
    spread = jnp.sqrt(e_s * (1 - share) * counts + jnp.asarray(noise_var, dtype))
    y = _superpose(spread * jax.random.normal(key_scatter, counts.shape, cdtype), direct, numerals, beta)
    return jnp.square(y.real) + jnp.square(y.imag)


def rician_variance(counts, noise_var, symbol_energy, k_factor=0.0):
    """Var K̂_l = (K_l + σ²/E_s)² − p² K_l, p = κ/(κ+1)."""
    share = k_factor / (k_factor + 1.0)
    return jnp.square(counts + noise_var / symbol_energy) - jnp.square(share) * counts


def _check_rician(k_factor=0.0):
    validation.non_negative("k_factor", k_factor)


# --------------------------------------------------------------------------- block fading
def check_block(block, n_resources: int | None = None):
    """ValueError unless a concrete ``block`` is an integer >= 1 (and divides ``n_resources``).

    Args:
        block: B, resources per coherence block (concrete or traced).
        n_resources: L, the resources of a round, or None.

    Returns:
        ``block`` unchanged.

    Raises:
        ValueError: a concrete ``block`` that is not an integer >= 1 or does not divide ``n_resources``.
    """
    if validation.is_traced(block):
        return block
    value = float(block)
    validation.check(
        "block", block, value >= 1 and value.is_integer(), "an integer >= 1 (resources per coherence block)"
    )
    if n_resources is not None:
        allowed = f"a divisor of the {n_resources} resources of a round (L = Q·β·D)"
        validation.check("block", block, n_resources % int(value) == 0, allowed)
    return block


def block_fading_energy(key, numerals, beta, noise_var, symbol_energy, active, block=1):
    """|y_l|² with y_l = Σ_{k on l} √E_s h_{k,⌊l/B⌋} r_{k,l} + w_l: ED k keeps one coefficient
    h ~ CN(0, 1) over each coherence block of B = ``block`` consecutive resources.

    ED k is active on one resource per (q, d), in increasing order l, so the coefficient of each
    active resource is the draw at the first of ED k's active resources in the same block (a
    running maximum of block starts): K·Q·D draws, whatever B.

    Args:
        key: a PRNG key (traced).
        numerals: (K, Q, D) int numerals of each ED's values.
        beta: base β (static).
        noise_var: σ² (traced).
        symbol_energy: E_s (traced).
        active: (K,) bool, the EDs that transmit.
        block: B >= 1, a divisor of L (concrete or traced).

    Returns:
        (L,) = (β·D·Q,) received energies.

    Raises:
        ValueError: a concrete ``block`` that check_block refuses.
    """
    n_devices, n_values, digits = numerals.shape
    n_res = n_values * digits * beta
    check_block(block, n_res)
    dtype, cdtype = _dtypes(noise_var, symbol_energy)
    key_fading, key_symbols, key_noise = jax.random.split(key, 3)
    q = jnp.arange(n_values, dtype=numerals.dtype)[:, None]
    d = jnp.arange(digits, dtype=numerals.dtype)
    resource = resource_index(q, d, numerals + (beta - 1) // 2, beta, digits).reshape(n_devices, -1)
    if validation.is_traced(block):  # l + 1/2 keeps ⌊l/B⌋ off the rounding of the division
        which = jnp.floor((resource.astype(dtype) + 0.5) / jnp.asarray(block, dtype))
    else:
        which = resource // int(block)
    start = jnp.concatenate([jnp.ones((n_devices, 1), bool), which[:, 1:] != which[:, :-1]], axis=1)
    first = lax.cummax(jnp.where(start, jnp.arange(resource.shape[1]), 0), axis=1)
    fading = jnp.take_along_axis(jax.random.normal(key_fading, resource.shape, cdtype), first, axis=1)
    received = jnp.sqrt(jnp.asarray(symbol_energy, dtype)) * fading.reshape(numerals.shape)
    received = received * qpsk(key_symbols, numerals.shape, cdtype)
    if active is not None:
        received = jnp.where(jnp.asarray(active, bool)[:, None, None], received, 0)
    noise = jnp.sqrt(jnp.asarray(noise_var, dtype)) * jax.random.normal(key_noise, (n_res,), cdtype)
    y = _superpose(noise, received, numerals, beta)
    energy = jnp.square(y.real) + jnp.square(y.imag)
    if validation.is_traced(block):
        b = jnp.asarray(block, dtype)
        ok = (b >= 1) & (b == jnp.floor(b)) & (jnp.mod(jnp.asarray(n_res, dtype), b) == 0)
        energy = jnp.where(ok, energy, jnp.nan)
    return energy


def block_fading_variance(counts, noise_var, symbol_energy, block=1):
    """Var K̂_l = (K_l + σ²/E_s)², Rayleigh's (each resource's law is Rayleigh's; the covariance
    within a block, n_{ll′}, depends on which EDs share resources, not on the counts)."""
    return _channel.rayleigh_count_variance(counts, noise_var, symbol_energy)


def _check_block_fading(block=1):
    check_block(block)


_channel.register(
    "power-control",
    power_control_energy,
    variance=power_control_variance,
    params={"spread_db": 0.0, "gain": None},
    check=_check_power_control,
)
_channel.register(
    "rician-fading", rician_energy, variance=rician_variance, params={"k_factor": 0.0}, check=_check_rician
)
_channel.register(
    "block-fading",
    block_fading_energy,
    variance=block_fading_variance,
    params={"block": 1.0},
    check=_check_block_fading,
)
