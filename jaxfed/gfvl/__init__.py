"""Gossip-based federated variational learning (G-FVL).

This face re-exports the protocol (``jaxfed.gfvl.NAME``); the code is in named modules:

- :mod:`jaxfed.gfvl.protocol`: the G-FVL protocol: the state (η travels with the token, the
  factors λ_k stay at the agents), one slot (:func:`step`), whole runs (:func:`learn`,
  :func:`learn_by_iteration`), the local solvers (:func:`conjugate_solver`,
  :func:`natgrad_solver`, …), unlearning (:func:`forget`, :func:`unlearn`) and the conjugate
  KL trajectory;
- :mod:`jaxfed.gfvl.expfam`: exponential families (natural parameters, log-partition, KL);
- :mod:`jaxfed.gfvl.likelihoods`, :mod:`jaxfed.gfvl.models`, :mod:`jaxfed.gfvl.logistic`: the
  agents' data and models;
- :mod:`jaxfed.gfvl.natgrad`, :mod:`jaxfed.gfvl.quadrature`: natural-gradient and quadrature
  solvers of the local free energy;
- :mod:`jaxfed.gfvl.graphs`, :mod:`jaxfed.gfvl.gossip`: communication graphs and the token's walk.
"""

# ruff: noqa: F401 (a face: every import below is a re-export)

from jaxfed.gfvl import expfam as expfam  # (the parts the protocol uses, as attributes of the face)
from jaxfed.gfvl import gossip as gossip
from jaxfed.gfvl import likelihoods as likelihoods
from jaxfed.gfvl import natgrad as natgrad
from jaxfed.gfvl.protocol import (
    RANK_SORT_MAX,
    GFVLState,
    LocalIteration,
    LocalSolver,
    conjugate_kl_trajectory,
    conjugate_natgrad_iteration,
    conjugate_natgrad_solver,
    conjugate_solver,
    forget,
    init,
    learn,
    learn_by_iteration,
    natgrad_iteration,
    natgrad_solver,
    posterior_eta,
    step,
    unlearn,
    unlearning_step,
)

__all__ = [
    "GFVLState",
    "LocalSolver",
    "init",
    "step",
    "learn",
    "learn_by_iteration",
    "conjugate_natgrad_iteration",
    "conjugate_solver",
    "conjugate_natgrad_solver",
    "natgrad_solver",
    "forget",
    "unlearn",
    "posterior_eta",
    "conjugate_kl_trajectory",
]
