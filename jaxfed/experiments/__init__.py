"""The reproduced experiments, by name. Each module defines a config dataclass, a sweep (trial +
points) and a plot; :mod:`jaxfed.experiments.base` runs them and writes the result directory."""

from __future__ import annotations

from jaxfed.experiments import (
    gfvl_graphs,
    gfvl_heterogeneity,
    gfvl_local_iters,
    gfvl_logistic,
    gfvl_topologies,
    gfvl_unlearning,
    gfvl_wallclock,
    kmeans_ablation,
    kmeans_channels,
    kmeans_counts,
    kmeans_mall,
    kmeans_studies,
)
from jaxfed.experiments.base import Experiment, Reading, Sweep, load_results, make_config, run_experiment
from jaxfed.experiments.catalog import describe, find

__all__ = [
    "REGISTRY",
    "get",
    "describe",
    "Experiment",
    "Reading",
    "Sweep",
    "make_config",
    "run_experiment",
    "load_results",
]

REGISTRY: dict[str, Experiment] = {
    exp.name: exp
    for exp in (
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
    )
}


def get(name: str) -> Experiment:
    """The experiment called ``name``: built-in, a user's ``path/to/file.py:ATTRIBUTE`` or an installed
    plugin (see :mod:`jaxfed.experiments.catalog`); ValueError listing the known names otherwise."""
    return find(name, REGISTRY)
