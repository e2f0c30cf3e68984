"""Layout checks on a drawn matplotlib Figure, as a reader sees it: each check returns a list of problems in
words (empty when there are none), and :func:`layout_problems` runs them all.

Every check reads the renderer's window extents (display pixels) of a figure already drawn
(``FigureCanvasAgg(fig).draw()``); tolerances are in points, so they mean the same at every dpi. Bounding boxes
are axis-aligned: a text rotated by other than a multiple of 90° is taken as its enclosing box.

Thresholds, and why:

- :data:`EDGE_PT`: a text (or a legend frame) closer than 2.5 pt to the figure's edge is cut off, or touches the
  edge of the image (kmeans-convergence's legend below its map: 2 pt); constrained layout keeps 3 pt (its
  ``w_pad``/``h_pad``) around what it lays out, so a figure it fits passes.
- :data:`OVERLAP_PT`: two texts overlap when their boxes share more than 1.5 pt in both directions. A text's box
  reaches from the font's descender to its ascender whatever its letters ("0.5" has the box of "lp"), so boxes of
  stacked tick labels may touch by a pixel with no ink touching; 1.5 pt is more than that slack and less than a
  quarter of a 7 pt letter.
- :data:`MARKER_CUT_PT`: a marker is cut by its axes when its edge lies more than 1 pt past the axes' edge (the
  marker taken as a disc of its size); a marker whose disc lies wholly outside the axes is not drawn at all, which
  is the experiment's choice of view, not a defect of the layout. Error bars' caps are markers too: a cap cut by
  the axis is an interval running off it, its end not shown.
- :data:`MIN_FONT_PT`, :data:`MIN_TITLE_PT`: every text at least 7 pt (tick labels, axis labels, legends, notes)
  and panel titles at least 9 pt: the journal sizes at the saved 130 dpi (7 pt is 12.6 pixels), the figures'
  design standard (issue 39). Sizes are absolute: a wide figure that a page shows scaled down (gfvl-graphs'
  8 pt y labels in a 16-inch figure, "tiny" in issue 39) passes; a check of that needs the width it is shown at.
- :data:`MOST_COVERED`: a legend may cover at most 5% of an axes' data (points of its lines, area of its bands).
"""

from __future__ import annotations

import itertools

import numpy as np
from matplotlib.collections import Collection, PathCollection, PolyCollection
from matplotlib.legend import Legend
from matplotlib.lines import Line2D, _mark_every_path
from matplotlib.patches import Patch
from matplotlib.spines import Spine
from matplotlib.text import Text

EDGE_PT = 2.5
OVERLAP_PT = 1.5
MARKER_CUT_PT = 1.0
MIN_FONT_PT = 7.0
MIN_TITLE_PT = 9.0
MOST_COVERED = 0.05


def layout_problems(fig) -> list[str]:
    """Every problem the checks of this module find on the drawn figure ``fig``."""
    return [
        *clipped_texts(fig),
        *overlapping_texts(fig),
        *artists_outside_figure(fig),
        *markers_cut_by_axes(fig),
        *duplicate_titles(fig),
        *small_fonts(fig),
        *legends_on_data(fig),
    ]


def _pixels(fig, points: float) -> float:
    return points * fig.dpi / 72.0


def _name(text: Text) -> str:
    return repr(text.get_text()[:50])


def _box(extent) -> tuple:
    return tuple(int(v) for v in np.round(extent.extents))


def drawn_artists(fig, kind=object) -> list:
    """The artists of type ``kind`` that the figure draws: visible, inside visible containers (an invisible
    axis, e.g. the shared x-axis of a twin axes, hides its tick labels however visible they are themselves)."""
    out = []

    def walk(artist) -> None:
        if not artist.get_visible():
            return
        if isinstance(artist, kind):
            out.append(artist)
        for child in artist.get_children():
            walk(child)

    walk(fig)
    return out


