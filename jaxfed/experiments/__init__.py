"""The built-in experiments: definitions only (what each one computes, plots and claims), by name.

:data:`REGISTRY` (a :class:`jaxfed.registry.Registry`) holds the reproduced figures of the two
papers, grouped by system: :mod:`jaxfed.experiments.gfvl` (G-FVL, docs/gfvl.md) and
:mod:`jaxfed.experiments.kmeans` (wireless federated k-means, docs/kmeans.md). What an experiment
is lives in :mod:`jaxfed.experiment`; how any experiment is run (found by name, a user's
``file.py:NAME`` included, run, sharded, merged, verified) in :mod:`jaxfed.runs`.
"""

from __future__ import annotations

from jaxfed.experiment import Experiment
from jaxfed.experiments.gfvl import graphs as gfvl_graphs
from jaxfed.experiments.gfvl import heterogeneity as gfvl_heterogeneity
from jaxfed.experiments.gfvl import local_iters as gfvl_local_iters
from jaxfed.experiments.gfvl import logistic as gfvl_logistic
from jaxfed.experiments.gfvl import topologies as gfvl_topologies
from jaxfed.experiments.gfvl import unlearning as gfvl_unlearning
from jaxfed.experiments.gfvl import wallclock as gfvl_wallclock
from jaxfed.experiments.kmeans import ablation as kmeans_ablation
from jaxfed.experiments.kmeans import channels as kmeans_channels
from jaxfed.experiments.kmeans import counts as kmeans_counts
from jaxfed.experiments.kmeans import mall as kmeans_mall
from jaxfed.experiments.kmeans import studies as kmeans_studies
from jaxfed.registry import Registry

__all__ = ["REGISTRY", "register", "names"]

REGISTRY: Registry[Experiment] = Registry("experiment", ", or give a user experiment as path/to/file.py:NAME")


def register(experiment: Experiment) -> Experiment:
    """Adds an experiment under its name (``jaxfed list`` and ``jaxfed run NAME`` then find it).

    Args:
        experiment: the :class:`~jaxfed.experiment.Experiment`; one of the same name is replaced.

    Returns:
        ``experiment``.
    """
    return REGISTRY.register(experiment.name, experiment)


def names() -> tuple[str, ...]:
    """The registered experiments' names.

    Returns:
        The names, built-ins first, in the order they were registered.
    """
    return REGISTRY.names()


for _experiment in (
    gfvl_topologies.EXPERIMENT,
    gfvl_local_iters.EXPERIMENT,
    gfvl_local_iters.EXPERIMENT_PAPER,
    gfvl_unlearning.EXPERIMENT,
    gfvl_unlearning.EXPERIMENT_PAPER,
    gfvl_unlearning.EXPERIMENT_CONJUGATE,
    gfvl_heterogeneity.EXPERIMENT,
    gfvl_logistic.EXPERIMENT,
    gfvl_wallclock.EXPERIMENT,
    gfvl_graphs.EXPERIMENT,
    kmeans_mall.CONVERGENCE,
    kmeans_mall.SNR,
    kmeans_ablation.EXPERIMENT,
    kmeans_studies.DEVICES,
    kmeans_studies.DIGITS1,
    kmeans_counts.EXPERIMENT,
    kmeans_channels.EXPERIMENT,
):
    register(_experiment)
