"""A user's channel, k-means aggregation method, exponential family, graph and experiments, all in one file
that the plain CLI loads (tests/runs/test_user_experiments.py), each added with its registry's ``register``:

- the channel "user-line-of-sight" (no fading: |y_l|² = E_s K_l + σ² Exp(1));
- the aggregation method "user-lossy" (each ED's update lost with probability 1/4, the sum rescaled);
- the exponential family "user-exponential" (q = Exponential(λ) on θ > 0, η = −λ), which the
  non-conjugate solver's natural-gradient step uses through the generic score and Fisher solve;
- the graph "user-wheel" (a hub joined to every agent of a ring of the others), which the G-FVL
  experiments take by name (``--set topologies=user-wheel``, gfvl-graphs' ``--set graphs=user-wheel``);
- the experiments "user-kmeans" (the k-means trial layer with ``--set method=`` and ``channel=``) and
  "user-family" (natural-gradient steps on a Poisson-rate loss with ``--set family=``).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import experiments, oac
from jaxfed.experiment import Experiment, Sweep
from jaxfed.experiments.kmeans import trials as kmeans_trials
from jaxfed.gfvl import expfam, graphs, natgrad


# --------------------------------------------------------------------------- a channel
def line_of_sight(key, numerals, beta, noise_var, symbol_energy, active):
    counts = oac.channel.resource_counts(numerals, beta, active).astype(jnp.float32)
    return symbol_energy * counts + noise_var * jax.random.exponential(key, counts.shape)


oac.channel.register("user-line-of-sight", line_of_sight, variance=None)


# --------------------------------------------------------------------------- an aggregation method
LOSS_PROB = 0.25


def lossy(beta, digits, snr_db, symbol_energy, channel) -> oac.aggregators.Aggregator:
    def aggregate(key, values, active, vmax):
        arrived = active & jax.random.bernoulli(key, 1.0 - LOSS_PROB, active.shape)
        return jnp.sum(jnp.where(arrived[:, None], values, 0.0), axis=0) / (1.0 - LOSS_PROB)

    return oac.aggregators.Aggregator(aggregate)


oac.aggregators.register("user-lossy", lossy, label=lambda lab: f"lossy p={LOSS_PROB}")


# --------------------------------------------------------------------------- an exponential family
EXPONENTIAL = expfam.register(
    expfam.ExpFamily(
        name="user-exponential",
        dim=1,
        sufficient_stats=lambda theta: theta[..., None],
        log_base_measure=jnp.zeros_like,
        log_partition=lambda eta: -jnp.log(-eta[..., 0]),
        mean=lambda eta: -1.0 / eta,
        fisher=lambda eta: (1.0 / eta**2)[..., None],
        fisher_quadratic=lambda eta, d: jnp.sum(d**2 / eta**2, axis=-1),
        boundary_distance=lambda eta: -eta,
        sample=lambda key, eta, shape: jax.random.exponential(key, shape, eta.dtype) / -eta[..., 0],
        project=lambda eta: jnp.minimum(eta, -1e-3),
    )
)


# --------------------------------------------------------------------------- a graph
def wheel(n_agents):
    adjacency = np.zeros((n_agents, n_agents), np.int32)
    adjacency[1:, 1:] = graphs.ring(n_agents - 1)
    adjacency[0, 1:] = adjacency[1:, 0] = 1
    return adjacency


graphs.register("user-wheel", wheel)


# --------------------------------------------------------------------------- two experiments
def _plot(cfg, labels, metrics, path):
    from jaxfed import plotting

    fig, ax = plotting.figure()
    plotting.save(fig, path)


def _report(cfg, labels, metrics) -> str:
    return "".join(f"- {name}: shape {np.shape(value)}\n" for name, value in metrics.items())


@dataclasses.dataclass(frozen=True)
class KMeansConfig(kmeans_trials.MallConfig):
    rows: int = 2  # mall tiles per column
    cols: int = 2  # mall tiles per row
    n_points: int = 60  # customers per trial
    n_components: int = 3  # Gaussian mixture components
    n_clusters: int = 3  # C
    n_rounds: int = 3  # rounds per trial
    method: str = "oac"  # the federated method, one of kmeans_trials.methods()


def build_kmeans(cfg: KMeansConfig) -> Sweep:
    return kmeans_trials.mall_sweep(cfg, [{"method": cfg.method, "digits": 2, "snr_db": 20.0}])


KMEANS = experiments.register(
    Experiment("user-kmeans", "a user's k-means method and channel", KMeansConfig, build_kmeans, _plot, _report)
)


@dataclasses.dataclass(frozen=True)
class FamilyConfig:
    family: str = "user-exponential"  # q's family, one of expfam.names()
    n_iters: int = 30  # natural-gradient steps
    n_samples: int = 16  # REINFORCE samples S per step
    rho: float = 0.05  # learning rate ρ


def build_family(cfg: FamilyConfig) -> Sweep:
    family = expfam.get(cfg.family)
    prior = jnp.asarray([-1.0])  # Exponential(1)

    def loss(theta):  # 10 Poisson counts summing to 30: L(θ) = 10 θ − 30 log θ
        return 10.0 * theta - 30.0 * jnp.log(theta)

    def trial(key, point):
        def step(eta, k):
            natural = natgrad.natural_gradient_estimate(k, family, eta, loss, cfg.n_samples, "leave-one-out")
            eta = natgrad.natural_step(family, eta, natural, prior, cfg.rho, 1.0)
            return eta, family.mean(eta)[0]

        _, means = jax.lax.scan(step, prior, jax.random.split(key, cfg.n_iters))
        return {"mean": means}

    return Sweep(trial, [{}], [{}], {"mean": ("iteration",)})


FAMILY = Experiment(
    "user-family", "a user's family in natural-gradient steps", FamilyConfig, build_family, _plot, _report
)
