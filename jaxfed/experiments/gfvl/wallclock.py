"""Beyond the G-FVL paper: Fig. 4 revisited in wall-clock time, with the cost of communication.

The paper (after Fig. 4): "this conclusion neglects the overhead required to communicate among agents, and
it should be revisited if the performance is to be measured in terms of wall clock time." Model
(docs/gfvl.md §A10): one slot is L local iterations at the scheduled agent followed by sending η to the next
agent, so it takes L·t_compute + t_comm, and after slot i the wall-clock time is i (L·t_compute + t_comm). In
units of t_compute, with r = t_comm/t_compute, the wall-clock time after m = L·i local iterations is
m (1 + r/L). The transform is deterministic, so the ratio r is a post-processing axis: one sweep over L
(the KL recorded every ``record_every`` local iterations, as in gfvl-local-iters) answers every r, and no
trial is simulated per ratio.

Two models, each a point per L (traced: one compiled program per model, :func:`jaxfed.gfvl.learn_by_iteration`):

- ``non-conjugate``: Fig. 4's trial (gfvl-local-iters: the same data, walk, keys and steps): noisy Bernoulli
  data, L natural-gradient iterations with S-sample REINFORCE gradients per slot, KL(q ‖ q*) by quadrature;
- ``conjugate``: Beta–Bernoulli data, L natural-gradient iterations with the exact gradient per slot
  (:func:`jaxfed.gfvl.conjugate_natgrad_iteration`: each iteration leaves (1 − ρα) of the gap to the exact
  conjugate update, :func:`jaxfed.gfvl.conjugate_natgrad_solver` in closed form), KL to the posterior in
  closed form.

Metric ``kl`` (point, trial, local_iteration): KL after m = R, 2R, …, total_iters local iterations in all
(R = ``record_every``). The points of a trial share its key (common random numbers): every L sees the same
data, and the two models of one L the same walk.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import gfvl, plotting, scenarios, stats, validation
from jaxfed.experiment import Experiment, Reading, Sweep
from jaxfed.experiments.gfvl.checks import check_bernoulli_setting, check_natgrad_setting
from jaxfed.experiments.gfvl.trials import noisy_data, summary_reading, target_text
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods, natgrad, quadrature

NAME = "gfvl-wallclock"
MODELS = ("conjugate", "non-conjugate")
"""The two models: conjugate data with exact-gradient local iterations, and Fig. 4's non-conjugate model."""
PAYLOAD_ENTRIES = 2
"""Entries of the payload η (a Beta's two natural parameters)."""
GRID_PER_DECADE = 8
"""Ratios per decade of the figure's and the report's fine grid of r."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Parameters. Static (shape-changing): n_agents, n_per_agent, n_samples, models (one engine group each),
    total_iters, record_every. Traced per point: L. Closure constants: the rest (a constant ρ: the learning-rate
    schedules of gfvl-local-iters are another axis). ``ratios``, ``level``, ``payload_bits`` and ``t_compute``
    only change the reading (post-processing), never the trials.
    """

    n_agents: int = 10  # K (complete graph)
    n_per_agent: int = 100  # N_k
    prior_a: float = 2.0  # Beta prior a
    prior_b: float = 2.0  # Beta prior b
    alpha: float = 1.0  # temperature α
    theta_true: float = 0.7  # [choice] data z ~ Bernoulli(θ_true) (conjugate) or noisy Bernoulli(θ_true)
    epsilon: float = 0.1  # flip probability ε of the non-conjugate model's noisy Bernoulli
    loss_normalisation: str = "sum"  # "sum" (target p(θ|D)) or "mean" (tempered by 1/N_k)
    rho: float = 0.05  # learning rate ρ of both models (conjugate: ρα <= 1)
    n_samples: int = 30  # REINFORCE samples S (non-conjugate)
    baseline: str = "leave-one-out"  # REINFORCE baseline (non-conjugate), one of natgrad.BASELINES
    c: float = 0.0  # constant baseline (non-conjugate, baseline "constant")
    local_iters: tuple[int, ...] = (1, 5, 10, 20)  # L, one point each per model; the first is the reference
    total_iters: int = 1000  # local iterations in all (L × number of slots), the same for every L
    record_every: int = 20  # KL recorded every this many local iterations; a multiple of every L
    models: tuple[str, ...] = MODELS  # [choice] one of MODELS: "conjugate" (exact gradients), "non-conjugate"
    level: float = 0.05  # KL level (nats) whose first wall-clock time is compared
    ratios: tuple[float, ...] = (0.0, 0.1, 1.0, 10.0, 100.0)  # r = t_comm/t_compute of the verdicts (>= 0)
    payload_bits: int = 32  # [choice] bits per entry of η on the link (float32)
    t_compute: float = 1e-3  # [choice] seconds per local iteration, only to express r as a link rate

    def __post_init__(self):
        check_bernoulli_setting(self)
        validation.one_of("baseline", self.baseline, natgrad.BASELINES)
        check_natgrad_setting(self)
        validation.check("models", self.models, len(self.models) >= 1, "a non-empty list")
        for model in self.models:
            validation.one_of("models", model, MODELS)
        validation.check("models", self.models, len(set(self.models)) == len(self.models), "distinct names")
        if "conjugate" in self.models:
            validation.check(
                "rho", self.rho, self.rho * self.alpha <= 1.0, f"<= 1/alpha = {1 / self.alpha:g} (conjugate model)"
            )
        validation.check("local_iters", self.local_iters, len(self.local_iters) >= 2, "a list of at least two L")
        for n_iters in self.local_iters:
            validation.integer("local_iters", n_iters, 1)
        validation.check(
            "local_iters", self.local_iters, len(set(self.local_iters)) == len(self.local_iters), "distinct"
        )
        validation.integer("record_every", self.record_every, 1)
        for n_iters in self.local_iters:
            multiple = self.record_every % n_iters == 0
            validation.check("record_every", self.record_every, multiple, f"a multiple of every L ({n_iters})")
        validation.check(
            "total_iters",
            self.total_iters,
            self.total_iters >= self.record_every and self.total_iters % self.record_every == 0,
            f"a positive multiple of record_every ({self.record_every})",
        )
        validation.positive("level", self.level)
        validation.check("ratios", self.ratios, len(self.ratios) >= 1, "a non-empty list")
        for ratio in self.ratios:
            validation.non_negative("ratios", ratio)
        validation.integer("payload_bits", self.payload_bits, 1)
        validation.positive("t_compute", self.t_compute)


