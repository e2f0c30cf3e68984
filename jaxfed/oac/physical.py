"""The physical layer of non-coherent over-the-air computation (docs/kmeans.md §B4): resource
mapping, activation, QPSK symbols, Rayleigh superposition and the energy detector.

The formulas and the choices (symbol energy, superposition) are those of
:mod:`jaxfed.oac.channel`, whose registered channel models are built from these functions and
which re-exports them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import validation
from jaxfed.oac.balanced import check_base, decode


def n_resources(n_values: int, beta: int, digits: int) -> int:
    """Complex resources per round, Q β D (= LCβD for the k-means' Q = LC values); independent of K.

    Args:
        n_values: Q >= 1, values summed per round.
        beta: base β, odd int >= 3.
        digits: D >= 1.

    Returns:
        Q·β·D, a Python int.

    Raises:
        ValueError: a bad ``n_values``, β or D.

    Examples:
        >>> n_resources(4, 3, 2)
        24
    """
    beta, digits = check_base(beta, digits)
    validation.integer("n_values", n_values, 1)
    return n_values * beta * digits


def resource_index(q, d, j, beta: int, digits: int):
    """Resource l = β D q + β d + j of value q, digit d and numeral s_j = j − (β−1)/2 (docs/kmeans.md §B4).

    It is the row-major flattening of a (Q, D, β) grid, which is how the functions here lay
    resources out. Works on ints and integer arrays alike.

    Args:
        q: value index in [0, Q) (int or integer array).
        d: digit index in [0, D).
        j: numeral index in [0, β).
        beta: base β, odd int >= 3 (static).
        digits: D >= 1 (static).

    Returns:
        The resource index l, of the broadcast shape of ``q``, ``d`` and ``j``.

    Raises:
        ValueError: a bad β or D.
    """
    beta, digits = check_base(beta, digits)
    return beta * digits * q + beta * d + j


def numeral_values(beta: int, dtype) -> jax.Array:
    """s_j = j − (β−1)/2 for j = 0..β−1."""
    return jnp.arange(beta, dtype=dtype) - (beta - 1) // 2


def activation(numerals: jax.Array, beta: int, active=None) -> jax.Array:
    """The transmitters' on/off pattern x_{k,l} ≠ 0: 1[η_{k,q,d} = s_j] and ED k active.

    Args:
        numerals: (K, Q, D) int numerals from :func:`jaxfed.oac.balanced.encode`.
        beta: base β (static).
        active: optional (K,) bool mask; an inactive ED transmits nothing (e.g. an ED without
            data points in k-means). Default: all active.

    Returns:
        (K, L) bool, L = QDβ, with exactly one True per (k, q, d) for an active ED.
    """
    numerals = jnp.asarray(numerals)
    onehot = numerals[..., None] == numeral_values(beta, numerals.dtype)  # (K, Q, D, β)
    if active is not None:
        onehot = onehot & jnp.asarray(active, bool)[:, None, None, None]
    return onehot.reshape(numerals.shape[0], -1)


def resource_counts(numerals: jax.Array, beta: int, active=None) -> jax.Array:
    """K_l: the number of EDs active on resource l (= K_{q,d,j}, the EDs whose digit d of value q is s_j).

    Two choices make this O(K Q D) cheap operations on CPU (5x faster than summing the one-hot):

    - bit fields: each ED adds 2^(w·j) to a uint32 word per (q, d), where w = bit_length(K)
      bits hold any count <= K, so fields never carry into each other and 32 // w numeral
      values share a word (all β of them for β = 3 and K < 1024); the one-hot alternative is
      β times larger and XLA writes it out before reducing it;
    - one reduction per digit: inside a jit XLA then computes each digit of the encoder within
      its reduction, instead of writing the (K, Q, D) numerals out and reading them back.

    Args:
        numerals: (K, Q, D) int numerals.
        beta: base β (static).
        active: optional (K,) bool mask of transmitting EDs.

    Returns:
        (L,) int32, in the resource order l = βDq + βd + j.
    """
    numerals = jnp.asarray(numerals)
    width = max(numerals.shape[0].bit_length(), 1)
    per_word = 32 // width
    mask = jnp.uint32(2**width - 1)
    one = jnp.uint32(1) if active is None else jnp.asarray(active, jnp.uint32)[:, None]
    per_digit = []
    for d in range(numerals.shape[-1]):
        offset = numerals[..., d] + (beta - 1) // 2  # (K, Q): j ∈ {0, …, β−1}
        counts = []
        for first in range(0, beta, per_word):  # one word per group of per_word numeral values
            field = offset - first
            in_word = (field >= 0) & (field < per_word)
            shift = (width * jnp.clip(field, 0, per_word - 1)).astype(jnp.uint32)
            packed = jnp.sum(jnp.where(in_word, one << shift, 0), axis=0, dtype=jnp.uint32)  # (Q,)
            counts += [(packed >> (width * f)) & mask for f in range(min(per_word, beta - first))]
        per_digit.append(jnp.stack(counts, axis=-1))  # (Q, β)
    return jnp.stack(per_digit, axis=1).astype(jnp.int32).reshape(-1)  # (Q, D, β) flattened


def noise_variance(snr_db, dtype=jnp.float32) -> jax.Array:
    """σ² = 1/SNR = 10^(−snr_db/10) (SNR of one ED at the ES, in dB); 0 for snr_db = +inf.

    Args:
        snr_db: the SNR in dB (traced; +inf for no noise).
        dtype: the float dtype of the result.

    Returns:
        σ², an array of the shape of ``snr_db``.

    Examples:
        >>> round(float(noise_variance(10.0)), 6)
        0.1
    """
    return jnp.power(jnp.asarray(10.0, dtype), -jnp.asarray(snr_db, dtype) / 10)


def qpsk(key: jax.Array, shape: tuple[int, ...], dtype=jnp.complex64) -> jax.Array:
    """Independent uniform QPSK symbols (±1 ± i)/√2.

    Two random bits per symbol, packed sixteen to a 32-bit word: every random word costs a full
    threefry block, so one word per symbol would cost about half as much as drawing the fading.

    Args:
        key: a PRNG key.
        shape: output shape (static).
        dtype: complex dtype.

    Returns:
        Complex array of ``shape`` and ``dtype``.
    """
    size = math.prod(shape)
    words = jax.random.bits(key, (-(-size // 16),), jnp.uint32)
    position = np.arange(size)
    two_bits = (words[position // 16] >> (2 * (position % 16)).astype(np.uint32)) & 3
    real_dtype = jnp.finfo(dtype).dtype
    re = 1 - 2 * (two_bits & 1).astype(real_dtype)
    im = 1 - 2 * (two_bits >> 1).astype(real_dtype)
    return (lax.complex(re, im) * np.sqrt(0.5).astype(real_dtype)).reshape(shape)


def _complex_dtype(real_dtype):
    return jnp.result_type(real_dtype, jnp.complex64)


SUPERPOSITIONS = ("scatter", "onehot")


def default_superposition() -> str:
    """The superposition the running backend uses by default: ``"scatter"`` on CPU, ``"onehot"`` elsewhere."""
    # CPU: a scatter-add costs about what the random draws cost. GPU/TPU: a scatter of K·Q·D
    # contributions onto QβD addresses serialises on atomics (measured 25x the draws at K = 1000 on
    # an H200) and its order is not deterministic; a one-hot reduction over the devices is neither.
    return "scatter" if jax.default_backend() == "cpu" else "onehot"


def explicit_energy(
    key: jax.Array, numerals: jax.Array, beta: int, noise_var, symbol_energy, active=None, superpose: str | None = None
) -> jax.Array:
    """|y_l|² of the per-ED model y_l = Σ_k h_{k,l} x_{k,l} + w_l (the reference).

    ED k's symbol on its active resource l of (q, d) is √E_s r_{k,q,d}; every other resource of
    (q, d) carries zero, so only h on the active resource matters: one fading coefficient
    g_{k,q,d} ~ CN(0, 1) and one QPSK symbol are drawn per (k, q, d), and the received
    contributions √E_s g r are scatter-added onto their resources l = βDq + βd + j. (Adding
    through a (K, Q, D, β) one-hot instead costs up to twice the random draws on CPU.)

    Args:
        key: a PRNG key.
        numerals: (K, Q, D) int numerals.
        beta: base β (static).
        noise_var: σ² (traced scalar); its float dtype (float32 for a Python float) sets the precision.
        symbol_energy: E_s (traced scalar).
        active: optional (K,) bool mask of transmitting EDs.
        superpose: ``"scatter"`` (scatter-add onto the resources) or ``"onehot"`` (a reduction over
            the EDs of a (K, Q, D, β) one-hot); static; default ``"scatter"`` on CPU and
            ``"onehot"`` elsewhere. The same sum in another order: equal up to rounding.

    Returns:
        (L,) energies |y_l|², L = QDβ.
    """
    superpose = default_superposition() if superpose is None else superpose
    validation.one_of("superpose", superpose, SUPERPOSITIONS)
    numerals = jnp.asarray(numerals)
    _, n_values, digits = numerals.shape
    dtype = jnp.result_type(noise_var, symbol_energy, jnp.float32)
    cdtype = _complex_dtype(dtype)
    key_fading, key_symbols, key_noise = jax.random.split(key, 3)
    fading = jax.random.normal(key_fading, numerals.shape, cdtype)  # g_{k,q,d} ~ CN(0, 1)
    received = jnp.sqrt(jnp.asarray(symbol_energy, dtype)) * fading * qpsk(key_symbols, numerals.shape, cdtype)
    if active is not None:
        received = jnp.where(jnp.asarray(active, bool)[:, None, None], received, 0)
    q = jnp.arange(n_values, dtype=numerals.dtype)[:, None]
    d = jnp.arange(digits, dtype=numerals.dtype)
    resource = resource_index(q, d, numerals + (beta - 1) // 2, beta, digits)  # (K, Q, D)
    n_res = n_values * digits * beta
    noise = jnp.sqrt(jnp.asarray(noise_var, dtype)) * jax.random.normal(key_noise, (n_res,), cdtype)
    if superpose == "scatter":
        y = noise.at[resource.reshape(-1)].add(received.reshape(-1), mode="promise_in_bounds")
    else:
        onehot = numerals[..., None] == (jnp.arange(beta, dtype=numerals.dtype) - (beta - 1) // 2)
        y = noise + jnp.sum(jnp.where(onehot, received[..., None], 0), axis=0).reshape(-1)
    return jnp.square(y.real) + jnp.square(y.imag)


def aggregate_energy(key: jax.Array, counts: jax.Array, noise_var, symbol_energy) -> jax.Array:
    """|y_l|² sampled from its exact law given the counts: (E_s K_l + σ²)·Exp(1).

    A sum of K_l independent CN(0, E_s) terms (h r √E_s, with |r| = 1) plus CN(0, σ²) noise is
    CN(0, E_s K_l + σ²), whose squared modulus is exponential with that mean.

    Args:
        key: a PRNG key.
        counts: (L,) active-ED counts K_l (:func:`resource_counts`).
        noise_var: σ² (traced scalar); its float dtype sets the precision.
        symbol_energy: E_s (traced scalar).

    Returns:
        (L,) energies.
    """
    dtype = jnp.result_type(noise_var, symbol_energy, jnp.float32)
    mean = jnp.asarray(symbol_energy, dtype) * jnp.asarray(counts, dtype) + jnp.asarray(noise_var, dtype)
    return mean * jax.random.exponential(key, mean.shape, dtype)


def detect(energy: jax.Array, noise_var, symbol_energy) -> jax.Array:
    """Energy detector K̂_l = (|y_l|² − σ²)/E_s, an unbiased estimate of K_l.

    Its variance is (K_l + σ²/E_s)² under the Rayleigh model.

    Args:
        energy: (L,) received energies |y_l|².
        noise_var: σ² (traced).
        symbol_energy: E_s (traced).

    Returns:
        (L,) estimates K̂_l.
    """
    return (energy - noise_var) / symbol_energy


def estimate_sum(counts_hat: jax.Array, beta: int, digits: int, vmax) -> jax.Array:
    """ES estimate v̂_q = (v_max/ξ) Σ_d β^d σ̂_{q,d} with σ̂_{q,d} = Σ_j s_j K̂_{q,d,j}.

    Args:
        counts_hat: (..., L) count estimates, L = QDβ in the order l = βDq + βd + j.
        beta: base β (static).
        digits: D (static).
        vmax: v_max, scalar or (Q,) (traced).

    Returns:
        (..., Q) estimates.

    Raises:
        ValueError: a bad β or D, or a last axis that is not a multiple of β·D.
    """
    beta, digits = check_base(beta, digits)
    counts_hat = jnp.asarray(counts_hat)
    ok = counts_hat.ndim > 0 and counts_hat.shape[-1] % (beta * digits) == 0
    allowed = f"an array with a last axis of Q*beta*digits = Q*{beta * digits} resources"
    validation.check("counts_hat", counts_hat.shape, ok, allowed)
    grid = counts_hat.reshape(counts_hat.shape[:-1] + (-1, digits, beta))
    sigma_hat = jnp.sum(grid * numeral_values(beta, grid.dtype), axis=-1)  # (..., Q, D)
    return decode(sigma_hat, beta, vmax)


def rayleigh_count_variance(counts, noise_var, symbol_energy) -> jax.Array:
    """Var K̂_l = (K_l + σ²/E_s)² of the energy detector under i.i.d. Rayleigh fading, given K_l.

    |y_l|² is exponential with mean E_s K_l + σ², so its variance is that mean squared.

    Args:
        counts: (L,) K_l, numbers of EDs on each resource.
        noise_var: σ² (traced).
        symbol_energy: E_s (traced).

    Returns:
        (L,) variances.
    """
    return jnp.square(counts + noise_var / symbol_energy)