def visible_texts(fig) -> list[Text]:
    """The text artists drawn: titles, labels, legend texts, annotations, and the tick labels of the ticks
    inside the view (matplotlib keeps labelled ticks outside it, undrawn)."""
    axes = [axis for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]
    every_tick = [tick for axis in axes for tick in axis.get_major_ticks() + axis.get_minor_ticks()]
    drawn = [tick for axis in axes for tick in axis._update_ticks()]  # (private: the ticks the axis draws)
    undrawn = {id(t) for tick in every_tick for t in (tick.label1, tick.label2)}
    undrawn -= {id(t) for tick in drawn for t in (tick.label1, tick.label2)}
    return [t for t in drawn_artists(fig, Text) if t.get_text().strip() and id(t) not in undrawn]


def clipped_texts(fig) -> list[str]:
    """The visible texts, and the frames of framed legends, whose window extent leaves the figure or comes
    within :data:`EDGE_PT` of its edge, and unframed legends whose box (texts and blank border) leaves the
    figure: a legend the layout did not fit, its texts wedged at the edge."""
    renderer = fig.canvas.get_renderer()
    box, pad = fig.bbox, _pixels(fig, EDGE_PT)
    out = []

    def at_edge(e) -> bool:
        return e.x0 < box.x0 + pad or e.y0 < box.y0 + pad or e.x1 > box.x1 - pad or e.y1 > box.y1 - pad

    for t in visible_texts(fig):
        e = t.get_window_extent(renderer)
        if at_edge(e):
            out.append(f"text cut off at (or touching) the figure's edge: {_name(t)} {_box(e)}")
    for legend in _legends(fig):
        e = legend.get_window_extent(renderer)
        if legend.get_frame_on() and at_edge(e):
            out.append(f"legend frame cut off at (or touching) the figure's edge: {_box(e)}")
        elif e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            out.append(f"legend not fitted in the figure (its box leaves it): {_legend_name(legend)} {_box(e)}")
    return out


def _legend_name(legend: Legend) -> str:
    texts = [legend.get_title().get_text()] + [t.get_text() for t in legend.get_texts()]
    return repr(next((t for t in texts if t.strip()), "(unlabelled)")[:40])


def overlapping_texts(fig) -> list[str]:
    """Pairs of visible texts whose window extents share more than :data:`OVERLAP_PT` in both directions
    (tick labels on each other or on an axis label, a title on a legend, annotations on each other), and texts
    on a framed legend they do not belong to. A legend's own texts lie inside its frame by design and are not
    compared with it; texts of one legend are compared with each other (the legend's packing keeps them apart,
    so an overlap there is a real one, e.g. a title wider than the frame its entries set)."""
    renderer = fig.canvas.get_renderer()
    texts = visible_texts(fig)
    extents = [t.get_window_extent(renderer) for t in texts]
    slack = _pixels(fig, OVERLAP_PT)
    out = []
    for (a, ea), (b, eb) in itertools.combinations(zip(texts, extents), 2):
        if _shared(ea, eb) > slack:
            out.append(f"texts overlap: {_name(a)} {_box(ea)} and {_name(b)} {_box(eb)}")
    for legend in _legends(fig):
        if not legend.get_frame_on():
            continue  # its texts are compared above; an unframed legend's box is empty space around them
        frame = legend.get_window_extent(renderer)
        own = {id(t) for t in legend.findobj(Text)}
        for t, e in zip(texts, extents):
            if id(t) not in own and _shared(frame, e) > slack:
                out.append(f"text on a legend: {_name(t)} {_box(e)} on the legend at {_box(frame)}")
    return out


def _shared(a, b) -> float:
    """The smaller of the widths and heights two boxes share (≤ 0 when they do not intersect)."""
    return min(min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0))


def _legends(fig) -> list[Legend]:
    return drawn_artists(fig, Legend)


