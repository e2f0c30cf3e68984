"""Matplotlib credible-band plots (median line and shaded central band over trials)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from jaxfed.stats import band

__all__ = ["band_plot", "save"]


def band_plot(ax, x, values, labels, mass: float = 0.75, log_y: bool = False, floor: float | None = None):
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
    """
    b = band(values, mass)
    for i, label in enumerate(labels):
        med, lo, hi = b.median[i], b.lower[i], b.upper[i]
        if floor is not None:
            med, lo, hi = (np.maximum(v, floor) for v in (med, lo, hi))
        (line,) = ax.plot(x, med, label=label, lw=1.6)
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


def save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
