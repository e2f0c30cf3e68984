"""The OAC k-means paper's experiments on the mall scenario: the shared trial, and the
``kmeans-convergence`` and ``kmeans-snr`` figures.

- ``kmeans-convergence``: loss vs round for centralized Lloyd's, ideal federated, quantisation only
  and OAC at several SNRs, with a picture of the scenario and each method's paired ratio to
  centralized;
- ``kmeans-snr``: final loss vs SNR (−10 … 30 dB, and a 100 dB noise-free limit) for D ∈ {1, 2, 3, 4},
  β = 3, with quantisation only per D, centralized and ideal federated k-means as references, and
  the OAC detector's centroid noise next to what its variance formula predicts.

The ablation is in :mod:`jaxfed.experiments.kmeans.ablation`; the sweep over the number of edge
devices (EDs) and the study of D = 1 in :mod:`jaxfed.experiments.kmeans.studies`; what they share
(the trial, the sweep, the verdict helpers) in :mod:`jaxfed.experiments.kmeans.trials`.

Every experiment stores ``loss`` (point, trial, round): the loss of the paper's equation (1), the
within-cluster squared distance of the partition the centroids induce, divided by the number of
customers |D| (m²), after each round; ``ari`` (point, trial, round): the adjusted Rand index of
that partition against the mixture components; and ``reinits`` (point, trial, round): how many
centroids re-initialisation moved in the round. Trials use common random numbers: within a trial
every point (method, SNR, …) sees the same customers, the same initial centroids and the same
channel draws, so methods are compared trial by trial (paired). The initial centroids are drawn
uniformly in the mall by default (``init="uniform"``): the edge server (ES) does not see the data,
only the floor plan; ``"forgy"`` (C customers) and ``"kmeans++"`` (centralized D² seeding) are the
alternatives. The i.i.d. split sends every customer to an ED drawn uniformly at random.

Verdicts on the paper's claims end every report section: :func:`jaxfed.stats.paired_verdict` on the
per-trial ratio of final losses, with the exact 95% interval of its median; "≈" claims hold
when that interval lies within ±5% (:data:`EQUAL_MARGIN`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from jaxfed import oac, plotting, scenarios, stats, validation
from jaxfed.experiment import Experiment, Reading, band_table
from jaxfed.experiments.kmeans import figures as kmeans_figures
from jaxfed.experiments.kmeans.trials import (
    CENTRALIZED_TEXT,
    LAST_ROUND_DIAGNOSTICS,
    LOSS_LABEL,
    MICRO_BATCH,
    RAW_NEEDED,
    MallConfig,
    check_snrs,
    mall_sweep,
    method_label,
    over_channel,
    parse_channel_sweep,
    resources_table,
    symbol_energy_value,
)
from jaxfed.experiments.kmeans.verdicts import (
    final_values,
    index_of,
    ratio_verdict,
    verdict_block,
)
from jaxfed.oac import kmeans


# --------------------------------------------------------------------------- kmeans-convergence
@dataclasses.dataclass(frozen=True)
class ConvergenceConfig(MallConfig):
    digits: int = 4  # D for quantisation and OAC
    snrs_db: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0)  # SNRs (dB) of the OAC points
    # the aggregation methods run at every SNR with D digits: "oac" and any registered ones, one of
    # oac.aggregators.names() (--import a file that registers one: --set methods=oac,NAME)
    methods: tuple[str, ...] = ("oac",)

    def __post_init__(self):
        super().__post_init__()
        validation.integer("digits", self.digits, 1)
        validation.check("snrs_db", self.snrs_db, len(self.snrs_db) >= 1, "at least one SNR")
        check_snrs("snrs_db", self.snrs_db)
        check_methods(self.methods)


def check_methods(methods: tuple[str, ...]) -> None:
    """ValueError unless ``methods`` are distinct registered aggregation methods, "oac" among them (the
    reports' claims are on it); an unknown name is the registry's error listing the registered ones."""
    for name in methods:
        oac.aggregators.get(name)
    validation.check("methods", methods, len(set(methods)) == len(methods), "distinct names")
    validation.check("methods", methods, "oac" in methods, 'registered aggregation methods, "oac" among them')


def _others(methods: tuple[str, ...]) -> list[str]:
    """The methods swept beside "oac", in the order given."""
    return [m for m in methods if m != "oac"]


def _convergence_labels(cfg: ConvergenceConfig) -> list[dict]:
    fixed: list[dict] = [{"method": "centralized"}, {"method": "ideal"}, {"method": "quantized", "digits": cfg.digits}]
    oac_points = [{"method": "oac", "digits": cfg.digits, "snr_db": s} for s in cfg.snrs_db]
    others = [{"method": m, "digits": cfg.digits, "snr_db": s} for m in _others(cfg.methods) for s in cfg.snrs_db]
    return fixed + oac_points + others + [{"method": "centralized-best"}]


@functools.lru_cache(maxsize=4)
def _scenario_draw(cfg: MallConfig) -> tuple[np.ndarray, ...]:
    """The scenario panel's draw (fixed keys 0, 1, 2: a function of ``cfg`` alone), as read-only
    arrays (points, owner, true centres, initial centroids, centroids after the last round).
    Cached: each call traces and compiles its rounds' scan afresh (~5 s on a 2-core CPU), and a
    process that draws the figure again (raw, then summarised results) need not."""
    scene = scenarios.mall(jax.random.key(0), cfg.n_points, cfg.n_components, cfg.spread, cfg.side, cfg.rows, cfg.cols)
    init = kmeans.initial_centroids(jax.random.key(1), scene.points, cfg.n_clusters, cfg.init, 0.0, cfg.side)
    data = kmeans.flat_data(scene.points, scene.owner)
    es = symbol_energy_value(cfg.symbol_energy, cfg.beta)
    settings = kmeans.Settings(
        aggregator=oac.aggregators.oac(cfg.channel, cfg.beta, 4, 20.0, es),
        vmax=cfg.vmax_fixed,
        vmax_rule=cfg.vmax_rule,
        s_min=cfg.s_min,
        sigma_c=cfg.sigma_c,
        mu=cfg.mu,
    )
    final, _ = kmeans.federated_rounds(jax.random.key(2), data, cfg.n_devices, init, cfg.n_rounds, settings)
    arrays = tuple(np.array(a) for a in (scene.points, scene.owner, scene.centres, init, final[-1]))
    for a in arrays:
        a.flags.writeable = False
    return arrays


def _scenario_panel(ax, cfg: MallConfig) -> None:
    """One illustrative draw of the scenario (its own keys 0, 1, 2, not a trial of the sweep):
    tiles, customers coloured by their ED's data size, true centres, the initial centroids and
    the centroids after OAC k-means at 20 dB, D = 4."""
    try:
        points, owner, c, i0, f = _scenario_draw(cfg)
    except TypeError:  # a config with an unhashable field (a subclass's): drawn afresh
        points, owner, c, i0, f = _scenario_draw.__wrapped__(cfg)
    sizes = np.bincount(owner, minlength=cfg.n_devices)[owner]
    for i in range(cfg.cols + 1):
        ax.axvline(i * cfg.side / cfg.cols, color="0.85", lw=0.6)
    for i in range(cfg.rows + 1):
        ax.axhline(i * cfg.side / cfg.rows, color="0.85", lw=0.6)
    sc = ax.scatter(points[:, 0], points[:, 1], c=sizes, s=3, cmap="viridis")
    ax.figure.colorbar(sc, ax=ax, label="customers held by the customer's edge device (ED)", fraction=0.046)
    ax.scatter(c[:, 0], c[:, 1], marker="x", s=60, color="red", label="true centres")
    ax.scatter(i0[:, 0], i0[:, 1], marker="^", s=30, color="tab:orange", label=f"initial centroids ({cfg.init})")
    ax.scatter(
        f[:, 0],
        f[:, 1],
        marker="o",
        s=60,
        facecolors="none",
        edgecolors="black",
        label=f"OAC k-means after {cfg.n_rounds} rounds, 20 dB, D=4",
    )
    ax.set_xlim(0, cfg.side)
    ax.set_ylim(0, cfg.side)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title(
        f"mall: {cfg.rows}×{cfg.cols} tiles (one ED each), {cfg.n_points} customers\n"
        "one illustrative draw (keys 0, 1, 2), not a trial of the sweep",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)  # off the data


def _plot_convergence(cfg: ConvergenceConfig, labels, results, path):
    fig, axes = plotting.figure(2, 2, figsize=(13, 10.5))
    _scenario_panel(axes[0, 0], cfg)
    rounds = np.arange(1, cfg.n_rounds + 1)
    names = [method_label(lab) for lab in labels]
    b = stats.band(results["loss"])
    over_air = [i for i, lab in enumerate(labels) if lab["method"] in cfg.methods]
    references = [i for i in range(len(labels)) if i not in over_air]
    title = f"loss per round, {{}} (medians; band: centralized's 75%)\nC={cfg.n_clusters}, β={cfg.beta}, {cfg.channel} channel, init {cfg.init}"
    for ax, rows, what in (
        (axes[0, 1], references, "references"),
        (
            axes[1, 0],
            over_air,
            f"{'OAC' if cfg.methods == ('oac',) else ', '.join(cfg.methods)} D={cfg.digits} at each SNR",
        ),
    ):
        ax.fill_between(rounds, b.lower[0], b.upper[0], color=plotting.series_style(0)["color"], alpha=0.15, lw=0)
        if 0 not in rows:  # centralized's median as the reference line
            ax.plot(rounds, b.median[0], color=plotting.series_style(0)["color"], lw=1.0, ls="-")
        for i in rows:  # each method in its style of every panel (the index of its point)
            # (centralized-best, the last point, would take centralized's colour again: grey)
            grey = {"color": "0.45"} if labels[i]["method"] == "centralized-best" else {}
            plotting.series_line(ax, rounds, b.median[i], i, len(labels), label=names[i], lw=1.6, **grey)
        ax.set_yscale("log")
        ax.set_xlabel("round n")
        ax.set_ylabel(LOSS_LABEL)
        ax.set_title(title.format(what), fontsize=9)
        ax.grid(True, which="both", alpha=0.25)
    axes[1, 0].sharey(axes[0, 1])
    ax = axes[1, 1]
    if isinstance(results["loss"], stats.Summary):
        ax.text(0.5, 0.5, "paired ratios need raw trials", ha="center", transform=ax.transAxes)
        ax.set_title("paired ratio to centralized k-means after the last round", fontsize=9)
    else:
        _paired_ratio_panel(ax, np.asarray(results["loss"]), names, cfg.n_rounds)
    plotting.legend(fig, axes.ravel()[1:3], ncol=4)
    plotting.save(fig, path)


def _paired_ratio_panel(ax, loss, names, n_rounds: int) -> None:
    """Median over trials of the final loss / centralized's (point 0) in the same trial, with its exact 95%
    interval, one row per method: the paired comparison separates the methods that the spread over trials
    hides. An interval the trials cannot bound (too few of them) is drawn to its estimate."""
    log_ratio = np.log(loss[1:, :, -1] / loss[0, :, -1][None])  # (method, trial)
    est, lo, hi = (np.exp(v) for v in stats.interval(log_ratio, "median"))
    lo, hi = np.where(np.isfinite(lo) & (lo > 0), lo, est), np.where(np.isfinite(hi), hi, est)
    xlabel = "final loss / centralized's, same trial\n(median, 95% interval)"
    plotting.interval_plot(ax, names[1:], est, lo, hi, reference=1.0, xlabel=xlabel)
    ax.set_title(f"paired ratio to centralized k-means after round {n_rounds}", fontsize=9)


def _report_convergence(cfg: ConvergenceConfig, labels, results) -> Reading:
    b = stats.band(results["loss"])
    names = [method_label(lab) for lab in labels]
    rounds = sorted({r for r in (1, 5, 10, 20, cfg.n_rounds) if r <= cfg.n_rounds})
    table = band_table("round", rounds, names, b, [r - 1 for r in rounds])
    final = b.median[:, -1]
    central = final[0]
    oac_rows = [i for i, lab in enumerate(labels) if lab["method"] == "oac"]
    gaps = ", ".join(f"{labels[i]['snr_db']:g} dB: {100 * (final[i] / central - 1):+.1f}%" for i in oac_rows)
    reading = (
        f"Final median loss: centralized {central:.2f} m², ideal federated {final[1]:.2f}, "
        f"quantisation only {final[2]:.2f}, centralized-best {final[index_of(labels, method='centralized-best')]:.2f}; OAC relative to centralized by SNR: "
        f"{gaps}. References: {CENTRALIZED_TEXT['centralized']}; {CENTRALIZED_TEXT['centralized-best']} "
        f"(n_starts = {cfg.n_starts})."
    )
    text = (
        f"Loss (1)/|D| (m²), median [75% band]:\n\n{table}\n\n"
        f"Resources per round:\n\n{resources_table(cfg, [cfg.digits])}\n\n**Reading.** {reading}\n\n"
    )
    last = final_values(results)
    if last is None:
        return Reading(text + RAW_NEEDED)
    reinits = np.asarray(results["reinits"]).sum(-1)
    hi, lo = oac_rows[-1], oac_rows[0]
    text += (
        f"Re-initialisation fired {reinits[1].mean():.2f} times per run for ideal federated k-means and "
        f"{reinits[hi].mean():.2f} for OAC at {labels[hi]['snr_db']:g} dB (mean over trials, init {cfg.init}).\n\n"
    )
    verdicts = [
        ratio_verdict(
            last, hi, 0, f"OAC {labels[hi]['snr_db']:g} dB ≈ centralized (a = OAC, b = centralized)", "equal"
        ),
        ratio_verdict(
            last,
            hi,
            index_of(labels, method="centralized-best"),
            f"OAC {labels[hi]['snr_db']:g} dB ≈ centralized-best (a = OAC, b = best of k-means++ starts)",
            "equal",
        ),
        # Ideal federated k-means starts where centralized k-means starts and re-initialises with the
        # same keys: the same algorithm, so "≈" holds by construction; it checks the implementation,
        # not the paper's "approaches standard k-means".
        ratio_verdict(
            last, 1, 0, "check of the implementation: ideal federated ≈ centralized (same start and keys)", "equal"
        ),
        ratio_verdict(
            last,
            hi,
            1,
            f"check of an explanation: OAC {labels[hi]['snr_db']:g} dB above ideal federated: the detector's self-noise",
            "greater",
        ),
    ]
    if hi != lo:
        verdicts.append(
            ratio_verdict(
                last,
                hi,
                lo,
                f"OAC improves with SNR: {labels[hi]['snr_db']:g} dB below {labels[lo]['snr_db']:g} dB",
                "less",
            )
        )
    return Reading(text + verdict_block(verdicts), tuple(verdicts))


CONVERGENCE = Experiment(
    name="kmeans-convergence",
    description="OAC k-means paper: loss vs round on the mall: centralized, ideal, quantized, OAC at several SNRs",
    config_cls=ConvergenceConfig,
    build=lambda cfg: mall_sweep(cfg, _convergence_labels(cfg)),
    plot=_plot_convergence,
    report=_report_convergence,
    caption=(
        "Top left: one illustrative draw of the mall scenario (not a trial of the sweep). Top right and bottom "
        "left: the loss per round, median over trials, of the reference methods and of OAC at each SNR, with "
        "centralized k-means's 75% band (and its median as a thin line among the OAC curves) as the common "
        "reference. Bottom right: each method's final loss divided by centralized k-means's on the same trial, "
        "median with its exact 95% interval (1: no difference)."
    ),
    default_trials=1000,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)


# --------------------------------------------------------------------------- kmeans-snr
NOISE_FREE_DB = 100.0  # σ²/E_s ~ 1e-10: the noise-free limit of the channel


@dataclasses.dataclass(frozen=True)
class SnrConfig(MallConfig):
    digits_list: tuple[int, ...] = (1, 2, 3, 4)  # the D compared (quantised and OAC points at each)
    snrs_db: tuple[float, ...] = (-10.0, -5.0, 0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0)  # SNRs (dB) of the OAC points
    # the aggregation methods run at every D and SNR (and without noise): "oac" and any registered ones,
    # one of oac.aggregators.names() (--import a file that registers one: --set methods=oac,NAME)
    methods: tuple[str, ...] = ("oac",)

    def __post_init__(self):
        super().__post_init__()
        validation.check("digits_list", self.digits_list, len(self.digits_list) >= 1, "at least one D")
        for d in self.digits_list:
            validation.integer("digits_list", d, 1)
        validation.check("snrs_db", self.snrs_db, len(self.snrs_db) >= 1, "at least one SNR")
        check_snrs("snrs_db", self.snrs_db)
        check_methods(self.methods)


def _snr_labels(cfg: SnrConfig) -> list[dict]:
    """kmeans-snr's sweep labels (public: ``jaxfed.runs.find("kmeans-snr").labels(...)``); each
    method of ``cfg.methods`` at every D and SNR, and at :data:`NOISE_FREE_DB` (``noise_free``)."""
    swept = ["oac", *_others(cfg.methods)]
    return (
        [{"method": "centralized"}, {"method": "ideal"}]
        + [{"method": "quantized", "digits": d} for d in cfg.digits_list]
        + [{"method": m, "digits": d, "snr_db": s} for m in swept for d in cfg.digits_list for s in cfg.snrs_db]
        + [
            {"method": m, "digits": d, "snr_db": NOISE_FREE_DB, "noise_free": True}
            for m in swept
            for d in cfg.digits_list
        ]
        + [{"method": "centralized-best"}]
    )


def _oac_rows(labels, d, where: tuple | None = None, method: str = "oac") -> list[int]:
    """Rows of ``method`` (OAC) with D = d over the SNR grid (without the noise-free point). With a swept
    channel parameter (``channel_sweep``) the rows of ``where`` = (parameter, value), by default of its
    first value (the one the report's verdicts use)."""
    rows, seen = [], set()
    for i, lab in enumerate(labels):
        if lab["method"] != method or lab.get("digits") != d or lab.get("noise_free") or "snr_db" not in lab:
            continue  # (the SNR grid only: a method also run without a channel, "quantized", has a point without one)
        if (where is not None and lab.get(where[0]) != where[1]) or lab["snr_db"] in seen:
            continue
        rows.append(i)
        seen.add(lab["snr_db"])
    return rows


def _snr_series(cfg: SnrConfig, col: int, d: int, wheres: list) -> list[tuple]:
    """The series of the panel of D = d: (style index, D, where, method) for each method of
    ``cfg.methods`` ("oac" first) and, for a method sent over the channel, each value of a swept
    channel parameter (``wheres``)."""
    pairs = [(m, where) for m in ["oac", *_others(cfg.methods)] for where in (wheres if over_channel(m) else [None])]
    if len(pairs) == 1:
        return [(col, d, pairs[0][1], "oac")]
    return [(j, d, where, m) for j, (m, where) in enumerate(pairs)]


def _series_name(d: int, where, method: str) -> str:
    name = "OAC" if method == "oac" else method
    return f"{name}, {where[0]}={where[1]:g}" if where else f"{name} D={d}"  # (a panel per D)


def _series(cfg: SnrConfig) -> list:
    """(parameter, value) of each value of a swept channel parameter, or [None] without a sweep."""
    if not cfg.channel_sweep:
        return [None]
    key, values = parse_channel_sweep(cfg.channel_sweep)
    return [(key, v) for v in values]


def _plot_snr(cfg: SnrConfig, labels, results, path):
    b = stats.band(results["loss"])
    n_cols = len(cfg.digits_list)
    fig, axes = plotting.figure(2, n_cols, figsize=(4.3 * n_cols + 0.8, 9.5), squeeze=False)
    snrs = np.asarray(cfg.snrs_db)
    free_x = kmeans_figures.beside(snrs)  # the noise-free points (NOISE_FREE_DB): a position of their own
    high = snrs >= np.median(snrs)  # the upper half of the grid, where the gap the report discusses lies
    last = final_values(results)
    wheres = _series(cfg)
    for col, d in enumerate(cfg.digits_list):
        # One panel per D; within it one series per method and value of a swept channel parameter. A series
        # keeps its style in every panel: by D with one series, by the series' place with several.
        series = _snr_series(cfg, col, d, wheres)
        ax = axes[0, col]
        _snr_loss_panel(ax, cfg, labels, b, series, snrs, free_x)
        ax.set_title(f"D = {d}: final loss (median, 75% band)", fontsize=9)
        ax2 = axes[1, col]
        if last is None:
            ax2.text(0.5, 0.5, "paired ratios need raw trials", ha="center", transform=ax2.transAxes)
            ax2.set_title(f"D = {d}: paired ratio to ideal federated", fontsize=9)
            continue
        _snr_ratio_panel(ax2, cfg, labels, last, series, 1, snrs[high], free_x)
        ax2.set_title(f"D = {d}: paired ratio to ideal federated, SNR ≥ {snrs[high].min():g} dB", fontsize=9)
    for ax in axes.ravel():
        grid = snrs if ax in axes[0] else snrs[high]
        ticks = [x for x in grid if x % 10 == 0] if len(grid) > 6 else list(grid)
        ax.set_xticks([*ticks, free_x], [f"{x:g}" for x in ticks] + ["no\nnoise"])
        ax.set_xlabel("SNR of one ED at the edge server (dB)")
        ax.grid(True, which="major", alpha=0.25)
    _same_log_limits(axes[0])
    axes[0, 0].set_ylabel(f"{LOSS_LABEL}\nafter {cfg.n_rounds} rounds")
    axes[1, 0].set_ylabel("final loss / ideal federated's, same trial\n(median, 95% interval)")
    fig.suptitle(f"OAC k-means, β={cfg.beta}, {cfg.channel} channel, init {cfg.init}", fontsize=10)
    plotting.legend(fig, axes.ravel(), ncol=4)
    plotting.save(fig, path)


def _same_log_limits(axes) -> None:
    """One y range for the log axes ``axes``: all their data, with a 5% margin (in decades) each side so that
    no marker or error bar cap at the extremes is cut."""
    finite = [ax.dataLim for ax in axes if np.isfinite(ax.dataLim.minposy) and np.isfinite(ax.dataLim.y1)]
    if not finite:
        return
    lo, hi = min(lim.minposy for lim in finite), max(lim.y1 for lim in finite)
    if not (0 < lo < hi):
        return
    pad = (hi / lo) ** 0.05
    for ax in axes:
        ax.set_ylim(lo / pad, hi * pad)


def _snr_loss_panel(ax, cfg: SnrConfig, labels, b: stats.Band, series, snrs, free_x: float) -> None:
    """Final loss against the SNR of the OAC ``series`` [(style index, D, where)] (median, 75% band), their
    noise-free points at ``free_x`` and quantisation only with the same D (dotted), over centralized (line and
    grey band) and ideal federated (dashed)."""
    ax.axhspan(b.lower[0, -1], b.upper[0, -1], color="0.5", alpha=0.12, lw=0)
    ax.axhline(b.median[0, -1], color="k", lw=1.2, label="centralized (median; grey: its 75% band)")
    ax.axhline(b.median[1, -1], color="0.4", ls="--", lw=1.2, label="ideal federated (median)")
    for j, (k, d, where, method) in enumerate(series):
        rows = _oac_rows(labels, d, where, method)
        name = _series_name(d, where, method)
        kmeans_figures.estimate_line(ax, snrs, b.median[rows, -1], b.lower[rows, -1], b.upper[rows, -1], k, label=name)
        free = _noise_free_row(labels, d, where, method)
        if free is not None:  # side by side where several series have one
            x = free_x + kmeans_figures.dodge(snrs, j, len(series))
            kmeans_figures.estimate_points(ax, [x], b.median[free, -1], b.lower[free, -1], b.upper[free, -1], k)
        if j == 0:  # (one quantised point per D, whatever the swept channel parameter)
            q = index_of(labels, method="quantized", digits=d)
            colour = plotting.series_style(k)["color"] if len(series) == 1 else "0.3"
            ax.axhline(b.median[q, -1], color=colour, ls=":", lw=1.2)
    ax.plot([], [], color="0.3", ls=":", lw=1.2, label="quantisation only, same D (median)")
    ax.set_yscale("log")


def _noise_free_row(labels, d: int, where, method: str = "oac") -> int | None:
    """The noise-free point of ``method`` (OAC) with D = d, of the value ``where`` = (parameter, value) of
    a swept channel parameter (None: the first), or None."""
    try:
        return index_of(labels, method=method, digits=d, noise_free=True, **dict([where] if where else []))
    except KeyError:
        return None


def _snr_ratio_panel(ax, cfg, labels, last, series, reference: int, snrs, free_x) -> None:
    """Median over trials of final loss / point ``reference``'s in the same trial (0: centralized, 1: ideal
    federated), with its exact 95% interval, at the SNRs ``snrs`` and without noise (at ``free_x``), of the
    OAC ``series`` [(style index, D, where)]; dotted: quantisation only. A linear axis for a ratio range under
    a factor 2, else log."""
    drawn = []
    for j, (k, d, where, method) in enumerate(series):
        rows = [r for r in _oac_rows(labels, d, where, method) if labels[r]["snr_db"] in set(snrs.tolist())]
        est, lo, hi = (np.exp(v) for v in stats.interval(np.log(last[rows] / last[reference][None]), "median"))
        style = plotting.series_style(k)
        bounded = lambda v: np.where(np.isfinite(v) & (v > 0), v, est)  # noqa: E731  (too few trials: no bound)
        kmeans_figures.estimate_line(ax, snrs, est, bounded(lo), bounded(hi), k)
        free = _noise_free_row(labels, d, where, method)
        if free is not None:
            f_est, f_lo, f_hi = (
                float(np.exp(v)) for v in stats.interval(np.log(last[free] / last[reference]), "median")
            )
            kmeans_figures.estimate_points(
                ax, [free_x + kmeans_figures.dodge(snrs, j, len(series))], f_est, f_lo, f_hi, k
            )
            drawn += [f_lo, f_hi]
        if j == 0:  # (one quantised point per D, whatever the sweep)
            q = index_of(labels, method="quantized", digits=d)
            colour = style["color"] if len(series) == 1 else "0.3"
            ax.axhline(np.exp(np.median(np.log(last[q] / last[reference]))), color=colour, ls=":", lw=1.0)
        drawn += [*lo, *hi]
    other = 1 - reference  # centralized on the ideal-federated panel and the other way round
    ax.axhline(1.0, color="k" if reference == 0 else "0.4", lw=1.2, ls="-" if reference == 0 else "--")
    ax.axhline(
        np.exp(np.median(np.log(last[other] / last[reference]))),
        color="k" if other == 0 else "0.4",
        lw=1.2,
        ls="-" if other == 0 else "--",
    )
    values = np.asarray(drawn)
    finite = values[np.isfinite(values) & (values > 0)]
    if finite.size and finite.max() / finite.min() > 2:
        ax.set_yscale("log")


def _gap_explanation(cfg: SnrConfig, labels, results, d_max: int) -> str:
    """The OAC gap at the top SNR and without noise, next to the detector's variance formula."""
    hi = _oac_rows(labels, d_max)[-1]
    free = index_of(labels, method="oac", digits=d_max, noise_free=True)
    quant = index_of(labels, method="quantized", digits=d_max)
    # Root mean square over trials: the formula gives E[error²] given the counts, so squares are
    # what average to it (a median of one-draw RMS values would sit below it).
    rms = {
        name: np.sqrt(np.mean(np.square(np.asarray(results[name], np.float64)), axis=1))
        for name in LAST_ROUND_DIAGNOSTICS
    }
    last = final_values(results)
    ratio = lambda a, b: ratio_verdict(last, a, b, "", "equal").interval_text()  # noqa: E731
    snr = labels[hi]["snr_db"]
    return (
        f"**Why OAC stays above the same algorithm with exact sums at high SNR.** The energy detector's estimate "
        f"of a sum has variance (v_max/ξ)² Σ_d β^(2d) Σ_j s_j² (K_(q,d,j) + σ²/E_s)²: besides the noise term "
        f"σ²/E_s it carries K_(q,d,j)², the fading's self-noise (|Σ_k h_k x_k|² fluctuates even without noise), "
        f"which no SNR removes. In the last round with D = {d_max} at {snr:g} dB the formula, evaluated on that "
        f"round's counts, predicts an RMS centroid error (over clusters and trials) of "
        f"{rms['centroid_noise_pred'][hi]:.3g} m, of which the noise-free limit (self-noise alone) is "
        f"{rms['centroid_noise_floor'][hi]:.3g} m; the measured channel error is {rms['centroid_noise'][hi]:.3g} m "
        f"(quantisation adds {rms['quant_error'][hi]:.3g} m). Without noise ({NOISE_FREE_DB:g} dB): "
        f"{rms['centroid_noise_pred'][free]:.3g} m predicted, {rms['centroid_noise'][free]:.3g} m measured. This "
        f"jitter, redrawn every round, is the measured gap: the final loss over ideal federated k-means (the same "
        f"algorithm, exact sums; median paired ratio, 95% interval) is {ratio(hi, 1)} at {snr:g} dB and "
        f"{ratio(free, 1)} without noise, while quantisation alone gives {ratio(quant, 1)}. Against centralized "
        f"Lloyd's from the same start, re-initialised like the federated methods, the ratio is {ratio(hi, 0)} at "
        f"{snr:g} dB; against the best of {cfg.n_starts} k-means++ starts (centralized-best) it is "
        f"{ratio(hi, index_of(labels, method='centralized-best'))}.\n\n"
    )


def _snr_table(cfg: SnrConfig, labels, b) -> list[str]:
    """The lines of the table of final losses: a row per D, a column per SNR, without noise and with
    quantisation only."""
    head = (
        "| D | "
        + " | ".join(f"{s:g} dB" for s in cfg.snrs_db)
        + f" | no noise ({NOISE_FREE_DB:g} dB) | quantisation only |"
    )
    lines = [head, "|---|" + "---|" * (len(cfg.snrs_db) + 2)]
    cell = lambda i: f"{b.median[i, -1]:.3g} [{b.lower[i, -1]:.3g}, {b.upper[i, -1]:.3g}]"  # noqa: E731
    for method in ["oac", *_others(cfg.methods)]:
        for d in cfg.digits_list:
            rows = _oac_rows(labels, d, method=method) + [
                index_of(labels, method=method, digits=d, noise_free=True),
                index_of(labels, method="quantized", digits=d),
            ]
            name = str(d) if method == "oac" else f"{d} ({method})"
            lines.append(f"| {name} | " + " | ".join(cell(i) for i in rows) + " |")
    return lines


def _report_snr(cfg: SnrConfig, labels, results) -> Reading:
    b = stats.band(results["loss"])
    final = b.median[:, -1]
    lines = _snr_table(cfg, labels, b)
    d_max, d_min = max(cfg.digits_list), min(cfg.digits_list)
    rows = _oac_rows(labels, d_max)
    by_digits = ", ".join(f"D={d}: {final[_oac_rows(labels, d)[-1]]:.2f}" for d in cfg.digits_list)
    reading = (
        f"Centralized {final[0]:.2f} m², centralized-best {final[index_of(labels, method='centralized-best')]:.2f} m², ideal federated {final[1]:.2f} m² "
        f"({CENTRALIZED_TEXT['centralized']}; {CENTRALIZED_TEXT['centralized-best']}). With D={d_max} the final median loss "
        f"goes from {final[rows[0]]:.2f} m² at {cfg.snrs_db[0]:g} dB to {final[rows[-1]]:.2f} m² at {cfg.snrs_db[-1]:g} dB "
        f"({100 * (final[rows[-1]] / final[0] - 1):+.1f}% from centralized); at {cfg.snrs_db[-1]:g} dB by digits: "
        f"{by_digits} m². The quantisation-only column is the same algorithm with exact sums of the quantised "
        "values: the distance from it to an OAC cell is the channel's share, the distance from it to ideal "
        "federated the quantisation's."
    )
    text = (
        f"Final loss (1)/|D| (m²) after {cfg.n_rounds} rounds, median [75% band]:\n\n"
        + "\n".join(lines)
        + f"\n\nResources per round:\n\n{resources_table(cfg, cfg.digits_list)}\n\n**Reading.** {reading}\n\n"
    )
    last = final_values(results)
    if last is None:
        return Reading(text + RAW_NEEDED)
    text += _gap_explanation(cfg, labels, results, d_max)
    if d_min == 1:
        low = _oac_rows(labels, 1)
        text += (
            f"With D = 1 the loss rises with SNR ({final[low[0]]:.2f} m² at {cfg.snrs_db[0]:g} dB, "
            f"{final[low[-1]]:.2f} m² at {cfg.snrs_db[-1]:g} dB): see `kmeans-digits1` for why.\n\n"
        )
    verdicts = _snr_verdicts(cfg, labels, last)
    return Reading(text + verdict_block(verdicts), tuple(verdicts))


def _snr_verdicts(cfg: SnrConfig, labels, last) -> list:
    """kmeans-snr's paired claims on the final losses ``last`` (point, trial)."""
    d_max = max(cfg.digits_list)
    rows = _oac_rows(labels, d_max)
    top = cfg.snrs_db[-1]
    verdicts = []
    for d in cfg.digits_list:
        r = _oac_rows(labels, d)
        if len(r) > 1:
            verdicts.append(
                ratio_verdict(last, r[-1], r[0], f"D={d}: OAC at {top:g} dB below {cfg.snrs_db[0]:g} dB", "less")
            )
    digits = sorted(cfg.digits_list)
    for d, e in zip(digits, digits[1:]):
        verdicts.append(
            ratio_verdict(
                last,
                _oac_rows(labels, e)[-1],
                _oac_rows(labels, d)[-1],
                f"more digits help at {top:g} dB: D={e} below D={d}",
                "less",
            )
        )
    verdicts.append(ratio_verdict(last, rows[-1], 0, f"OAC D={d_max} at {top:g} dB ≈ centralized", "equal"))
    best = index_of(labels, method="centralized-best")
    verdicts.append(
        ratio_verdict(
            last, rows[-1], best, f"OAC D={d_max} at {top:g} dB ≈ centralized-best (k-means++ starts)", "equal"
        )
    )
    verdicts.append(
        ratio_verdict(
            last,
            rows[-1],
            1,
            f"check of an explanation: OAC D={d_max} at {top:g} dB above ideal federated: the detector's self-noise",
            "greater",
        )
    )
    free = index_of(labels, method="oac", digits=d_max, noise_free=True)
    verdicts.append(ratio_verdict(last, free, 0, f"OAC D={d_max} without noise ≈ centralized", "equal"))
    return verdicts


SNR = Experiment(
    name="kmeans-snr",
    description="OAC k-means paper: final loss vs SNR (-10..30 dB, and no noise) for D = 1..4, with quantisation only, centralized and ideal",
    config_cls=SnrConfig,
    build=lambda cfg: mall_sweep(cfg, _snr_labels(cfg), last_round_diagnostics=True),
    plot=_plot_snr,
    report=_report_snr,
    caption=(
        "One column per number of digits D. Top: OAC's final loss against the SNR (median and 75% band of the "
        "trials; right: without noise), with quantisation only at the same D (dotted), centralized k-means (black, "
        "grey 75% band) and ideal federated k-means (dashed), on one axis for every D. Bottom, the upper half of "
        "the SNR grid: OAC's final loss divided by ideal federated's on the same trial (median, exact 95% "
        "interval), each panel on its own axis: 1 is no cost of the channel."
    ),
    default_trials=1000,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)