def artists_outside_figure(fig) -> list[str]:
    """Axes, lines, markers, patches and collections whose drawn extent leaves the figure (beyond 1 pixel).
    Artists clipped to their axes are drawn inside the axes' box at most, so for them the axes' box is checked
    (an axes off the figure is reported once); a legend's frame is checked as a patch."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    out = []

    def outside(e) -> bool:
        return e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1

    for ax in fig.axes:
        if ax.get_visible() and outside(ax.bbox):
            out.append(f"axes {ax.get_title()[:40]!r} leaves the figure: {_box(ax.bbox)}")
    # Tick marks and grid lines belong to an axis and lie at its axes' edges (ticks keep labelled ticks outside
    # the view undrawn, with stale extents): the axes' box and the tick labels are checked instead.
    skip = {id(fig.patch)} | {id(ax.patch) for ax in fig.axes}
    skip |= {id(a) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for a in axis.findobj()}
    for artist in drawn_artists(fig, (Line2D, Patch, Collection)):
        if id(artist) in skip or isinstance(artist, Spine):
            continue
        if artist.get_clip_on() and (artist.get_clip_box() is not None or artist.get_clip_path() is not None):
            continue
        e = artist.get_window_extent(renderer)
        if np.all(np.isfinite(e.extents)) and e.width >= 0 and outside(e):
            out.append(f"{type(artist).__name__} {artist.get_label()[:40]!r} leaves the figure: {_box(e)}")
    return out


def markers_cut_by_axes(fig) -> list[str]:
    """Markers that their axes cut: a marker of a line or a scatter clipped to its axes, whose disc (its size
    as diameter, plus half its edge width) crosses an edge of the axes by more than :data:`MARKER_CUT_PT`
    while its centre lies less than a radius outside it (drawn in part). Examples: a marker at the last x of
    an axes without an x margin, a "▼" on the axis floor, a marker on a panel's corner."""
    cut_by = _pixels(fig, MARKER_CUT_PT)
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        box = ax.bbox
        for xy, radius, what in _markers(ax):
            inside = np.minimum.reduce([xy[:, 0] - box.x0, box.x1 - xy[:, 0], xy[:, 1] - box.y0, box.y1 - xy[:, 1]])
            cut = (inside < radius - cut_by) & (inside > -radius)
            if cut.any():
                x, y = ax.transData.inverted().transform(xy[cut][0])
                out.append(
                    f"{what} cut by the edge of axes {ax.get_title()[:40]!r}: {int(cut.sum())} marker(s), "
                    f"the first at ({x:.4g}, {y:.4g})"
                )
    return out


def _markers(ax):
    """(display xy of the drawn markers, radius in pixels, name) of each clipped line and scatter of ``ax``."""
    renderer_scale = ax.figure.dpi / 72.0
    for line in ax.get_lines():
        marker = line.get_marker()
        if not line.get_visible() or not line.get_clip_on() or marker in ("", " ", "None", "none", None):
            continue
        if line.get_markersize() <= 0:
            continue
        tpath, affine = line._get_transformed_path().get_transformed_points_and_affine()  # (private: as drawn)
        if not len(tpath.vertices):
            continue
        markevery = line.get_markevery()
        path = _mark_every_path(markevery, tpath, affine, ax) if markevery is not None else tpath
        xy = affine.transform(path.vertices)
        xy = xy[np.isfinite(xy).all(axis=1)]
        radius = (line.get_markersize() + line.get_markeredgewidth()) / 2 * renderer_scale
        yield xy, radius, f"marker {marker!r} of {line.get_label()[:40]!r}"
    for collection in ax.collections:
        if not isinstance(collection, PathCollection) or not collection.get_visible() or not collection.get_clip_on():
            continue
        offsets = np.asarray(collection.get_offsets(), float)
        sizes = collection.get_sizes()
        if not len(offsets) or not len(sizes):
            continue
        xy = collection.get_offset_transform().transform(offsets)
        radius = np.sqrt(np.resize(sizes, len(xy))) / 2 * renderer_scale  # (sizes cycle over the points)
        keep = np.isfinite(xy).all(axis=1)
        yield xy[keep], radius[keep], "scatter marker"


