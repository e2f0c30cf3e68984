"""Each rule of ``paired_verdict`` alone (jaxfed.stats.verdicts.PAIRED_RULES), on constructed
:class:`Pairs`: what it decides, its reason word for word, and the inputs it leaves to the next rule."""

import inspect
import math

import numpy as np
import pytest

from jaxfed import stats
from jaxfed.stats import verdicts as v

NOTE = "censored: 20% of pairs not reached within 200 iterations"


def pairs(d, expect="greater", interval=None, **fields):
    """:class:`Pairs` of the differences ``d``: the interval (estimate, lower, upper) given, else the
    median and the range of d; the observed verdict and the sign test computed from them."""
    d = np.asarray(d, np.float64)
    est, lo, hi = interval if interval is not None else (float(np.median(d)), float(d.min()), float(d.max()))
    margin = fields.pop("margin", 0.1 if expect == "equal" else 0.0)
    base = dict(
        claim="a > b",
        expect=expect,
        transform="difference",
        margin=margin,
        level=0.95,
        min_effect=None,
        d=d,
        dropped=0,
        reference=1.0,
        estimate=est,
        lower=lo,
        upper=hi,
        observed=v._interval_verdict(expect, lo, hi, margin),
        p_value=stats.sign_test(d),
        censoring="",
        widened="",
        bounds=(lo, hi),
    )
    return v.Pairs(**{**base, **fields})


def shifted(n_up, n_down=0, n_tied=0, size=1.0):
    return np.array([size] * n_up + [-size] * n_down + [0.0] * n_tied)


def test_the_rules_are_tried_in_their_documented_order():
    names = [rule.__name__ for rule in v.PAIRED_RULES]
    assert names == [
        "_no_pairs",
        "_undecided_by_censoring",
        "_not_reproduced",
        "_inconclusive",
        "_equivalent",
        "_too_few_untied",
        "_sign_test_disagrees",
        "_invisible",
        "_carried_by_few",
        "_reproduced",
    ]
    source = inspect.getsource(v)
    documented = source[source.index("PAIRED_RULES = (") :]  # the tuple, then its docstring
    documented = documented[documented.index('"""') :]
    positions = [documented.index(f"``{name}``") for name in names]
    assert positions == sorted(positions)


def test_no_pairs_is_inconclusive_without_a_statistic():
    verdict = v._no_pairs(pairs([], interval=(math.nan,) * 3, dropped=3, claim="c"))
    assert verdict is not None and verdict.verdict == stats.INCONCLUSIVE
    assert verdict.n == 0 and verdict.n_dropped == 3 and verdict.p_value == 1.0
    assert math.isnan(verdict.estimate) and verdict.kind == "" and verdict.reason == ""
    assert v._no_pairs(pairs([1.0])) is None


def test_censoring_the_completions_cannot_decide_is_not_testable():
    undecided = pairs(shifted(30), censoring=NOTE, widened=stats.INCONCLUSIVE, bounds=(0.5, math.inf))
    verdict = v._undecided_by_censoring(undecided)
    assert verdict is not None and verdict.verdict == stats.NOT_TESTABLE
    assert verdict.reason == f"{NOTE}; {v.LONGER_HORIZON}" and (verdict.lower, verdict.upper) == (0.5, math.inf)
    assert verdict.trials_needed == math.inf
    assert verdict.kind == "greater" and verdict.n == 30
    # Completions that all give one verdict leave it to the other rules, and so does no censoring.
    assert v._undecided_by_censoring(undecided._replace(widened=stats.REPRODUCED)) is None
    assert v._undecided_by_censoring(undecided._replace(censoring="", widened="")) is None


