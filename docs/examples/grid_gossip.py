"""A user experiment: conjugate G-FVL on square grids of growing size.

Run it with the same CLI, store, resume and report as the built-in experiments:

    jaxfed show docs/examples/grid_gossip.py:EXPERIMENT
    jaxfed run docs/examples/grid_gossip.py:EXPERIMENT --trials 200 --out results/grid
    jaxfed plot results/grid --experiment docs/examples/grid_gossip.py:EXPERIMENT

(``plot`` and ``report`` never run the code a result directory names: ``--experiment`` names the file,
whose code must match the run's.)

Metric ``kl`` (point, trial, slot): KL(q^(i) ‖ p(θ|D)) on an s × s grid, one point per side s.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import gfvl, plotting, scenarios, stats, validation
from jaxfed.experiment import Experiment, Sweep
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods


@dataclasses.dataclass(frozen=True)
class Config:
    """Static: sides (one compiled shape each), n_per_agent, n_slots. Closure constants: the rest."""

    sides: tuple[int, ...] = (2, 3, 4)  # grid sides s; K = s² agents
    n_per_agent: int = 50  # data points per agent
    theta_true: float = 0.7  # data z ~ Bernoulli(θ_true)
    n_slots: int = 200  # slots recorded

    def __post_init__(self):
        validation.check("sides", self.sides, len(self.sides) >= 1 and min(self.sides) >= 2, "integers >= 2")
        validation.integer("n_slots", self.n_slots, 1)


def build(cfg: Config) -> Sweep:
    prior = expfam.beta_natural(2.0, 2.0)

    def trial(key, point):
        key_data, key_walk = jax.random.split(key)
        adjacency = point["adjacency"]
        n_agents = adjacency.shape[0]  # static: each side is its own compiled group
        ones = scenarios.bernoulli_counts(key_data, n_agents, cfg.n_per_agent, cfg.theta_true)
        suff = likelihoods.bernoulli_beta_stats(ones, cfg.n_per_agent)
        walk = gossip.mh_walk(key_walk, adjacency, cfg.n_slots)
        return {"kl": gfvl.conjugate_kl_trajectory(expfam.BETA, prior, suff, 1.0, walk.schedule, walk.n_visited)}

    points = [{"adjacency": jnp.asarray(graphs.grid(s, s))} for s in cfg.sides]
    labels = [{"side": s} for s in cfg.sides]
    return Sweep(trial=trial, points=points, labels=labels, metric_axes={"kl": ("slot",)})


def plot(cfg: Config, labels, metrics, path):
    fig, ax = plotting.figure(figsize=(6, 4))
    slots = np.arange(1, cfg.n_slots + 1)
    # KL is exactly 0 once every agent has been visited: on the log axis band_plot shades the slots where every
    # trial is 0 ("every trial 0 from x = …") instead of ending the axis where the lines do
    plotting.band_plot(ax, slots, metrics["kl"], [f"{lab['side']}×{lab['side']} grid" for lab in labels], log_y=True)
    ax.set_xlabel("slot i")
    ax.set_ylabel("KL(q ‖ p(θ|D))")
    plotting.save(fig, path)


def report(cfg: Config, labels, metrics) -> str:
    median = stats.band(metrics["kl"]).median
    rows = [f"| {lab['side']}×{lab['side']} | {median[i, -1]:.3g} |" for i, lab in enumerate(labels)]
    return "| grid | median KL at the last slot |\n|---|---|\n" + "\n".join(rows) + "\n"


EXPERIMENT = Experiment(
    name="grid-gossip",
    description="conjugate G-FVL on s × s grids: KL to the posterior vs slot",
    config_cls=Config,
    build=build,
    plot=plot,
    report=report,
    default_trials=200,
)
