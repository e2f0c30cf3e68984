"""Verdict helper: paired bootstrap interval, sign test, verdicts; and the streaming summaries."""

import numpy as np
import pytest
from scipy import stats as sps

from jaxfed import stats


def test_sign_test_matches_scipy_binomtest():
    rng = np.random.default_rng(0)
    for n, shift in [(7, 0.0), (40, 0.3), (301, -0.1), (1000, 0.05)]:
        d = rng.normal(shift, 1.0, n)
        d[:3] = 0.0  # ties are dropped
        n_pos, n_neg = int((d > 0).sum()), int((d < 0).sum())
        expected = sps.binomtest(n_pos, n_pos + n_neg, 0.5).pvalue
        assert stats.sign_test(d) == pytest.approx(expected, rel=1e-9)
    assert stats.sign_test(np.zeros(5)) == 1.0


def test_bootstrap_interval_is_seeded_vectorised_and_covers():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, (3, 400))
    est, lo, hi = stats.bootstrap_interval(x, "mean", level=0.95, n_boot=1000, seed=3)
    assert est.shape == lo.shape == hi.shape == (3,)
    np.testing.assert_allclose(est, x.mean(-1))
    assert np.all(lo < est) and np.all(est < hi)
    # Width close to the normal theory 2 * 1.96 * sd / sqrt(n).
    np.testing.assert_allclose(hi - lo, 2 * 1.96 * x.std(-1) / 20, rtol=0.15)
    again = stats.bootstrap_interval(x, "mean", level=0.95, n_boot=1000, seed=3)
    np.testing.assert_array_equal(lo, again[1])
    # Each row alone gives the same interval as in the batch (same resampling indices).
    single = stats.bootstrap_interval(x[1], "mean", level=0.95, n_boot=1000, seed=3)
    assert single[1] == pytest.approx(lo[1]) and single[2] == pytest.approx(hi[1])


def test_verdict_inconclusive_on_identical_distributions():
    rng = np.random.default_rng(2)
    inconclusive = 0
    for seed in range(20):
        a, b = rng.exponential(1.0, (2, 300))
        v = stats.paired_verdict(a, b, "a > b", expect="greater", seed=seed)
        inconclusive += v.verdict == stats.INCONCLUSIVE
    # A 95% interval excludes 0 about 1 time in 20 in either direction.
    assert inconclusive >= 16


def test_verdict_reproduced_on_clear_shift_and_not_reproduced_when_reversed():
    rng = np.random.default_rng(3)
    base = rng.exponential(1.0, 500)
    a = base * 1.2 * np.exp(rng.normal(0, 0.05, 500))
    v = stats.paired_verdict(a, base, "a > b", expect="greater", transform="log_ratio")
    assert v.verdict == stats.REPRODUCED and 1.15 < v.estimate < 1.25 and v.lower > 1.0
    assert v.fraction_greater > 0.9 and v.p_value < 1e-10
    assert stats.paired_verdict(base, a, "b > a", expect="greater").verdict == stats.NOT_REPRODUCED
    assert stats.paired_verdict(base, a, "b < a", expect="less").verdict == stats.REPRODUCED


def test_verdict_equivalence_with_margin():
    rng = np.random.default_rng(4)
    a = rng.normal(0, 1, 400)
    close = a + rng.normal(0.01, 0.01, 400)
    far = a + 1.0
    assert stats.paired_verdict(close, a, "≈", expect="equal", margin=0.1).verdict == stats.REPRODUCED
    assert stats.paired_verdict(far, a, "≈", expect="equal", margin=0.1).verdict == stats.NOT_REPRODUCED
    noisy = a + rng.normal(0.1, 1.0, 400)
    assert stats.paired_verdict(noisy, a, "≈", expect="equal", margin=0.1).verdict == stats.INCONCLUSIVE


def test_verdict_drops_non_finite_pairs_and_handles_none_left():
    a = np.array([1.0, np.nan, 3.0, np.inf, 5.0] * 20)
    b = np.zeros(100)
    v = stats.paired_verdict(a, b, "a > b")
    assert v.n == 60 and v.n_dropped == 40 and v.verdict == stats.REPRODUCED
    empty = stats.paired_verdict([np.nan], [1.0], "a > b")
    assert empty.verdict == stats.INCONCLUSIVE and empty.n == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"expect": "bigger"}, "expect must be one of"),
        ({"transform": "ratio"}, "transform must be one of"),
        ({"statistic": "mode"}, "statistic must be one of"),
        ({"expect": "equal"}, "margin must be > 0 with expect='equal'"),
        ({"margin": float("inf")}, "margin must be finite"),
        ({"level": 1.5}, "level must be in"),
    ],
)
def test_verdict_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_verdict(np.ones(5), np.ones(5), "c", **kwargs)


