"""Matplotlib credible-band plots (median line and shaded central band over trials)."""

from __future__ import annotations

import numpy as np

from jaxfed import stats

__all__ = ["band_plot", "exact_fraction_plot", "figure", "interval_plot", "LINE_STYLES", "save"]

# Distinct dash patterns and markers, so that curves lying on top of each other stay visible.
LINE_STYLES = [
    {"ls": ls, "marker": m}
    for ls, m in zip(
        ["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 2)), "--", ":", "-."],
        ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*"],
    )
]


def band_plot(ax, x, values, labels, mass: float = 0.75, log_y: bool = False, styles=None):
    """Draws median and central ``mass`` band of a metric over trials for each point.

    On a log axis, values that are exactly 0 (e.g. a KL once the posterior is exact) cannot be drawn:
    the median and the band edges are left out where they are 0 (no cliff down to an arbitrary floor),
    and a downward triangle marks the first x from which the median is 0; pair it with
    :func:`exact_fraction_plot` to show how many trials are exact. A point without a finite trial
    (every value NaN or ±inf) draws nothing and is named in the legend's title, and so are the
    points that have no positive value to draw on a log axis.

    Args:
        ax: matplotlib axes.
        x: (n_x,) abscissa.
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary` (n_points, n_x).
        labels: legend label per point.
        mass: band mass (0.75: 12.5%–87.5% quantiles).
        log_y: logarithmic y axis.
        styles: optional matplotlib line keyword arguments per point (e.g. :data:`LINE_STYLES`);
            markers are drawn at about 8 positions along each line.
    """
    b = stats.band(values, mass)
    x = np.asarray(x)
    positive = np.concatenate([b.lower[b.lower > 0], b.upper[b.upper > 0]])
    # Where a band's lower edge is 0 it runs to the bottom of the axis, a little below the data
    # (nowhere when there is no positive value at all).
    bottom = positive.min() / 3 if log_y and positive.size else None
    for i, label in enumerate(labels):
        med, lo, hi = b.median[i], b.lower[i], b.upper[i]
        if log_y:
            med, hi = np.where(med > 0, med, np.nan), np.where(hi > 0, hi, np.nan)
            lo = np.where(lo > 0, lo, np.nan if bottom is None else bottom)
        style = dict(styles[i]) if styles is not None else {}
        if "marker" in style:
            style.setdefault("markevery", max(1, len(x) // 8))
            style.setdefault("ms", 4)
        (line,) = ax.plot(x, med, label=label, lw=1.6, **style)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
        zero = np.flatnonzero(b.median[i] == 0)
        if log_y and zero.size and zero[0] > 0 and np.all(b.median[i][zero[0] :] == 0):
            ax.plot([x[zero[0]]], [b.median[i][zero[0] - 1]], marker="v", ms=7, color=line.get_color(), ls="none")
    if bottom is not None:
        ax.set_ylim(bottom=bottom)
    title = f"median, {round(100 * mass)}% band" + _not_drawn(b, labels, log_y)
    if log_y:
        if positive.size:  # (a log axis with no positive value fails the figure's layout)
            ax.set_yscale("log")
        if np.any(b.median == 0):
            title += "\n▼ median exactly 0 from here on"
        if np.any(b.lower == 0):
            title += "\nband to the bottom: its lower edge is 0"
    ax.legend(title=title, fontsize=8, title_fontsize=8, loc="upper right")
    ax.grid(True, which="both", alpha=0.25)
    return b


def _not_drawn(b: stats.Band, labels, log_y: bool) -> str:
    """Lines naming the points whose curve is empty or broken: no finite trial (every value NaN
    or ±inf), gaps (x without a finite trial), or on a log axis no positive value. Said rather
    than failed on: the run's results are stored, and a figure that names its missing curves is
    better than none."""
    empty = np.isnan(b.median).reshape(len(labels), -1)
    missing = [str(label) for i, label in enumerate(labels) if empty[i].all()]
    gaps = [str(label) for i, label in enumerate(labels) if empty[i].any() and not empty[i].all()]
    flat = [str(label) for i, label in enumerate(labels) if log_y and not np.any(b.upper[i] > 0)]
    flat = [label for label in flat if label not in missing]
    named = [
        (f"not drawn, no finite trial: {_few(missing, len(labels))}", missing),
        (f"gaps where no trial is finite: {_few(gaps, len(labels))}", gaps),
        (f"not drawn, no positive value (log axis): {_few(flat, len(labels))}", flat),
    ]
    return "".join(f"\n{line}" for line, points in named if points)


def _few(names: list[str], n_all: int, most: int = 4) -> str:
    """``names`` for a legend: "every point", or at most ``most`` of them and how many there are."""
    if len(names) == n_all > 1:
        return "every point"
    return ", ".join(names) if len(names) <= most else f"{len(names)} points ({', '.join(names[:most])}, …)"


def exact_fraction_plot(ax, x, values, labels, tol: float = 0.0) -> None:
    """Fraction of trials whose value is <= ``tol`` (exactly 0 by default) at each x, from raw values
    (n_points, n_trials, n_x) or from a :class:`jaxfed.stats.Summary` (below the histogram's bin
    edge at ``tol``: < 1e-12 for ``tol`` = 0, see :func:`jaxfed.stats.fraction_at_most`)."""
    if isinstance(values, stats.Summary):
        fraction = stats.fraction_at_most(values, tol)
        what = "KL < 1e-12" if tol <= 1e-12 else f"KL ≲ {tol:g}"
    else:
        fraction = np.mean(np.asarray(values) <= tol, axis=1)
        what = "KL = 0" if tol == 0 else f"KL ≤ {tol:g}"
    for i, label in enumerate(labels):
        ax.plot(x, fraction[i], label=label, lw=1.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(f"fraction of trials\nexact ({what})", fontsize=8)
    ax.grid(True, alpha=0.25)


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


def figure(nrows: int = 1, ncols: int = 1, **kwargs):
    """``(fig, axes)`` like ``matplotlib.pyplot.subplots(nrows, ncols, **kwargs)`` (``figsize``
    goes to the figure, the rest to ``Figure.subplots``), but a plain :class:`matplotlib.figure.Figure`
    outside pyplot: no global figure registry to close, and no pyplot import (0.1 s of every run)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=kwargs.pop("figsize", None))
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save(fig, path: str) -> None:
    """Writes the figure as PNG to ``path`` atomically (a new file renamed over it, never through
    a symbolic link: see :func:`jaxfed.store.atomic_write_bytes`)."""
    import io

    from jaxfed import store

    _say_what_is_empty(fig)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=130, format="png")
    store.atomic_write_bytes(path, buffer.getvalue())


def _say_what_is_empty(fig) -> None:
    """Axes with nothing to draw (every value NaN or ±inf: a run whose trials all failed) say so,
    and a log scale without a positive value falls back to linear, on which matplotlib's layout
    raised "Data cannot be log-scaled" and the figure of a finished run was lost."""
    for ax in fig.axes:
        limits = ax.dataLim
        if ax.get_yscale() == "log" and not np.isfinite(limits.minposy):
            ax.set_yscale("linear")
        if ax.get_xscale() == "log" and not np.isfinite(limits.minposx):
            ax.set_xscale("linear")
        if ax.has_data() and not np.isfinite(limits.get_points()).all():
            ax.text(0.5, 0.5, "nothing to draw: no finite value", transform=ax.transAxes, ha="center", color="0.4")
