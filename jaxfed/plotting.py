"""Matplotlib credible-band plots (median line and shaded central band over trials) in one shared style.

The style every experiment's figure follows, so that a reader understands it without the code:

- each series has its own colour, line style and marker (:data:`LINE_STYLES`, :func:`series_style`,
  :func:`series_line`); markers are staggered between series, so curves that lie on top of each other still show each one;
- one legend per figure, outside the data (:func:`legend`; :func:`band_plot` alone puts its legend to the right of
  its axes);
- readable ticks: a log axis spanning less than a decade gets plain numbers ("1.04", not "1.04×10⁰"), one spanning a
  few decades labels 1, 2 and 5 of each (:func:`save` applies this to every axes);
- symbols in mathtext (:func:`kl_label`);
- curves that coincide are said to coincide (:func:`coincide_note`) or shown as a ratio panel by the experiment.
"""

from __future__ import annotations

import io
import textwrap

import numpy as np

from jaxfed import stats
from jaxfed.store import files

__all__ = [
    "band_plot",
    "coincide_note",
    "exact_fraction_plot",
    "figure",
    "interval_plot",
    "legend",
    "LINE_STYLES",
    "PALETTE",
    "save",
    "series_style",
    "small_multiples",
]

# The Okabe-Ito palette, safe for the common colour-vision deficiencies (its yellow left out: unreadable as a
# line on white). Blue, vermillion, bluish green, reddish purple, orange, sky blue, black.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]
# One colour, dash pattern and marker per series: series stay distinct in colour, in greyscale and where they
# lie on top of each other.
LINE_STYLES = [
    {"color": PALETTE[i % len(PALETTE)], "ls": ls, "marker": m}
    for i, (ls, m) in enumerate(
        zip(
            ["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 2)), (0, (6, 2, 1, 2)), (0, (2, 1)), "-"],
            ["o", "s", "^", "v", "D", "P", "X", "<", ">", "*"],
        )
    )
]
FONT_SIZE = 8  # legends, notes and small labels: readable at the saved size (130 dpi)


def series_style(i: int) -> dict:
    """The matplotlib line keywords of series ``i`` (colour, line style, marker), cycling through
    :data:`LINE_STYLES`.

    Args:
        i: the series' index (any int >= 0).

    Returns:
        A new dict of matplotlib keywords.

    Examples:
        >>> series_style(0) == series_style(len(LINE_STYLES))
        True
    """
    return dict(LINE_STYLES[i % len(LINE_STYLES)])


def series_line(ax, x, y, i: int, n: int = 1, **kwargs):
    """``ax.plot(x, y)`` of series ``i`` of ``n``: :func:`series_style` ``i`` (``kwargs`` override it) with its
    markers every 0.12 of the axes' diagonal (equal visual distances on linear and log axes), shifted by
    ``i / n`` of a step, so that where curves coincide each one's markers still show. Returns the line."""
    return ax.plot(x, y, **_staggered(series_style(i) | kwargs, i, n, y))[0]


def _staggered(style: dict, i: int, n: int, y, spacing: float = 0.12) -> dict:
    """``style`` with staggered markers (see :func:`series_line`), unless it sets ``markevery`` or has no
    marker, or ``y`` has fewer than two finite values (matplotlib's distance-based ``markevery`` fails on a
    line without a finite point)."""
    if "marker" not in style or "markevery" in style or np.isfinite(np.asarray(y, float)).sum() < 2:
        return style
    return {"markevery": (spacing * (i % max(n, 1)) / max(n, 1), spacing), "ms": 4} | style


def kl_label(target: str = "q^*", iterate: str = "q^{(i)}") -> str:
    """``KL(q⁽ⁱ⁾ ‖ target)`` in mathtext, e.g. ``kl_label(r"p(\\theta|\\mathcal{D})")``."""
    return f"KL(${iterate}$ ‖ ${target}$)"


def band_plot(
    ax,
    x,
    values,
    labels,
    mass: float = 0.75,
    log_y: bool = False,
    styles=None,
    legend: bool = True,
    offset: int = 0,
    bars: int = 0,
):
    """Draws median and central ``mass`` band of a metric over trials for each point.

    On a log axis, values that are exactly 0 (e.g. a KL once the posterior is exact) cannot be drawn:
    the median and the band edges are left out where they are 0 (no cliff down to an arbitrary floor),
    and a downward triangle marks the first x from which the median is 0; pair it with
    :func:`exact_fraction_plot` to show how many trials are exact. Where, from some x to the last, every
    point's band is 0 (nothing left to draw), the axis still runs to the last x: that stretch is shaded and
    labelled "every trial 0 from x = …" (raw values all 0) or "the band 0 from x = …" ,
    so the lines ending there are not read as the data ending. A point without a finite trial
    (every value NaN or ±inf) draws nothing and is named in the legend's title, and so are the
    points that have no positive value to draw on a log axis.

    Args:
        ax: matplotlib axes.
        x: (n_x,) abscissa.
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary` (n_points, n_x).
        labels: legend label per point.
        mass: band mass (0.75: 12.5%–87.5% quantiles).
        log_y: logarithmic y axis.
        styles: matplotlib line keyword arguments per point; by default :func:`series_style` of
            ``offset + i``. Markers staggered as by :func:`series_line` unless the style sets ``markevery``.
        legend: a legend to the right of ``ax`` (outside the data) with :func:`band_title` as its
            title; False for a figure that draws one :func:`legend` for all its axes.
        offset: index of the first point's default style (to keep a series' style across panels).
        bars: 0 for shaded bands; ``n`` > 0 draws each point's band as ``n`` vertical bars instead, spread
            over the x where its median is drawn and staggered between points (bands that overlap blend
            into one colour; bars stay apart).

    Returns:
        The band drawn, a :class:`jaxfed.stats.Band`.
    """
    b = stats.band(values, mass)
    x = np.asarray(x)
    positive = np.concatenate([b.lower[b.lower > 0], b.upper[b.upper > 0]])
    bottom = _log_floor(positive, b, log_y)
    for i, label in enumerate(labels):
        style = dict(styles[i]) if styles is not None else series_style(offset + i)
        _band_series(ax, x, b, i, label, len(labels), style, log_y, bottom, bars)
    _fit_log_axis(ax, positive, bottom, log_y)
    if log_y:
        _mark_zero_tail(ax, x, values, b)
    if legend:
        ax.legend(
            title=band_title(b, labels, mass, log_y),
            fontsize=FONT_SIZE,
            title_fontsize=FONT_SIZE,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
        )
    ax.grid(True, which="both", alpha=0.25)
    return b


def _zero_tail(values, b: stats.Band) -> tuple[int, bool] | None:
    """Where a band on a log axis has nothing left to draw: the first index t > 0 of the last axis from which
    every point's upper band edge is 0 (so its median and band are 0 and undrawable), and whether every trial
    is 0 there too (raw values; a summary cannot say). None when there is no such stretch.

    Args:
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary`, as :func:`band_plot` takes.
        b: their band (:func:`jaxfed.stats.band`).

    Returns:
        ``(t, every_trial)`` or None.
    """
    upper = np.asarray(b.upper)
    if upper.ndim != 2 or upper.shape[1] < 2:
        return None
    nonzero = np.flatnonzero(np.any(~(upper <= 0), axis=0))  # (NaN: a cell without a finite trial counts as drawn)
    t = 0 if nonzero.size == 0 else int(nonzero[-1]) + 1
    if t == 0 or t >= upper.shape[1]:
        return None
    every_trial = not isinstance(values, stats.Summary) and bool(np.all(np.asarray(values)[..., t:] == 0))
    return t, every_trial


def _mark_zero_tail(ax, x, values, b: stats.Band) -> None:
    """Shades the stretch where ``_zero_tail`` finds nothing to draw on a log axis and says why, so the x
    axis runs to the last x instead of ending silently where the lines do."""
    tail = _zero_tail(values, b)
    if tail is None:
        return
    t, every_trial = tail
    ax.axvspan(x[t], x[-1], color="0.5", alpha=0.1, lw=0)
    what = "every trial" if every_trial else f"the {b.mass:.0%} band"
    lo, hi = float(x[t]), float(x[-1])
    middle = np.sqrt(lo * hi) if ax.get_xscale() == "log" and lo > 0 else (lo + hi) / 2
    ax.text(
        middle,
        0.5,
        f"{what} 0 from x = {x[t]:g}\n(not drawn on a log axis)",
        transform=ax.get_xaxis_transform(),
        rotation=90,
        ha="center",
        va="center",
        fontsize=FONT_SIZE,
        color="0.35",
    )


def _log_floor(positive: np.ndarray, b: stats.Band, log_y: bool) -> float | None:
    """Where a band's lower edge is 0 on a log axis it runs to the bottom of the axis, a little below the
    data: a third of the lowest value, or 6% of the axis' decades below it when the data span many (so that
    a "▼" at the lowest value is drawn whole above the floor, not cut in half by it). None (the axis fits
    the data) on a linear axis, when no edge is 0, or when there is no positive value (``positive``) at all."""
    if not (log_y and positive.size and np.any(b.lower <= 0)):
        return None
    low, decades = float(positive.min()), float(np.log10(positive.max()) - np.log10(positive.min()))
    return low / 10 ** max(np.log10(3.0), 0.06 * decades)


def _band_series(ax, x, b: stats.Band, i: int, label, n: int, style: dict, log_y: bool, bottom, bars: int) -> None:
    """:func:`band_plot`'s point ``i`` of ``n``: its median line in ``style``, its band (shaded, or ``bars``
    vertical bars), and on a log axis a "▼" at the first x from which its median is 0."""
    med, lo, hi = b.median[i], b.lower[i], b.upper[i]
    if log_y:
        med, hi = np.where(med > 0, med, np.nan), np.where(hi > 0, hi, np.nan)
        lo = np.where(lo > 0, lo, np.nan if bottom is None else bottom)
    (line,) = ax.plot(x, med, label=label, lw=1.6, **_staggered(style, i, n, med))
    if bars:
        at = _bar_positions(x, np.isfinite(med), bars, i, n, ax.get_xscale() == "log")
        # a lower edge of 0 runs past the floor: no cap drawn on it, as if it were a value
        low = np.where(b.lower[i] > 0, lo, bottom / 10) if bottom is not None else lo
        interval_bars(ax, x[at], med[at], low[at], hi[at], line.get_color())
    else:
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
    zero = np.flatnonzero(b.median[i] == 0)
    if log_y and zero.size and zero[0] > 0 and np.all(b.median[i][zero[0] :] == 0):
        ax.plot([x[zero[0]]], [b.median[i][zero[0] - 1]], marker="v", ms=7, color=line.get_color(), ls="none")


def _fit_log_axis(ax, positive: np.ndarray, bottom, log_y: bool) -> None:
    """A log y axis from ``bottom`` (:func:`_log_floor`) when there is one, and log scale where there is
    a positive value to draw."""
    if bottom is not None:
        # Fixing the bottom stops autoscaling: the top gets autoscaling's 5% margin (of the axis' decades) over
        # everything drawn on the axes so far, or markers at the highest values are cut by the top edge.
        top = max(float(ax.dataLim.y1), float(positive.max()))
        ax.set_ylim(bottom, top * 10 ** (0.05 * np.log10(top / bottom)))
    if log_y and positive.size:  # (a log axis with no positive value fails the figure's layout)
        ax.set_yscale("log")


def interval_bars(ax, x, estimate, lower, upper, color) -> None:
    """Vertical bars from ``lower`` to ``upper`` at ``x`` (no marker: the series' line carries it), in
    ``color``: a band or interval drawn at a few points where shaded bands of several series would blend."""
    estimate = np.asarray(estimate)
    yerr = [estimate - np.asarray(lower), np.asarray(upper) - estimate]
    ax.errorbar(x, estimate, yerr=yerr, fmt="none", ecolor=color, elinewidth=1.2, capsize=2.5)


def _bar_positions(x, drawn, bars: int, i: int, n: int, log_x: bool = False) -> np.ndarray:
    """Indices of ``bars`` points spread evenly in ``x`` (in log x for ``log_x``: as a log axis shows them) over
    the span where ``drawn`` is true, shifted by ``(i + 1) / (n + 1)`` of their spacing for series ``i`` of ``n``
    (series' bars side by side, not on top of each other): each the drawn point nearest its target."""
    where = np.flatnonzero(drawn)
    if where.size == 0:
        return where
    coord = np.asarray(x, np.float64)[where]
    if log_x and np.all(coord > 0):
        coord = np.log(coord)
    lo, hi = coord.min(), coord.max()
    targets = lo + (np.arange(bars) + (i + 1) / (n + 1)) * (hi - lo) / bars
    return np.unique(where[np.abs(coord[None, :] - targets[:, None]).argmin(axis=1)])


def band_title(b: stats.Band, labels, mass: float = 0.75, log_y: bool = False, coincide: bool = True) -> str:
    """The legend title of a :func:`band_plot`: what the line and band are, the points not drawn, the
    marks on a log axis and (``coincide``) the points whose curves coincide (:func:`coincide_note`)."""
    title = f"median, {round(100 * mass)}% band" + _not_drawn(b, labels, log_y)
    if log_y and np.any(b.median == 0):
        title += "\n▼ median exactly 0 from here on"
    if log_y and np.any(b.lower == 0):
        title += "\nband to the bottom: its lower edge is 0"
    note = coincide_note(b, labels) if coincide else ""
    return title + (f"\n{note}" if note else "")


def coincide_note(b: stats.Band, labels, width: int = 60) -> str:
    """The words for curves that hide each other on the figure: "A, B, C coincide within their bands" for the
    points (at least two) whose medians each lie inside every other's band at every x where both are finite,
    or "" when there are none. The largest such group, greedily from each point in turn; lines of at most
    ``width`` characters (a panel's title).

    Args:
        b: the :class:`jaxfed.stats.Band` of the points, (n_points, n_x).
        labels: one label per point.
        width: the longest line, in characters.

    Returns:
        The note (lines joined by newlines), or "".
    """
    n = len(labels)
    med, lo, hi = (np.asarray(v).reshape(n, -1) for v in (b.median, b.lower, b.upper))

    def inside(i: int, j: int) -> bool:  # j's median within i's band wherever both are finite
        ok = np.isfinite(med[j]) & np.isfinite(lo[i]) & np.isfinite(hi[i])
        return bool(ok.any()) and bool(np.all((med[j][ok] >= lo[i][ok]) & (med[j][ok] <= hi[i][ok])))

    best: list[int] = []
    for first in range(n):
        group = [first]
        for j in range(n):
            if j not in group and all(inside(i, j) and inside(j, i) for i in group):
                group.append(j)
        best = group if len(group) > len(best) else best
    if len(best) < 2:
        return ""
    names = [str(labels[i]) for i in sorted(best)]
    others = [str(labels[i]) for i in range(n) if i not in best]
    if len(best) == n:
        which = f"all {n} curves" if n > 2 else " and ".join(names)
    elif len(others) < len(names) > 3:
        which = f"all but {', '.join(others)}"
    else:
        which = ", ".join(names)
    return textwrap.fill(f"{which} coincide within their bands", width)


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


def exact_fraction_plot(ax, x, values, labels, tol: float = 0.0, offset: int = 0) -> None:
    """Fraction of trials whose value is <= ``tol`` (exactly 0 by default) at each x, from raw values
    (n_points, n_trials, n_x) or from a :class:`jaxfed.stats.Summary` (below the histogram's bin
    edge at ``tol``: < 1e-12 for ``tol`` = 0, see :func:`jaxfed.stats.fraction_at_most`); point ``i``
    in :func:`series_style` ``offset + i``, as in :func:`band_plot`.

    Args:
        ax: matplotlib axes.
        x: (n_x,) abscissa.
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary`.
        labels: legend label per point.
        tol: the threshold at or below which a value counts as exact.
        offset: index of the first point's style.
    """
    if isinstance(values, stats.Summary):
        fraction = stats.fraction_at_most(values, tol)
        what = "KL < 1e-12" if tol <= 1e-12 else f"KL ≲ {tol:g}"
    else:
        values = np.asarray(values)
        # counted a block of trials at a time, without a temporary of the values' size (the same
        # float64 as np.mean of the booleans: a count divided by the trials)
        at_most = np.zeros(values.shape[:1] + values.shape[2:], np.int64)
        block = stats.quantiles.TRIAL_BLOCK
        for i in range(0, values.shape[1], block):
            at_most += np.count_nonzero(values[:, i : i + block] <= tol, axis=1)
        fraction = at_most / values.shape[1]
        what = "KL = 0" if tol == 0 else f"KL ≤ {tol:g}"
    for i, label in enumerate(labels):
        series_line(ax, x, fraction[i], offset + i, len(labels), label=label, lw=1.4)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(f"fraction of trials\nexact ({what})", fontsize=FONT_SIZE)
    ax.grid(True, alpha=0.25)


def interval_plot(ax, labels, estimate, lower, upper, reference: float = 1.0, xlabel: str = "paired ratio"):
    """Horizontal estimates with intervals, one row per label (top to bottom), and a vertical
    line at ``reference`` (no effect).

    Args:
        ax: matplotlib axes.
        labels: one label per row.
        estimate: (n,) estimates.
        lower: (n,) lower ends of the intervals.
        upper: (n,) upper ends.
        reference: the x of the no-effect line.
        xlabel: the x axis' label.
    """
    y = np.arange(len(labels))[::-1]
    est, lo, hi = (np.asarray(v, float) for v in (estimate, lower, upper))
    ax.errorbar(est, y, xerr=[est - lo, hi - est], fmt="o", color="k", ms=4, capsize=3)
    ax.axvline(reference, color="0.5", lw=1, ls="--")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=FONT_SIZE)
    if len(y):
        ax.set_ylim(-0.6, len(y) - 0.4)
    ax.set_xlabel(xlabel, fontsize=FONT_SIZE + 1)
    ax.grid(True, axis="x", alpha=0.25)


