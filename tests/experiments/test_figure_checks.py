"""The layout checks of figure_checks.py can fail: each finds its defect on a figure drawn with it, and none
finds anything on an ordinary figure of the package's style."""

import numpy as np
import pytest
from figure_checks import (
    artists_outside_figure,
    clipped_texts,
    covered_shares,
    duplicate_titles,
    layout_problems,
    legends_on_data,
    markers_cut_by_axes,
    overlapping_texts,
    small_fonts,
)
from matplotlib.backends.backend_agg import FigureCanvasAgg

from jaxfed import plotting


def drawn(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def good_figure():
    """Two panels in the package's style: staggered markers, bands, error bars, log axes, a legend below and a
    framed one beside, titles, labels."""
    fig, axes = plotting.figure(1, 2, figsize=(6.4, 2.8))
    x = np.arange(1, 41)
    for k, ax in enumerate(axes):
        for i in range(3):
            plotting.series_line(ax, x, np.exp(-x / (10 + 5 * i)) + k, i, 3, label=f"series {i}")
            ax.fill_between(x, 0.9 * np.exp(-x / (10 + 5 * i)) + k, 1.1 * np.exp(-x / (10 + 5 * i)) + k, alpha=0.2)
        ax.errorbar([10, 20], [k + 0.5, k + 0.4], yerr=0.1, fmt="o", ms=4, capsize=3)
        ax.set_yscale("log")
        ax.set_title(f"panel {k}: loss over rounds", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel("loss")
    plotting.legend(fig, axes[:1])
    axes[1].legend(["framed"], loc="upper left", bbox_to_anchor=(1.02, 1.0))  # its texts inside its frame: no overlap
    return drawn(fig)


def test_an_ordinary_figure_has_no_problem():
    assert layout_problems(good_figure()) == []


def test_a_label_off_the_figure_is_clipped():
    fig, ax = plotting.figure(figsize=(3, 2))
    fig.set_layout_engine("none")
    ax.set_xlabel("a label far too long for a figure three inches wide, running off its right edge")
    assert any("far too long" in p for p in clipped_texts(drawn(fig)))


def test_a_legend_touching_the_edge_is_clipped():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    fig.legend(loc="lower right", bbox_to_anchor=(1, 0), borderaxespad=0, borderpad=0, frameon=False)
    assert any("a line" in p for p in clipped_texts(drawn(fig)))
    fig.legends[0].remove()
    fig.legend(loc="upper right", bbox_to_anchor=(1, 0.05), frameon=False)  # its box below the figure
    assert "legend not fitted in the figure (its box leaves it)" in [p.split(":")[0] for p in clipped_texts(drawn(fig))]
    fig.legends[0].remove()
    fig.legend(loc="lower right", bbox_to_anchor=(1, 0), borderaxespad=0)
    assert [p.split(":")[0] for p in clipped_texts(drawn(fig))] == [
        "legend frame cut off at (or touching) the figure's edge"
    ]


def test_tick_labels_on_each_other_overlap():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.set_xticks(np.linspace(0, 1, 11), [f"{v:.3f}" for v in np.linspace(0, 1, 11)], fontsize=8)
    problems = overlapping_texts(drawn(fig))
    assert any("'0.100'" in p and "'0.200'" in p for p in problems)


def test_a_title_on_a_legend_and_an_annotation_on_a_label_overlap():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set_title("a panel's title")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 0.97), fontsize=8)
    ax.set_xlabel("rounds")
    ax.annotate("a note", xy=(0.5, 0), xycoords="axes fraction", xytext=(0, -22), textcoords="offset points")
    problems = overlapping_texts(drawn(fig))
    assert any("a panel's title" in p and "legend" in p for p in problems)
    assert any("'a note'" in p and "'rounds'" in p for p in problems)


def test_a_legend_and_a_marker_off_the_figure_are_outside():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend(loc="upper left", bbox_to_anchor=(1.5, 1.0))
    ax.plot([1.8], [0.5], "o", clip_on=False, label="an unclipped marker")
    ax.set_xlim(0, 1)
    fig.set_layout_engine("none")
    problems = artists_outside_figure(drawn(fig))
    assert any("FancyBboxPatch" in p for p in problems)  # the legend's frame
    assert any("an unclipped marker" in p for p in problems)


