"""Document 001's experiments: federated k-means over non-coherent OAC on the mall scenario.

Three experiments share the scenario and the trial (SPEC B6 [choice] parameters):

- ``kmeans-convergence``: loss vs round for centralized Lloyd's, ideal federated, quantisation only
  and OAC at several SNRs, with a picture of the scenario;
- ``kmeans-snr``: final loss vs SNR (−10 … 30 dB) for D ∈ {1, 2, 3, 4}, β = 3, with centralized and
  ideal federated k-means as references;
- ``kmeans-ablation``: OAC with and without adaptive v_max and re-initialisation, on the
  heterogeneous (tile) split and on an i.i.d. split of the same points.

Every experiment stores ``loss`` (point, trial, round): loss (1) normalised by |D| after each round,
and ``ari`` (point, trial, round): the adjusted Rand index of the induced partition against the
mixture components. Trials use common random numbers: within a trial every point (method, SNR, …)
sees the same customers, the same initial centroids (C distinct customers drawn at random,
**[choice]** Forgy initialisation) and the same channel draws. The i.i.d. split sends every
customer to an ED drawn uniformly at random.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import kmeans, plotting, scenarios, stats
from jaxfed.experiments.base import Experiment, Sweep, band_table, check


@dataclasses.dataclass(frozen=True)
class MallConfig:
    """Scenario and algorithm parameters shared by the k-means experiments.

    Static: rows, cols, n_points, n_components, n_clusters, n_rounds, beta, digits, channel.
    Traced per point: SNR and the enhancement switches. Closure constants: the rest."""

    rows: int = 10  # mall tiles per column; K = rows · cols EDs
    cols: int = 10
    side: float = 100.0  # mall side (m)
    n_points: int = 2000  # customers per trial
    n_components: int = 10  # Gaussian mixture components
    spread: float = 5.0  # component standard deviation (m)
    n_clusters: int = 10  # C
    n_rounds: int = 50
    mu: float = 1.0  # learning rate μ
    beta: int = 3  # balanced-number base β
    s_min: float = 1.0  # re-initialise clusters with fewer points
    sigma_c: float = 1.0  # re-initialisation jitter (m)
    vmax_fixed: float = 1000.0  # [choice] v_max when adaptive v_max is off (m)
    channel: str = "aggregate"  # "aggregate" (exact in distribution, fast) or "explicit" (per-ED fading)

    def __post_init__(self):
        for name in ("rows", "cols", "n_points", "n_components", "n_clusters", "n_rounds"):
            value = getattr(self, name)
            check(name, value, isinstance(value, int) and value >= 1, "an integer >= 1")
        check("n_clusters", self.n_clusters, self.n_clusters <= self.n_points, f"<= n_points = {self.n_points}")
        for name in ("side", "spread", "mu", "sigma_c", "vmax_fixed"):
            check(name, getattr(self, name), getattr(self, name) > 0, "> 0")
        check("s_min", self.s_min, self.s_min >= 0, ">= 0")
        check("beta", self.beta, self.beta >= 3 and self.beta % 2 == 1, "an odd integer >= 3")
        check("channel", self.channel, self.channel in ("aggregate", "explicit"), "'aggregate' or 'explicit'")

    @property
    def n_devices(self) -> int:
        return self.rows * self.cols


def _point(method: str, digits: int = 4, snr_db: float = 0.0, adaptive=True, reinit=True, iid=False) -> dict:
    """Engine point: the method, D and the split are static; SNR and the switches are traced."""
    return {
        "method": method,
        "digits": digits,
        "snr_db": jnp.float32(snr_db),
        "adaptive": jnp.bool_(adaptive),
        "reinit": jnp.bool_(reinit),
        "iid": bool(iid),
    }


def make_trial(cfg: MallConfig):
    """trial(key, point) -> {"loss": (n_rounds,), "ari": (n_rounds,)}."""

    def trial(key, point):
        k_scene, k_split, k_init, k_run = jax.random.split(key, 4)
        scene = scenarios.mall(k_scene, cfg.n_points, cfg.n_components, cfg.spread, cfg.side, cfg.rows, cfg.cols)
        owner = scenarios.iid_owner(k_split, cfg.n_points, cfg.n_devices) if point["iid"] else scene.owner
        init = scene.points[scenarios.random_subset(k_init, cfg.n_points, cfg.n_clusters)]
        data = kmeans.flat_data(scene.points, owner)

        def rand_index(part):  # inside each round: stacking the rounds' assignments costs as much
            return kmeans.adjusted_rand_index(part.index, scene.labels, cfg.n_clusters, cfg.n_components)

        if point["method"] == "centralized":
            history, info = kmeans.lloyd_rounds(scene.points, init, cfg.n_rounds, observe=rand_index)
        else:
            settings = kmeans.Settings(
                aggregation=point["method"],
                beta=cfg.beta,
                digits=point["digits"],
                channel=cfg.channel,
                snr_db=point["snr_db"],
                mu=cfg.mu,
                adaptive_vmax=point["adaptive"],
                vmax=cfg.vmax_fixed,
                reinit=point["reinit"],
                s_min=cfg.s_min,
                sigma_c=cfg.sigma_c,
            )
            history, info = kmeans.federated_rounds(
                k_run, data, cfg.n_devices, init, cfg.n_rounds, settings, observe=rand_index
            )
        # The rounds report on the centroids they start from; the metric after round n is about
        # the centroids it ends with, i.e. the next round's, and one more evaluation for the last.
        weight = data.mask.astype(data.coords.dtype)
        last = kmeans.partition(data.coords, weight, history[-1])
        loss = jnp.concatenate([info.loss[1:], kmeans.partition_loss(last, weight)[None]])
        ari = jnp.concatenate([info.observed[1:], rand_index(last)[None]])
        return {"loss": loss, "ari": ari}

    return trial


def _label(point: dict) -> str:
    m = point["method"]
    if m == "centralized":
        return "centralized"
    if m == "ideal":
        return "ideal federated"
    if m == "quantized":
        return f"quantized D={point['digits']}"
    extra = ""
    if "adaptive" in point:
        extra = f", {'adaptive' if point['adaptive'] else 'fixed'} v_max, {'re-init' if point['reinit'] else 'no re-init'}"
    return f"OAC D={point['digits']} {point['snr_db']:g} dB{extra}"


def _sweep(cfg, labels: list[dict]) -> Sweep:
    points = [
        _point(
            lab["method"],
            lab.get("digits", 4),
            lab.get("snr_db", 0.0),  # unused by non-OAC methods
            lab.get("adaptive", True),
            lab.get("reinit", True),
            lab.get("split", "tiles") == "iid",
        )
        for lab in labels
    ]
    return Sweep(make_trial(cfg), points, labels, {"loss": ("round",), "ari": ("round",)})


def resources_table(cfg: MallConfig, digits_list) -> str:
    """Markdown table of complex resources per round: OAC (L·C·β·D) vs orthogonal digital
    (L·C·K·N_bits/r_bits with N_bits = ⌈D log2 β⌉ for the same resolution and QPSK, r_bits = 2)."""
    rows = ["| D | OAC resources/round | digital resources/round (K = %d) | ratio |" % cfg.n_devices, "|---|---|---|---|"]
    for d in digits_list:
        oac_res = kmeans.oac_resources(2, cfg.n_clusters, cfg.beta, d)
        bits = math.ceil(d * math.log2(cfg.beta))
        digital = kmeans.digital_resources(2, cfg.n_clusters, cfg.n_devices, bits)
        rows.append(f"| {d} | {oac_res} | {digital:g} ({bits} bits/value) | {digital / oac_res:.1f}x |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- kmeans-convergence
@dataclasses.dataclass(frozen=True)
class ConvergenceConfig(MallConfig):
    digits: int = 4  # D for quantisation and OAC
    snrs_db: tuple[float, ...] = (0.0, 10.0, 20.0, 30.0)

    def __post_init__(self):
        super().__post_init__()
        check("digits", self.digits, self.digits >= 1, "an integer >= 1")
        for snr in self.snrs_db:
            check("snrs_db", snr, -50 <= snr <= 100, "SNRs in dB within [-50, 100]")


def _convergence_labels(cfg: ConvergenceConfig) -> list[dict]:
    return (
        [{"method": "centralized"}, {"method": "ideal"}, {"method": "quantized", "digits": cfg.digits}]
        + [{"method": "oac", "digits": cfg.digits, "snr_db": s} for s in cfg.snrs_db]
    )


def _scenario_panel(ax, cfg: MallConfig) -> None:
    """One instance of the scenario (fixed key 0): tiles, customers coloured by their ED's data size,
    true centres and the centroids after OAC k-means at the last SNR."""
    scene = scenarios.mall(jax.random.key(0), cfg.n_points, cfg.n_components, cfg.spread, cfg.side, cfg.rows, cfg.cols)
    points, owner = np.asarray(scene.points), np.asarray(scene.owner)
    sizes = np.bincount(owner, minlength=cfg.n_devices)[owner]
    init = scene.points[scenarios.random_subset(jax.random.key(1), cfg.n_points, cfg.n_clusters)]
    data = kmeans.flat_data(scene.points, scene.owner)
    final, _ = kmeans.federated_rounds(
        jax.random.key(2), data, cfg.n_devices, init, cfg.n_rounds,
        kmeans.Settings(aggregation="oac", beta=cfg.beta, digits=4, channel=cfg.channel, snr_db=20.0),
    )
    for i in range(cfg.cols + 1):
        ax.axvline(i * cfg.side / cfg.cols, color="0.85", lw=0.6)
    for i in range(cfg.rows + 1):
        ax.axhline(i * cfg.side / cfg.rows, color="0.85", lw=0.6)
    sc = ax.scatter(points[:, 0], points[:, 1], c=sizes, s=3, cmap="viridis")
    ax.figure.colorbar(sc, ax=ax, label="points held by the customer's ED", fraction=0.046)
    c = np.asarray(scene.centres)
    ax.scatter(c[:, 0], c[:, 1], marker="x", s=60, color="red", label="true centres")
    f = np.asarray(final[-1])
    ax.scatter(f[:, 0], f[:, 1], marker="o", s=60, facecolors="none", edgecolors="black", label="OAC k-means, 20 dB, D=4")
    ax.set_xlim(0, cfg.side)
    ax.set_ylim(0, cfg.side)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_title(f"mall: {cfg.rows}×{cfg.cols} tiles, {cfg.n_points} customers")
    ax.legend(fontsize=7, loc="upper right")


def _plot_convergence(cfg: ConvergenceConfig, labels, results, path):
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 5))
    _scenario_panel(ax0, cfg)
    rounds = np.arange(1, cfg.n_rounds + 1)
    plotting.band_plot(ax1, rounds, results["loss"], [_label(lab) for lab in labels], log_y=True)
    ax1.set_xlabel("round n")
    ax1.set_ylabel("loss (1) / |D|  (m²)")
    ax1.set_title(f"federated k-means, C={cfg.n_clusters}, β={cfg.beta}, {cfg.channel} channel")
    plotting.save(fig, path)


def _report_convergence(cfg: ConvergenceConfig, labels, results) -> str:
    b = stats.band(results["loss"])
    names = [_label(lab) for lab in labels]
    rounds = sorted({r for r in (1, 5, 10, 20, cfg.n_rounds) if r <= cfg.n_rounds})
    table = band_table("round", rounds, names, b, [r - 1 for r in rounds])
    final = b.median[:, -1]
    central = final[0]
    oac_rows = [i for i, lab in enumerate(labels) if lab["method"] == "oac"]
    gaps = ", ".join(f"{labels[i]['snr_db']:g} dB: {100 * (final[i] / central - 1):+.1f}%" for i in oac_rows)
    reading = (
        f"Final median loss: centralized {central:.2f} m², ideal federated {final[1]:.2f}, "
        f"quantized {final[2]:.2f}; OAC relative to centralized by SNR: {gaps}."
    )
    return (
        f"Loss (1)/|D| (m²), median [75% band]:\n\n{table}\n\n"
        f"Resources per round:\n\n{resources_table(cfg, [cfg.digits])}\n\n**Reading.** {reading}\n"
    )


CONVERGENCE = Experiment(
    name="kmeans-convergence",
    description="Doc. 001: k-means loss vs round on the mall: centralized, ideal, quantized, OAC at several SNRs",
    config_cls=ConvergenceConfig,
    build=lambda cfg: _sweep(cfg, _convergence_labels(cfg)),
    plot=_plot_convergence,
    report=_report_convergence,
    default_trials=1000,
    common_random_numbers=True,
)


# --------------------------------------------------------------------------- kmeans-snr
@dataclasses.dataclass(frozen=True)
class SnrConfig(MallConfig):
    digits_list: tuple[int, ...] = (1, 2, 3, 4)
    snrs_db: tuple[float, ...] = (-10.0, -5.0, 0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0)

    def __post_init__(self):
        super().__post_init__()
        for d in self.digits_list:
            check("digits_list", d, isinstance(d, int) and d >= 1, "integers >= 1")
        for snr in self.snrs_db:
            check("snrs_db", snr, -50 <= snr <= 100, "SNRs in dB within [-50, 100]")


def _snr_labels(cfg: SnrConfig) -> list[dict]:
    return [{"method": "centralized"}, {"method": "ideal"}] + [
        {"method": "oac", "digits": d, "snr_db": s} for d in cfg.digits_list for s in cfg.snrs_db
    ]


def _plot_snr(cfg: SnrConfig, labels, results, path):
    import matplotlib.pyplot as plt

    b = stats.band(results["loss"])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    snrs = np.asarray(cfg.snrs_db)
    for i, name, style in ((0, "centralized", "k-"), (1, "ideal federated", "k--")):
        ax.axhline(b.median[i, -1], color="k", ls=style[1:], lw=1.2, label=f"{name} (median)")
        ax.axhspan(b.lower[i, -1], b.upper[i, -1], color="0.5", alpha=0.08)
    for d in cfg.digits_list:
        rows = [i for i, lab in enumerate(labels) if lab.get("digits") == d and lab["method"] == "oac"]
        (line,) = ax.plot(snrs, b.median[rows, -1], marker="o", ms=3, label=f"OAC D={d}")
        ax.fill_between(snrs, b.lower[rows, -1], b.upper[rows, -1], color=line.get_color(), alpha=0.15, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("SNR (dB)")
    ax.set_ylabel(f"loss (1)/|D| after {cfg.n_rounds} rounds (m²)")
    ax.set_title(f"final loss vs SNR, β={cfg.beta}, {cfg.channel} channel (median, 75% band)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    plotting.save(fig, path)


def _report_snr(cfg: SnrConfig, labels, results) -> str:
    b = stats.band(results["loss"])
    final = b.median[:, -1]
    head = "| D | " + " | ".join(f"{s:g} dB" for s in cfg.snrs_db) + " |"
    lines = [head, "|---|" + "---|" * len(cfg.snrs_db)]
    best = {}
    for d in cfg.digits_list:
        rows = [i for i, lab in enumerate(labels) if lab.get("digits") == d and lab["method"] == "oac"]
        lines.append(
            f"| {d} | " + " | ".join(f"{b.median[i, -1]:.3g} [{b.lower[i, -1]:.3g}, {b.upper[i, -1]:.3g}]" for i in rows) + " |"
        )
        best[d] = final[rows[-1]]
    by_digits = ", ".join(f"D={d}: {best[d]:.2f}" for d in cfg.digits_list)
    d_max = max(cfg.digits_list)
    rows = [i for i, lab in enumerate(labels) if lab.get("digits") == d_max and lab["method"] == "oac"]
    low, high = final[rows[0]], final[rows[-1]]
    reading = (
        f"Centralized {final[0]:.2f} m², ideal federated {final[1]:.2f} m². With D={d_max} the final median loss "
        f"goes from {low:.2f} m² at {cfg.snrs_db[0]:g} dB to {high:.2f} m² at {cfg.snrs_db[-1]:g} dB "
        f"({100 * (high / final[0] - 1):+.1f}% from centralized); at {cfg.snrs_db[-1]:g} dB by digits: {by_digits} m²."
    )
    return (
        f"Final loss (1)/|D| (m²) after {cfg.n_rounds} rounds, median [75% band]:\n\n" + "\n".join(lines)
        + f"\n\nResources per round:\n\n{resources_table(cfg, cfg.digits_list)}\n\n**Reading.** {reading}\n"
    )


SNR = Experiment(
    name="kmeans-snr",
    description="Doc. 001: final k-means loss vs SNR (-10..30 dB) for D = 1..4, with centralized and ideal",
    config_cls=SnrConfig,
    build=lambda cfg: _sweep(cfg, _snr_labels(cfg)),
    plot=_plot_snr,
    report=_report_snr,
    default_trials=1000,
    common_random_numbers=True,
)


# --------------------------------------------------------------------------- kmeans-ablation
@dataclasses.dataclass(frozen=True)
class AblationConfig(MallConfig):
    digits: int = 4
    snr_db: float = 20.0

    def __post_init__(self):
        super().__post_init__()
        check("digits", self.digits, self.digits >= 1, "an integer >= 1")
        check("snr_db", self.snr_db, -50 <= self.snr_db <= 100, "in dB within [-50, 100]")


def _ablation_labels(cfg: AblationConfig) -> list[dict]:
    return [
        {"method": "oac", "digits": cfg.digits, "snr_db": cfg.snr_db, "adaptive": a, "reinit": r, "split": split}
        for split in ("tiles", "iid")
        for a in (True, False)
        for r in (True, False)
    ] + [{"method": "centralized", "split": "tiles"}]


def _plot_ablation(cfg: AblationConfig, labels, results, path):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    rounds = np.arange(1, cfg.n_rounds + 1)
    for ax, split, title in zip(axes, ("tiles", "iid"), ("heterogeneous split (tiles)", "i.i.d. split")):
        rows = [i for i, lab in enumerate(labels) if lab.get("split") == split]
        names = [_label(labels[i]) if labels[i]["method"] != "centralized" else "centralized" for i in rows]
        plotting.band_plot(ax, rounds, results["loss"][rows], names, log_y=True)
        ax.set_title(f"OAC D={cfg.digits}, {cfg.snr_db:g} dB: {title}")
        ax.set_xlabel("round n")
    axes[0].set_ylabel("loss (1) / |D|  (m²)")
    plotting.save(fig, path)


def _report_ablation(cfg: AblationConfig, labels, results) -> str:
    b = stats.band(results["loss"])
    names = [f"{_label(lab)}, {lab['split']}" for lab in labels]
    table = band_table("round", [cfg.n_rounds], names, b, [cfg.n_rounds - 1])
    final = {(lab.get("split"), lab.get("adaptive"), lab.get("reinit")): b.median[i, -1] for i, lab in enumerate(labels)}
    full, bare = final[("tiles", True, True)], final[("tiles", False, False)]
    reading = (
        f"On the tile split the final median loss is {full:.2f} m² with adaptive v_max and re-initialisation and "
        f"{bare:.2f} m² with neither; adaptive v_max alone {final[('tiles', True, False)]:.2f}, re-initialisation "
        f"alone {final[('tiles', False, True)]:.2f}; on the i.i.d. split {final[('iid', True, True)]:.2f} "
        f"(centralized {final[('tiles', None, None)]:.2f})."
    )
    return f"Final loss (1)/|D| (m²), median [75% band]:\n\n{table}\n\n**Reading.** {reading}\n"


ABLATION = Experiment(
    name="kmeans-ablation",
    description="Doc. 001: OAC k-means with/without adaptive v_max and re-initialisation, tile vs i.i.d. split",
    config_cls=AblationConfig,
    build=lambda cfg: _sweep(cfg, _ablation_labels(cfg)),
    plot=_plot_ablation,
    report=_report_ablation,
    default_trials=1000,
    common_random_numbers=True,
)
