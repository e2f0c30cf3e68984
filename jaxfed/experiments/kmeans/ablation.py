"""``kmeans-ablation``: what each enhancement of OAC k-means (adaptive v_max, centroid
re-initialisation) changes, under each initialisation, with paired effects and intervals.

Points (all OAC at one D and SNR unless named otherwise):

- on the heterogeneous tile split, for every init in ``inits`` (default: uniform in the mall —
  the server-side start the other figures use —, Forgy, k-means++): both enhancements ("full"),
  no re-initialisation, a fixed v_max, neither; ideal federated k-means (to count how often
  re-initialisation fires without a channel) and centralized k-means from the same start
  (Lloyd's, re-initialised like the federated methods);
- under the configured init: the full algorithm with each other adaptive v_max reading
  (:data:`jaxfed.oac.kmeans.VMAX_RULES`) and with the other symbol energy reading;
- on an i.i.d. split of the same customers: the four enhancement settings.

An enhancement's effect is the per-trial difference of final losses with − without it on the same
trial (same customers, start and channel draws), averaged over trials: below 0 means it helps. The
mean, not the median: in most trials an enhancement changes nothing (re-initialisation does not
fire), and its effect is the runs it rescues.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxfed import plotting, stats, validation
from jaxfed.experiment import Experiment, Reading, band_table
from jaxfed.experiments.kmeans import figures as kmeans_figures
from jaxfed.experiments.kmeans.trials import (
    LOSS_LABEL,
    MICRO_BATCH,
    RAW_NEEDED,
    SYMBOL_ENERGIES,
    MallConfig,
    mall_sweep,
)
from jaxfed.experiments.kmeans.verdicts import (
    DIFFERENCE_TEXT,
    difference_verdict,
    final_values,
    index_of,
    verdict_block,
)
from jaxfed.oac import kmeans

VARIANTS = {  # name -> (adaptive v_max, re-initialisation)
    "full": (True, True),
    "no re-init": (True, False),
    "fixed v_max": (False, True),
    "neither": (False, False),
}
EFFECTS = (("re-initialisation", "no re-init"), ("adaptive v_max", "fixed v_max"), ("both", "neither"))


@dataclasses.dataclass(frozen=True)
class AblationConfig(MallConfig):
    digits: int = 4  # D for OAC
    snr_db: float = 20.0  # SNR (dB) of OAC
    inits: tuple[str, ...] = ("uniform", "forgy", "kmeans++")  # initialisations compared, each one of kmeans.INITS

    def __post_init__(self):
        super().__post_init__()
        validation.integer("digits", self.digits, 1)
        validation.check("snr_db", self.snr_db, -50 <= self.snr_db <= 100, "in dB within [-50, 100]")
        validation.check("inits", self.inits, len(self.inits) >= 1, "at least one init")
        for init in self.inits:
            validation.check("inits", init, init in kmeans.INITS, f"inits from {kmeans.INITS}")


def _labels(cfg: AblationConfig) -> list[dict]:
    oac = {"method": "oac", "digits": cfg.digits, "snr_db": cfg.snr_db}
    labels = []
    for init in dict.fromkeys((cfg.init,) + tuple(cfg.inits)):  # the configured init first
        for name, (adaptive, reinit) in VARIANTS.items():
            labels.append(
                {**oac, "variant": name, "adaptive": adaptive, "reinit": reinit, "split": "tiles", "init": init}
            )
        labels.append({"method": "ideal", "variant": "ideal federated", "split": "tiles", "init": init})
        labels.append({"method": "centralized", "variant": "centralized", "split": "tiles", "init": init})
    for rule in kmeans.VMAX_RULES:
        if rule != cfg.vmax_rule:
            labels.append(
                {**oac, "variant": f"v_max reading {rule}", "vmax_rule": rule, "split": "tiles", "init": cfg.init}
            )
    for es in SYMBOL_ENERGIES:
        if es != cfg.symbol_energy:
            labels.append(
                {**oac, "variant": f"E_s reading {es}", "symbol_energy": es, "split": "tiles", "init": cfg.init}
            )
    for name, (adaptive, reinit) in VARIANTS.items():
        labels.append(
            {**oac, "variant": name, "adaptive": adaptive, "reinit": reinit, "split": "iid", "init": cfg.init}
        )
    return labels


def _rows(labels, split: str, init: str) -> list[int]:
    return [
        i
        for i, lab in enumerate(labels)
        if lab.get("split") == split
        and lab.get("init") == init
        and (lab["variant"] in VARIANTS or lab["method"] != "oac")
    ]


def _effects(cfg, labels, last, split: str, init: str):
    """[(name, Verdict)] of each enhancement: mean difference full − without on the same trials."""
    full = index_of(labels, variant="full", split=split, init=init)
    return [
        (
            name,
            difference_verdict(
                last,
                full,
                index_of(labels, variant=without, split=split, init=init),
                f"{name} helps ({split}, init {init}): full below {without}",
            ),
        )
        for name, without in EFFECTS
    ]


def _effect_plot(ax, rows: list, xlabel: str) -> None:
    """:func:`jaxfed.plotting.interval_plot` of [(name, Verdict)]: mean differences and their intervals."""
    estimate, lower, upper = ([getattr(v, field) for _, v in rows] for field in ("estimate", "lower", "upper"))
    plotting.interval_plot(ax, [name for name, _ in rows], estimate, lower, upper, reference=0.0, xlabel=xlabel)


def _readings(cfg, labels, last):
    """[(name, Verdict)]: each other reading against the configured one (mean difference
    reading − default; the verdict field is not used: these are not claims of the paper)."""
    full = index_of(labels, variant="full", split="tiles", init=cfg.init)
    return [
        (lab["variant"], difference_verdict(last, i, full, lab["variant"]))
        for i, lab in enumerate(labels)
        if lab["variant"].startswith(("v_max reading", "E_s reading"))
    ]


ORDER = (*VARIANTS, "ideal federated", "centralized")  # one style per variant in every panel


def _plot(cfg: AblationConfig, labels, results, path):
    inits = list(dict.fromkeys((cfg.init,) + tuple(cfg.inits)))
    fig, axes = plotting.figure(2, 2, figsize=(14, 10.5))
    _final_loss_panel(axes[0, 0], cfg, labels, results, inits)
    _rounds_panel(axes[0, 1], cfg, labels, results)
    last = final_values(results)
    effect_axes = axes[1]
    if last is None:
        for ax in effect_axes:
            ax.text(0.5, 0.5, "paired effects need raw trials", ha="center", transform=ax.transAxes)
    else:
        splits = [("tiles", i) for i in inits] + [("iid", cfg.init)]
        effects = [
            (f"{name}, {split} {init}", v)
            for split, init in splits
            for name, v in _effects(cfg, labels, last, split, init)
        ]
        _effect_plot(
            effect_axes[0], effects, "final loss with − without the enhancement,\nsame trial (m²; mean, 95% interval)"
        )
        effect_axes[0].set_title("paired effect of each enhancement (mean, 95% interval; < 0 helps)", fontsize=9)
        for j in range(1, len(splits)):  # a rule between the splits' groups of rows
            effect_axes[0].axhline(len(effects) - j * len(EFFECTS) - 0.5, color="0.75", lw=0.8)
        readings = _readings(cfg, labels, last)
        if readings:
            xlabel = (
                f"final loss − default reading's ({cfg.vmax_rule}, E_s {cfg.symbol_energy}),\n"
                "same trial (m²; mean, 95% interval)"
            )
            _effect_plot(effect_axes[1], readings, xlabel)
            effect_axes[1].set_title(f"paired effect of the other readings, tile split, init {cfg.init}", fontsize=9)
        else:
            effect_axes[1].remove()
    plotting.legend(fig, axes[0], ncol=len(ORDER))
    plotting.save(fig, path)


def _final_loss_panel(ax, cfg: AblationConfig, labels, results, inits: list[str]) -> None:
    """The final loss of each variant (median, 75% band of trials) side by side at each split and init;
    centralized k-means, which does not depend on the split, is the tile split's."""
    b = stats.band(results["loss"])
    settings = [("tiles", init) for init in inits] + [("iid", cfg.init)]
    x = np.arange(len(settings), dtype=float)
    drawn = []
    for k, variant in enumerate(ORDER):
        xs, rows = [], []
        for j, (split, init) in enumerate(settings):
            where = {"split": "tiles" if variant == "centralized" else split, "init": init}
            try:
                rows.append(index_of(labels, variant=variant, **where))
            except KeyError:  # (no ideal federated point on the i.i.d. split)
                continue
            xs.append(x[j] + kmeans_figures.dodge(x, k, len(ORDER), width=0.7))
        kmeans_figures.estimate_points(ax, xs, b.median[rows, -1], b.lower[rows, -1], b.upper[rows, -1], k, variant)
        drawn += [*b.lower[rows, -1], *b.upper[rows, -1]]
    finite = np.asarray(drawn)[np.isfinite(drawn)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 3:
        ax.set_yscale("log")
    kmeans_figures.category_ticks(
        ax, x, [f"{'tile' if s == 'tiles' else 'i.i.d.'} split,\ninit {i}" for s, i in settings]
    )
    ax.set_ylabel(f"{LOSS_LABEL}\nafter {cfg.n_rounds} rounds")
    ax.set_title(f"final loss of each variant, OAC D={cfg.digits} at {cfg.snr_db:g} dB (median, 75% band)", fontsize=9)
    ax.grid(True, axis="y", alpha=0.25)


def _rounds_panel(ax, cfg: AblationConfig, labels, results) -> None:
    """Loss per round of each variant on the tile split under the configured init: medians only (the bands
    would hide each other), and centralized k-means's 75% band as the spread over trials."""
    b = stats.band(results["loss"])
    rounds = np.arange(1, cfg.n_rounds + 1)
    rows = _rows(labels, "tiles", cfg.init)
    for i in rows:
        variant = labels[i]["variant"]
        plotting.series_line(ax, rounds, b.median[i], ORDER.index(variant), len(ORDER), label=variant, lw=1.4)
        if variant == "centralized":
            ax.fill_between(
                rounds,
                b.lower[i],
                b.upper[i],
                color=plotting.series_style(ORDER.index(variant))["color"],
                alpha=0.15,
                lw=0,
            )
    ax.set_yscale("log")
    ax.set_xlabel("round n")
    ax.set_ylabel(LOSS_LABEL)
    ax.set_title(f"loss per round, tile split, init {cfg.init} (medians; band: centralized's 75%)", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)


def _firings_table(labels, reinits: np.ndarray, inits: list[str]) -> list[str]:
    """Lines of the table of re-initialisation firings per run (``reinits``: (point, trial) counts) by
    init and variant, tile split."""
    fire = [
        "| init | "
        + " | ".join(
            f"{v} ({lab})" for v, lab in (("full", "OAC"), ("fixed v_max", "OAC"), ("ideal federated", "exact sums"))
        )
        + " |",
        "|---|---|---|---|",
    ]
    for init in inits:
        cells = []
        for variant in ("full", "fixed v_max", "ideal federated"):
            r = reinits[index_of(labels, variant=variant, split="tiles", init=init)]
            cells.append(f"{r.mean():.2f} per run ({(r > 0).mean():.0%} of runs)")
        fire.append(f"| {init} | " + " | ".join(cells) + " |")
    return fire


def _report(cfg: AblationConfig, labels, results) -> Reading:
    b = stats.band(results["loss"])
    names = [f"{lab['variant']}, {lab['split']}, init {lab['init']}" for lab in labels]
    table = band_table("round", [cfg.n_rounds], names, b, [cfg.n_rounds - 1])
    text = f"Final loss (1)/|D| (m²), OAC D={cfg.digits} at {cfg.snr_db:g} dB unless named, median [75% band]:\n\n{table}\n\n"
    last = final_values(results)
    if last is None:
        return Reading(text + RAW_NEEDED)
    inits = list(dict.fromkeys((cfg.init,) + tuple(cfg.inits)))
    fire = _firings_table(labels, np.asarray(results["reinits"]).sum(-1), inits)
    effect_rows = [
        "| enhancement | split, init | with − without, mean (m²) [95% interval] | runs it changed | sign-test p | verdict |",
        "|---|---|---|---|---|---|",
    ]
    verdicts = []
    for split, init in [("tiles", i) for i in inits] + [("iid", cfg.init)]:
        for name, v in _effects(cfg, labels, last, split, init):
            changed = _changed(labels, last, split, init, name)
            effect_rows.append(
                f"| {name} | {split}, {init} | {v.interval_text()} | {changed:.0%} | {v.p_value:.2g} | {v.verdict} |"
            )
            verdicts.append(v)
    readings = _readings(cfg, labels, last)
    reading_rows = ["| reading | reading − default, mean (m²) [95% interval] | sign-test p |", "|---|---|---|"] + [
        f"| {name} | {v.interval_text()} | {v.p_value:.2g} |" for name, v in readings
    ]
    full = {init: np.median(last[index_of(labels, variant="full", split="tiles", init=init)]) for init in inits}
    central = {init: np.median(last[index_of(labels, variant="centralized", init=init)]) for init in inits}
    reading = (
        "Final median loss of the full algorithm by init: "
        + ", ".join(
            f"{i} {full[i]:.2f} m² (centralized Lloyd's from the same start, re-initialised, {central[i]:.2f})"
            for i in inits
        )
        + ". Re-initialisation can only help when centroids lose all their points; from data points "
        "(Forgy, k-means++) that rarely happens, from uniform draws in the mall it does, which is why the "
        f"server-side start is the one where the enhancement shows. Adaptive v_max is compared with a fixed "
        f"v_max of {cfg.vmax_fixed:g} (`vmax_fixed`, a choice: the paper's value is unknown), so its effect "
        "measures that choice as much as the enhancement. The v_max readings: `abs` uses the "
        "largest |change| of the current round (nothing is clamped); `signed` the largest signed change "
        "(changes below −v_max are clamped); the `-previous` readings last round's maxima (changes that grew "
        "since are clamped). E_s = √β lowers the energy per active resource by 2.39 dB at β = 3."
    )
    markdown = (
        text
        + "Re-initialisation firings (mean per run of "
        + f"{cfg.n_rounds} rounds, and the share of runs where it fired at all):\n\n"
        + "\n".join(fire)
        + "\n\nPaired effect of each enhancement on the final loss:\n\n"
        + "\n".join(effect_rows)
        + "\n\nWhat the other readings change (full algorithm, tile split):\n\n"
        + "\n".join(reading_rows)
        + f"\n\n**Reading.** {reading}\n\n"
        + verdict_block(verdicts, DIFFERENCE_TEXT, "mean a − b (m²)")
    )
    return Reading(markdown, tuple(verdicts))


def _changed(labels, last, split: str, init: str, name: str) -> float:
    """Share of trials whose final loss the enhancement changed at all."""
    without = dict(EFFECTS)[name]
    a = last[index_of(labels, variant="full", split=split, init=init)]
    b = last[index_of(labels, variant=without, split=split, init=init)]
    return float(np.mean(a != b))


EXPERIMENT = Experiment(
    name="kmeans-ablation",
    description="OAC k-means paper: paired effect of adaptive v_max and re-initialisation under each init, v_max and E_s readings, tile vs i.i.d. split",
    config_cls=AblationConfig,
    build=lambda cfg: mall_sweep(cfg, _labels(cfg)),
    plot=_plot,
    report=_report,
    caption=(
        "OAC k-means with and without its enhancements (adaptive v_max, re-initialisation), under each "
        "initialisation and on the i.i.d. split. Top left: each variant's final loss (median and 75% band of the "
        "trials); top right: the loss per round under the configured init (medians only; the band is centralized "
        "k-means's 75% band). Bottom: the paired effect on the final loss of each enhancement and of each other "
        "v_max and E_s reading, per trial with − without on the same trial, mean and 95% bootstrap interval "
        "(left of the dashed 0 it lowers the loss)."
    ),
    default_trials=500,
    common_random_numbers=True,
    micro_batch=MICRO_BATCH,
)
