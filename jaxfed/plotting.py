"""Matplotlib credible-band plots (median line and shaded central band over trials)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; no display is assumed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jaxfed.stats import band  # noqa: E402

__all__ = ["band_plot", "interval_plot", "LINE_STYLES", "save"]

# Distinct dash patterns and markers, so that curves lying on top of each other stay visible.
LINE_STYLES = [
    {"ls": ls, "marker": m}
    for ls, m in zip(["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 2)), "--", ":", "-."],
                     ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*"])
]


def band_plot(ax, x, values, labels, mass: float = 0.75, log_y: bool = False, floor: float | None = None, styles=None):
    """Draws median and central ``mass`` band of a metric over trials for each point.

    Args:
        ax: matplotlib axes.
        x: (n_x,) abscissa.
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary` (n_points, n_x).
        labels: legend label per point.
        mass: band mass (0.75: 12.5%–87.5% quantiles).
        log_y: logarithmic y axis.
        floor: values below are drawn at ``floor`` (e.g. exact zeros on a log axis); stated in the
            legend title.
        styles: optional matplotlib line keyword arguments per point (e.g. :data:`LINE_STYLES`);
            markers are drawn at about 8 positions along each line.
    """
    b = band(values, mass)
    for i, label in enumerate(labels):
        med, lo, hi = b.median[i], b.lower[i], b.upper[i]
        if floor is not None:
            med, lo, hi = (np.maximum(v, floor) for v in (med, lo, hi))
        style = dict(styles[i]) if styles is not None else {}
        if "marker" in style:
            style.setdefault("markevery", max(1, len(x) // 8))
            style.setdefault("ms", 4)
        (line,) = ax.plot(x, med, label=label, lw=1.6, **style)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
    if log_y:
        ax.set_yscale("log")
        if floor is not None:
            ax.set_ylim(bottom=floor / 2)
    title = f"median, {round(100 * mass)}% band"
    if floor is not None:
        title += f" (values < {floor:g} drawn at {floor:g})"
    ax.legend(title=title, fontsize=8, title_fontsize=8, loc="upper right")
    ax.grid(True, which="both", alpha=0.25)
    return b


def interval_plot(ax, labels, estimate, lower, upper, reference: float = 1.0, xlabel: str = "paired ratio"):
    """Horizontal estimates with intervals, one row per label (top to bottom), and a vertical
    line at ``reference`` (no effect)."""
    y = np.arange(len(labels))[::-1]
    est, lo, hi = (np.asarray(v, float) for v in (estimate, lower, upper))
    ax.errorbar(est, y, xerr=[est - lo, hi - est], fmt="o", color="k", ms=4, capsize=3)
    ax.axvline(reference, color="0.5", lw=1, ls="--")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="x", alpha=0.25)


def save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
