"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

G-FVL (docs/gfvl.md): graphs, gossip, expfam, likelihoods, natgrad, quadrature, numerics, gfvl.
Over-the-air federated k-means (docs/kmeans.md): oac (codec, channel), kmeans.
Shared: scenarios (data), engine (sweeps), stats, plotting, experiments, validation (argument checks); cli.
Results as labelled data (docs/results.md): open_results, to_xarray, bands, verdicts (jaxfed.results).
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
from jaxfed.results import bands, open_results, to_xarray, verdicts  # noqa: E402  (xarray/pandas: on first use)

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
    "open_results",
    "to_xarray",
    "bands",
    "verdicts",
    "__version__",
]