# --------------------------------------------------------------------------- trials
def make_trial(cfg: Config):
    """Both models as one trial over L (traced): noisy Bernoulli data (non-conjugate, as in gfvl-local-iters:
    :func:`jaxfed.experiments.gfvl.trials.noisy_data`) or Bernoulli data (conjugate), the MH walk on the complete
    graph, and G-FVL one local iteration at a time (:func:`jaxfed.gfvl.learn_by_iteration`) with REINFORCE
    natural-gradient iterations (:func:`jaxfed.gfvl.natgrad_iteration`) or exact-gradient ones
    (:func:`jaxfed.gfvl.conjugate_natgrad_iteration`); ``kl`` (record,) after every ``record_every`` local
    iterations. The non-conjugate trial computes what gfvl-local-iters' trial does for the same key (the same
    keys, walk and steps; tests/experiments/test_gfvl_studies.py), in one program for every L instead of one per L."""
    prior = expfam.beta_natural(cfg.prior_a, cfg.prior_b)
    adjacency = jnp.asarray(graphs.complete(cfg.n_agents))
    weight = likelihoods.loss_weight(cfg.loss_normalisation, cfg.n_per_agent)
    lik = likelihoods.noisy_bernoulli(cfg.epsilon)
    n_slots = cfg.total_iters // min(cfg.local_iters)  # the walk for every L (a longer one starts the same)

    def trial(key, point):
        n_iters = point["local_iters"]
        key_data, key_schedule, key_learn = jax.random.split(key, 3)
        schedule = gossip.mh_schedule(key_schedule, adjacency, n_slots)
        if point["model"] == "conjugate":
            ones = scenarios.bernoulli_counts(key_data, cfg.n_agents, cfg.n_per_agent, cfg.theta_true)
            agent_stats = likelihoods.bernoulli_beta_stats(ones, cfg.n_per_agent) * weight
            iterate = gfvl.conjugate_natgrad_iteration(agent_stats, cfg.alpha, cfg.rho)
            target = gfvl.posterior_eta(prior, agent_stats, cfg.alpha)

            def kl(eta):
                return expfam.kl(expfam.BETA, eta, target)

        else:
            data = noisy_data(key_data, cfg)
            iterate = gfvl.natgrad_iteration(
                expfam.BETA, lik, data, cfg.alpha, cfg.rho, cfg.n_samples, cfg.baseline, cfg.c
            )
            pooled = lik.pool(data)

            def loss_change(theta_ref, t):
                return lik.loss_change(pooled, theta_ref, t)

            quad_target = quadrature.make_target(prior, loss_change, cfg.alpha)

            def kl(eta):
                return quadrature.kl_to_target(eta, quad_target, loss_change, cfg.alpha)

        _, etas = gfvl.learn_by_iteration(
            key_learn, gfvl.init(prior, cfg.n_agents), schedule, n_iters, iterate, cfg.total_iters
        )
        return {"kl": jax.vmap(kl)(etas[cfg.record_every - 1 :: cfg.record_every])}

    return trial


