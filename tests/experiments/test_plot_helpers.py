"""The plotting helpers the G-FVL figures are drawn with (small multiples, a band as bars) and their captions."""

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from jaxfed import plotting
from jaxfed.experiments import REGISTRY


def _decaying(n_points: int, n_trials: int = 16, n_x: int = 30, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rate = np.linspace(0.1, 0.3, n_points)[:, None, None]
    return np.exp(-rate * np.arange(n_x)) * rng.lognormal(0.0, 0.5, (n_points, n_trials, n_x))


def test_band_as_bars_draws_no_shaded_band_and_staggers_the_series():
    fig, ax = plotting.figure()
    x = np.arange(30.0)
    plotting.band_plot(ax, x, _decaying(3), ["a", "b", "c"], bars=5, legend=False)
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]  # no fill_between
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 3  # one set of bars per series
    xs = [{float(seg[0, 0]) for seg in c.get_segments()} for c in bars]
    assert all(len(positions) == 5 for positions in xs)
    assert not (xs[0] & xs[1]) and not (xs[1] & xs[2])  # side by side, not on top of each other


def test_a_bar_whose_lower_edge_is_0_runs_past_the_log_floor():
    values = _decaying(1)
    values[:, :8, 10:] = 0.0  # half the trials exact from x = 10: the band's lower edge is 0 there
    fig, ax = plotting.figure()
    plotting.band_plot(ax, np.arange(30.0), values, ["a"], log_y=True, bars=6, legend=False)
    floor = ax.get_ylim()[0]
    (bars,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    lows = [min(seg[:, 1]) for seg in bars.get_segments()]
    assert min(lows) < floor  # its cap lies outside the axes: not drawn on the floor as if it were a value


def test_a_log_band_that_is_0_to_the_end_keeps_the_axis_and_says_so():
    """Every trial of every point exactly 0 from slot 78 of 100 (a KL once the posterior is exact): the lines end
    there, but the x axis runs to the last slot, and the stretch is shaded and labelled, not cut off silently."""
    values = _decaying(2, n_x=100)
    values[..., 78:] = 0.0
    x = np.arange(100.0)
    fig, ax = plotting.figure()
    plotting.band_plot(ax, x, values, ["a", "b"], log_y=True, legend=False)
    fig.canvas.draw()
    assert ax.get_xlim()[1] >= x[-1]
    (note,) = [t.get_text() for t in ax.texts]
    assert "every trial 0 from x = 78" in note
    # only the band's upper edge at 0 (some trials above it): the note says the band, not every trial
    values[:, 0, 78:] = 1.0
    fig, ax = plotting.figure()
    plotting.band_plot(ax, x, values, ["a", "b"], log_y=True, legend=False)
    assert ["75% band 0 from x = 78" in t.get_text() for t in ax.texts] == [True]
    # a band with values to the end, or a linear axis, has no such note
    fig, ax = plotting.figure()
    plotting.band_plot(ax, x, _decaying(2, n_x=100), ["a", "b"], log_y=True, legend=False)
    plotting.band_plot(ax, x, values, ["a", "b"], legend=False)
    assert not ax.texts


def test_small_multiples_one_panel_per_series_the_others_grey_behind():
    fig, axes = plotting.figure(2, 3, sharex=True, sharey=True)
    labels = ["a", "b", "c", "d", "e"]
    plotting.small_multiples(axes, np.arange(1, 31), _decaying(5), labels, log_y=True)
    flat = axes.ravel()
    assert [ax.get_title() for ax in flat[:5]] == labels
    assert not flat[5].get_visible()
    for i, ax in enumerate(flat[:5]):
        greys = [line for line in ax.get_lines() if line.get_color() == "0.78"]
        coloured = [line for line in ax.get_lines() if line.get_color() == plotting.series_style(i)["color"]]
        assert len(greys) == 4 and len(coloured) >= 1
    assert flat[0].get_yscale() == "log"


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if n.startswith("gfvl-")))
def test_every_gfvl_figure_has_a_caption(name):
    caption = REGISTRY[name].caption
    assert caption and caption != REGISTRY[name].description and caption.endswith(".")
