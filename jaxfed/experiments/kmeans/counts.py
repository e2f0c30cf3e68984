"""``kmeans-oac-counts``: the partition sizes over the air (docs/kmeans.md §B9).

The paper sends the counts |S_{k,c}| over an error-free orthogonal channel and remarks that "the
sum for computing |S_c| can be evaluated with OAC for further resource saving". Here the counts go
over the same non-coherent channel as the changes, with the same balanced-number codec (β, D_c
digits), v_max = the round's largest per-ED count (each ED reports its largest count over the
orthogonal channel, with its largest change), through ``kmeans.Settings.count_aggregator``; the
ES uses its estimate |Ŝ_c| wherever the algorithm reads |S_c|: the step's divisor, the test
|S_c| > 0 and re-initialisation's |S_c| < S_min.

Points (OAC changes with D digits throughout; "exact counts" is the paper's orthogonal baseline):
exact and OAC counts at each SNR of ``snrs_db`` with re-initialisation, and both without
re-initialisation at ``snr_db``. Paired against the baseline on the same trials (customers, start,
the changes' channel draws: the counts' draws are a stream of their own).
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
    DIFFERENCE_TEXT,
    difference_verdict,
    final_values,
    index_of,
    ratio_verdict,
    verdict_block,
)
from jaxfed.oac import kmeans


@dataclasses.dataclass(frozen=True)
class CountsConfig(MallConfig):
    digits: int = 4  # D of the changes Δc_{k,c} (OAC, every point)
    count_digits: int = 4  # D_c of the counts |S_{k,c}| when they go over the air (same β and channel)
    snrs_db: tuple[float, ...] = (10.0, 20.0, 30.0)  # SNRs (dB) of the points with re-initialisation
    snr_db: float = 20.0  # SNR (dB) of the points without re-initialisation and of the re-initialisation claims
    bits_per_resource: float = 2.0  # r_bits of the orthogonal links (QPSK) in the resource count

    def __post_init__(self):
        super().__post_init__()
        validation.integer("digits", self.digits, 1)
        validation.integer("count_digits", self.count_digits, 1)
        validation.check("snrs_db", self.snrs_db, len(self.snrs_db) >= 1, "at least one SNR")
        check_snrs("snrs_db", self.snrs_db)
        check_snrs("snr_db", (self.snr_db,))
        validation.positive("bits_per_resource", self.bits_per_resource)
        validation.check(
            "channel_sweep", self.channel_sweep, not self.channel_sweep, "empty in this study (set `channel`)"
        )

    @property
    def count_bits(self) -> int:
        """Bits of an exact count on an orthogonal link: any count up to n_points."""
        return math.ceil(math.log2(self.n_points + 1))


def _labels(cfg: CountsConfig) -> list[dict]:
    labels = []
    for snr in dict.fromkeys((*cfg.snrs_db, cfg.snr_db)):
        for reinit in (True, False) if snr == cfg.snr_db else (True,):
            base = {"method": "oac", "digits": cfg.digits, "snr_db": snr, "reinit": reinit}
            labels.append({**base, "counts": "exact"})
            labels.append({**base, "counts": "oac", "count_digits": cfg.count_digits})
    return labels


def resources(cfg: CountsConfig) -> dict:
    """Complex resources per round of each part (the changes' v_max reports, the same in both, left out)."""
    bits, r = cfg.count_bits, cfg.bits_per_resource
    return {
        "changes": kmeans.oac_resources(2, cfg.n_clusters, cfg.beta, cfg.digits),
        "orthogonal counts": kmeans.digital_resources(1, cfg.n_clusters, cfg.n_devices, bits, r),
        "OAC counts": kmeans.oac_resources(1, cfg.n_clusters, cfg.beta, cfg.count_digits),
        "count v_max reports": kmeans.digital_resources(1, 1, cfg.n_devices, bits, r),
    }


def _name(lab: dict) -> str:
    counts = "exact counts" if lab["counts"] == "exact" else f"OAC counts D_c={lab['count_digits']}"
    return f"{counts}, {lab['snr_db']:g} dB" + ("" if lab["reinit"] else ", no re-init")


def _per_run(results, name: str):
    return np.asarray(results[name]).sum(-1)  # (point, trial): summed over the rounds


def _plot(cfg: CountsConfig, labels, results, path):
    fig, (ax0, ax1, ax2) = plotting.figure(1, 3, figsize=(16, 5.4))
    b = stats.band(results["loss"])
    # Categories: each SNR with re-initialisation, then the point without it.
    cases = [(snr, True) for snr in cfg.snrs_db] + [(cfg.snr_db, False)]
    names = [f"{snr:g}" for snr in cfg.snrs_db] + [f"{cfg.snr_db:g},\nno re-init"]
    x = np.arange(len(cases), dtype=float)
    x[-1] += 0.5  # apart from the SNR axis
    for k, counts in enumerate(("exact", "oac")):
        rows = [index_of(labels, counts=counts, snr_db=snr, reinit=reinit) for snr, reinit in cases]
        name = "exact counts (orthogonal)" if counts == "exact" else f"OAC counts, D_c={cfg.count_digits}"
        kmeans_figures.estimate_points(
            ax0, x + kmeans_figures.dodge(x, k, 2), b.median[rows, -1], b.lower[rows, -1], b.upper[rows, -1], k, name
        )
    ax0.set_yscale("log")
    kmeans_figures.category_ticks(ax0, x, names)
    ax0.set_xlabel("SNR of one ED at the edge server (dB)")
    ax0.set_ylabel(f"{LOSS_LABEL}\nafter {cfg.n_rounds} rounds", fontsize=8)
    ax0.set_title(f"final loss, OAC changes D={cfg.digits} (median, 75% band)", fontsize=9)
    ax1.set_title(f"re-initialisations per run at {cfg.snr_db:g} dB (mean, 95% interval)", fontsize=9)
    ax2.set_title(f"error of the counts over the air at {cfg.snr_db:g} dB (median, 75% band)", fontsize=9)
    if isinstance(results["reinits"], stats.Summary):
        for ax in (ax1, ax2):
            ax.text(0.5, 0.5, "needs raw trials (--keep raw)", ha="center", transform=ax.transAxes)
    else:
        _reinit_panel(ax1, cfg, labels, results)
        rounds = np.arange(1, cfg.n_rounds + 1)
        i = index_of(labels, counts="oac", snr_db=cfg.snr_db, reinit=True)
        plotting.band_plot(ax2, rounds, np.asarray(results["count_error"])[[i]], ["OAC counts"], legend=False, offset=1)
        size = cfg.n_points / cfg.n_clusters
        ax2.axhline(size, color="k", lw=1, ls=":")
        ax2.annotate(
            f"mean cluster size N/C = {size:g}",
            (0.02, size),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=plotting.FONT_SIZE,
        )
        ax2.set_xlabel("round n")
        ax2.set_ylabel("RMS over clusters of |Ŝ_c| − |S_c| (points)", fontsize=8)
    for ax in (ax0, ax1, ax2):
        ax.grid(True, axis="y", alpha=0.25)
    plotting.legend(fig, [ax0], ncol=2)
    plotting.save(fig, path)


def _reinit_panel(ax, cfg: CountsConfig, labels, results) -> None:
    """Re-initialisations per run at ``snr_db`` with re-initialisation, by kind, exact against OAC counts:
    mean over trials and its 95% interval as points (a 0 is a point on the line at 0, not a missing bar)."""
    kinds = (
        ("reinits", "re-initialised"),
        ("spurious_reinits", "moved with\n>= S_min points"),
        ("missed_reinits", "left below\nS_min"),
    )
    x = np.arange(len(kinds), dtype=float)
    top = 0.0
    for k, counts in enumerate(("exact", "oac")):
        i = index_of(labels, counts=counts, snr_db=cfg.snr_db, reinit=True)
        est, lo, hi = kmeans_figures.mean_interval(np.stack([_per_run(results, m)[i] for m, _ in kinds]))
        kmeans_figures.estimate_points(ax, x + kmeans_figures.dodge(x, k, 2), est, lo, hi, k)
        top = max(top, float(np.nanmax(hi)))
    kmeans_figures.category_ticks(ax, x, [name for _, name in kinds])
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_ylim(-0.05 * max(top, 1.0), 1.08 * max(top, 1.0))  # a point at 0 drawn whole
    ax.set_xlabel(f"re-initialisation reads |Ŝ_c| < S_min = {cfg.s_min:g}")
    ax.set_ylabel(f"clusters per run of {cfg.n_rounds} rounds", fontsize=8)


def _setting_text(cfg: CountsConfig, labels, results) -> str:
    """The points' final losses and the resources per round, in markdown."""
    b = stats.band(results["loss"])
    table = band_table("round", [cfg.n_rounds], [_name(lab) for lab in labels], b, [cfg.n_rounds - 1])
    res = resources(cfg)
    total_orth = res["changes"] + res["orthogonal counts"]
    total_oac = res["changes"] + res["OAC counts"] + res["count v_max reports"]
    resource_rows = [
        "| counts | changes (OAC, L·C·β·D) | counts | count v_max reports | total | saved on the counts |",
        "|---|---|---|---|---|---|",
        f"| orthogonal, exact (C·K·{cfg.count_bits} bits / r_bits) | {res['changes']} | {res['orthogonal counts']:g} | 0 | "
        f"{total_orth:g} | – |",
        f"| over the air (C·β·D_c; K·{cfg.count_bits} bits / r_bits) | {res['changes']} | {res['OAC counts']} | "
        f"{res['count v_max reports']:g} | {total_oac:g} | "
        f"{1 - (res['OAC counts'] + res['count v_max reports']) / res['orthogonal counts']:.0%} |",
    ]
    text = (
        f"OAC changes D = {cfg.digits}, β = {cfg.beta}, channel `{cfg.channel}`; counts exact (the paper) or over the "
        f"same channel with D_c = {cfg.count_digits}. Final loss (1)/|D| (m²), median [75% band]:\n\n{table}\n\n"
        f"Complex resources per round (K = {cfg.n_devices}, C = {cfg.n_clusters}, r_bits = {cfg.bits_per_resource:g}; "
        f"an exact count takes ⌈log2(N + 1)⌉ = {cfg.count_bits} bits; the changes' own v_max reports are the same in "
        f"both and left out). Over the air the round saves {total_orth - total_oac:g} resources, "
        f"{1 - total_oac / total_orth:.0%} of the total:\n\n" + "\n".join(resource_rows) + "\n\n"
    )
    return text


def _claims(cfg: CountsConfig, labels, last, fires) -> tuple[list, str, object, object]:
    """(ratio verdicts, the SNR sentence, the spurious and the firing verdicts) of the counts study."""
    at = lambda counts, snr=cfg.snr_db, reinit=True: index_of(labels, counts=counts, snr_db=snr, reinit=reinit)  # noqa: E731
    ratios = [
        ratio_verdict(
            last, at("oac", s), at("exact", s), f"OAC counts ≈ exact counts at {s:g} dB (final loss)", "equal"
        )
        for s in cfg.snrs_db
    ]
    ratios.append(
        ratio_verdict(
            last,
            at("oac", reinit=False),
            at("exact", reinit=False),
            f"without re-init, OAC counts ≈ exact counts at {cfg.snr_db:g} dB",
            "equal",
        )
    )
    ratios.append(
        ratio_verdict(
            last,
            at("oac"),
            at("oac", reinit=False),
            f"with OAC counts, re-initialisation lowers the final loss at {cfg.snr_db:g} dB",
            "less",
        )
    )
    snr_effect = ""
    if len(cfg.snrs_db) > 1:
        lo, hi = min(cfg.snrs_db), max(cfg.snrs_db)
        penalty = lambda s: last[at("oac", s)] / last[at("exact", s)]  # noqa: E731
        shrink = stats.paired_verdict(
            penalty(hi),
            penalty(lo),
            f"the OAC-count penalty (loss ratio to exact counts) is smaller at {hi:g} dB than at {lo:g} dB",
            expect="less",
            transform="log_ratio",
        )
        ratios.append(shrink)
        snr_effect = (
            f" Raising the SNR from {lo:g} to {hi:g} dB multiplies the penalty by {shrink.estimate:.3g} (median per "
            f"trial): the detector's noise term σ²/E_s falls with the SNR, its self-noise term K_l does not."
        )
    spurious = stats.paired_verdict(
        fires["spurious_reinits"][at("oac")],
        fires["spurious_reinits"][at("exact")],
        f"OAC counts make re-initialisation move populated clusters (per run, above exact counts' 0) at {cfg.snr_db:g} dB",
        expect="greater",
        statistic="mean",
    )
    fired = difference_verdict(
        fires["reinits"],
        at("oac"),
        at("exact"),
        f"re-initialisation fires more often with OAC counts at {cfg.snr_db:g} dB (per run)",
        "greater",
    )
    return ratios, snr_effect, spurious, fired


def _report(cfg: CountsConfig, labels, results) -> Reading:
    text = _setting_text(cfg, labels, results)
    last = final_values(results)
    if last is None:
        return Reading(text + RAW_NEEDED)
    fires = {m: _per_run(results, m) for m in ("reinits", "spurious_reinits", "missed_reinits", "small_clusters")}
    rows = [
        "| point | re-initialised per run | of them with >= S_min points | left below S_min | RMS count error (points) |"
    ]
    rows.append("|---|---|---|---|---|")
    error = np.asarray(results["count_error"]).mean(axis=(1, 2))
    for i, lab in enumerate(labels):
        if lab["reinit"]:
            rows.append(
                f"| {_name(lab)} | {fires['reinits'][i].mean():.2f} | {fires['spurious_reinits'][i].mean():.2f} | "
                f"{fires['missed_reinits'][i].mean():.2f} | {error[i]:.3g} |"
            )
    ratios, snr_effect, spurious, fired = _claims(cfg, labels, last, fires)
    at = lambda counts, snr=cfg.snr_db, reinit=True: index_of(labels, counts=counts, snr_db=snr, reinit=reinit)  # noqa: E731
    i_oac, i_exact = at("oac"), at("exact")
    reading = (
        f"At {cfg.snr_db:g} dB the ES's counts are off by {error[i_oac]:.3g} points RMS per cluster and round, against a "
        f"mean cluster size of {cfg.n_points / cfg.n_clusters:g}: under Rayleigh fading the energy detector's variance (K_l + σ²/E_s)² keeps "
        "the fading's self-noise K_l² at every SNR, and unlike the changes, which shrink as the centroids settle (and "
        "v_max with them), the counts do not shrink, so their relative error stays of order one. The ES then divides "
        "the summed changes by a wrong |Ŝ_c| (a small |Ŝ_c| throws a centroid far away) and re-initialisation reads "
        f"|Ŝ_c| < S_min: it moved {fires['spurious_reinits'][i_oac].mean():.2f} clusters per run that held points "
        f"(exact counts: {fires['spurious_reinits'][i_exact].mean():.2f}) and left "
        f"{fires['missed_reinits'][i_oac].mean():.2f} empty ones in place. Without re-initialisation nothing brings the "
        "thrown centroids back." + snr_effect
    )
    markdown = (
        text
        + "Re-initialisation and the counts' error, mean per run (sums over the rounds) and per round:\n\n"
        + "\n".join(rows)
        + f"\n\n**Reading.** {reading}\n\n"
        + verdict_block(ratios)
        + "\n"
        + verdict_block([spurious, fired], DIFFERENCE_TEXT.replace("final losses (m²)", "counts per run"), "mean a − b")
    )
    return Reading(markdown, (*ratios, spurious, fired))


EXPERIMENT = Experiment(
    name="kmeans-oac-counts",
    description="OAC k-means beyond the paper: partition sizes |S_c| over the air too; resources, loss and re-initialisation vs exact counts",
    config_cls=CountsConfig,
    build=lambda cfg: mall_sweep(cfg, _labels(cfg), count_diagnostics=True),
    plot=_plot,
    report=_report,
    caption=(
        "The partition sizes |S_c| exact (over orthogonal links, the paper) against over the air (OAC counts). "
        "Left: the final loss at each SNR with re-initialisation and at one SNR without it (median and 75% band "
        "of the trials). Middle: re-initialisations per run by kind, mean over trials with its 95% bootstrap "
        "interval (a point at 0 is a count of 0). Right: the RMS error of the counts over the air per round "
        "(median, 75% band), against the mean cluster size (dotted)."
    ),
    default_trials=200,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)
