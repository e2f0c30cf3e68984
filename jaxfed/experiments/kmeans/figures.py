"""Drawing pieces the k-means figures share: an estimate with its interval along an axis, a reference
point at a category of its own beside that axis (e.g. "no noise", "quantisation only"), and per-trial
statistics with their 95% intervals."""

from __future__ import annotations

import numpy as np

from jaxfed import plotting, stats


def mean_interval(per_trial) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, lower, upper) over the last axis of ``per_trial``: the mean and its 95% percentile-bootstrap
    interval (:func:`jaxfed.stats.interval`)."""
    return stats.interval(np.asarray(per_trial, np.float64), "mean")


def estimate_line(ax, x, est, lo, hi, i: int, n: int = 1, label: str | None = None, alpha: float = 0.18):
    """Series ``i`` of ``n`` (:func:`jaxfed.plotting.series_line`): the estimates ``est`` along ``x`` and the
    shaded range [``lo``, ``hi``] in its colour; a marker at every x where there are at most 12 (each is a
    simulated point), else staggered. Returns the line."""
    every = {"markevery": None} if len(np.atleast_1d(x)) <= 12 else {}
    line = plotting.series_line(ax, x, est, i, n, label=label, lw=1.6, **every)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=alpha, lw=0)
    return line


def estimate_points(ax, x, est, lo, hi, i: int, label: str | None = None, line: bool = False):
    """Series ``i``'s estimates at ``x`` as markers with error bars from ``lo`` to ``hi`` (joined by a thin
    line in the series' dash pattern when ``line``). Infinite bounds (too few trials for the interval) draw
    no bar on that side."""
    est, lo, hi = (np.atleast_1d(np.asarray(v, float)) for v in (est, lo, hi))
    style = plotting.series_style(i)
    below = np.where(np.isfinite(lo), est - lo, 0.0)
    above = np.where(np.isfinite(hi), hi - est, 0.0)
    return ax.errorbar(
        x,
        est,
        yerr=[below, above],
        color=style["color"],
        marker=style["marker"],
        ms=5,
        capsize=3,
        elinewidth=1.2,
        lw=1.0 if line else 0,
        ls=style["ls"] if line else "none",
        label=label,
    )


def category_ticks(ax, positions, names, axis: str = "x") -> None:
    """Ticks at ``positions`` named ``names`` only (no others), and a margin of half a step beyond the
    outermost, so that markers there are not cut by the axes."""
    positions = np.asarray(positions, float)
    (ax.set_xticks if axis == "x" else ax.set_yticks)(positions, [str(n) for n in names])
    step = float(np.min(np.diff(np.sort(positions)))) if len(positions) > 1 else 1.0
    (ax.set_xlim if axis == "x" else ax.set_ylim)(positions.min() - step / 2, positions.max() + step / 2)


def beside(values) -> float:
    """The position of a category of its own right of ``values`` (an axis of numbers): 1.5 of their
    smallest step beyond the largest."""
    return float(np.max(values) + 1.5 * _step(values))


def dodge(values, i: int, n: int, width: float = 0.4) -> float:
    """The offset of series ``i`` of ``n`` at one position of an axis of ``values``, so that the error bars
    of ``n`` series there stand side by side (over ``width`` of the smallest step, centred on the position)."""
    return (i - (n - 1) / 2) * width * _step(values) / max(n - 1, 1)


def _step(values) -> float:
    values = np.unique(np.asarray(values, float))
    return float(np.min(np.diff(values))) if len(values) > 1 else 5.0


def note(ax, text: str, where: str = "upper right") -> None:
    """A small note inside ``ax`` (what is not drawn, and why), in grey."""
    top, right = where.split()[0] == "upper", where.split()[1] == "right"
    ax.text(
        0.97 if right else 0.03,
        0.96 if top else 0.04,
        text,
        transform=ax.transAxes,
        ha="right" if right else "left",
        va="top" if top else "bottom",
        fontsize=plotting.FONT_SIZE,
        color="0.3",
    )