def test_verdict_bad_inputs():
    with pytest.raises(ValueError, match="one length"):
        stats.paired_verdict(np.ones(5), np.ones(4), "c")
    with pytest.raises(ValueError, match="positive values"):
        stats.paired_verdict(np.ones(5), -np.ones(5), "c", transform="log_ratio")


def test_verdict_table_lists_each_claim():
    v = stats.paired_verdict(np.arange(1.0, 51), np.zeros(50), "grows")
    table = stats.verdict_table([v], what="a − b")
    assert "| grows |" in table and "**reproduced**" in table and "a − b" in table
    assert stats.verdict_table([]) == ""


@pytest.mark.parametrize("draw", ["normal", "exponential", "lognormal"])
def test_median_se_from_the_histogram_matches_the_spread_of_sample_medians(draw):
    """Across 400 replicates of n = 2,000 trials, the histogram's median standard error agrees
    with the empirical standard deviation of the sample medians within 15% (skewed laws too)."""
    rng = np.random.default_rng(7)
    values = {
        "normal": lambda s: rng.normal(5.0, 1.0, s),
        "exponential": lambda s: rng.exponential(1.0, s),
        "lognormal": lambda s: rng.lognormal(0.0, 2.0, s),
    }[draw]((400, 2000))
    acc = stats.summary.SummaryAccumulator((400,))
    acc.add(values)
    estimate = np.median(stats.median_se(acc.result()))
    assert estimate == pytest.approx(np.median(values, axis=1).std(), rel=0.15)


def test_median_se_needs_four_finite_trials():
    acc = stats.summary.SummaryAccumulator((2,))
    acc.add(np.array([[1.0, 2.0, 3.0, np.nan], [1.0, 2.0, 3.0, 4.0]]))
    se = stats.median_se(acc.result())
    assert se[0] == np.inf and np.isfinite(se[1])


def test_fraction_at_most_from_the_histogram_matches_raw_values_at_bin_edges():
    rng = np.random.default_rng(3)
    values = np.where(rng.random((2, 500, 3)) < 0.3, 0.0, rng.lognormal(-3.0, 2.0, (2, 500, 3)))
    values[0, :7, 0] = np.nan  # left out, as everywhere
    acc = stats.summary.SummaryAccumulator((2, 3))
    acc.add(values)
    summary = acc.result()
    finite = np.isfinite(values)
    np.testing.assert_allclose(
        stats.fraction_at_most(summary), (values == 0).sum(1) / finite.sum(1)
    )  # nothing here lies in (0, 1e-12)
    edge = (
        10.0 ** (stats.summary.HIST_LOG_MIN + np.arange(2000) / stats.summary.HIST_PER_DECADE)[1037]
    )  # a bin edge: exact there
    with np.errstate(invalid="ignore"):
        expected = (values < edge).sum(1) / finite.sum(1)
    np.testing.assert_allclose(stats.fraction_at_most(summary, edge), expected)


def test_a_shift_in_4_of_100_trials_is_never_reproduced():
    """The gfvl-heterogeneity case: 96 pairs tied, 4 shifted by 0.36 the same way. The bootstrap
    of the mean puts its interval above 0, but 4 pairs cannot carry a claim (sign test p = 0.12)."""
    b = np.arange(100, dtype=float)
    a = b.copy()
    a[[3, 30, 60, 90]] += 0.36
    v = stats.paired_verdict(a, b, "a later than b", statistic="mean")
    assert v.lower > 0  # the interval alone would have said "reproduced"
    assert v.verdict == "inconclusive" and v.n_untied == 4
    assert "only 4 of 100 pairs differ" in v.reason
    assert "4 differ" in stats.verdict_table([v]) and "only 4 of 100" in stats.verdict_table([v])


def test_a_claim_carried_by_enough_pairs_but_against_the_sign_test_is_inconclusive():
    # 28 pairs differ: 8 by +10 (the mean), 20 by −0.1 (the majority): interval and sign test disagree.
    b = np.zeros(100)
    a = np.zeros(100)
    a[:8], a[8:28] = 10.0, -0.1
    v = stats.paired_verdict(a, b, "a > b", statistic="mean")
    assert v.lower > 0 and v.verdict == "inconclusive" and "sign test" in v.reason
    many = stats.paired_verdict(np.r_[np.full(30, 1.0), np.zeros(70)], np.zeros(100), "a > b", statistic="mean")
    assert many.verdict == "reproduced" and many.n_untied == 30 and many.reason.startswith("carried by 30 of 100")