def legend(fig, axes=None, title: str | None = None, loc: str = "outside lower center", ncol: int | None = None):
    """One legend for the whole figure, outside every axes (``loc`` one of matplotlib's "outside …"
    locations of a constrained layout, as :func:`figure` makes): the labelled artists of ``axes``
    (default: all of the figure's), each label once (the first artist carrying it), in the order
    drawn. Returns the legend, or None when nothing is labelled.

    Args:
        fig: the matplotlib figure.
        axes: the axes whose artists to list; None for all of the figure's.
        title: the legend's title.
        loc: an "outside …" location.
        ncol: number of columns; None to choose (at most 4 side by side, fewer when they would not fit).

    Returns:
        The matplotlib legend, or None.
    """
    handles: dict = {}
    for ax in fig.axes if axes is None else np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if not handles:
        return None
    wide = loc.split()[1] in ("lower", "upper")  # below or above: labels side by side
    ncol = ncol or (min(len(handles), 4) if wide else 1)
    kwargs = {"loc": loc, "title": title, "fontsize": FONT_SIZE, "title_fontsize": FONT_SIZE, "frameon": False}
    made = fig.legend(list(handles.values()), list(handles), ncol=ncol, **kwargs)
    renderer = fig._get_renderer()
    while ncol > 1 and made.get_window_extent(renderer).width > fig.bbox.width:  # fewer columns: none cut
        made.remove()
        ncol -= 1
        made = fig.legend(list(handles.values()), list(handles), ncol=ncol, **kwargs)
    return made


