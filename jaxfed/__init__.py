"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

G-FVL (docs/gfvl.md): graphs, gossip, expfam, likelihoods, natgrad, quadrature, numerics, gfvl.
Over-the-air federated k-means (docs/kmeans.md): oac (codec, channel), kmeans.
Shared: scenarios (data), engine (sweeps), stats, plotting, experiments, validation (argument checks); cli.
Results as labelled data (docs/results.md): open_results, to_xarray, bands, verdicts (jaxfed.results);
the result directory they read: jaxfed.rundir.
"""

from jaxfed import (  # noqa: F401
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
from jaxfed._version import __version__
from jaxfed.results import bands, open_results, to_xarray, verdicts  # (xarray/pandas: on first use)

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
