"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

The package in layers, each importing only those below it (docs/layout.md):

- foundations: :mod:`~jaxfed.numerics`, :mod:`~jaxfed.registry`, :mod:`~jaxfed.validation`, and
  :mod:`~jaxfed.stats` (summaries, intervals, verdicts);
- models and kernels: :mod:`jaxfed.gfvl` (G-FVL, docs/gfvl.md: the protocol and its expfam,
  likelihoods, models, graphs, gossip, natgrad, quadrature, logistic), :mod:`jaxfed.oac`
  (over-the-air computation), then :mod:`~jaxfed.kmeans` and :mod:`~jaxfed.scenarios` (data);
- the stored run: :mod:`jaxfed.store` (chunks, result directory);
- :mod:`jaxfed.engine` (sweeps), :mod:`~jaxfed.plotting`;
- :mod:`jaxfed.experiments` (the reproduced figures);
- :mod:`jaxfed.results` (results as labelled data, docs/results.md: :func:`open_results`,
  :func:`to_xarray`, :func:`bands`, :func:`verdicts`; the reports); the ``jaxfed`` command;
- beyond one machine (docs/clusters.md): ``jaxfed.run_shard`` computes one shard of a run,
  ``jaxfed.merge`` joins the shards into the one-process run's directory byte for byte,
  ``jaxfed.run_on_dask`` runs the shards as Dask tasks (the dask extra); ``jaxfed.verify``
  recomputes stored values of a finished run bit for bit.

Modules that moved in 0.2 keep their old paths (``jaxfed.expfam``, ``jaxfed.rundir``, …) with a
DeprecationWarning until 0.3 (:mod:`jaxfed._aliases`).
"""

import importlib

from jaxfed import _aliases, engine, gfvl, kmeans, numerics, oac, registry, scenarios, stats, validation
from jaxfed._version import __version__
from jaxfed.results import bands, open_results, to_xarray, verdicts  # (xarray/pandas: on first use)

_aliases.install()

__all__ = [
    "engine",
    "gfvl",
    "kmeans",
    "numerics",
    "oac",
    "registry",
    "scenarios",
    "stats",
    "validation",
    "open_results",
    "to_xarray",
    "bands",
    "verdicts",
    "merge",
    "run_shard",
    "run_on_dask",
    "verify",
    "__version__",
]

_ON_FIRST_USE = {
    "merge": "jaxfed.results.merging",
    "run_shard": "jaxfed.experiments.sharding",
    "run_on_dask": "jaxfed.experiments.distributed",
    "verify": "jaxfed.experiments.verifying",
}
"""Public names imported on first use (``import jaxfed`` does not load the experiments): runs
beyond one machine (docs/clusters.md)."""


def __getattr__(name: str):
    """``jaxfed.expfam`` and the other modules that moved in 0.2, with a DeprecationWarning."""
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    old = f"jaxfed.{name}"
    if old in _aliases.MOVED:
        return _aliases.moved(old, stacklevel=3)  # (the line that reads jaxfed.NAME)
    raise AttributeError(f"module 'jaxfed' has no attribute {name!r}")
