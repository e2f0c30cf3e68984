"""Balanced-number codec of the over-the-air k-means (docs/kmeans.md §B3).

A real value v is quantised to one of β^D levels and written as D numerals of a balanced number
system of odd base β, least significant first. With ξ = (β^D − 1)/2:

1. clamp: v′ = max(−v_max, min(v, v_max));
2. scale and floor: n = ⌊ξ v′/v_max + ξ + 1/2⌋ ∈ {0, …, 2ξ}, expanded as n = Σ_d b_d β^d with
   b_d ∈ {0, …, β−1};
3. shift: η_d = b_d − (β−1)/2 ∈ {−(β−1)/2, …, (β−1)/2}.

Decoding, v̂ = (v_max/ξ) Σ_d η_d β^d, is linear in the numerals: the decoded sum of numerals
is the sum of the decoded values, which is what lets the edge server recover a sum from sums
of numerals. Inside the range the quantisation error is at most v_max/(2ξ).

β (``beta``) and D (``digits``) are static Python ints (they fix array shapes); ``v`` and
``v_max`` are arrays, traced under jit.

Limits (checked, ValueError otherwise):

- **int32**: the numerals are int32 and the largest integer the codec forms is 2ξ = β^D − 1,
  so β^D − 1 < 2^31 (β = 3: D ≤ 19; β = 5: D ≤ 13; β = 7: D ≤ 11).
- **float32 precision** (when the values are float32): β^D ≤ 2^24 (β = 3: D ≤ 15; β = 5:
  D ≤ 10; β = 7: D ≤ 8). Then ξ and every p + 1/2 with p ∈ [−ξ, ξ] a float32 are exact, so
  the only roundings in step 2 are those of the product and quotient in p = (ξ v′)/v_max
  (division correctly rounded, see :func:`_divide`); the level is exact whenever p is, and
  otherwise differs from the exact one only for values within that rounding (about 2^-23
  v_max) of a decision threshold. Beyond 2^24 levels the quantisation step would be finer
  than float32 resolves near v_max.
  Enable ``jax_enable_x64`` and pass float64 values for more levels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import validation

__all__ = [
    "max_level",
    "encode",
    "decode",
]

# 2ξ = β^D − 1 is the largest integer formed; it must fit an int32.
_INT32_LIMIT = 2**31
# Number of levels β^D up to which float32 represents ξ and every p + 1/2 (p ∈ [−ξ, ξ]) exactly.
_FLOAT32_LEVELS = 2**24


def check_base(beta, digits) -> tuple[int, int]:
    """Validates the base β and the number of digits D; returns them as Python ints.

    Raises:
        ValueError: if β is not an odd int >= 3, D is not an int >= 1, or β^D − 1 >= 2^31
            (the numerals and levels are int32).
    """
    odd = "an odd integer >= 3 (3, 5, 7, ...)"
    beta = validation.integer("beta", beta, note=f" ({odd})")
    validation.check("beta", beta, beta >= 3 and beta % 2 == 1, odd)
    digits = validation.integer("digits", digits, 1)
    fits = f"at most {_max_digits(beta, _INT32_LIMIT)} for beta={beta} (beta**digits - 1 must fit an int32, < 2**31)"
    validation.check("digits", digits, beta**digits - 1 < _INT32_LIMIT, fits)
    return beta, digits


def _max_digits(beta: int, levels: int) -> int:
    """Largest D with β^D <= ``levels``."""
    d = 0
    while beta ** (d + 1) <= levels:
        d += 1
    return d


def _divide(numerator: jax.Array, denominator) -> jax.Array:
    """numerator / denominator, correctly rounded.

    XLA rewrites a division by a broadcast scalar into a multiplication by the reciprocal (two
    roundings), which moves values lying exactly on a quantisation threshold to the wrong level;
    materialising the denominator behind an optimisation barrier keeps the division.
    """
    shape = jnp.broadcast_shapes(jnp.shape(numerator), jnp.shape(denominator))
    denominator = jnp.broadcast_to(jnp.asarray(denominator, numerator.dtype), shape)
    return numerator / lax.optimization_barrier(denominator)


def max_level(beta: int, digits: int) -> int:
    """ξ = (β^D − 1)/2: the quantised values are (v_max/ξ)·m for m ∈ {−ξ, …, ξ}.

    Args:
        beta: base β, odd int >= 3.
        digits: D >= 1.

    Returns:
        ξ, a Python int.

    Raises:
        ValueError: a bad β or D.

    Examples:
        >>> max_level(3, 2)
        4
    """
    beta, digits = check_base(beta, digits)
    return (beta**digits - 1) // 2


def encode(v, beta: int, digits: int, vmax) -> jax.Array:
    """Balanced base-β numerals of the quantised ``v`` (docs/kmeans.md §B3), least significant digit first.

    η_d = b_d − (β−1)/2 with ⌊ξ v′/v_max + ξ + 1/2⌋ = Σ_d b_d β^d and v′ = clamp(v, ±v_max).

    Computed as n = ξ + ⌊(ξ v′)/v_max + 1/2⌋, which equals the floor of docs/kmeans.md §B3 since ξ is an
    integer, and keeps the fractional part of the scaled value at full precision (adding ξ
    first would round it away for large ξ). See the module docstring for the precision limits.

    Args:
        v: values, any shape (...); integer inputs are converted to float.
        beta: base β, static odd int >= 3.
        digits: number of digits D, static int >= 1.
        vmax: clamping range v_max > 0 (not checked: it may be traced), an array
            broadcasting against ``v``.

    Returns:
        int32 numerals of shape ``broadcast(v, vmax).shape + (digits,)``, each in
            {−(β−1)/2, …, (β−1)/2}. NaN values give unspecified numerals.

    Raises:
        ValueError: for an invalid β or D, or when float32 values would need more than 2^24 levels.
    """
    beta, digits = check_base(beta, digits)
    v = jnp.asarray(v)
    dtype = jnp.result_type(v, vmax, jnp.float32)
    if jnp.finfo(dtype).bits < 64:
        allowed = (
            f"at most {_max_digits(beta, _FLOAT32_LEVELS)} for beta={beta} with {jnp.dtype(dtype).name} values "
            "(beta**digits levels, at most 2**24, the most they resolve exactly; "
            "enable jax_enable_x64 and pass float64 values for more digits)"
        )
        validation.check("digits", digits, beta**digits <= _FLOAT32_LEVELS, allowed)
    xi = (beta**digits - 1) // 2
    v = jnp.asarray(v, dtype)
    vmax = jnp.asarray(vmax, dtype)
    clamped = jnp.clip(v, -vmax, vmax)
    # (ξ·v′)/v_max rather than ξ·(v′/v_max): exact whenever ξ·v′ and the quotient are
    # representable (e.g. the halfway points of v_max = ξ). Its rounding can exceed ±ξ by an
    # ulp for v′ = ±v_max, hence the clip.
    offset = jnp.floor(_divide(xi * clamped, vmax) + 0.5)
    level = jnp.clip(offset, -xi, xi).astype(jnp.int32) + xi  # n ∈ {0, …, 2ξ}
    # Digits peeled off one at a time by a division by the constant β, which compiles to a
    # multiply and shift (about 3x faster on CPU than jnp's `//` and `%` by an array of powers,
    # which divide generically and fix up signs); n >= 0, so truncating division is floor division.
    numerals = []
    for _ in range(digits):
        quotient = lax.div(level, jnp.int32(beta))
        numerals.append(level - beta * quotient - (beta - 1) // 2)  # η_d = b_d − (β−1)/2
        level = quotient
    return jnp.stack(numerals, axis=-1)


def decode(numerals, beta: int, vmax) -> jax.Array:
    """Quantised value of balanced numerals (docs/kmeans.md §B3): v̂ = (v_max/ξ) Σ_d η_d β^d.

    Linear in the numerals, so it also decodes sums of numerals (to the sum of the decoded
    values) and real-valued numeral estimates such as the energy detector's σ̂_{q,d}.
    The digit sum is formed in floating point by elementwise products (no matmul, whose reduced
    GPU precision would break exactness); it is exact while |Σ_d η_d β^d| < 2^24 in float32.

    Args:
        numerals: (..., D) numerals, least significant first (int or float).
        beta: base β, static odd int >= 3; D is ``numerals.shape[-1]``.
        vmax: v_max, an array broadcasting against ``numerals.shape[:-1]`` (traced).

    Returns:
        float array of shape ``broadcast(numerals.shape[:-1], vmax.shape)``.

    Raises:
        ValueError: ``numerals`` has no digit axis, or a bad β.
    """
    numerals = jnp.asarray(numerals)
    allowed = "an array with a trailing digit axis (shape (..., D))"
    validation.check("numerals", numerals.shape, numerals.ndim > 0, allowed)
    beta, digits = check_base(beta, numerals.shape[-1])
    xi = (beta**digits - 1) // 2
    dtype = jnp.result_type(numerals, vmax, jnp.float32)
    powers = jnp.asarray(beta ** np.arange(digits), dtype)
    total = jnp.sum(numerals.astype(dtype) * powers, axis=-1)
    return _divide(jnp.asarray(vmax, dtype), xi) * total


def quantize(v, beta: int, digits: int, vmax) -> jax.Array:
    """The quantised value decode(encode(v)) without forming the digits: (v_max/ξ)·m with
    m = clip(⌊ξ v′/v_max + 1/2⌋, −ξ, ξ) and v′ = clamp(v, ±v_max). Bit-identical to the round
    trip (the same operations; the digit expansion is exact), several times cheaper.
    """
    beta, digits = check_base(beta, digits)
    xi = (beta**digits - 1) // 2
    dtype = jnp.result_type(v, vmax, jnp.float32)
    v = jnp.asarray(v, dtype)
    vmax = jnp.asarray(vmax, dtype)
    offset = jnp.clip(jnp.floor(_divide(xi * jnp.clip(v, -vmax, vmax), vmax) + 0.5), -xi, xi)
    return _divide(vmax, xi) * offset
