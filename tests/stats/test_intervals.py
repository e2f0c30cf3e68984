"""The report's intervals against the straightforward bootstrap they replace (issue 35 part 7).

``reference_resamples`` is the implementation before: n indices drawn per resample and the statistic
of the resampled values. The fast bootstrap must draw the same law (two-sample KS test on the
resampled statistics), and the exact order-statistic interval of the median must cover at least as
often as the reference's percentile bootstrap, on adversarial data: ties, all equal, NaN, n = 1,
n = 2, heavy tails.
"""

import numpy as np
import pytest
from scipy import stats as sps

from jaxfed import stats


def reference_resamples(x, statistic, n_boot, seed):
    """The bootstrap before: the statistic of ``n_boot`` resamples drawn index by index, (..., n_boot)."""
    x = np.asarray(x, np.float64)
    n = x.shape[-1]
    reduce = np.median if statistic == "median" else np.mean
    rng = np.random.default_rng(seed)
    slab = max(1, int(4_000_000 // max(n * max(x[..., 0].size, 1), 1)))
    slabs = []
    for start in range(0, n_boot, slab):
        idx = rng.integers(0, n, size=(min(slab, n_boot - start), n))
        slabs.append(reduce(x[..., idx], axis=-1))
    return np.concatenate(slabs, axis=-1)


def reference_interval(x, statistic="median", level=0.95, n_boot=2000, seed=0):
    boots = reference_resamples(x, statistic, n_boot, seed)
    lower, upper = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2], axis=-1)
    return (np.median if statistic == "median" else np.mean)(x, axis=-1), lower, upper


def _datasets():
    rng = np.random.default_rng(11)
    return {
        "n=1": np.array([3.5]),
        "n=2": np.array([1.0, 4.0]),
        "n=3": np.array([2.0, -1.0, 7.0]),
        "all equal": np.full(50, 2.25),
        "two values": np.r_[np.zeros(97), np.ones(3)],
        "ties (Poisson)": rng.poisson(2.0, 400).astype(float),
        "integer slots, even n": rng.geometric(0.05, 1000).astype(float),
        "normal, even n": rng.normal(0.0, 1.0, 300),
        "Cauchy": rng.standard_cauchy(301),
        "Pareto 1.1": rng.pareto(1.1, 500),
        "lognormal sigma 3": rng.lognormal(0.0, 3.0, 40),
        "one outlier": np.r_[np.zeros(99), 1e9],
    }


@pytest.mark.parametrize("statistic", ["median", "mean"])
@pytest.mark.parametrize("name", list(_datasets()))
def test_fast_resamples_have_the_reference_bootstrap_law(name, statistic):
    x = _datasets()[name]
    if statistic == "median":
        fast = stats.intervals._resampled_medians(x, 4000, np.random.default_rng(1))
    else:
        fast = stats.intervals._resampled_means(x, 4000, np.random.default_rng(1))
    slow = reference_resamples(x, statistic, 4000, seed=2)
    if np.ptp(slow) == 0:
        np.testing.assert_array_equal(fast, slow)
        return
    assert sps.ks_2samp(fast, slow).pvalue > 1e-4
    # The percentile interval agrees to within the Monte Carlo error of 4,000 resamples.
    q = [0.025, 0.5, 0.975]
    spread = np.quantile(slow, 0.99) - np.quantile(slow, 0.01)
    np.testing.assert_allclose(np.quantile(fast, q), np.quantile(slow, q), atol=0.1 * spread)


def test_bootstrap_interval_degenerate_cases_equal_the_reference():
    for statistic in ("median", "mean"):
        for x in ([3.5], np.full(50, 2.25), np.full((2, 7), -1.0)):
            np.testing.assert_array_equal(stats.bootstrap_interval(x, statistic), reference_interval(x, statistic))
        # NaN: the reference is NaN unless no resample draws it; the fast one always is.
        x = np.r_[np.arange(20.0), np.nan]
        assert np.isnan(reference_interval(x, statistic)[1:]).all()
        assert np.isnan(stats.bootstrap_interval(x, statistic)).all()
        rows = np.array([[1.0, np.nan, 2.0, 3.0], [1.0, 5.0, 2.0, 3.0]])
        est, lo, hi = stats.bootstrap_interval(rows, statistic)
        assert np.isnan([est[0], lo[0], hi[0]]).all() and np.isfinite([est[1], lo[1], hi[1]]).all()


def test_bootstrap_mean_with_infinite_values_follows_the_reference():
    x = np.r_[np.arange(30.0), np.inf]
    est, lo, hi = stats.bootstrap_interval(x, "mean")
    ref = reference_interval(x, "mean")
    assert est == ref[0] == np.inf and lo == pytest.approx(ref[1], rel=0.1)
    np.testing.assert_equal(hi, ref[2])  # NaN for both: numpy.quantile interpolates inf − inf