def duplicate_titles(fig) -> list[str]:
    """Axes that share a non-empty title (centre, left and right titles read together): two panels that say
    the same cannot both say what they show."""
    titles: dict[str, int] = {}
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        title = " | ".join(t for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t.strip())
        if title:
            titles[title] = titles.get(title, 0) + 1
    return [f"{n} panels titled {title!r}" for title, n in titles.items() if n > 1]


def small_fonts(fig) -> list[str]:
    """Visible texts smaller than :data:`MIN_FONT_PT` and panel titles (axes titles, the figure's suptitle)
    smaller than :data:`MIN_TITLE_PT`, each size and its texts once."""
    titles = {id(t) for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title)}  # (private: titles)
    if fig._suptitle is not None:
        titles.add(id(fig._suptitle))
    small: dict[tuple[str, float], list[str]] = {}
    for t in visible_texts(fig):
        least = MIN_TITLE_PT if id(t) in titles else MIN_FONT_PT
        size = t.get_fontsize()
        if size < least - 1e-9:
            small.setdefault(("title" if id(t) in titles else "text", size), []).append(_name(t))
    return [
        f"{kind}s in {size:g} pt (< {MIN_TITLE_PT if kind == 'title' else MIN_FONT_PT:g} pt): "
        + ", ".join(names[:4])
        + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        for (kind, size), names in small.items()
    ]


def legends_on_data(fig) -> list[str]:
    """Legends that cover more than :data:`MOST_COVERED` of an axes' data (see :func:`covered_shares`)."""
    return [
        f"legend {what} covers {share:.0%} of the data" for what, share in covered_shares(fig) if share > MOST_COVERED
    ]


def covered_shares(fig) -> list[tuple[str, float]]:
    """(legend title or first label, share of an axes' data covered by the legend's window extent), for each
    legend and axes pair where the share is not 0. An axes' data are its plotted points (lines, markers, error
    bars) inside it, and the area its bands fill (on a grid of 80 × 60 positions): the share is the larger of
    the shares of the points and of the band area under the legend."""
    renderer = fig.canvas.get_renderer()
    legends = _legends(fig)
    out = []
    for ax in fig.axes:
        points, band = _line_points(ax), _band_area(ax)
        for legend in legends:
            box = legend.get_window_extent(renderer)
            share = max(float(np.mean(_inside(box, xy))) if len(xy) else 0.0 for xy in (points, band))
            if share > 0:
                out.append((f"{_legend_name(legend)} on {ax.get_title()[:40]!r}", share))
    return out


def _line_points(ax) -> np.ndarray:
    """(n, 2) display coordinates of the points of ``ax``'s visible lines that lie inside it."""
    points = [np.zeros((0, 2))]
    for line in ax.get_lines():
        if line.get_visible():
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
            points.append(xy[np.isfinite(xy).all(axis=1)])
    xy = np.concatenate(points)
    return xy[_inside(ax.bbox, xy)]


def _band_area(ax, nx: int = 80, ny: int = 60) -> np.ndarray:
    """Display coordinates of the grid positions inside ``ax`` that one of its filled bands covers."""
    box = ax.bbox
    gx, gy = np.meshgrid(np.linspace(box.x0, box.x1, nx), np.linspace(box.y0, box.y1, ny))
    grid = np.column_stack([gx.ravel(), gy.ravel()])
    covered = np.zeros(len(grid), bool)
    for collection in ax.collections:
        if isinstance(collection, PolyCollection) and collection.get_visible():
            for path in collection.get_paths():
                covered |= path.transformed(collection.get_transform()).contains_points(grid)
    return grid[covered]


def _inside(bbox, xy: np.ndarray) -> np.ndarray:
    return (xy[:, 0] >= bbox.x0) & (xy[:, 0] <= bbox.x1) & (xy[:, 1] >= bbox.y0) & (xy[:, 1] <= bbox.y1)
