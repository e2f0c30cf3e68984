"""Task 4 of issue 49: a 1-D logistic likelihood written by a user, with unlearning, in one experiment file.

    p(y | x, θ) = σ((2y − 1) x θ),   θ ∈ R,   q = N(m, 1/p) (jaxfed.gfvl.expfam.NORMAL),   prior N(0, prior_var)

The likelihood is one line of JAX given to :func:`jaxfed.gfvl.likelihoods.from_log_lik` (no registry: the
built-in unlearning experiments take no likelihood by name, so this file is the experiment, run by path):

    jaxfed run tests/data/users/logistic1d.py:EXPERIMENT --trials 8

After ``learn_slots`` slots of G-FVL on the complete graph agent u = ``forget_agent`` asks to be forgotten
("unlearning": η ← η − λ_u at u's next slot), against "retrain" (G-FVL from the prior without u). Metrics:
``kl`` (point, trial, slot) KL(q^(i) ‖ p(θ | D_−u)) after each slot from the request, the exact posterior by
a quadrature on a grid; ``hit`` (point, trial) the slots until u is scheduled (the same for both points).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import gfvl, plotting
from jaxfed.experiment import Experiment, Sweep
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods

METHODS = ("unlearning", "retrain")
GRID = np.linspace(-12.0, 12.0, 2401)  # θ grid of the posterior normaliser: spacing 0.01, the prior to 6 sd
HERMITE = np.polynomial.hermite_e.hermegauss(40)  # E_q[f(θ)] for a Normal q


def log_lik(z, theta):
    """log p(y | x, θ) for one point z = (x, y)."""
    return jax.nn.log_sigmoid((2.0 * z[1] - 1.0) * z[0] * theta)


LIKELIHOOD = likelihoods.from_log_lik(log_lik, "logistic-1d")


@dataclasses.dataclass(frozen=True)
class Config:
    n_agents: int = 6  # K (complete graph)
    n_per_agent: int = 30  # N_k
    theta_true: float = 1.5  # y ~ Bernoulli(σ(θ x)), x ~ N(0, 1)
    prior_var: float = 4.0  # prior N(0, prior_var)
    rho: float = 0.1  # learning rate ρ
    local_iters: int = 3  # L
    n_samples: int = 16  # REINFORCE samples S
    forget_agent: int = 5  # u, numbered from 0
    learn_slots: int = 30  # slots of learning before the request
    n_slots: int = 30  # slots recorded after the request


def draw_data(key, cfg):
    """(K, N, 2) points (x, y) as :class:`jaxfed.gfvl.likelihoods.PaddedData` of weight 1."""
    kx, ky = jax.random.split(key)
    x = jax.random.normal(kx, (cfg.n_agents, cfg.n_per_agent))
    y = jax.random.bernoulli(ky, jax.nn.sigmoid(cfg.theta_true * x)).astype(x.dtype)
    return likelihoods.PaddedData(z=jnp.stack([x, y], -1), weight=jnp.ones_like(x))


def kl_to_posterior(eta, data, prior_var):
    """KL(N(m, 1/p) ‖ p(θ | data)): E_q[log q] − E_q[log prior − L] + log ∫ prior e^(−L) dθ."""
    mean, precision = expfam.normal_mean_precision(eta)
    nodes, weights = (jnp.asarray(h, eta.dtype) for h in HERMITE)
    grid = jnp.asarray(GRID, eta.dtype)

    def log_joint(theta):
        return -0.5 * theta**2 / prior_var - 0.5 * jnp.log(2 * jnp.pi * prior_var) - LIKELIHOOD.loss(data, theta)

    theta = mean + nodes / jnp.sqrt(precision)
    expected = jnp.sum(weights * log_joint(theta)) / jnp.sum(weights)
    entropy = 0.5 * jnp.log(2 * jnp.pi * jnp.e / precision)
    log_z = jax.nn.logsumexp(log_joint(grid)) + np.log(GRID[1] - GRID[0])  # the spacing in float64
    return log_z - expected - entropy


def make_trial(cfg: Config):
    prior = expfam.normal_natural(0.0, cfg.prior_var)
    complete = jnp.asarray(graphs.complete(cfg.n_agents))
    rest_graph = jnp.asarray(graphs.complete(cfg.n_agents - 1))

    def solver(data):
        return gfvl.natgrad_solver(
            expfam.NORMAL, LIKELIHOOD, data, 1.0, cfg.rho, cfg.local_iters, cfg.n_samples, "leave-one-out"
        )

    def trial(key, point):
        key_data, key_walk, key_learn = jax.random.split(key, 3)
        data = draw_data(key_data, cfg)
        rest = likelihoods.without_agent(data, cfg.forget_agent)
        walk = gossip.mh_schedule(key_walk, complete, cfg.learn_slots + cfg.n_slots)
        hit = gossip.hitting_time(walk, cfg.forget_agent, cfg.learn_slots - 1)
        if point["method"] == "unlearning":
            state = gfvl.init(prior, cfg.n_agents)
            _, etas = gfvl.unlearn(key_learn, state, walk, solver(data), cfg.forget_agent, request=cfg.learn_slots)
            etas = etas[cfg.learn_slots :]
        else:
            walk_rest = gossip.mh_schedule(key_walk, rest_graph, cfg.n_slots)
            _, etas = gfvl.learn(key_learn, gfvl.init(prior, cfg.n_agents - 1), walk_rest, solver(rest))
        pooled = LIKELIHOOD.pool(rest)
        kl = jax.vmap(lambda eta: kl_to_posterior(eta, pooled, cfg.prior_var))(etas)
        return {"kl": kl, "hit": hit}

    return trial


def build(cfg: Config) -> Sweep:
    points = [{"method": m} for m in METHODS]
    return Sweep(make_trial(cfg), points, [dict(p) for p in points], {"kl": ("slot",), "hit": ()})


def plot(cfg, labels, metrics, path):
    fig, ax = plotting.figure()
    slots = np.arange(1, cfg.n_slots + 1)
    plotting.band_plot(ax, slots, metrics["kl"], [lab["method"] for lab in labels], log_y=True)
    ax.set_xlabel("slot i after the unlearning request")
    ax.set_ylabel("KL(q ‖ p(θ | D_−u))")
    plotting.save(fig, path)


def report(cfg, labels, metrics) -> str:
    if hasattr(metrics["kl"], "_fields"):  # a summary (--keep summary): the figure has the bands
        return "1-D logistic unlearning: see the figure.\n"
    kl = np.asarray(metrics["kl"])
    rows = [f"| {lab['method']} | {np.median(kl[p, :, -1]):.3g} |" for p, lab in enumerate(labels)]
    return "| method | median final KL |\n|---|---|\n" + "\n".join(rows) + "\n"


EXPERIMENT = Experiment(
    "user-logistic-unlearning",
    "a 1-D logistic likelihood with unlearning",
    Config,
    build,
    plot,
    report,
    common_random_numbers=True,  # both methods see the same data and walk
)
