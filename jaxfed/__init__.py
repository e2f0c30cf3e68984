"""jaxfed: a batched Monte Carlo engine in JAX for federated learning systems.

The package in floors, each importing only those below it (docs/layout.md):

- foundations: :mod:`~jaxfed.numerics`, :mod:`~jaxfed.registry`, :mod:`~jaxfed.validation`,
  :mod:`~jaxfed.jaxcompat`, :mod:`~jaxfed.builds`; then :mod:`jaxfed.stats` (summaries,
  intervals, verdicts);
- models and kernels: :mod:`jaxfed.gfvl` (G-FVL, docs/gfvl.md), :mod:`jaxfed.oac` (over-the-air
  computation and the federated k-means built on it, docs/kmeans.md); the stored run,
  :mod:`jaxfed.store`;
- :mod:`jaxfed.engine` (sweeps), :mod:`~jaxfed.scenarios` (data), :mod:`~jaxfed.plotting`;
- :mod:`jaxfed.experiment`: what an experiment is (:class:`Experiment`, :class:`Sweep`,
  :class:`Reading`);
- :mod:`jaxfed.experiments`: the built-in experiments (definitions only); :mod:`jaxfed.results`:
  a run as labelled data and its reports;
- :mod:`jaxfed.runs`: how any experiment is run: found by name, run, sharded and merged, run on
  Dask, verified (docs/clusters.md); :func:`run` is ``jaxfed run`` from Python;
- :mod:`jaxfed.cli`: the ``jaxfed`` command.
"""

from jaxfed import engine, gfvl, numerics, oac, registry, scenarios, stats, validation
from jaxfed._version import __version__
from jaxfed.experiment import Experiment, Reading, Sweep
from jaxfed.results import bands, open_results, to_xarray, verdicts  # (xarray/pandas: on first use)
from jaxfed.runs import merge, run, run_on_dask, run_shard, verify

__all__ = [
    "engine",
    "gfvl",
    "numerics",
    "oac",
    "registry",
    "scenarios",
    "stats",
    "validation",
    "Experiment",
    "Reading",
    "Sweep",
    "open_results",
    "to_xarray",
    "bands",
    "verdicts",
    "run",
    "merge",
    "run_shard",
    "run_on_dask",
    "verify",
    "__version__",
]
