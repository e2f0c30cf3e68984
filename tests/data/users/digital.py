"""Task 2 of issue 49: a digital 2-bit aggregation method against OAC in the built-in experiments.

Each ED sends its values on 4 levels over an error-free digital link; the ES sums them exactly:

    jaxfed run kmeans-convergence --import digital.py --set methods=oac,digital-2bit
"""

import jax.numpy as jnp
from quantizers import uniform  # a module beside this file

from jaxfed import oac

BITS = 2


def digital(beta, digits, snr_db, symbol_energy, channel):
    """Σ_{k active} Q₂(v_k), Q₂ the uniform 2-bit quantiser of [−v_max, v_max]."""

    def quantize(values, vmax):
        return uniform(values, vmax, BITS)

    def aggregate(key, values, active, vmax):
        return jnp.sum(jnp.where(active[:, None], quantize(values, vmax), 0.0), axis=0)

    return oac.aggregators.Aggregator(aggregate, quantize)


oac.aggregators.register("digital-2bit", digital, label=lambda lab: f"digital {BITS}-bit")