def test_markers_at_an_edge_and_a_corner_are_cut():
    fig, axes = plotting.figure(1, 3, figsize=(6, 2))
    x = np.arange(10)
    axes[0].plot(x, x, "o-", label="last x without margin")
    axes[0].set_xlim(0, 9)  # the last marker on the right edge, half drawn
    axes[1].plot([1, 2, 3], [5, 3, 1], label="floor")
    axes[1].plot([3], [1], "v", ms=7, label="down to the floor")
    axes[1].set_ylim(bottom=1)
    axes[2].plot([0, 1], [0, 1], "s", label="corner")
    axes[2].set_xlim(0, 1)
    axes[2].set_ylim(0, 1)
    problems = markers_cut_by_axes(drawn(fig))
    assert any("last x without margin" in p and "2 marker(s), the first at (0, 0)" in p for p in problems)
    assert any("down to the floor" in p for p in problems)
    assert any("corner" in p and "2 marker(s)" in p for p in problems)
    assert not any("'floor'" in p for p in problems)  # a line without markers crosses edges freely


def test_markers_well_inside_or_not_drawn_are_not_cut():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot(np.arange(10), np.arange(10), "o-")
    ax.set_xlim(-0.5, 5.5)  # markers from x = 6 on are off the view: not drawn, not cut
    ax.scatter([1, 2], [2, 3], s=30)
    assert markers_cut_by_axes(drawn(fig)) == []


def test_a_scatter_marker_on_an_edge_is_cut():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.scatter([0, 0.5], [0.5, 0.5], s=40)
    ax.set_xlim(0, 1)
    assert len(markers_cut_by_axes(drawn(fig))) == 1


def test_two_panels_with_one_title():
    fig, axes = plotting.figure(1, 3, figsize=(6, 2))
    for ax, title in zip(axes, ["KL over rounds", "KL over rounds", "accuracy"]):
        ax.set_title(title)
    assert duplicate_titles(drawn(fig)) == ["2 panels titled 'KL over rounds'"]
    axes[1].set_title("KL over time")
    assert duplicate_titles(drawn(fig)) == []


def test_tiny_tick_labels_and_titles_are_small():
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.tick_params(labelsize=6)
    ax.set_title("a tiny title", fontsize=8)
    ax.legend(fontsize=7)
    problems = small_fonts(drawn(fig))
    assert any(p.startswith("texts in 6 pt") for p in problems)
    assert any(p.startswith("titles in 8 pt") and "a tiny title" in p for p in problems)
    assert not any("a line" in p for p in problems)  # 7 pt legends are readable


@pytest.mark.parametrize("loc, covers", [("center", True), ("outside lower center", False)])
def test_a_legend_on_the_lines_covers_the_data(loc, covers):
    fig, ax = plotting.figure(figsize=(3, 2))
    x = np.linspace(0, 1, 200)
    for k in range(4):
        ax.plot(x, 0.5 + 0.01 * k + 0 * x, label=f"series {k}")
    (ax.legend(loc=loc) if covers else fig.legend(loc=loc))
    assert bool(legends_on_data(drawn(fig))) == covers
    assert (max((share for _, share in covered_shares(fig)), default=0.0) > 0.05) == covers


def test_the_hidden_axis_of_a_twin_axes_draws_no_text():
    """twinx hides the twin's x-axis: its tick labels, visible themselves, are not drawn on the first's."""
    fig, ax = plotting.figure(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.twinx().plot([0, 1], [1, 0])
    assert overlapping_texts(drawn(fig)) == []


def test_band_plot_draws_its_zero_marker_whole_above_the_floor():
    """A KL falling 39 decades to exactly 0 (the conjugate case): band_plot's "▼" at its last positive median
    sits on the lowest value drawn, so the floor goes far enough below it (a third of it was 2 pixels of a
    40-decade axis: the marker cut in half, issue 39's gfvl-heterogeneity), and the top, fixed with it, keeps
    a margin over the first markers (it was the highest value: the first marker cut in half)."""
    fig, ax = plotting.figure(figsize=(4, 2.6))
    t = np.arange(60)
    kl = np.broadcast_to(np.where(t < 40, 10.0**-t, 0.0), (2, 5, 60))  # every trial alike: no band
    plotting.band_plot(ax, t, kl, ["exact", "also exact"], log_y=True, legend=False)
    plotting.legend(fig)
    assert markers_cut_by_axes(drawn(fig)) == []
