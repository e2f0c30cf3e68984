"""The G-FVL trial layer: what the G-FVL experiments share (no experiment module imports another),
and what a user's G-FVL study may build on (docs/extending.md):

- report texts: the KL's target (:func:`target_text`), the presets (:func:`preset_differences`,
  :data:`PAPER_CONVENTION`) and the report of a run kept as summaries (:func:`summary_reading`);
- first-slot statistics (:func:`first_slot_at_or_below`, :func:`asymptote`);
- the unlearning verdicts with their detectability rule (:func:`unlearning_verdicts`: gfvl-unlearning,
  its paper preset and conjugate variant, and gfvl-logistic);
- the trial of Fig. 4 (:func:`local_iters_trial`, :func:`noisy_data`: gfvl-local-iters and gfvl-wallclock)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import gfvl, scenarios, stats
from jaxfed.experiment import Reading
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, natgrad, quadrature

__all__ = [
    "local_iters_trial",
    "noisy_data",
    "unlearning_verdicts",
    "first_slot_at_or_below",
    "summary_reading",
]


def target_text(loss_normalisation: str, alpha: float) -> str:
    """What the KL of a non-conjugate G-FVL experiment is measured against, in words."""
    if loss_normalisation == "sum":
        what = "the Bayesian posterior p(θ|D)" if alpha == 1.0 else f"the generalized posterior at α = {alpha:g}"
        return f"{what} of all agents' data (sum loss: L_k = −Σ_n log p(z_k,n|θ))"
    return (
        f"the generalized posterior q* ∝ p_0(θ) exp(−Σ_k L_k(θ)/α) with the mean loss L_k = −(1/N_k) Σ_n log p(z_k,n|θ) "
        f"(α = {alpha:g}): p(θ|D) tempered by 1/N_k, much wider than p(θ|D)"
    )


PAPER_CONVENTION = (
    "The paper's eq. (1) defines each agent's loss as a mean over its N_k points, but its statement that α = 1 "
    "gives the ordinary posterior (and its conjugate update that adds all sufficient statistics) holds only for "
    'the sum, so its "true global posterior" is ambiguous; `loss_normalisation` selects either.'
)


def preset_differences(cfg) -> str:
    """One sentence: the fields in which ``cfg`` differs from its class's other preset(s)."""
    parts = []
    for name, values in cfg.PRESETS.items():
        if name == cfg.preset:
            continue
        diff = [f"{k} = {getattr(cfg, k)!r} (there {v!r})" for k, v in values.items() if getattr(cfg, k) != v]
        parts.append(f"Differs from preset `{name}` in " + (", ".join(diff) if diff else "nothing") + ".")
    return " ".join(parts)


PAIRED_NEEDS_RAW = "\n**Reading.** Paired verdicts need the raw trials (run with `--keep raw`)."


def summary_reading(results, text: list[str], metric: str = "kl", reading: str = PAIRED_NEEDS_RAW) -> Reading | None:
    """The whole report of a run that kept ``metric`` as summaries: ``text`` (what summaries give: the
    setting, the band tables) and ``reading``, which says what needs the raw trials; None for raw trials.

    Args:
        results: the run's results, {metric: raw array or :class:`jaxfed.stats.Summary`}.
        text: the report's lines that summaries can give.
        metric: the metric whose kind decides.
        reading: the line saying what needs the raw trials.

    Returns:
        The report, a :class:`jaxfed.Reading`, or None when ``metric`` holds raw trials.
    """
    if not isinstance(results[metric], stats.Summary):
        return None
    return Reading("\n".join([*text, reading]) + "\n")