def test_a_claim_the_settings_cannot_detect_is_not_testable_with_its_reason():
    v = stats.not_testable("unlearning before retraining", "u's data moves q* less than the noise floor")
    table = stats.verdict_table([v, stats.paired_verdict(np.ones(50), np.zeros(50), "a > b")])
    assert "| unlearning before retraining | – | – | – | – | **not testable here** (u's data" in table
    assert "[95% interval]" in table


def test_the_report_states_the_verdict_policy_once_and_tables_every_claim(tmp_path):
    from jaxfed.experiment import Reading
    from jaxfed.results import report

    up = stats.paired_verdict(np.arange(1.0, 51.0), np.zeros(50), "a > b")
    untestable = stats.not_testable("u forgotten", "nothing to unlearn")
    sections = [
        ("exp-a", Reading("## exp-a", (up,))),
        ("exp-b", Reading("## exp-b")),
        ("exp-c", Reading("## exp-c", (untestable,))),
    ]
    text = open(report.write(str(tmp_path), sections, 1.0)).read()
    assert text.count("**How verdicts are decided**") == 1
    assert f"at least {stats.MIN_UNTIED_PAIRS} pairs differ" in text and f"p < {stats.SIGN_TEST_ALPHA:g}" in text
    assert "*Not testable here*" in text and "(n dropped)" in text
    assert stats.verdicts.VERDICT_POLICY in text and "**direction only**" in text and "not testable (censored)" in text
    assert "| the papers' claims | 2 | 1 | 0 | 0 | 0 | 1 |" in text  # counted by kind and verdict
    table = text[text.index("## Every claim") : text.index("## exp-a")]
    assert "| [exp-a](#exp-a) | a > b | 25.5 [" in table and "**reproduced**" in table
    assert "| [exp-c](#exp-c) | u forgotten | – |" in table and "(nothing to unlearn)" in table
    assert "exp-b" not in table and text.index("## exp-a") < text.index("## exp-b") < text.index("## exp-c")


def test_the_report_counts_by_kind_numbers_repeated_claims_and_is_byte_identical(tmp_path):
    """Checks of an explanation and beyond-the-paper studies counted apart from the papers' claims; a claim
    name stated twice is numbered; the same sections give the same bytes (no clock, sorted parameters)."""
    from jaxfed.experiment import Reading
    from jaxfed.results import report

    up = stats.paired_verdict(np.arange(1.0, 51.0), np.zeros(50), "a > b")
    check = up._replace(claim="check of an explanation: why")
    record = {"wall_s": 12.0}
    section = report.Section(
        "Beyond the paper: a study",
        "s/s.png",
        "",
        "",
        (),
        {"b": 1, "a": {"y": 1, "x": 2}},
        Reading("## s", (up, up, check)),
        record,
        "s",
    )
    paper = section._replace(description="Fig. 1", name="p")
    texts = []
    for out in ("one", "two"):
        (tmp_path / out).mkdir()
        texts.append(open(report.write(str(tmp_path / out), [("s", section), ("p", paper)], 0.0), "rb").read())
    assert texts[0] == texts[1]
    text = texts[0].decode()
    assert "| beyond-the-paper studies | 2 | 2 | 0 | 0 | 0 | 0 |" in text
    assert "| checks of an explanation | 2 | 2 |" in text and "| the papers' claims | 2 | 2 |" in text
    assert "| a > b (2nd) |" in text and "took 24 s to compute" in text
    assert text.index("| `a` |") < text.index("| `b` |") and '{"x": 2, "y": 1}' in text


def test_effect_size_censoring_equivalence_and_each_trial_verdicts():
    """A significant 0.8% effect is "direction only"; a verdict on censored values is not testable;
    an undecided equality says how many trials would decide it; a claim about each trial is a share."""
    rng = np.random.default_rng(0)
    b = rng.exponential(1.0, 300)
    small = stats.paired_verdict(b * 1.008 * np.exp(rng.normal(0, 0.01, 300)), b, "a > b", transform="log_ratio")
    assert small.verdict == stats.DIRECTION_ONLY and "effect 0.8%" in small.reason
    # Just below the visible size the effect is printed with the digits that show it is below ("5.0% < 5.0%").
    edge = stats.paired_verdict(b * 1.0496 * np.exp(rng.normal(0, 0.001, 300)), b, "a > b", transform="log_ratio")
    assert edge.verdict == stats.DIRECTION_ONLY and "effect 4.9" in edge.reason and "< visible 5.0%" in edge.reason
    big = stats.paired_verdict(b * 1.2, b * np.exp(rng.normal(0, 0.01, 300)), "a > b", transform="log_ratio")
    assert big.verdict == "reproduced"
    slots = stats.paired_verdict(b + 0.02, b, "a > b", min_effect=1.0)  # the claim's own visible size
    assert slots.verdict == stats.DIRECTION_ONLY
    t = np.full(64, 200.0)
    every = np.ones(64, bool)
    cens = stats.paired_verdict(t, t * 0.9, "w", transform="log_ratio", censored_a=every, censored_b=every)
    assert cens.verdict == stats.NOT_TESTABLE and "censored: 100%" in cens.reason
    few = np.zeros(300, bool)
    few[:3] = True  # a censored value on the claimed side cannot undo a clear effect
    kept = stats.paired_verdict(b * 1.3, b, "a > b", transform="log_ratio", censored_a=few)
    assert kept.verdict == "reproduced" and "censored: 1%" in kept.reason
    noisy = b[:60] * np.exp(0.01 + 0.3 * rng.permutation(np.linspace(-1, 1, 60)))
    eq = stats.paired_verdict(noisy, b[:60], "≈", "equal", "log_ratio", margin=np.log(1.05))
    assert eq.verdict == "inconclusive" and "trials would decide it" in eq.reason
    assert "equivalence: interval vs margin" in stats.verdict_table([eq])
    share = stats.share_verdict(rng.random(300) < 0.69, "each trial")
    assert share.verdict == "not reproduced" and share.upper < 0.9 and share.kind == "share"
    assert stats.share_verdict(np.ones(300, bool), "each trial").verdict == "reproduced"


