"""Two studies around the OAC k-means paper's figures.

- ``kmeans-devices``: the same customers split among K = n² edge devices (EDs, one per tile of an
  n × n tiling of the mall, K from 9 to 1,024): final loss and complex resources per round of OAC
  against orthogonal digital aggregation. The paper's headline is a resource cost L·C·β·D that does
  not depend on K, where orthogonal links need L·C·K·N_bits·r_compression/r_bits. The digital
  scheme's loss is that of error-free links carrying the quantised values (quantisation only, with
  the same β^D levels: N_bits = ⌈D log2 β⌉ bits resolve at least as many).
- ``kmeans-digits1``: why the loss with D = 1 rises with the SNR. With one balanced digit the
  levels are {−v_max, 0, v_max}: every change below v_max/2 quantises to 0, so most clusters get a
  zero update (the dead zone) and their centroids would not move. OAC at low SNR adds detector noise
  to those zero sums, the centroids wander, some lose all their points and re-initialisation moves
  them next to populated clusters, a random restart that escapes the frozen configuration. The
  study runs D = 1 with and without re-initialisation over the SNR and records the dead-zone
  share, how far centroids move per round and how often re-initialisation fires.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxfed import plotting, stats, validation
from jaxfed.experiment import Experiment, Reading, band_table
from jaxfed.experiments.kmeans import figures as kmeans_figures
from jaxfed.experiments.kmeans.trials import (
    LOSS_LABEL,
    MICRO_BATCH,
    RAW_NEEDED,
    MallConfig,
    check_snrs,
    mall_sweep,
)
from jaxfed.experiments.kmeans.verdicts import (
    final_values,
    index_of,
    ratio_verdict,
    verdict_block,
)
from jaxfed.oac import kmeans


# --------------------------------------------------------------------------- kmeans-devices
@dataclasses.dataclass(frozen=True)
class DevicesConfig(MallConfig):
    grid_sides: tuple[int, ...] = (3, 10, 32)  # n × n tiles: K = 9, 100, 1024 EDs
    digits: int = 4  # D for quantisation and OAC
    snr_db: float = 20.0  # SNR (dB) of OAC
    bits_per_resource: float = 2.0  # r_bits of the digital links (QPSK)
    compression: float = 1.0  # r_compression of the digital links (compressed size / raw size)

    def __post_init__(self):
        super().__post_init__()
        validation.check("grid_sides", self.grid_sides, len(self.grid_sides) >= 1, "at least one tiling")
        for n in self.grid_sides:
            validation.integer("grid_sides", n, 1, 100)
        validation.integer("digits", self.digits, 1)
        check_snrs("snr_db", (self.snr_db,))
        validation.positive("bits_per_resource", self.bits_per_resource)
        validation.probability("compression", self.compression, low_open=True)

    @property
    def bits(self) -> int:
        return math.ceil(self.digits * math.log2(self.beta))


def _devices_labels(cfg: DevicesConfig) -> list[dict]:
    labels: list[dict] = [{"method": "centralized"}]
    for n in cfg.grid_sides:
        grid = {"rows": n, "cols": n, "devices": n * n, "digits": cfg.digits}
        labels.append({"method": "oac", "snr_db": cfg.snr_db, **grid})
        labels.append({"method": "quantized", "scheme": "digital", **grid})
    return labels


def resources(cfg: DevicesConfig, n_devices: int) -> tuple[int, float]:
    """(OAC, orthogonal digital) complex resources per round for K = ``n_devices``."""
    return (
        kmeans.oac_resources(2, cfg.n_clusters, cfg.beta, cfg.digits),
        kmeans.digital_resources(2, cfg.n_clusters, n_devices, cfg.bits, cfg.bits_per_resource, cfg.compression),
    )


def _plot_devices(cfg: DevicesConfig, labels, results, path):
    b = stats.band(results["loss"])
    ks = [n * n for n in cfg.grid_sides]
    x = np.arange(len(ks), dtype=float)
    fig, (ax, ax1, ax2) = plotting.figure(1, 3, figsize=(16.5, 5.4))
    methods = (
        ("oac", f"OAC D={cfg.digits}, {cfg.snr_db:g} dB"),
        ("quantized", "orthogonal digital (error-free, same levels)"),
    )
    ax.axhspan(b.lower[0, -1], b.upper[0, -1], color="0.5", alpha=0.12, lw=0)
    ax.axhline(b.median[0, -1], color="0.3", lw=1.2, label="centralized (median; grey: its 75% band)")
    for k, (method, name) in enumerate(methods):
        rows = [index_of(labels, method=method, devices=n) for n in ks]
        at = x + kmeans_figures.dodge(x, k, 2)
        kmeans_figures.estimate_points(ax, at, b.median[rows, -1], b.lower[rows, -1], b.upper[rows, -1], k, name)
    kmeans_figures.category_ticks(ax, x, ks)
    ax.set_xlabel("number of edge devices K (n × n tiles)")
    ax.set_ylabel(f"{LOSS_LABEL}\nafter {cfg.n_rounds} rounds")
    ax.set_title("final loss, same customers split among K EDs (median, 75% band)", fontsize=9)
    ax.grid(True, axis="y", alpha=0.25)

    last = final_values(results)
    ax1.set_title("paired ratio OAC / orthogonal digital, same trial", fontsize=9)
    if last is None:
        ax1.text(0.5, 0.5, "paired ratios need raw trials", ha="center", transform=ax1.transAxes)
    else:
        ratio = np.stack(
            [
                np.log(
                    last[index_of(labels, method="oac", devices=n)]
                    / last[index_of(labels, method="quantized", devices=n)]
                )
                for n in ks
            ]
        )
        est, lo, hi = (np.exp(v) for v in stats.interval(ratio, "median"))
        black = 6  # (series_style 6: a ratio of both methods, in neither's colour)
        kmeans_figures.estimate_points(ax1, x, est, np.where(lo > 0, lo, np.nan), hi, black, line=True)
        ax1.axhline(1.0, color="0.5", lw=1, ls="--")
        kmeans_figures.category_ticks(ax1, x, ks)
        ax1.set_xlabel("number of edge devices K")
        ax1.set_ylabel("final loss OAC / digital (median, 95% interval)")
        ax1.grid(True, axis="y", alpha=0.25)

    grid = np.unique(np.geomspace(1, max(max(ks), 2), 50).round())
    for k, (which, text) in enumerate(
        (
            (0, "OAC: L·C·β·D"),
            (
                1,
                f"digital: L·C·K·N_bits·r_comp/r_bits\n({cfg.bits} bits, r_comp={cfg.compression:g}, r_bits={cfg.bits_per_resource:g})",
            ),
        )
    ):
        style = plotting.series_style(k)
        values = [resources(cfg, int(g))[which] for g in grid]
        ax2.plot(grid, values, color=style["color"], ls=style["ls"], lw=1.4)
        ax2.plot(ks, [resources(cfg, n)[which] for n in ks], marker=style["marker"], color=style["color"], ls="none")
        spot = len(grid) - 1 if k == 0 else len(grid) // 2  # the rising line labelled at its middle, above-left
        ax2.annotate(  # a direct label: the loss panels' legend names the methods, not these formulas
            text,
            (grid[spot], values[spot]),
            xytext=(-4, 6) if k == 0 else (-8, 8),
            textcoords="offset points",
            ha="right",
            va="bottom",
            fontsize=plotting.FONT_SIZE,
            color=style["color"],
        )
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("number of edge devices K")
    ax2.set_ylabel("complex resources per round")
    ax2.set_title("resources per round (markers: the simulated K)", fontsize=9)
    ax2.grid(True, which="major", alpha=0.25)
    plotting.legend(fig, [ax], ncol=3)
    plotting.save(fig, path)


def _report_devices(cfg: DevicesConfig, labels, results) -> Reading:
    b = stats.band(results["loss"])
    cell = lambda i: f"{b.median[i, -1]:.3g} [{b.lower[i, -1]:.3g}, {b.upper[i, -1]:.3g}]"  # noqa: E731
    rows = [
        "| K | OAC loss | digital loss | OAC resources/round | digital resources/round | digital / OAC |",
        "|---|---|---|---|---|---|",
    ]
    for n in cfg.grid_sides:
        k = n * n
        oac_res, dig_res = resources(cfg, k)
        rows.append(
            f"| {k} | {cell(index_of(labels, method='oac', devices=k))} | "
            f"{cell(index_of(labels, method='quantized', devices=k))} | {oac_res} | {dig_res:g} | {dig_res / oac_res:.3g}x |"
        )
    oac_all = {resources(cfg, n * n)[0] for n in cfg.grid_sides}
    text = (
        f"Final loss (1)/|D| (m²) after {cfg.n_rounds} rounds, median [75% band], centralized {b.median[0, -1]:.3g}; "
        f"resources per round (L = 2, C = {cfg.n_clusters}, β = {cfg.beta}, D = {cfg.digits}; digital: "
        f"{cfg.bits} bits per value, r_compression = {cfg.compression:g}, r_bits = {cfg.bits_per_resource:g}):\n\n"
        + "\n".join(rows)
        + "\n\n**Reading.** OAC's resources per round are the same for every K; the orthogonal links' grow "
        "linearly with K. The loss columns and the last verdict show what the channel costs as K grows: more "
        "EDs share each resource, and the detector's fading self-noise grows with the counts K_l.\n\n"
    )
    resources_line = (
        f'Claim "OAC resources per round do not depend on K": **{"reproduced" if len(oac_all) == 1 else "not reproduced"}** '
        f"(exact count: {sorted(oac_all)} for K = {', '.join(str(n * n) for n in cfg.grid_sides)}).\n\n"
    )
    last = final_values(results)
    if last is None:
        return Reading(text + resources_line + RAW_NEEDED)
    ks = [n * n for n in cfg.grid_sides]
    verdicts = [
        ratio_verdict(
            last,
            index_of(labels, method="oac", devices=k),
            index_of(labels, method="quantized", devices=k),
            f"OAC ≈ digital at K = {k}",
            "equal",
        )
        for k in ks
    ]
    if len(ks) > 1:
        verdicts.append(
            ratio_verdict(
                last,
                index_of(labels, method="oac", devices=max(ks)),
                index_of(labels, method="oac", devices=min(ks)),
                f"OAC loss at K = {max(ks)} ≈ at K = {min(ks)}",
                "equal",
            )
        )
    return Reading(text + resources_line + verdict_block(verdicts), tuple(verdicts))


DEVICES = Experiment(
    name="kmeans-devices",
    description="OAC k-means: loss and resources per round vs the number of EDs K (9..1024), OAC vs orthogonal digital",
    config_cls=DevicesConfig,
    build=lambda cfg: mall_sweep(cfg, _devices_labels(cfg)),
    plot=_plot_devices,
    report=_report_devices,
    caption=(
        "The same customers split among K edge devices (EDs). Left: the final loss of OAC and of orthogonal digital "
        "links carrying the same quantised values without error, side by side at each K (median and 75% band of "
        "the trials), and centralized k-means (line, grey band). Middle: OAC's final loss divided by digital's on "
        "the same trial (median, exact 95% interval; 1: no difference). Right: the complex resources per round of "
        "each scheme against K (derived; markers at the simulated K)."
    ),
    default_trials=200,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)


# --------------------------------------------------------------------------- kmeans-digits1
@dataclasses.dataclass(frozen=True)
class Digits1Config(MallConfig):
    snrs_db: tuple[float, ...] = (-10.0, 0.0, 5.0, 10.0, 20.0, 30.0)  # SNRs (dB) of the OAC points (D = 1)

    def __post_init__(self):
        super().__post_init__()
        validation.check("snrs_db", self.snrs_db, len(self.snrs_db) >= 2, "at least two SNRs")
        check_snrs("snrs_db", self.snrs_db)


def _digits1_labels(cfg: Digits1Config) -> list[dict]:
    labels = []
    for reinit in (True, False):
        labels.append({"method": "quantized", "digits": 1, "reinit": reinit})
        labels += [{"method": "oac", "digits": 1, "snr_db": s, "reinit": reinit} for s in cfg.snrs_db]
    return labels


def _digits1_rows(labels, reinit: bool) -> list[int]:
    return [i for i, lab in enumerate(labels) if lab["method"] == "oac" and lab["reinit"] == reinit]


def _plot_digits1(cfg: Digits1Config, labels, results, path):
    snrs = np.asarray(cfg.snrs_db)
    free_x = kmeans_figures.beside(snrs)  # quantisation only: no channel, a category of its own
    fig, axes = plotting.figure(2, 2, figsize=(11, 8))
    panels = (
        ("loss", f"{LOSS_LABEL}\nafter {cfg.n_rounds} rounds", "final loss (median, 75% band of trials)"),
        ("reinits", "centroids re-initialised per run", "re-initialisations per run (mean, 95% interval)"),
        ("movement", "centroid move per round (m)", "how far centroids move per round (mean, 95% interval)"),
        ("dead_zone", "share of clusters with points", "clusters in the dead zone: every change quantises to 0"),
    )
    for ax, (metric, ylabel, title) in zip(axes.ravel(), panels):
        _digits1_panel(ax, cfg, labels, results, metric, free_x)
        ax.set_xticks([*snrs, free_x], [f"{s:g}" for s in snrs] + ["quant.\nonly"])
        ax.set_xlabel("SNR of one ED at the edge server (dB)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.25)
    fig.suptitle(f"OAC k-means with one balanced digit (D = 1, β = {cfg.beta}), init {cfg.init}", fontsize=10)
    plotting.legend(fig, axes, ncol=2)
    plotting.save(fig, path)


def _digits1_panel(ax, cfg: Digits1Config, labels, results, metric: str, free_x: float) -> None:
    """One panel of the D = 1 figure: ``metric`` per trial (the final loss; re-initialisations summed over
    the rounds; movement and dead-zone share averaged over them) against the SNR with and without
    re-initialisation, and quantisation only at ``free_x``. The loss as median and 75% band of trials, the
    others as mean and its 95% interval. A series that is 0 in every trial (no re-initialisation without
    it) is said, not drawn on the axis floor."""
    snrs = np.asarray(cfg.snrs_db)
    if metric == "loss":
        b = stats.band(results["loss"])
        summary = lambda rows: (b.median[rows, -1], b.lower[rows, -1], b.upper[rows, -1])  # noqa: E731
    elif isinstance(results[metric], stats.Summary):
        ax.text(0.5, 0.5, "needs raw trials (--keep raw)", ha="center", transform=ax.transAxes)
        return
    else:
        value = np.asarray(results[metric], np.float64)
        per_trial = value.sum(-1) if metric == "reinits" else value.mean(-1)
        summary = lambda rows: kmeans_figures.mean_interval(per_trial[rows])  # noqa: E731
    zero = []
    for k, reinit in enumerate((True, False)):
        name = "with re-initialisation" if reinit else "without re-initialisation"
        rows = _digits1_rows(labels, reinit)
        quantized = index_of(labels, method="quantized", reinit=reinit)
        if metric != "loss" and not np.any(per_trial[[*rows, quantized]]):
            zero.append(name)
            continue
        kmeans_figures.estimate_line(ax, snrs, *summary(rows), k, 2, label=f"OAC D=1, {name}")
        kmeans_figures.estimate_points(ax, [free_x + kmeans_figures.dodge(snrs, k, 2)], *summary([quantized]), k)
    if zero:
        kmeans_figures.note(ax, f"{' and '.join(zero)}: 0 in every trial (not drawn)")
    if metric in ("loss", "movement"):  # the lowest SNR is orders of magnitude off the others
        ax.set_yscale("log")
    if metric == "dead_zone":  # a share: the whole of [0, 1] in view, with room for markers at 0 and 1
        low, high = ax.get_ylim()
        ax.set_ylim(min(low, -0.04), max(high, 1.04))


def _report_digits1(cfg: Digits1Config, labels, results) -> Reading:
    b = stats.band(results["loss"])
    names = [
        ("quantisation only" if lab["method"] == "quantized" else f"OAC {lab['snr_db']:g} dB")
        + (", re-init" if lab["reinit"] else ", no re-init")
        for lab in labels
    ]
    table = band_table("round", [cfg.n_rounds], names, b, [cfg.n_rounds - 1])
    text = f"D = 1, β = {cfg.beta}, init {cfg.init}: final loss (1)/|D| (m²), median [75% band]:\n\n{table}\n\n"
    last = final_values(results)
    if last is None:
        return Reading(text + RAW_NEEDED)
    reinits = np.asarray(results["reinits"]).sum(-1).mean(1)
    movement = np.asarray(results["movement"]).mean((1, 2))
    dead = np.asarray(results["dead_zone"]).mean((1, 2))
    rows = ["| point | re-inits per run | centroid move per round (m) | dead-zone share |", "|---|---|---|---|"]
    rows += [f"| {n} | {reinits[i]:.2f} | {movement[i]:.2f} | {dead[i]:.2f} |" for i, n in enumerate(names)]
    on, off = _digits1_rows(labels, True), _digits1_rows(labels, False)
    low = int(np.argmin(np.abs(np.asarray(cfg.snrs_db) - 5.0)))  # the low SNR compared: nearest 5 dB
    lo_db, hi_db = cfg.snrs_db[low], cfg.snrs_db[-1]
    reading = (
        f"On average {dead[on[-1]]:.0%} of the clusters with points are in the dead zone in a round at {hi_db:g} dB "
        f"(every change below v_max/2 quantises to 0, so their quantised sum is 0). At {lo_db:g} dB the detector's "
        f"noise moves centroids {movement[on[low]]:.2f} m per round against {movement[on[-1]]:.2f} m at {hi_db:g} dB, "
        f"and re-initialisation fires {reinits[on[low]]:.2f} times per run against {reinits[on[-1]]:.2f}. "
        f"With re-initialisation the median final loss is {b.median[on[low], -1]:.2f} m² at {lo_db:g} dB and "
        f"{b.median[on[-1], -1]:.2f} m² at {hi_db:g} dB; without it {b.median[off[low], -1]:.2f} and "
        f"{b.median[off[-1], -1]:.2f} m². "
    )
    verdicts = [
        ratio_verdict(
            last, on[-1], on[low], f"with re-init, D=1 is worse at {hi_db:g} dB than at {lo_db:g} dB", "greater"
        ),
        ratio_verdict(
            last, off[-1], off[low], f"without re-init, D=1 is worse at {hi_db:g} dB than at {lo_db:g} dB", "greater"
        ),
    ]
    if verdicts[0].verdict == stats.REPRODUCED and verdicts[1].verdict != stats.REPRODUCED:
        reading += (
            "The noise does not act as a dither on the quantiser (it is added after quantisation, to the sums), "
            "and on its own it does not help: it helps D = 1 by knocking frozen centroids loose so that "
            "re-initialisation restarts them where the data are."
        )
    else:
        reading += "These trials do not single out noise-driven re-initialisation as the cause (see the verdicts)."
    markdown = (
        text
        + "Per round, mean over trials and rounds:\n\n"
        + "\n".join(rows)
        + f"\n\n**Reading.** {reading}\n\n"
        + "Checks of the explanation (not claims of the paper):\n\n"
        + verdict_block(verdicts)
    )
    return Reading(markdown, tuple(v._replace(claim=f"check of an explanation: {v.claim}") for v in verdicts))


DIGITS1 = Experiment(
    name="kmeans-digits1",
    description="OAC k-means with D = 1: why the loss rises with SNR (dead zone, noise, re-initialisation)",
    config_cls=Digits1Config,
    build=lambda cfg: mall_sweep(cfg, _digits1_labels(cfg), round_diagnostics=True),
    plot=_plot_digits1,
    report=_report_digits1,
    caption=(
        "OAC k-means with one balanced digit (D = 1) against the SNR, with re-initialisation (blue, solid) and "
        "without (vermillion, dashed); the right-most position of each panel is quantisation only (no channel). "
        "Final loss: median and 75% band of the trials; re-initialisations per run, centroid movement per round "
        "and the dead-zone share (clusters whose changes all quantise to 0): mean over trials with its 95% "
        "bootstrap interval. A series that is 0 in every trial is named in its panel instead of drawn."
    ),
    default_trials=200,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)