def figure(nrows: int = 1, ncols: int = 1, **kwargs):
    """``(fig, axes)`` like ``matplotlib.pyplot.subplots(nrows, ncols, **kwargs)`` (``figsize``
    goes to the figure, the rest to ``Figure.subplots``), but a plain :class:`matplotlib.figure.Figure`
    outside pyplot: no global figure registry to close, and no pyplot import (which every run would pay).
    The figure has a constrained layout: titles, labels and an outside :func:`legend` are fitted
    inside it, none clipped.

    Args:
        nrows: rows of axes.
        ncols: columns of axes.
        **kwargs: ``figsize`` for the figure, the rest for ``Figure.subplots``.

    Returns:
        ``(fig, axes)``: the figure and its axes (one or an array, as ``subplots`` returns).
    """
    from matplotlib.figure import Figure  # on the first figure: `import jaxfed` does not load matplotlib

    fig = Figure(figsize=kwargs.pop("figsize", None), layout="constrained")
    return fig, fig.subplots(nrows, ncols, **kwargs)


def save(fig, path: str) -> None:
    """Writes the figure as PNG to ``path`` atomically (a new file renamed over it, never through
    a symbolic link: see :func:`jaxfed.store.atomic_write_bytes`), with readable log ticks
    (:func:`readable_ticks`) and, for a figure without a layout engine, a tight layout.

    Args:
        fig: the matplotlib figure.
        path: the PNG file's path.
    """
    _say_what_is_empty(fig)
    for ax in fig.axes:
        readable_ticks(ax)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=130, format="png")
    files.atomic_write_bytes(path, buffer.getvalue())