def test_a_share_that_is_not_zero_never_reads_zero_percent():
    """The full reproduce printed "not testable (censored: 0% of pairs …)": a share below 0.5% that decided a verdict."""
    assert [stats.verdicts.percent(x) for x in (0.0, 0.004, 0.3, 0.996, 1.0)] == ["0%", "<1%", "30%", ">99%", "100%"]
    t = np.arange(1.0, 401.0)
    cens = np.zeros(400, bool)
    cens[0] = True  # one pair in 400 censored, and no effect to speak of: not testable, said as "<1%"
    v = stats.paired_verdict(t, t, "a > b", transform="log_ratio", censored_a=cens)
    assert "censored: 0%" not in v.reason


# --------------------------------------------------------------------------- bands reused (issue 58, part 6)
def test_bands_reused_takes_the_quantiles_of_one_array_once(monkeypatch):
    """Within ``bands_reused`` a second band of the same unchanged array is not computed again (the
    same values, as copies); a changed array, another mass or another array is; outside, every
    call computes."""
    from jaxfed.stats import quantiles

    calls: list = []
    real = quantiles._band
    monkeypatch.setattr(quantiles, "_band", lambda *a: calls.append(a[1:]) or real(*a))
    x = np.random.default_rng(0).standard_normal((3, 500, 4))
    with quantiles.bands_reused():
        first = stats.band(x)
        again = stats.band(x)
        assert len(calls) == 1
        assert all(np.array_equal(a, b) for a, b in zip(first[:3], again[:3], strict=True))
        again.median[0, 0] = 99.0  # (a copy: the kept band is untouched)
        assert stats.band(x).median[0, 0] == first.median[0, 0] and len(calls) == 1
        stats.band(x, mass=0.5)
        stats.band(x.copy())
        assert len(calls) == 3
        x[0, 0, 0] = 100.0  # (changed in place: computed again)
        assert stats.band(x).median.tolist() == real(x, 0.75, 1).median.tolist() and len(calls) == 4
    stats.band(x)
    stats.band(x)
    assert len(calls) == 6


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize(
    "shape, axis", [((3, 700, 70), 1), ((5, 300), 1), ((9,), 0), ((4, 33, 2, 3), 1), ((2, 3, 50, 4), 2), ((50, 3), 0)]
)
def test_a_raw_band_is_numpys_quantile_of_the_finite_trials_bit_for_bit(shape, axis, dtype):
    """The blocked sort behind a raw band gives ``np.quantile``'s bits (``np.nanquantile`` of the
    finite values where a cell has a NaN or ±inf; NaN where it has none)."""
    import warnings

    from jaxfed.stats import quantiles

    rng = np.random.default_rng(len(shape) + axis)
    values = (rng.standard_normal(shape) * 10).astype(dtype)
    cases = [values]
    if values.dtype.kind == "f":
        damaged = values.copy()
        damaged.reshape(-1)[rng.integers(0, values.size, 3)] = [np.nan, np.inf, -np.inf]
        cases.append(damaged)
        if values.ndim >= 2:
            lost = damaged.copy()
            lost[(0,) * axis + (slice(None),)] = np.nan  # a cell without one finite trial
            cases.append(lost)
    qs = [0.5, 0.125, 0.875]
    for case in cases:
        finite = np.isfinite(case)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if finite.all():
                expected = np.quantile(case, qs, axis=axis)
            else:
                expected = np.nanquantile(np.where(finite, case, np.nan), qs, axis=axis)
            got = quantiles._raw_quantiles(case, qs, axis)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