@pytest.mark.parametrize(
    "expect, interval, side",
    [
        ("greater", (-1.0, -2.0, 0.0), "on the other side of no effect: absent or reversed"),
        ("less", (1.0, 0.0, 2.0), "on the other side of no effect: absent or reversed"),
        ("equal", (0.5, 0.3, 0.7), "outside the margin"),
    ],
)
def test_an_interval_on_the_wrong_side_is_not_reproduced(expect, interval, side):
    verdict = v._not_reproduced(pairs(shifted(5, 25), expect, interval))
    assert verdict is not None and verdict.verdict == stats.NOT_REPRODUCED
    assert verdict.reason == f"the interval lies {side}"
    straddling, claimed = (0.05, -0.5, 0.5), {"greater": (1.0, 0.5, 1.5), "less": (-1.0, -1.5, -0.5)}
    assert v._not_reproduced(pairs(shifted(25), expect, straddling)) is None
    assert v._not_reproduced(pairs(shifted(25), expect, claimed.get(expect, (0.0, -0.05, 0.05)))) is None


def test_a_straddling_interval_is_inconclusive_and_says_what_would_decide_it():
    directional = v._inconclusive(pairs(shifted(15, 15), "greater", (0.0, -0.5, 0.5), reference=1.0))
    assert directional is not None and directional.verdict == stats.INCONCLUSIVE
    assert directional.reason == "the estimate leans against the claim: more trials would not show it"
    assert directional.trials_needed == math.inf
    # estimate 0.2, half-width 0.5 on 30 trials: 30·(0.5 / 0.2)² = 187.5 trials to clear 0.
    leaning = v._inconclusive(pairs(shifted(15, 15), "greater", (0.2, -0.3, 0.7), reference=10.0))
    assert leaning is not None and leaning.trials_needed == 188
    assert leaning.reason == (
        "≈ 188 trials would decide it at the observed effect and spread (estimated: an interval's half-width ∝ 1/√n)"
        " (an effect below the visible size: it would read direction only)"
    )
    # The interval within ±the visible size (5% of 10): no number of trials would make it visible.
    invisible = v._inconclusive(pairs(shifted(15, 15), "greater", (0.0, -0.3, 0.3), reference=10.0))
    assert invisible is not None and invisible.verdict == stats.DIRECTION_ONLY
    assert invisible.reason.startswith("no visible effect: the interval lies within ±0.5")
    # |estimate| 0.02 inside the margin 0.1, half-width 0.1: n·(0.1 / 0.08)² = 100·1.5625 trials.
    near = v._inconclusive(pairs(np.zeros(100), "equal", (0.02, -0.08, 0.12)))
    assert near is not None and near.verdict == stats.INCONCLUSIVE and near.trials_needed == 157
    assert (
        near.reason
        == "≈ 157 trials would decide it at the observed spread (estimated: an interval's half-width ∝ 1/√n)"
    )
    outside = v._inconclusive(pairs(np.zeros(100), "equal", (0.15, -0.05, 0.35)))
    assert outside is not None
    assert outside.reason == "the estimate lies outside the margin: more trials would not show equality"
    assert v._inconclusive(pairs(shifted(25), "greater", (1.0, 0.5, 1.5))) is None


def test_an_equality_inside_its_margin_is_reproduced_without_sign_test_or_visible_size():
    verdict = v._equivalent(pairs(np.zeros(3), "equal", (0.0, -0.01, 0.01)))  # 3 pairs, none differs
    assert verdict is not None and verdict.verdict == stats.REPRODUCED
    assert verdict.reason == "" and verdict.kind == "equal"
    assert v._equivalent(pairs(shifted(25), "greater", (1.0, 0.5, 1.5))) is None


def test_a_directional_effect_needs_ten_differing_pairs():
    verdict = v._too_few_untied(pairs(shifted(9, 0, 21)))
    assert verdict is not None and verdict.verdict == stats.INCONCLUSIVE
    assert verdict.reason == (
        "only 9 of 30 pairs differ (at least 10 needed); ≈ 34 trials would decide it at the observed share of "
        "differing pairs (estimated: differing pairs ∝ n)"
    )
    assert verdict.n_untied == 9
    assert v._too_few_untied(pairs(shifted(10, 0, 20))) is None