def first_slot_at_or_below(kl: np.ndarray, level: float) -> np.ndarray:
    """Per trial, the first slot (1-based) with KL <= ``level``; n_slots + 1 where it never is
    (censored: the true slot is later).

    Args:
        kl: (..., n_trials, n_slots) KL per trial and slot.
        level: the KL level.

    Returns:
        (..., n_trials) int slots in [1, n_slots + 1].

    Examples:
        >>> first_slot_at_or_below(np.array([[0.5, 0.1, 0.0], [0.5, 0.4, 0.3]]), 0.2).tolist()
        [2, 4]
    """
    below = kl <= level
    return np.where(below.any(axis=-1), np.argmax(below, axis=-1) + 1, kl.shape[-1] + 1)


ASYMPTOTE_TOLERANCE = 1.5
"""A trial has reached the asymptote at the first slot at which its KL is within this factor of it (the
asymptote: retrain's median KL averaged over the last quarter of the slots)."""


def asymptote(median_retrain: np.ndarray) -> float:
    """The retrain-from-scratch asymptote: the mean of its median KL over the last quarter of slots."""
    return float(np.mean(median_retrain[-max(1, len(median_retrain) // 4) :]))


HIT_MARGIN = 1.0
"""Claim (2), "unlearnt when u is scheduled", holds when the paired slot difference lies within ±1 slot."""


def unlearning_verdicts(kl_unlearn, kl_retrain, hit, level: float, what: str, shift: float | None = None) -> list:
    """Paired verdicts on forgetting u against retraining without u, both measured against the
    target without u, per trial (pair) of the (trial, slot) arrays ``kl_unlearn`` and ``kl_retrain``:

    1. *unlearning reaches ``level`` before retraining*: slots of retrain − unlearning, where
       unlearning's slot is the first s >= h_t with KL <= level (h_t = ``hit``, the slot, from 1,
       at which u is forgotten: before it the model still holds u's data, so a KL already below
       the level is not unlearning) and retrain's the first slot with KL <= level; both censored
       at n_slots + 1 (also where u is never scheduled);
    2. *unlearning reaches it when u is scheduled*: unlearning's slot − h_t within ±:data:`HIT_MARGIN`
       (trials where u is not scheduled within the slots, ``hit`` < 1, are dropped).

    Detectability: the claims are tested only where forgetting u has something to do, i.e. the
    median over trials of the KL at slot h_t − 1 (the learnt model just before u is forgotten,
    trials with h_t >= 2) exceeds ``level``, and, when given, ``shift`` (the KL between the targets
    with and without u) exceeds it too; otherwise both are "not testable here" with the reason.

    Args:
        kl_unlearn: (n_trials, n_slots) KL of unlearning (forgetting u).
        kl_retrain: (n_trials, n_slots) KL of retraining without u.
        hit: (n_trials,) slot (from 1) at which u is forgotten; < 1 where u is never scheduled.
        level: the KL level the claims are about.
        what: the claims' wording of reaching the level.
        shift: the KL between the targets with and without u, or None.

    Returns:
        A list of two :class:`jaxfed.stats.Verdict`.
    """
    kl_unlearn, kl_retrain = np.asarray(kl_unlearn), np.asarray(kl_retrain)
    hit = np.asarray(hit).astype(int)
    n_slots = kl_unlearn.shape[-1]
    claims = (
        f"unlearning {what} before retraining (slots of retrain − unlearning; unlearning from u's visit)",
        f"unlearning {what} when u is scheduled, in each trial (share of trials within ±{HIT_MARGIN:g} slot of u's hitting time)",
    )
    before = hit >= 2
    held = float(np.median(kl_unlearn[before, hit[before] - 2])) if before.any() else float("nan")
    reasons = []
    if not held > level:
        reasons.append(
            f"just before u is forgotten the median KL to the target without u is {held:.3g}, not above the "
            f"level {level:.3g}: there is nothing to unlearn that the level can see"
        )
    if shift is not None and not shift > level:
        reasons.append(
            f"u's data move the target by KL {shift:.3g}, not more than the level {level:.3g} (the learner's "
            "own noise floor times the tolerance)"
        )
    if reasons:
        return [stats.not_testable(claim, "; ".join(reasons)) for claim in claims]
    slots = np.arange(1, n_slots + 1)
    below = (kl_unlearn <= level) & (slots[None, :] >= hit[:, None]) & (hit[:, None] >= 1)
    unl = np.where(below.any(axis=-1), np.argmax(below, axis=-1) + 1, n_slots + 1).astype(float)
    ret = first_slot_at_or_below(kl_retrain, level).astype(float)
    scheduled = hit >= 1
    within = f"within {n_slots} slots"
    censored = {"censored_a": ret > n_slots, "censored_b": unl > n_slots, "censoring": within}
    on_time = np.where(scheduled, np.abs(unl - hit) <= HIT_MARGIN, np.nan)  # never reached: not on time
    return [stats.paired_verdict(ret, unl, claims[0], **censored), stats.share_verdict(on_time, claims[1])]


def noisy_data(key, cfg) -> jax.Array:
    """Weighted counts (K, 2) of z ~ Bernoulli(ε + (1 − 2ε) θ_true), N_k per agent (the model's own law).

    Args:
        key: a PRNG key (traced).
        cfg: a config with n_agents, n_per_agent, theta_true, epsilon and loss_normalisation.

    Returns:
        (K, 2) weighted counts (n1, n0).
    """
    p_one = cfg.epsilon + (1.0 - 2.0 * cfg.epsilon) * cfg.theta_true
    ones = scenarios.bernoulli_counts(key, cfg.n_agents, cfg.n_per_agent, p_one)
    weight = likelihoods.loss_weight(cfg.loss_normalisation, cfg.n_per_agent)
    return likelihoods.bernoulli_beta_stats(ones, cfg.n_per_agent) * weight


def local_iters_trial(cfg):
    """The trial of Fig. 4 (gfvl-local-iters, and gfvl-wallclock's non-conjugate points): noisy Bernoulli
    data (:func:`noisy_data`) on the complete graph, an MH schedule of total_iters / L slots, L natural-gradient
    iterations per slot with S-sample REINFORCE gradients; ``kl`` (record,) = KL(q ‖ q*) by quadrature after
    every ``record_every`` local iterations. ``point["local_iters"]`` is L (static). ``cfg`` has the fields of
    gfvl-local-iters' Config (n_agents, n_per_agent, prior_a/b, alpha, theta_true, epsilon,
    loss_normalisation, rho, rho_schedule, n_samples, baseline, c, total_iters, record_every).

    Args:
        cfg: the config (fields above).

    Returns:
        The trial function ``trial(key, point) -> {"kl": (record,)}``.
    """
    prior = expfam.beta_natural(cfg.prior_a, cfg.prior_b)
    lik = likelihoods.noisy_bernoulli(cfg.epsilon)
    adjacency = jnp.asarray(graphs.complete(cfg.n_agents))

    def trial(key, point):
        n_iters = point["local_iters"]
        n_slots = cfg.total_iters // n_iters
        every = cfg.record_every // n_iters  # slots between records
        key_data, key_schedule, key_learn = jax.random.split(key, 3)
        data = noisy_data(key_data, cfg)
        schedule = gossip.mh_schedule(key_schedule, adjacency, n_slots)
        rho = natgrad.rho_schedule(cfg.rho_schedule, cfg.rho, n_slots)
        solve = gfvl.natgrad_solver(expfam.BETA, lik, data, cfg.alpha, rho, n_iters, cfg.n_samples, cfg.baseline, cfg.c)
        _, etas = gfvl.learn(key_learn, gfvl.init(prior, cfg.n_agents), schedule, solve)
        pooled = lik.pool(data)

        def loss_change(theta_ref, t):
            return lik.loss_change(pooled, theta_ref, t)

        target = quadrature.make_target(prior, loss_change, cfg.alpha)
        recorded = etas[every - 1 :: every]
        return {"kl": jax.vmap(lambda eta: quadrature.kl_to_target(eta, target, loss_change, cfg.alpha))(recorded)}

    return trial