def readable_ticks(ax) -> None:
    """Log axes with matplotlib's default ticks get ticks a reader can read: plain numbers at evenly
    spaced values when the axis spans less than a decade (1.02, 1.04, … rather than "1.04×10⁰" at
    unlabelled minor ticks), and labels at 1, 2 and 5 of each decade in plain numbers when it spans
    at most three (not two labelled ticks). Wider axes keep powers of ten. Axes whose ticks were set
    by their experiment are left as they are."""
    from matplotlib import ticker  # on the first figure: `import jaxfed` does not load matplotlib

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log" or not isinstance(axis.get_major_formatter(), ticker.LogFormatterSciNotation):
            continue
        lo, hi = sorted(limits)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo > 0):
            continue
        decades = np.log10(hi / lo)
        if decades > 3:
            continue
        if decades < 1:
            axis.set_major_locator(ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        else:
            axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.4g}"))
        axis.set_minor_formatter(ticker.NullFormatter())


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


def small_multiples(axes, x, values, labels, log_y: bool = False, mass: float = 0.75, offsets=None) -> stats.Band:
    """One panel per series, for more series than one axes can show apart: in ``axes[i]`` (flat, one per
    label, sharing their axes) series ``i``'s median and central ``mass`` band (:func:`band_plot`, its
    :func:`series_style`), the other series' medians as thin grey lines behind it (where it lies among them),
    and its label as the panel's title. ``values``: raw (n_points, n_trials, n_x) or a
    :class:`jaxfed.stats.Summary`; ``offsets[i]``: series ``i``'s style index (default ``i``). Axes beyond
    the labels are hidden. The shared y range holds every panel's own (each band_plot's floor and top).
    Returns the :class:`jaxfed.stats.Band` of all series.

    Args:
        axes: the axes, at least one per label (any shape, flattened).
        x: (n_x,) abscissa.
        values: raw (n_points, n_trials, n_x) or a :class:`jaxfed.stats.Summary`.
        labels: one label per series.
        log_y: logarithmic y axes.
        mass: band mass.
        offsets: series ``i``'s style index, or None for ``i``.

    Returns:
        The bands of all series, a :class:`jaxfed.stats.Band`.
    """
    axes = list(np.ravel(axes))
    b = stats.band(values, mass)
    n = len(labels)
    offsets = list(range(n)) if offsets is None else list(offsets)
    limits = []
    for i, (ax, label) in enumerate(zip(axes, labels)):
        for j in range(n):
            if j != i:
                other = b.median[j]
                ax.plot(x, np.where(other > 0, other, np.nan) if log_y else other, color="0.78", lw=0.8, zorder=1)
        one = (
            stats.Summary(*(np.asarray(f)[i : i + 1] for f in values))
            if isinstance(values, stats.Summary)
            else (np.asarray(values)[i : i + 1])
        )
        band_plot(ax, x, one, [label], mass=mass, log_y=log_y, legend=False, offset=offsets[i])
        ax.set_title(str(label), fontsize=FONT_SIZE + 1)
        limits.append(ax.get_ylim())
    for ax in axes[n:]:
        ax.set_visible(False)
    if limits:  # shared: the lowest floor and highest top of the panels' own (each band_plot set its own)
        axes[0].set_ylim(min(lo for lo, _ in limits), max(hi for _, hi in limits))
    return b
