"""The host scans that go a block of trials at a time (stats.quantiles.TRIAL_BLOCK) give what the
one-pass computation gives: the figure's share of exact trials and the count of non-finite trials,
on sizes around the block, with NaN, ±inf, ties at the threshold, and a single trial."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxfed import plotting, stats  # noqa: E402
from jaxfed.engine.sinks import nonfinite_trials  # noqa: E402

BLOCK = stats.quantiles.TRIAL_BLOCK


@pytest.mark.parametrize("n_trials", [1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 3])
@pytest.mark.parametrize("tol", [0.0, 0.25])
def test_block_scans_equal_the_one_pass_computations(n_trials, tol):
    rng = np.random.default_rng(n_trials)
    values = rng.random((3, n_trials, 5)).astype(np.float32)
    values[values < 0.3] = 0.0
    values[(values > 0.3) & (values < 0.31)] = tol  # ties at the threshold count
    values[values > 0.995] = np.nan
    values[(values > 0.99) & (values < 0.991)] = np.inf
    values[(values > 0.98) & (values < 0.981)] = -np.inf
    fig, ax = plt.subplots()
    plotting.exact_fraction_plot(ax, np.arange(5), values, ["a", "b", "c"], tol=tol)
    drawn = np.array([line.get_ydata() for line in ax.get_lines()])
    plt.close(fig)
    assert drawn.dtype == np.float64 and np.array_equal(drawn, np.mean(values <= tol, axis=1))
    for point in values:
        assert nonfinite_trials(point) == int((~np.isfinite(point)).reshape(n_trials, -1).any(-1).sum())
