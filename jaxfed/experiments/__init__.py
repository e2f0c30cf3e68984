"""The reproduced experiments, by name (:func:`register`, :func:`get`, :func:`names`; the registry
:data:`REGISTRY` is a :class:`jaxfed.registry.Registry`). Each module defines a config dataclass, a
sweep (trial + points) and a plot (:mod:`jaxfed.experiments.spec`); :mod:`jaxfed.experiments.runner`
runs them and writes the result directory (:mod:`jaxfed.store.rundir`). The trial layers they share,
which a user's experiment may build on too, are
:mod:`jaxfed.experiments.kmeans_trials` and :mod:`jaxfed.experiments.gfvl_trials`; ``jaxfed reproduce``'s
progress over the experiments is :mod:`jaxfed.experiments.reproduce_progress`."""

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
from jaxfed.experiments.catalog import describe, find
from jaxfed.experiments.runner import run_experiment
from jaxfed.experiments.spec import Experiment, Reading, Sweep, make_config
from jaxfed.registry import Registry
from jaxfed.store.rundir import load_results

__all__ = [
    "REGISTRY",
    "register",
    "get",
    "names",
    "describe",
    "Experiment",
    "Reading",
    "Sweep",
    "make_config",
    "run_experiment",
    "load_results",
]

REGISTRY: Registry[Experiment] = Registry("experiment", ", or give a user experiment as path/to/file.py:NAME")


def register(experiment: Experiment) -> Experiment:
    """Adds ``experiment`` under ``experiment.name`` (replacing one of that name; ``jaxfed list`` and
    ``jaxfed run NAME`` then find it) and returns it."""
    return REGISTRY.register(experiment.name, experiment)


def names() -> tuple[str, ...]:
    """The registered experiments' names, built-ins first."""
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


def get(name: str) -> Experiment:
    """The experiment called ``name``: registered, a user's ``path/to/file.py:ATTRIBUTE`` or an installed
    plugin (see :mod:`jaxfed.experiments.catalog`); ValueError listing the known names otherwise."""
    return find(name, REGISTRY)
