"""A helper module beside digital.py (task 2 of issue 49): imported by name, as `python digital.py` would."""

import jax.numpy as jnp


def uniform(values, vmax, bits: int):
    """``values`` in [−v_max, v_max] on 2^bits evenly spaced levels (the nearest)."""
    levels = 2**bits - 1
    step = 2 * jnp.maximum(vmax, 1e-30) / levels
    return jnp.clip(jnp.round((values + vmax) / step), 0, levels) * step - vmax
