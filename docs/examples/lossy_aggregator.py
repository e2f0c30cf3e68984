"""A user aggregator: federated k-means when edge devices' updates are lost in transit.

Each round, every active ED's update reaches the ES with probability 1 − p (independently); the
ES sums what arrived and rescales by 1/(1 − p), an unbiased estimate of Σ_k v_k. The aggregator is
a value, ``jaxfed.oac.aggregators.Aggregator(aggregate)``, defined here; nothing in the package
changes. Run it with the same CLI, store, resume and report as the built-in experiments:

    jaxfed show docs/examples/lossy_aggregator.py:EXPERIMENT
    jaxfed run docs/examples/lossy_aggregator.py:EXPERIMENT --trials 200 --out results/lossy

Metric ``loss`` (point, trial, round): the k-means loss of the centroids the ES broadcast, one
point per loss probability p (p = 0 is the ideal channel). Data: C Gaussian blobs in the unit
square, split over K EDs at random.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import plotting
from jaxfed.experiment import Experiment, Sweep
from jaxfed.oac import kmeans
from jaxfed.oac.aggregators import Aggregator
from jaxfed.validation import check


def lossy(loss_prob) -> Aggregator:
    """Σ_{k active, arrived} v_k / (1 − p), each ED's update lost with probability p (traced)."""

    def aggregate(key, values, active, vmax):
        arrived = active & jax.random.bernoulli(key, 1.0 - loss_prob, active.shape)
        return jnp.sum(jnp.where(arrived[:, None], values, 0.0), axis=0) / (1.0 - loss_prob)

    return Aggregator(aggregate)


@dataclasses.dataclass(frozen=True)
class Config:
    """Static: n_devices, points_per_device, n_clusters, n_rounds. Traced: loss_probs (one point each)."""

    loss_probs: tuple[float, ...] = (0.0, 0.2, 0.5)  # probability p that an ED's update is lost
    n_devices: int = 10  # K edge devices
    points_per_device: int = 20  # data points per ED
    n_clusters: int = 3  # C blobs and centroids
    n_rounds: int = 15  # federated rounds recorded

    def __post_init__(self):
        check("loss_probs", self.loss_probs, all(0.0 <= p < 1.0 for p in self.loss_probs), "numbers in [0, 1)")
        check("n_devices", self.n_devices, self.n_devices >= 1, "an integer >= 1")
        check("points_per_device", self.points_per_device, self.points_per_device >= 1, "an integer >= 1")
        check("n_clusters", self.n_clusters, self.n_clusters >= 2, "an integer >= 2")
        check("n_rounds", self.n_rounds, self.n_rounds >= 1, "an integer >= 1")


def build(cfg: Config) -> Sweep:
    n_points = cfg.n_devices * cfg.points_per_device

    def trial(key, point):
        k_centres, k_points, k_init, k_rounds = jax.random.split(key, 4)
        centres = jax.random.uniform(k_centres, (cfg.n_clusters, 2))
        labels = jnp.arange(n_points) % cfg.n_clusters
        points = centres[labels] + 0.05 * jax.random.normal(k_points, (n_points, 2))
        data = kmeans.flatten_devices(
            points.reshape(cfg.n_devices, cfg.points_per_device, 2), jnp.ones((cfg.n_devices, cfg.points_per_device))
        )
        init = kmeans.initial_centroids(k_init, points, cfg.n_clusters, "uniform", 0.0, 1.0)
        settings = kmeans.Settings(lossy(point["loss_prob"]))
        _, info = kmeans.federated_rounds(k_rounds, data, cfg.n_devices, init, cfg.n_rounds, settings)
        return {"loss": info.loss}

    points = [{"loss_prob": jnp.float32(p)} for p in cfg.loss_probs]
    labels = [{"loss_prob": p} for p in cfg.loss_probs]
    return Sweep(trial=trial, points=points, labels=labels, metric_axes={"loss": ("round",)})


def plot(cfg: Config, labels, metrics, path):
    fig, ax = plotting.figure(figsize=(6, 4))
    rounds = np.arange(cfg.n_rounds)
    plotting.band_plot(ax, rounds, metrics["loss"], [f"p = {lab['loss_prob']}" for lab in labels], log_y=True)
    ax.set_xlabel("round")
    ax.set_ylabel("k-means loss (median, 75% band)")
    ax.set_title("federated k-means with lost updates (user aggregator)")
    plotting.save(fig, path)


def report(cfg: Config, labels, metrics) -> str:
    from jaxfed import stats

    band = stats.band(metrics["loss"])
    rows = "\n".join(
        f"| {lab['loss_prob']} | {band.median[p, -1]:.4g} [{band.lower[p, -1]:.4g}, {band.upper[p, -1]:.4g}] |"
        for p, lab in enumerate(labels)
    )
    return "| p | final loss, median [75% band] |\n|---|---|\n" + rows + "\n"


EXPERIMENT = Experiment(
    name="lossy-aggregator",
    description="federated k-means with a user aggregator that loses ED updates with probability p",
    config_cls=Config,
    build=build,
    plot=plot,
    report=report,
    default_trials=100,
    common_random_numbers=True,  # every p sees the same data and initial centroids in a trial
)