def test_a_directional_effect_needs_the_sign_test():
    split = v._sign_test_disagrees(pairs(shifted(12, 8), interval=(0.5, 0.1, 1.0)))
    assert split is not None and split.verdict == stats.INCONCLUSIVE
    p = stats.sign_test(shifted(12, 8))
    # z = 1.96 at a share of 12/20 in the claimed direction: (1.96 / 0.2)² = 96.04 differing pairs, all differ
    assert split.reason == (
        f"sign test p = {p:.2g} (12 of 20 differing pairs in the claimed direction); ≈ 97 trials would decide it at "
        "the observed share in the claimed direction (estimated: the sign test in its normal approximation)"
    )
    # Significant, but the other way: none of the 20 in the claimed direction.
    against = v._sign_test_disagrees(pairs(shifted(20), "less", interval=(-1.0, -1.5, -0.5)))
    assert against is not None and "(0 of 20 differing pairs in the claimed direction); no number" in against.reason
    assert v._sign_test_disagrees(pairs(shifted(20))) is None
    assert v._sign_test_disagrees(pairs(-shifted(20), "less")) is None


def test_an_effect_below_the_visible_size_is_direction_only():
    small = v._invisible(pairs(shifted(30, size=0.4), reference=10.0))  # visible: 5% of 10
    assert small is not None and small.verdict == stats.DIRECTION_ONLY
    assert small.reason == "effect 0.4 < visible 0.5"
    assert v._invisible(pairs(shifted(30, size=0.6), reference=10.0)) is None
    stated = v._invisible(pairs(shifted(30, size=0.6), reference=10.0, min_effect=1.0))  # the claim's own size
    assert stated is not None and stated.reason == "effect 0.6 < visible 1"
    # A log-ratio just under log 1.05 reads below 5.0% with the digits it takes; the ratio is reported.
    ratio = v._invisible(pairs(np.full(30, math.log(1.0496)), transform="log_ratio"))
    assert ratio is not None and ratio.reason == "effect 4.96% < visible 5.0%"
    assert ratio.estimate == pytest.approx(1.0496)
    assert v._invisible(pairs(np.full(30, math.log(1.06)), transform="log_ratio")) is None


def test_an_effect_carried_by_under_half_the_pairs_says_so():
    few = v._carried_by_few(pairs(shifted(20, 0, 30), interval=(0.0, 0.0, 1.0)))
    assert few is not None and few.verdict == stats.REPRODUCED
    assert few.reason == "carried by 20 of 50 trials (40%); the others tie"
    assert v._carried_by_few(pairs(shifted(25, 0, 25))) is None


def test_the_last_rule_reproduces_with_the_censoring_note_and_ratios():
    plain = v._reproduced(pairs(shifted(30), claim="c"))
    assert plain is not None and plain == stats.Verdict(
        "c", 1.0, 1.0, 1.0, 0.95, stats.sign_test(shifted(30)), 1.0, 30, 0, stats.REPRODUCED, 30, "", "greater"
    )
    d = np.full(40, math.log(1.2))
    censored = v._reproduced(pairs(d, transform="log_ratio", censoring=NOTE, bounds=(math.log(1.1), math.inf)))
    assert censored is not None and censored.reason == NOTE
    assert censored.estimate == pytest.approx(1.2) and censored.lower == pytest.approx(1.1)
    assert censored.upper == math.inf


def test_a_reason_and_the_censoring_note_are_joined():
    verdict = v._verdict(pairs(shifted(30), censoring=NOTE), stats.INCONCLUSIVE, "why")
    assert verdict.reason == f"why; {NOTE}"
    assert v._verdict(pairs(shifted(30)), stats.INCONCLUSIVE, "why").reason == "why"


def test_censoring_comes_before_the_observed_verdict():
    """Every a is lower than its b, but 60% of the a's were censored (could be larger): the completions
    cannot decide, so the claim is not testable rather than not reproduced."""
    b = np.arange(1.0, 51.0)
    a = b - 1.0
    censored = np.arange(50) < 30
    observed = stats.paired_verdict(a, b, "a > b")
    assert observed.verdict == stats.NOT_REPRODUCED
    verdict = stats.paired_verdict(a, b, "a > b", censored_a=censored, censoring="within 5 s")
    assert verdict.verdict == stats.NOT_TESTABLE
    assert verdict.reason == f"censored: 60% of pairs not reached within 5 s; {v.LONGER_HORIZON}"
    assert verdict.upper == math.inf
