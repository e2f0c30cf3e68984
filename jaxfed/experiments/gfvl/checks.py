"""Checks of the parameters the G-FVL experiments share (the Bernoulli setting, the loss
normalisation, the natural-gradient solver's settings), for their config classes' ``__post_init__``.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

from jaxfed import validation
from jaxfed.gfvl import likelihoods, natgrad


def check_bernoulli_setting(cfg, min_agents: int = 2) -> None:
    """Validates the fields every G-FVL experiment shares: n_agents, n_per_agent, prior_a, prior_b,
    alpha, theta_true."""
    high = validation.INT32_RANGE[1]
    validation.integer("n_agents", cfg.n_agents, min_agents, high, note=validation.INT32_NOTE)
    validation.integer("n_per_agent", cfg.n_per_agent, 1, high, note=validation.INT32_NOTE)
    validation.check(
        "n_per_agent",
        cfg.n_per_agent,
        cfg.n_agents * cfg.n_per_agent <= high,
        f"at most {high // cfg.n_agents:,} with n_agents = {cfg.n_agents} (the data points of all agents, "
        "n_agents·n_per_agent, are counted in a 32-bit integer)",
    )
    validation.positive("prior_a", cfg.prior_a)
    validation.positive("prior_b", cfg.prior_b)
    validation.positive("alpha", cfg.alpha)
    validation.probability("theta_true", cfg.theta_true)


def check_loss_normalisation(value) -> None:
    """``loss_normalisation`` is one of :data:`jaxfed.gfvl.likelihoods.LOSS_NORMALISATIONS` ("sum", "mean")."""
    allowed = likelihoods.LOSS_NORMALISATIONS
    validation.one_of("loss_normalisation", value, allowed)


def check_natgrad_setting(cfg) -> None:
    """Validates the fields of the non-conjugate (natural-gradient) G-FVL experiments: epsilon,
    loss_normalisation, rho, baseline, n_samples."""
    validation.number("epsilon", cfg.epsilon, 0.0, 0.5, high_open=True)
    check_loss_normalisation(cfg.loss_normalisation)
    validation.positive("rho", cfg.rho)
    validation.one_of("baseline", cfg.baseline, natgrad.BASELINES)
    minimum = 1 if cfg.baseline == "constant" else 2
    validation.integer("n_samples", cfg.n_samples, minimum)