def build(cfg: Config):
    labels = [{"model": model, "local_iters": n} for model in cfg.models for n in cfg.local_iters]
    # the model is static (one compiled group each), L traced: every L of a model shares one program
    points = [{"model": lab["model"], "local_iters": jnp.asarray(lab["local_iters"], jnp.int32)} for lab in labels]
    axes, coords = {"kl": ("local_iteration",)}, {"local_iteration": record_iterations(cfg).tolist()}
    return Sweep(trial=make_trial(cfg), points=points, labels=labels, metric_axes=axes, coords=coords)


# --------------------------------------------------------------------------- the wall-clock transform
def record_iterations(cfg: Config) -> np.ndarray:
    """Local iterations m at each record: record_every, 2 record_every, …, total_iters."""
    return np.arange(1, cfg.total_iters // cfg.record_every + 1) * cfg.record_every


def wall_clock(iterations, n_iters, ratio):
    """Wall-clock time, in units of t_compute, after ``iterations`` = m local iterations at L = ``n_iters``
    per slot: m/L slots of L·t_compute + t_comm each, m (1 + r/L) with r = t_comm/t_compute."""
    return np.asarray(iterations, np.float64) * (1.0 + np.asarray(ratio, np.float64) / n_iters)


def iterations_to_level(cfg: Config, kl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (…, trial): the local iterations m at the first record with KL <= level, and whether the trial
    never got there (censored: m is then total_iters + record_every, a lower bound)."""
    below = np.asarray(kl) <= cfg.level
    reached = below.any(axis=-1)
    first = (np.argmax(below, axis=-1) + 1) * cfg.record_every
    return np.where(reached, first, cfg.total_iters + cfg.record_every).astype(np.float64), np.asarray(~reached)


def crossover_ratio(m_a, n_a: int, m_b, n_b: int) -> np.ndarray:
    """Per trial, the smallest r >= 0 at which L = ``n_b`` reaches the level no later than L = ``n_a`` in
    wall-clock (m_b (1 + r/L_b) <= m_a (1 + r/L_a)); inf where it never does. With A = m_b − m_a and
    B = m_b/L_b − m_a/L_a the difference is A + rB: r* = 0 if A <= 0, A/(−B) if B < 0, else inf."""
    m_a, m_b = np.asarray(m_a, np.float64), np.asarray(m_b, np.float64)
    a, b = m_b - m_a, m_b / n_b - m_a / n_a
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a <= 0, 0.0, np.where(b < 0, a / -np.where(b < 0, b, -1.0), np.inf))


GRID_DECADES = (-3, 3)
"""The fine grid of r spans at least 10^-3 … 10^3 (and a decade beyond the verdict ratios)."""


def ratio_grid(cfg: Config) -> np.ndarray:
    """The fine grid of r for the figure and the fastest-L table: 0, then GRID_PER_DECADE ratios per decade over
    GRID_DECADES, widened to a decade beyond the smallest positive and the largest verdict ratio."""
    positive = [r for r in cfg.ratios if r > 0] or [1.0]
    lo = min(GRID_DECADES[0], np.floor(np.log10(min(positive))) - 1)
    hi = max(GRID_DECADES[1], np.ceil(np.log10(max(positive))) + 1)
    return np.concatenate([[0.0], np.logspace(lo, hi, int(round((hi - lo) * GRID_PER_DECADE)) + 1)])


def link_rate(cfg: Config, ratio: float) -> float:
    """The link rate (bit/s) at which sending η (PAYLOAD_ENTRIES × payload_bits) takes r·t_compute."""
    return PAYLOAD_ENTRIES * cfg.payload_bits / (ratio * cfg.t_compute) if ratio > 0 else float("inf")


def _rate_text(rate: float) -> str:
    if not np.isfinite(rate):
        return "∞"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if rate >= scale:
            return f"{rate / scale:.3g} {unit}"
    return f"{rate:.3g} bit/s"


def _points(labels, model: str) -> list[int]:
    return [p for p, lab in enumerate(labels) if lab["model"] == model]


COMMUNICATION_BOUND = 1.0
"""The study's hypothesis (docs/gfvl.md §A10) divides the ratios r = t_comm/t_compute here: below it a local
iteration costs more than sending η (computation-bound) and Fig. 4's ordering is expected to hold in wall-clock
(the last L reaches the level later than the first); from it on (communication-bound) the study expects the
ordering reversed (the last L first), the revisiting the paper asks for after Fig. 4."""


def expected_ordering(ratio: float) -> str:
    """The study's expected direction of T_last(r)/T_first(r) at ``ratio``: "greater" (Fig. 4's ordering, the last
    L later) where r < :data:`COMMUNICATION_BOUND`, else "less" (reversed: the last L earlier)."""
    return "greater" if ratio < COMMUNICATION_BOUND else "less"


def ordering_claim(cfg: Config, model: str, ratio: float, first: int, last: int) -> str:
    """The claim of the ordering verdict at ``ratio``: the study's hypothesis there, with Fig. 4's ordering (the
    last L later per local iteration) named as the contrast where the study expects it reversed."""
    if expected_ordering(ratio) == "greater":
        return (
            f"{model}, r = {ratio:g}, computation-bound: Fig. 4's ordering holds, L = {last} reaches KL <= "
            f"{cfg.level:g} later than L = {first} in wall-clock (time ratio)"
        )
    return (
        f"{model}, r = {ratio:g}, communication-bound: L = {last} reaches KL <= {cfg.level:g} before L = {first} in "
        f"wall-clock, the study's hypothesis against Fig. 4's ordering (time ratio)"
    )


def model_analysis(cfg: Config, labels, kl: np.ndarray, model: str) -> dict:
    """Everything the report and the figure read for one model: m to the level per L (trial,), censoring,
    the median wall-clock per L on the fine grid, the fastest L there, the per-trial crossover of the last L
    against the first, and the verdicts at ``cfg.ratios``."""
    idx = _points(labels, model)
    ls = [labels[p]["local_iters"] for p in idx]
    m, censored = iterations_to_level(cfg, kl[idx])  # (L, trial)
    grid = ratio_grid(cfg)
    wall = np.stack([wall_clock(m[j][None, :], ls[j], grid[:, None]) for j in range(len(ls))])  # (L, r, trial)
    median = np.median(wall, axis=-1)  # (L, r)
    fastest = np.asarray(ls)[np.argmin(median, axis=0)]  # (r,)
    cross = crossover_ratio(m[0], ls[0], m[-1], ls[-1])
    order, best = [], []
    for ratio in cfg.ratios:
        t = np.stack([wall_clock(m[j], ls[j], ratio) for j in range(len(ls))])  # (L, trial)
        within = f"within {cfg.total_iters} iterations"
        order.append(
            stats.paired_verdict(
                t[-1],
                t[0],
                ordering_claim(cfg, model, ratio, ls[0], ls[-1]),
                expect=expected_ordering(ratio),
                transform="log_ratio",
                censored_a=censored[-1],
                censored_b=censored[0],
                censoring=within,
            )
        )
        first, runner = np.argsort(np.median(t, axis=-1), kind="stable")[:2]
        claim = (
            f"{model}, r = {ratio:g}: L = {ls[first]} reaches KL <= {cfg.level:g} first in wall-clock "
            f"(time of the runner-up L = {ls[runner]} / L = {ls[first]})"
        )
        cens = {"censored_a": censored[runner], "censored_b": censored[first]}
        v = stats.paired_verdict(t[runner], t[first], claim, transform="log_ratio", censoring=within, **cens)
        best.append((ls[first], v))
    return {
        "ls": ls,
        "m": m,
        "censored": censored,
        "grid": grid,
        "wall": wall,
        "median": median,
        "fastest": fastest,
        "crossover": cross,
        "order": order,
        "best": best,
        "verdicts": [v for pair in zip(order, (v for _, v in best)) for v in pair],
    }


def fastest_ranges(grid: np.ndarray, fastest: np.ndarray) -> str:
    """'L = 1 for r <= 0.05, L = 5 for 0.06–0.3, …' from the fastest L on the fine grid."""
    parts, start = [], 0
    for j in range(1, len(grid) + 1):
        if j == len(grid) or fastest[j] != fastest[start]:
            lo, hi = grid[start], grid[j - 1]
            where = f"r = {lo:.2g}" if lo == hi else f"r in [{lo:.2g}, {hi:.2g}]"
            parts.append(f"L = {fastest[start]} for {where}")
            start = j
    return "; ".join(parts)


# --------------------------------------------------------------------------- figure
def _kl_against_wall_clock(ax, cfg: Config, labels, kl, model: str, ratio: float) -> None:
    """KL against wall-clock time at ``ratio``, a line per L: the median over trials with its 75% band as bars at
    a few times (four shaded bands overlap into one colour)."""
    iters = record_iterations(cfg)
    floors, tops = [], []
    ax.set_xscale("log")  # first: the band's bars are spread evenly on it
    for j, p in enumerate(_points(labels, model)):
        n_iters = labels[p]["local_iters"]
        x = wall_clock(iters, n_iters, ratio)
        style = [plotting.series_style(j)]
        b = plotting.band_plot(ax, x, kl[p : p + 1], [f"L = {n_iters}"], log_y=True, styles=style, legend=False, bars=5)
        floors.append(ax.get_ylim()[0])
        tops.append(np.nanmax(np.where(b.upper > 0, b.upper, np.nan), initial=floors[-1]))
    ax.set_ylim(min(floors), 2 * max(tops))  # every L's bars inside (each band_plot set its own floor)
    ax.axhline(cfg.level, color="k", lw=0.6, ls=":")
    ax.set_xlabel("wall-clock time / t_compute")
    ax.set_title(f"{model}: KL against wall-clock time at r = {ratio:g}", fontsize=9)


def _ratio_panel(ax, cfg: Config, model: str, a: dict) -> None:
    """The median paired wall-clock ratio to the level of each L to the first L against r (line, over the fine
    grid), with its 95% interval (order statistics) as bars at the configured ratios, staggered per L."""
    grid = a["grid"][1:]  # (log axis: r = 0 left out)
    ref = a["wall"][0, 1:]
    ls = a["ls"]
    for j, n_iters in enumerate(ls):
        ratio = np.median(np.log(a["wall"][j, 1:] / ref), axis=-1)
        plotting.series_line(ax, grid, np.exp(ratio), j, len(ls), lw=1.5, label=f"L = {n_iters}")
        if j == 0:
            continue  # the reference: 1 by definition
        for r in (r for r in cfg.ratios if r > 0):
            t = wall_clock(a["m"][j], n_iters, r) / wall_clock(a["m"][0], ls[0], r)
            est, lo, hi = np.exp(stats.interval(np.log(t), "median"))
            if not (np.isfinite(est) and 0 < lo and np.isfinite(hi)):
                continue  # too few trials to bound the median at 95%
            at = r * 1.15 ** (j - len(ls) / 2)  # side by side around r
            style = plotting.series_style(j)
            ax.errorbar([at], [est], yerr=[[est - lo], [hi - est]], color=style["color"], fmt="none", capsize=2.5)
    ax.axhline(1.0, color="k", lw=0.8)
    for r in cfg.ratios:
        if r > 0:
            ax.axvline(r, color="0.7", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("r = t_comm / t_compute")
    ax.set_ylabel(f"wall-clock to KL ≤ {cfg.level:g}\nrelative to L = {ls[0]}", fontsize=9)
    ax.set_title(f"{model}: time to KL ≤ {cfg.level:g} relative to L = {ls[0]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)


def plot(cfg: Config, labels, results, path):
    """A row per model: KL against wall-clock time at the smallest and the largest configured r, and the
    paired wall-clock ratio to the level of each L to the first L against r."""
    models = list(dict.fromkeys(lab["model"] for lab in labels))
    fig, axes = plotting.figure(len(models), 3, figsize=(14, 3.8 * len(models) + 1.0), squeeze=False)
    if isinstance(results["kl"], stats.Summary):
        for ax in axes.ravel():
            ax.text(0.5, 0.5, "the wall-clock transform\nneeds the raw trials (--keep raw)", ha="center")
        plotting.save(fig, path)
        return
    kl = np.asarray(results["kl"])
    lo_r, hi_r = min(cfg.ratios), max(cfg.ratios)
    for row, model in enumerate(models):
        _kl_against_wall_clock(axes[row, 0], cfg, labels, kl, model, lo_r)
        _kl_against_wall_clock(axes[row, 1], cfg, labels, kl, model, hi_r)
        axes[row, 0].set_ylabel("KL(q ‖ target)", fontsize=9)
        _ratio_panel(axes[row, 2], cfg, model, model_analysis(cfg, labels, kl, model))
    fig.suptitle(
        f"G-FVL in wall-clock time: slot = L·t_compute + t_comm, complete K={cfg.n_agents}, ρ={cfg.rho:g}, "
        f"{cfg.loss_normalisation} loss",
        fontsize=10,
    )
    plotting.legend(
        fig,
        axes[:, 0],
        title=f"median over trials; bars: 75% band (KL), 95% interval of the median (ratio); dotted: KL = {cfg.level:g}",
        ncol=len(cfg.local_iters),
    )
    plotting.save(fig, path)


# --------------------------------------------------------------------------- report
def _median_text(values) -> str:
    est, lo, hi = stats.interval(values, "median")
    return f"{est:.4g} [{lo:.4g}, {hi:.4g}]"


def _crossover_text(cross: np.ndarray, censored: np.ndarray) -> str:
    """Median r* with its interval; not testable where a trial of either L never reached the level (its r*
    is then computed from a censoring value)."""
    if censored.any():
        return f"not testable (censored: {stats.verdicts.percent(float(np.mean(censored)))} of trials did not reach the level for one of the two L)"
    est, lo, hi = stats.interval(cross, "median")
    return f"{est:.3g} [{lo:.3g}, {hi:.3g}]" + (
        f" ({stats.verdicts.percent(float(np.mean(np.isinf(cross))))} of trials never)" if np.isinf(cross).any() else ""
    )


def _model_section(cfg: Config, model: str, a: dict) -> list[str]:
    ls = a["ls"]
    head = (
        "| L | local iterations to KL <= level | slots | never below within total_iters | "
        + " | ".join(f"wall-clock at r = {r:g}" for r in cfg.ratios)
        + " |"
    )
    rule = "|---|---|---|---|" + "---|" * len(cfg.ratios)
    rows = []
    for j, n_iters in enumerate(ls):
        cells = [_median_text(wall_clock(a["m"][j], n_iters, r)) for r in cfg.ratios]
        rows.append(
            f"| {n_iters} | {_median_text(a['m'][j])} | {_median_text(a['m'][j] / n_iters)} | "
            f"{np.mean(a['censored'][j]):.0%} | " + " | ".join(cells) + " |"
        )
    target = (
        f"the posterior p(θ|D) in closed form (Beta–Bernoulli, exact-gradient local iterations: each leaves "
        f"(1 − ρα) = {1 - cfg.rho * cfg.alpha:g} of the gap to the exact update)"
        if model == "conjugate"
        else f"{target_text(cfg.loss_normalisation, cfg.alpha)}, by quadrature (REINFORCE, S = {cfg.n_samples}, "
        f"{cfg.baseline} baseline)"
    )
    return [
        f"### {model}",
        "",
        f"KL is measured against {target}. Median [95% interval] over the trials; wall-clock in units of "
        "t_compute; a trial that never reaches the level counts at total_iters + record_every (a lower bound):",
        "",
        head,
        rule,
        *rows,
        "",
        f"Fastest L by median wall-clock to KL <= {cfg.level:g} on the grid of r: {fastest_ranges(a['grid'], a['fastest'])}. "
        f"Per trial, L = {ls[-1]} is no later than L = {ls[0]} from r* = (m_{ls[-1]} − m_{ls[0]})/(m_{ls[0]}/{ls[0]} − "
        f"m_{ls[-1]}/{ls[-1]}) on; median r* [95% interval]: {_crossover_text(a['crossover'], a['censored'][0] | a['censored'][-1])}.",
    ]


def reading_text(cfg: Config, model: str, a: dict) -> str:
    """One sentence per model: the ratios where the study's hypothesis (Fig. 4's ordering below
    :data:`COMMUNICATION_BOUND`, reversed from it on) is reproduced, where not, where undecided; where the
    ordering was seen to hold and where reversed; and the fastest L."""
    by_verdict: dict[str, list[str]] = {}
    for r, v in zip(cfg.ratios, a["order"]):
        by_verdict.setdefault(v.verdict, []).append(f"{r:g}")

    def seen(later: bool) -> list[str]:  # the ratios whose median time ratio T_last/T_first is above 1 (or below)
        return [
            f"{r:g}" for r, v in zip(cfg.ratios, a["order"]) if np.isfinite(v.estimate) and (v.estimate > 1) == later
        ]

    first, last = a["ls"][0], a["ls"][-1]
    best = "; ".join(f"r = {r:g}: L = {n} (**{v.verdict}**)" for r, (n, v) in zip(cfg.ratios, a["best"]))
    return (
        f"{model}: the study's hypothesis, Fig. 4's ordering (L = {first} before L = {last}) while computation "
        f"dominates (r < {COMMUNICATION_BOUND:g}) and reversed once sending η costs at least a local iteration, is "
        + "; ".join(f"{verdict} at r = {', '.join(rs)}" for verdict, rs in by_verdict.items())
        + f". In the medians the ordering holds at r = {', '.join(seen(True)) or 'none of the ratios'} and is "
        f"reversed at r = {', '.join(seen(False)) or 'none of the ratios'} "
        f"(per-trial crossover r*: {_crossover_text(a['crossover'], a['censored'][0] | a['censored'][-1])}); "
        f"fastest L: {best}."
    )


def report(cfg: Config, labels, results) -> Reading:
    rates = ", ".join(f"r = {r:g} ↔ {_rate_text(link_rate(cfg, r))}" for r in cfg.ratios if r > 0)
    text = [
        "Model (docs/gfvl.md §A10): a slot is L local iterations at the scheduled agent, then η is sent to the next "
        "agent: L·t_compute + t_comm, so after m = L·i local iterations the wall-clock time is m (1 + r/L) t_compute "
        "with r = t_comm/t_compute. On the complete graph the MH walk moves at every slot, so every slot sends η. "
        "The wall-clock is a deterministic transform of the recorded local-iteration counts: one sweep over L "
        "answers every r (no trial is simulated per ratio). The payload η is "
        f"{PAYLOAD_ENTRIES} × {cfg.payload_bits} bits; at t_compute = {cfg.t_compute:g} s per local iteration, {rates} "
        "(the link rate at which sending η takes r·t_compute).",
        "",
    ]
    reading = "**Reading.** The wall-clock transform and the paired verdicts need the raw trials (`--keep raw`)."
    if (partial := summary_reading(results, text, reading=reading)) is not None:
        return partial
    kl = np.asarray(results["kl"])
    verdicts, readings = [], []
    for model in dict.fromkeys(lab["model"] for lab in labels):
        a = model_analysis(cfg, labels, kl, model)
        text += _model_section(cfg, model, a) + [""]
        verdicts += a["verdicts"]
        readings.append(reading_text(cfg, model, a))
    text += [
        "Paired verdicts (same data, and for one L the same walk, in every pair; wall-clock ratios per trial). "
        f"r = 0 is Fig. 4's comparison per local iteration; below r = {COMMUNICATION_BOUND:g} the claim is Fig. 4's "
        "ordering, from it on the study's hypothesis that the ordering reverses (Fig. 4's ordering is then the "
        "contrast: a claim reproduced there is the ordering reversed):",
        "",
        stats.verdict_table(verdicts, what="median paired time ratio"),
        "",
        "**Reading.** " + " ".join(readings),
    ]
    return Reading("\n".join(text) + "\n", tuple(verdicts))


EXPERIMENT = Experiment(
    name=NAME,
    description="Beyond the paper: Fig. 4 in wall-clock time, slot = L·t_compute + t_comm, swept over t_comm/t_compute",
    config_cls=Config,
    build=build,
    plot=plot,
    report=report,
    default_trials=256,
    common_random_numbers=True,
    micro_batch={"cpu": 128},
    caption="A row per model. Left and middle: the KL to the target against wall-clock time (in units of t_compute) "
    "at the smallest and the largest configured r = t_comm/t_compute, a line per number of local iterations L, the "
    "median over trials with its 75% band as bars at a few times (dotted: the level). Right: the median over trials "
    "of the paired ratio of each L's wall-clock time to the level to that of the first L (below 1: faster), against r, "
    "with 95% intervals of the median as bars at the configured r (dotted verticals).",
)
