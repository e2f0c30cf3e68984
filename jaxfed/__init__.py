"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

G-FVL (docs/gfvl.md): graphs, gossip, expfam, likelihoods, natgrad, quadrature, numerics, gfvl.
Over-the-air federated k-means (docs/kmeans.md): oac (codec, channel), kmeans.
Shared: scenarios (data), engine (sweeps), stats, plotting, experiments, validation (argument checks); cli.
"""

__version__ = "0.1.0"

from jaxfed import (  # noqa: E402,F401
    engine,
    expfam,
    gfvl,
    gossip,
    graphs,
    kmeans,
    likelihoods,
    natgrad,
    numerics,
    oac,
    quadrature,
    scenarios,
    stats,
    validation,
)

__all__ = [
    "engine",
    "expfam",
    "gfvl",
    "gossip",
    "graphs",
    "kmeans",
    "likelihoods",
    "natgrad",
    "numerics",
    "oac",
    "quadrature",
    "scenarios",
    "stats",
    "validation",
    "__version__",
]
