"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

Modules: graphs, gossip, expfam, likelihoods, gfvl, scenarios (G-FVL, document 000);
engine (sweeps), stats, plotting, experiments; cli.
"""

__version__ = "0.1.0"

from jaxfed import engine, expfam, gfvl, gossip, graphs, likelihoods, scenarios, stats  # noqa: E402,F401

__all__ = ["engine", "expfam", "gfvl", "gossip", "graphs", "likelihoods", "scenarios", "stats", "__version__"]