@pytest.mark.parametrize("q", [0.5, 0.1, 0.9])
def test_order_statistic_ranks_are_the_tightest_that_keep_each_tail(q):
    level, tail = 0.95, 0.025
    for n in [*range(1, 80), 101, 1000, 20_000, 1_000_001]:
        lower, upper = stats.intervals._binomial_ranks(n, q, level)
        cdf = sps.binom(n, q).cdf
        # P[B <= l − 1] <= tail < P[B <= l] and P[B >= u] <= tail < P[B >= u − 1]
        assert (lower == 0 or cdf(lower - 1) <= tail + 1e-12) and cdf(lower) > tail - 1e-12, (n, lower)
        assert (upper == n + 1 or 1 - cdf(upper - 1) <= tail + 1e-12) and 1 - cdf(upper - 2) > tail - 1e-12
        if q == 0.5:
            assert upper == n + 1 - lower  # symmetric


def test_quantile_interval_on_adversarial_data():
    est, lo, hi = stats.quantile_interval([3.5])
    assert (est, lo, hi) == (3.5, -np.inf, np.inf)  # one value cannot bound the median at 95%
    assert stats.quantile_interval([1.0, 4.0])[1:] == (-np.inf, np.inf)
    assert stats.quantile_interval([1.0, 4.0], level=0.4)[1:] == (1.0, 4.0)
    assert stats.quantile_interval(np.arange(6.0))[1:] == (0.0, 5.0)  # n = 6: P[B = 0] = 1/64 <= 2.5%
    assert stats.quantile_interval(np.full(50, 2.25)) == (2.25, 2.25, 2.25)
    est, lo, hi = stats.quantile_interval(np.r_[np.zeros(97), np.ones(3)])
    assert (est, lo, hi) == (0.0, 0.0, 0.0)
    est, lo, hi = stats.quantile_interval(np.r_[np.arange(20.0), np.nan])
    assert np.isnan([est, lo, hi]).all()
    rows = np.random.default_rng(0).standard_cauchy((3, 51))
    rows[1, 4] = np.inf
    est, lo, hi = stats.quantile_interval(rows)
    for r in range(3):
        assert stats.quantile_interval(rows[r]) == (est[r], lo[r], hi[r])
        s = np.sort(rows[r])
        assert (lo[r], hi[r]) == (s[18], s[32])  # ranks 19 and 33 of 51
    with pytest.raises(ValueError, match="at least one value"):
        stats.quantile_interval(np.zeros((2, 0)))
    with pytest.raises(ValueError, match="q must be in"):
        stats.quantile_interval([1.0], q=1.0)


@pytest.mark.parametrize(
    "draw, median",
    [
        (lambda rng, s: rng.normal(1.0, 2.0, s), 1.0),
        (lambda rng, s: rng.standard_cauchy(s), 0.0),
        (lambda rng, s: rng.lognormal(0.0, 3.0, s), 1.0),
        (lambda rng, s: rng.poisson(1.7, s).astype(float), 2.0),  # atoms: median 1.7's Poisson is 2
        (lambda rng, s: rng.binomial(1, 0.5, s).astype(float) + (rng.random(s) < 0.02) * 1e6, 1.0),
    ],
    ids=["normal", "Cauchy", "lognormal", "Poisson", "two atoms and outliers"],
)
@pytest.mark.parametrize("n", [8, 25, 200])
def test_median_interval_covers_at_least_as_often_as_the_reference_bootstrap(draw, median, n):
    """1,000 data sets each: the exact interval covers the true median >= 95% (within Monte Carlo
    error), and at least as often as the percentile bootstrap of the median it replaces."""
    rng = np.random.default_rng(n)
    x = draw(rng, (1000, n))
    _, lo, hi = stats.interval(x, "median")
    covered = np.mean((lo <= median) & (median <= hi))
    # The percentile bootstrap of the median, in law the reference's (tested above), in 1,000 resamples.
    _, rlo, rhi = stats.bootstrap_interval(x, "median", n_boot=1000)
    reference = np.mean((rlo <= median) & (median <= rhi))
    assert covered >= 0.95 - 3 * np.sqrt(0.05 * 0.95 / 1000)
    assert covered >= reference - 0.01


def test_interval_takes_the_exact_median_interval_and_the_bootstrap_of_the_mean():
    x = np.random.default_rng(5).exponential(1.0, (2, 99))
    assert np.array_equal(stats.interval(x, "median"), stats.quantile_interval(x, 0.5))
    assert np.array_equal(
        stats.interval(x, "mean", n_boot=300, seed=4), stats.bootstrap_interval(x, "mean", 0.95, 300, 4)
    )
    with pytest.raises(ValueError, match="statistic must be one of"):
        stats.interval(x, "mode")


@pytest.mark.parametrize("n_pos, n_neg", [(0, 1), (3, 0), (5, 5), (60_000, 59_000), (100_001, 100_000), (7, 200_000)])
def test_sign_test_matches_scipy_at_any_size(n_pos, n_neg):
    d = np.r_[np.ones(n_pos), -np.ones(n_neg), np.zeros(11)]
    assert stats.sign_test(d) == pytest.approx(sps.binomtest(n_pos, n_pos + n_neg, 0.5).pvalue, rel=1e-9)
