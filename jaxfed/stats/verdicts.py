"""Verdicts on a paper's claims, and their English and Markdown.

A claim is judged by a paired comparison across trials (:func:`paired_verdict`): the per-trial
difference (or log-ratio) of two metrics computed on the same trials, an interval of its median
(exact, from order statistics: :func:`jaxfed.stats.intervals.quantile_interval`) or mean (seeded
percentile bootstrap: :func:`jaxfed.stats.intervals.bootstrap_interval`), an exact two-sided sign
test, and a verdict "reproduced", "not reproduced" or "inconclusive" read from the interval by an
ordered list of rules (:data:`PAIRED_RULES`); a claim about each trial by the share of trials
meeting it (:func:`share_verdict`). The policy is stated by the constants below and in words by
:data:`VERDICT_POLICY`; :func:`verdict_table` writes the verdicts as a Markdown table.

This part of :mod:`jaxfed.stats` may import :mod:`jaxfed.stats.intervals` and
:mod:`jaxfed.stats.summary` (neither imports it), NumPy and :mod:`jaxfed.validation`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import NamedTuple

import numpy as np

from jaxfed import validation
from jaxfed.stats.intervals import interval, sign_test

__all__ = [
    "Verdict",
    "REPRODUCED",
    "NOT_REPRODUCED",
    "INCONCLUSIVE",
    "NOT_TESTABLE",
    "DIRECTION_ONLY",
    "share_verdict",
    "EQUAL_RATIO_MARGIN",
    "MIN_UNTIED_PAIRS",
    "SIGN_TEST_ALPHA",
    "paired_verdict",
    "not_testable",
    "verdict_table",
]

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_TESTABLE = "not testable here"
DIRECTION_ONLY = "direction only"
"""A directional effect the interval and the sign test agree on, smaller than the visible size
(:data:`VISIBLE_RATIO`, :data:`VISIBLE_FRACTION`): not what a figure shows."""
_CLAIMS = ("greater", "less", "equal")
_TRANSFORMS = ("difference", "log_ratio")


class Verdict(NamedTuple):
    """A paired comparison of two metrics over the same trials and what it says about a claim.

    ``estimate``, ``lower`` and ``upper`` are on the scale the claim is stated in: a difference
    a − b, or for ``transform="log_ratio"`` the ratio a / b (the interval of the log-ratio mapped
    back by exp).
    """

    claim: str  # human-readable claim, e.g. "complete converges before star"
    estimate: float  # statistic of the paired differences (or ratio)
    lower: float  # interval at ``level`` (:func:`interval`)
    upper: float
    level: float
    p_value: float  # exact two-sided sign test of "median difference = 0" (ties dropped)
    fraction_greater: float  # fraction of used pairs with a > b
    n: int  # pairs used (both values finite)
    n_dropped: int  # pairs dropped because a value was NaN or infinite
    verdict: str  # "reproduced" | "not reproduced" | "inconclusive"
    n_untied: int = 0  # pairs with a != b: those that can carry a directional effect
    reason: str = (
        ""  # why the verdict is what it is beyond the interval (not carried, effect size, censoring, trials needed)
    )
    kind: str = ""  # "greater" | "less" | "equal" (an equivalence test) | "share" (a claim about each trial)
    # the trials per point that would decide an undecided claim at the observed effect and spread
    # (an estimate, its method in ``reason``); inf: no number would; None: decided, or nothing to
    # estimate from
    trials_needed: float | None = None

    def interval_text(self, fmt: str = "{:.3g}") -> str:
        """The estimate and its interval as text, ``"1.2 [1.1, 1.3]"``.

        Args:
            fmt: the format of each number.

        Returns:
            The text.
        """
        return f"{fmt.format(self.estimate)} [{fmt.format(self.lower)}, {fmt.format(self.upper)}]"


MIN_UNTIED_PAIRS = 10
"""A directional claim is "reproduced" only when at least this many pairs differ (a != b)."""
SIGN_TEST_ALPHA = 0.05
"""... and the two-sided sign test rejects "no direction" at this level, in the claimed direction."""
EQUAL_RATIO_MARGIN = 0.05
"""Every "≈" claim on a ratio holds when the ratio's interval lies within [1/1.05, 1.05] (margin
log 1.05 on the log scale): the interval inside the margin, i.e. two one-sided tests (TOST) at
2.5% each."""
VISIBLE_RATIO = 0.05
"""A directional claim read from a figure is "reproduced" only when its effect is visible: a median
(or mean) ratio at least 1.05 (or at most 1/1.05) …"""
VISIBLE_FRACTION = 0.05
"""… or a difference a − b at least 5% of the median |b| (unless the claim states its own visible
size, e.g. a number of slots: ``min_effect``). A smaller effect the trials agree on is
:data:`DIRECTION_ONLY`."""
FEW_TRIALS_SHARE = 0.5
"""A directional effect carried by fewer than this share of the trials (the others tie) says so in
its verdict."""
EACH_TRIAL_SHARE = 0.9
"""A claim about each trial ("when u is scheduled, …") holds when the share of trials meeting it
has its 95% interval above this share, and fails when the interval lies below it."""
VERDICT_POLICY = (
    "A directional claim (a > b) is **reproduced** when the 95% interval of the paired median (or mean) "
    "lies on the claimed side of no effect, at least 10 pairs differ, the exact sign test agrees (p < 0.05) **and** the effect "
    "is visible: a ratio of at least 1.05 (5%), a difference of at least 5% of the reference's median, or "
    "the size the claim states (e.g. slots); a smaller effect the trials agree on is **direction only** "
    "(counted apart). An effect carried by under half the trials (the others tie) says so in its verdict. "
    "An equality (≈) claim is an equivalence test: **reproduced** when the 95% interval lies inside the "
    "stated margin (±5% on a ratio; two one-sided tests at 2.5%), **not reproduced** when it lies outside; "
    "otherwise inconclusive. Every inconclusive claim gives the trials that would decide it at the observed "
    "effect and spread (an estimate: an interval's half-width shrinks as 1/√n), or says that no number would; "
    "a directional claim whose interval lies within the visible size on both sides is **direction only** (no "
    "number of trials would make it visible). A "
    "claim about each trial is judged on the share of trials meeting it (95% Wilson interval above 90%). "
    "A first-passage reading (time, slots, iterations to a level; cover times) whose verdict the trials "
    "that never reached the level could change is **not testable (censored)**."
)


class Pairs(NamedTuple):
    """What the rules of :func:`paired_verdict` read (:func:`_pairs`): the paired differences and what
    their interval says about the claim, on the transform's scale (a log-ratio for ``"log_ratio"``)."""

    claim: str
    expect: str  # "greater" | "less" | "equal"
    transform: str  # "difference" | "log_ratio"
    margin: float
    level: float
    min_effect: float | None  # the visible size the claim states (None: the default)
    d: np.ndarray  # (n,) a − b (or log(a / b)) over the pairs whose values are both finite
    dropped: int  # pairs with a non-finite value
    reference: float  # median |b| over those pairs (NaN without a pair): the scale of a visible difference
    estimate: float  # the statistic of d (NaN without a pair)
    lower: float  # its interval at ``level`` (:func:`interval`; NaN without a pair)
    upper: float
    observed: str  # what [lower, upper] says about the claim (:func:`_interval_verdict`)
    p_value: float  # :func:`sign_test` of d
    censoring: str  # "censored: x% of pairs not reached …", "" when no pair is censored
    widened: str  # what the interval over every completion of the censored values says ("": none is)
    bounds: tuple[float, float]  # the interval reported: [lower, upper], over the completions when censored

    @property
    def n(self) -> int:
        """Pairs used."""
        return int(self.d.size)

    @property
    def untied(self) -> int:
        """Pairs with a != b: those that can carry a directional effect."""
        return int((self.d != 0).sum())


def _pairs(a, b, claim, expect, transform, margin, min_effect, options, censored, censoring) -> Pairs:
    """The :class:`Pairs` of :func:`paired_verdict`'s arguments, validated (``options``: (statistic,
    level, n_boot, seed) of :func:`interval`; ``censored``: (censored_a, censored_b)); without a
    finite pair, no interval is taken (the statistic and its bounds are NaN)."""
    validation.one_of("expect", expect, _CLAIMS)
    validation.one_of("transform", transform, _TRANSFORMS)
    validation.non_negative("margin", margin)
    if expect == "equal":
        validation.check("margin", margin, margin > 0, "> 0 with expect='equal'")
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    validation.check("b", b.size, a.shape == b.shape, f"of one length with a ({a.size})")
    ok = np.isfinite(a) & np.isfinite(b)
    censored_a, censored_b = censored
    cens_a = np.zeros(a.shape, bool) if censored_a is None else np.asarray(censored_a, bool).ravel()
    cens_b = np.zeros(b.shape, bool) if censored_b is None else np.asarray(censored_b, bool).ravel()
    reference = float(np.median(np.abs(b[ok]))) if ok.any() else float("nan")
    if transform == "log_ratio":
        if np.any((a[ok] <= 0) | (b[ok] <= 0)):
            raise ValueError("transform='log_ratio' needs positive values in a and b")
        d = np.log(a[ok]) - np.log(b[ok])
    else:
        d = a[ok] - b[ok]
    if d.size:
        est, lo, hi = (float(v) for v in interval(d, *options))
    else:
        est = lo = hi = float("nan")
    observed = _interval_verdict(expect, lo, hi, margin)
    p_value = sign_test(d)
    what, widened, bounds = "", "", (lo, hi)
    if d.size and (cens_a | cens_b)[ok].any():
        what, widened, bounds = _censored(d, cens_a[ok], cens_b[ok], expect, margin, censoring, options)
    done = (reference, est, lo, hi, observed, p_value, what, widened, bounds)
    return Pairs(claim, expect, transform, margin, options[1], min_effect, d, int(a.size - d.size), *done)


def _verdict(pairs: Pairs, verdict: str, reason: str, needed: float | None = None) -> Verdict:
    """The :class:`Verdict` ``verdict`` on ``pairs`` with ``reason`` (and ``needed``, its
    ``trials_needed``), to which the share of censored pairs is added; a log-ratio's estimate and
    interval mapped back to ratios."""
    if pairs.censoring:
        reason = f"{reason}; {pairs.censoring}" if reason else pairs.censoring
    est, (lo, hi) = pairs.estimate, pairs.bounds
    if pairs.transform == "log_ratio":
        est, lo, hi = np.exp(est), np.exp(lo), np.exp(hi)
    frac = float((pairs.d > 0).mean())
    out = (pairs.level, pairs.p_value, frac, pairs.n, pairs.dropped, verdict, pairs.untied, reason, pairs.expect, needed)  # fmt: skip
    return Verdict(pairs.claim, float(est), float(lo), float(hi), *out)


def _no_pairs(pairs: Pairs) -> Verdict | None:
    """No pair with both values finite: inconclusive, without a statistic (and without a kind)."""
    if pairs.n:
        return None
    nan = float("nan")
    return Verdict(pairs.claim, nan, nan, nan, pairs.level, 1.0, nan, 0, pairs.dropped, INCONCLUSIVE)


def _undecided_by_censoring(pairs: Pairs) -> Verdict | None:
    """Censored pairs whose completions the interval cannot decide on: :data:`NOT_TESTABLE`, whatever
    the observed values say (a verdict the completions cannot change stands, in the rules below)."""
    if pairs.widened == INCONCLUSIVE:  # "" where no pair is censored
        verdict = _verdict(pairs, NOT_TESTABLE, "", math.inf)
        return verdict._replace(reason=f"{verdict.reason}; {LONGER_HORIZON}")
    return None


LONGER_HORIZON = "more trials at this horizon cannot decide it, a longer one could"
"""Said of a claim that censoring leaves undecided."""


def _not_reproduced(pairs: Pairs) -> Verdict | None:
    """The interval lies on the other side of no effect (absent or reversed), or outside an equality's
    margin: not reproduced."""
    if pairs.observed != NOT_REPRODUCED:
        return None
    side = "outside the margin" if pairs.expect == "equal" else "on the other side of no effect: absent or reversed"
    return _verdict(pairs, NOT_REPRODUCED, f"the interval lies {side}")


def _inconclusive(pairs: Pairs) -> Verdict | None:
    """The interval straddles the claim's boundary: inconclusive; for an equality, with the trials that
    would decide it at the observed spread (:func:`_needed`); a directional claim, with those at the
    observed effect and spread, or, when the interval lies within the visible size on both sides,
    :data:`DIRECTION_ONLY` (no number of trials would make the effect visible)."""
    if pairs.observed != INCONCLUSIVE:
        return None
    half = (pairs.upper - pairs.lower) / 2
    if pairs.expect == "equal":
        needed = _needed(pairs.n, pairs.margin - abs(pairs.estimate), half)
        if needed == math.inf:
            return _verdict(pairs, INCONCLUSIVE, "the estimate lies outside the margin: more trials would not show equality", needed)  # fmt: skip
        return _verdict(pairs, INCONCLUSIVE, _needed_text(needed, "at the observed spread", _SHRINKS), needed)
    visible = _visible_size(pairs)
    if -visible < pairs.lower and pairs.upper < visible:
        reason = (
            f"no visible effect: the interval lies within ±{_effect_text(visible, pairs.transform)}, the visible "
            "size; no number of trials would make it visible"
        )
        return _verdict(pairs, DIRECTION_ONLY, reason, math.inf)
    toward = (pairs.estimate if pairs.expect == "greater" else -pairs.estimate) - pairs.margin
    needed = _needed(pairs.n, toward, half)
    if needed == math.inf:
        return _verdict(pairs, INCONCLUSIVE, "the estimate leans against the claim: more trials would not show it", needed)  # fmt: skip
    small = " (an effect below the visible size: it would read direction only)" if abs(pairs.estimate) < visible else ""
    return _verdict(pairs, INCONCLUSIVE, _needed_text(needed, "at the observed effect and spread", _SHRINKS) + small, needed)  # fmt: skip


def _equivalent(pairs: Pairs) -> Verdict | None:
    """An equality whose interval lies inside the margin (the rules above took the others): reproduced,
    with neither sign test nor visible size (an equivalence test)."""
    return _verdict(pairs, REPRODUCED, "") if pairs.expect == "equal" else None


def _too_few_untied(pairs: Pairs) -> Verdict | None:
    """A directional effect the interval shows where fewer than :data:`MIN_UNTIED_PAIRS` pairs differ:
    inconclusive (a few trials do not carry a claim)."""
    if pairs.untied < MIN_UNTIED_PAIRS:
        needed = math.ceil(pairs.n * MIN_UNTIED_PAIRS / pairs.untied) if pairs.untied else math.inf
        reason = f"only {pairs.untied} of {pairs.n} pairs differ (at least {MIN_UNTIED_PAIRS} needed); {_needed_text(needed, 'at the observed share of differing pairs', 'differing pairs ∝ n')}"  # fmt: skip
        return _verdict(pairs, INCONCLUSIVE, reason, needed)
    return None


def _sign_test_disagrees(pairs: Pairs) -> Verdict | None:
    """A directional effect the interval shows that the exact sign test does not: p at least
    :data:`SIGN_TEST_ALPHA`, or no more than half the differing pairs in the claimed direction."""
    d = pairs.d
    n_claimed = int((d > 0).sum() if pairs.expect == "greater" else (d < 0).sum())
    if pairs.p_value >= SIGN_TEST_ALPHA or 2 * n_claimed <= pairs.untied:
        reason = f"sign test p = {pairs.p_value:.2g} ({n_claimed} of {pairs.untied} differing pairs in the claimed direction)"  # fmt: skip
        # the sign test's z = (2k − m)/√m at the observed share k/m of m differing pairs reaches the
        # normal quantile of SIGN_TEST_ALPHA / 2 when m >= (z / (2k/m − 1))²
        lean = 2 * n_claimed / pairs.untied - 1
        z = math.sqrt(2) * _erfinv(1 - SIGN_TEST_ALPHA)
        needed = math.ceil(pairs.n / pairs.untied * (z / lean) ** 2) if lean > 0 else math.inf
        return _verdict(pairs, INCONCLUSIVE, f"{reason}; {_needed_text(needed, 'at the observed share in the claimed direction', 'the sign test in its normal approximation')}", needed)  # fmt: skip
    return None


def _invisible(pairs: Pairs) -> Verdict | None:
    """A directional effect the trials carry, smaller than the visible size (``min_effect``, else a
    ratio of 1 + :data:`VISIBLE_RATIO` or :data:`VISIBLE_FRACTION` of the median |b|):
    :data:`DIRECTION_ONLY`, with both sizes in the reason."""
    transform, visible = pairs.transform, _visible_size(pairs)
    if abs(pairs.estimate) < visible:
        reason = f"effect {_smaller_text(pairs.estimate, visible, transform)} < visible {_effect_text(visible, transform)}"  # fmt: skip
        return _verdict(pairs, DIRECTION_ONLY, reason)
    return None


def _visible_size(pairs: Pairs) -> float:
    """The visible size of a directional effect on the transform's scale: ``min_effect``, else a
    ratio of 1 + :data:`VISIBLE_RATIO` or :data:`VISIBLE_FRACTION` of the median |b|."""
    if pairs.min_effect is not None:
        return pairs.min_effect
    return float(np.log1p(VISIBLE_RATIO) if pairs.transform == "log_ratio" else VISIBLE_FRACTION * pairs.reference)


def _carried_by_few(pairs: Pairs) -> Verdict | None:
    """A visible directional effect that fewer than :data:`FEW_TRIALS_SHARE` of the pairs carry (the
    others tie): reproduced, saying so."""
    n, untied = pairs.n, pairs.untied
    if untied < FEW_TRIALS_SHARE * n:
        return _verdict(pairs, REPRODUCED, f"carried by {untied} of {n} trials ({percent(untied / n)}); the others tie")
    return None


def _reproduced(pairs: Pairs) -> Verdict | None:
    """What is left: a visible directional effect the interval, the sign test and most pairs carry."""
    return _verdict(pairs, REPRODUCED, "")


PAIRED_RULES = (
    _no_pairs,
    _undecided_by_censoring,
    _not_reproduced,
    _inconclusive,
    _equivalent,
    _too_few_untied,
    _sign_test_disagrees,
    _invisible,
    _carried_by_few,
    _reproduced,
)
"""The rules of :func:`paired_verdict`, tried in this order on the :class:`Pairs`: the first that
returns a :class:`Verdict` decides. Each assumes that the rules before it returned None:

1. ``_no_pairs``: no finite pair: inconclusive, without a statistic;
2. ``_undecided_by_censoring``: censored pairs whose completions could change the verdict:
   :data:`NOT_TESTABLE`;
3. ``_not_reproduced``: the interval lies on the other side of no effect (outside an equality's margin);
4. ``_inconclusive``: the interval straddles the boundary, with the trials that would decide it
   (``trials_needed``); a directional one whose interval lies within the visible size both ways:
   :data:`DIRECTION_ONLY`, as no number of trials would make it visible;
5. ``_equivalent``: an equality whose interval lies inside the margin: reproduced;
6. ``_too_few_untied``: a directional effect where under :data:`MIN_UNTIED_PAIRS` pairs differ: inconclusive;
7. ``_sign_test_disagrees``: the sign test does not agree (:data:`SIGN_TEST_ALPHA`): inconclusive;
8. ``_invisible``: an effect below the visible size: :data:`DIRECTION_ONLY`;
9. ``_carried_by_few``: carried by under :data:`FEW_TRIALS_SHARE` of the pairs: reproduced, saying so;
10. ``_reproduced``: reproduced (always returns).

A verdict the censored pairs cannot change gives their share in its ``reason`` (:func:`_verdict`).
"""


def paired_verdict(
    a,
    b,
    claim: str,
    expect: str = "greater",
    transform: str = "difference",
    statistic: str = "median",
    margin: float = 0.0,
    level: float | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    min_effect: float | None = None,
    censored_a=None,
    censored_b=None,
    censoring: str = "",
) -> Verdict:
    """Verdict on a claim about two metrics measured on the same trials (pair i = trial i).

    With d_i = a_i − b_i (``transform="difference"``) or d_i = log(a_i / b_i) (``"log_ratio"``,
    both positive), the interval [lo, hi] of the median (or mean) of d at ``level`` (:func:`interval`:
    exact from order statistics for the median, ``n_boot`` percentile-bootstrap resamples for the mean)
    decides:

    - ``expect="greater"`` (claim a > b): reproduced if lo > margin, not reproduced if hi <= margin
      (the effect is absent or reversed), else inconclusive;
    - ``expect="less"`` (claim a < b): mirror image, with −margin;
    - ``expect="equal"`` (claim |a − b| <= margin, margin > 0): reproduced if the interval lies inside
      [−margin, margin], not reproduced if it lies entirely outside, else inconclusive.

    A directional claim ("greater" or "less") must also be carried by the trials, not by a few of
    them: "reproduced" needs the interval **and** the exact sign test to agree — at least
    :data:`MIN_UNTIED_PAIRS` pairs that differ (``n_untied``), a sign-test p below
    :data:`SIGN_TEST_ALPHA`, more of them in the claimed direction — else the verdict is
    inconclusive and ``reason`` says which condition failed (4 shifted trials out of 100, the
    other 96 tied, are never "reproduced", whatever the bootstrap of the mean says).

    A directional claim is also read from a figure, so "reproduced" needs a visible effect (|estimate| >=
    ``min_effect``); a smaller one is :data:`DIRECTION_ONLY` with the effect in ``reason``, and one carried
    by under :data:`FEW_TRIALS_SHARE` of the pairs says so there. An inconclusive "equal" claim's ``reason``
    gives the trials that would decide it, n·(w / (margin − |estimate|))² for the interval's half-width w
    (which scales as 1/√n; none when |estimate| >= margin).

    Args:
        a: the first metric, one value per trial (any shape, flattened).
        b: the second metric, paired with ``a`` (same size).
        claim: the claim's text, kept in the verdict.
        expect: "greater", "less" or "equal".
        transform: "difference" or "log_ratio" (its estimate and interval reported as ratios).
        statistic: "median" or "mean".
        margin: on the transform's scale (> 0 for "equal"; a 5% ratio margin is log(1.05)).
        level: the interval's level; None for the current default level.
        n_boot: resamples of the mean's bootstrap.
        seed: integer seed of the mean's bootstrap.
        min_effect: the smallest visible |estimate| of a directional claim, on the transform's scale; None:
            log 1.05 for a log-ratio, :data:`VISIBLE_FRACTION` of the median |b| for a difference.
        censored_a: optional bools, the trials whose ``a`` is only a lower bound (a first-passage level not
            reached); the interval is then taken over every completion of the censored values (differences
            sent to ±inf), and a verdict they could change is :data:`NOT_TESTABLE` ("censored: x% not …").
        censored_b: optional bools, the trials whose ``b`` is only a lower bound.
        censoring: how they are censored, for ``reason`` (e.g. "within 200 iterations").

    Returns:
        The verdict of the first of :data:`PAIRED_RULES` giving one on the arguments' :class:`Pairs`;
            pairs with a non-finite value dropped (``n_dropped``), none left: inconclusive; censoring in ``reason``.

    Raises:
        ValueError: a bad ``expect``, ``transform`` or margin, unequal lengths, non-positive "log_ratio" values.

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> before = rng.exponential(1.0, 400)
        >>> after = before * 1.2 * np.exp(rng.normal(0, 0.1, 400))
        >>> v = paired_verdict(after, before, "after > before", transform="log_ratio")
        >>> v.verdict, v.interval_text("{:.2f}")
        ('reproduced', '1.20 [1.18, 1.21]')
    """
    level = _LEVEL.get() if level is None else level
    options = (statistic, level, n_boot, seed)  # as interval() takes them
    pairs = _pairs(a, b, claim, expect, transform, margin, min_effect, options, (censored_a, censored_b), censoring)
    return next(verdict for verdict in (rule(pairs) for rule in PAIRED_RULES) if verdict is not None)


def share_verdict(met, claim: str, share: float = EACH_TRIAL_SHARE, level: float | None = None) -> Verdict:
    """Verdict on a claim about each trial: the share of trials meeting it (``met``, bools; NaN is
    dropped) with its Wilson score interval, p̂ ± z√(p̂(1−p̂)/n + z²/4n²) / (1 + z²/n) around
    (p̂ + z²/2n)/(1 + z²/n): reproduced when the interval lies above ``share``, not reproduced when it
    lies below, else inconclusive.

    Args:
        met: per-trial bools (or 0/1 floats; NaN dropped), any shape.
        claim: the claim's text.
        share: the share of trials the claim needs, in (0, 1).
        level: the interval's level; None for the current default level.

    Returns:
        The verdict, a :class:`Verdict` (estimate: the share p̂; :data:`NOT_TESTABLE` with no trial).

    Examples:
        >>> share_verdict(np.ones(200, bool), "each trial").verdict
        'reproduced'
    """
    level = _LEVEL.get() if level is None else level
    met = np.asarray(met, np.float64).ravel()
    ok = np.isfinite(met)
    n, k = int(ok.sum()), float(met[ok].sum())
    if n == 0:
        return not_testable(claim, "no trial")
    z = float(np.sqrt(2) * _erfinv(level))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = max(0.0, float(centre - half)), min(1.0, float(centre + half))
    verdict = REPRODUCED if lo > share else NOT_REPRODUCED if hi < share else INCONCLUSIVE
    reason = f"{percent(p)} of {n} trials meet it; needs more than {share:.0%}"
    needed = None
    if verdict == INCONCLUSIVE:
        needed = _needed(n, abs(p - share), (hi - lo) / 2)
        reason = f"{reason}; {_needed_text(needed, 'at the observed share', _SHRINKS)}"
    nan = float("nan")
    return Verdict(claim, p, lo, hi, level, nan, p, n, int(met.size - n), verdict, n, reason, "share", needed)


def _erfinv(y: float) -> float:
    """erf⁻¹ by Newton's method on math.erf (a handful of steps to double precision for |y| < 1)."""
    x = 0.0
    for _ in range(60):
        x -= (math.erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def _interval_verdict(expect: str, lo: float, hi: float, margin: float) -> str:
    """What the interval [lo, hi] says about the claim (see :func:`paired_verdict`); NaN bounds decide nothing."""
    if expect == "greater":
        return REPRODUCED if lo > margin else NOT_REPRODUCED if hi <= margin else INCONCLUSIVE
    if expect == "less":
        return REPRODUCED if hi < -margin else NOT_REPRODUCED if lo >= -margin else INCONCLUSIVE
    inside = -margin <= lo and hi <= margin
    outside = lo > margin or hi < -margin
    return REPRODUCED if inside else NOT_REPRODUCED if outside else INCONCLUSIVE


def _effect_text(x: float, transform: str) -> str:
    return f"{100 * np.expm1(abs(x)):.1f}%" if transform == "log_ratio" else f"{abs(x):.3g}"


def percent(share: float) -> str:
    """A share in whole percent, except that a share that is not 0 (or not 1) never reads "0%" (or "100%"):
    "<1%" and ">99%" (a verdict "censored: 0% of pairs" that censoring decided was a contradiction)."""
    if 0 < share < 0.005:
        return "<1%"
    if 0.995 <= share < 1:
        return ">99%"
    return f"{share:.0%}"


def _smaller_text(x: float, limit: float, transform: str) -> str:
    """:func:`_effect_text` of ``x`` with as many digits as it takes to read below that of ``limit``
    (|x| < limit: "4.96%" rather than "5.0%" beside a visible size of 5.0%)."""
    text = _effect_text(x, transform)
    for digits in (2, 3, 4):
        if text != _effect_text(limit, transform):
            break
        text = f"{100 * np.expm1(abs(x)):.{digits}f}%" if transform == "log_ratio" else f"{abs(x):.{digits + 2}g}"
    return text


_SHRINKS = "an interval's half-width ∝ 1/√n"


def _needed(n: int, room: float, half: float) -> float | None:
    """The trials at which an interval of half-width ``half`` on ``n`` trials, shrinking as 1/√n,
    would fit in ``room`` (the distance from the estimate to the boundary it must clear):
    n·(half / room)²; inf when ``room`` <= 0 (no number would), None without a spread."""
    if not (np.isfinite(half) and half > 0 and np.isfinite(room)):
        return None
    if room <= 0:
        return math.inf
    return float(math.ceil(n * (half / room) ** 2))


def _needed_text(needed: float | None, at: str, method: str) -> str:
    if needed is None:
        return "no spread to estimate the trials that would decide it from"
    if needed == math.inf:
        return f"no number of trials would decide it {at}"
    return f"≈ {int(needed):,} trials would decide it {at} (estimated: {method})"


_LEVEL = contextvars.ContextVar("verdict_level", default=0.95)
"""The interval level of verdicts not given one: 0.95, or a deciding procedure's look's (:func:`judged_at`)."""


@contextlib.contextmanager
def judged_at(level: float):
    """Inside, :func:`paired_verdict` and :func:`share_verdict` take intervals at ``level`` unless
    given one: a look of a deciding procedure (:func:`look_level`) re-judges an experiment's claims
    through its own report code."""
    token = _LEVEL.set(validation.probability("level", level, low_open=True, high_open=True))
    try:
        yield
    finally:
        _LEVEL.reset(token)


def look_level(look: int, alpha: float = 0.05) -> float:
    """The interval level of look k = 0, 1, … of a procedure that grows a run until its claims are
    decided (``jaxfed reproduce --decide``): 1 − α·2^−(k+1), spending α/2, α/4, … at looks whose
    trial counts n_k = n_0·2^k are fixed before the first. A wrong decision at any look needs that
    look's interval to miss the true effect, so by the union bound the chance of any wrong decision
    is at most Σ_k α·2^−(k+1) = α, however many looks are taken, which are skipped and what stopped
    them: the sequential plan keeps the stated error rate."""
    validation.integer("look", look, 0)
    return 1.0 - alpha * 2.0 ** -(look + 1)


def _censored(d, cens_a, cens_b, expect, margin, censoring, options) -> tuple[str, str, tuple[float, float]]:
    """(the "censored: …" text, what the interval over every completion says, that interval) with
    censored pairs: a censored a only bounds d from below, a censored b from above; the interval over
    every completion is [lo with those sent to −inf, hi with them sent to +inf]. A verdict it cannot
    decide, where the observed values did, is not testable (:func:`_undecided_by_censoring`)."""
    low = np.where(cens_b, -np.inf, d)
    high = np.where(cens_a, np.inf, d)
    with np.errstate(invalid="ignore"):
        lo = float(interval(low, *options)[1])
        hi = float(interval(high, *options)[2])
    share = float((cens_a | cens_b).mean())
    what = f"censored: {percent(share)} of pairs not reached{' ' + censoring if censoring else ''}"
    return what, _interval_verdict(expect, lo, hi, margin), (lo, hi)


def not_testable(claim: str, reason: str) -> Verdict:
    """The verdict on a claim that the settings cannot detect (``reason`` says why): no statistic.

    Args:
        claim: the claim's text.
        reason: why it cannot be tested.

    Returns:
        A verdict of :data:`NOT_TESTABLE` with NaN statistics.
    """
    nan = float("nan")
    return Verdict(claim, nan, nan, nan, float("nan"), nan, nan, 0, 0, NOT_TESTABLE, 0, reason, "")


def verdict_table(
    verdicts: list, what: str = "paired statistic", fmt: str = "{:.3g}", sections: list | None = None
) -> str:
    """Markdown table of verdicts: claim, statistic with interval, sign-test p, pairs, verdict; with
    ``sections`` (one name per verdict) a first column naming where each claim is stated.

    Args:
        verdicts: the :class:`Verdict` list.
        what: the statistic's name in the header.
        fmt: the format of each number.
        sections: one section name per verdict, or None.

    Returns:
        The Markdown table ("" for no verdict).
    """
    if not verdicts:
        return ""
    level = next((v.level for v in verdicts if v.verdict != NOT_TESTABLE), 0.95)
    first, rule = ("| section ", "|---") if sections is not None else ("", "")
    rows = [
        f"{first}| claim | {what} [{level:.0%} interval] | a > b in | sign-test p | pairs | verdict |",
        f"{rule}|---|---|---|---|---|---|",
    ]
    for i, v in enumerate(verdicts):
        where = f"| {sections[i]} " if sections is not None else ""
        dropped = f" ({v.n_dropped} dropped)" if v.n_dropped else ""
        untied = f", {v.n_untied} differ" if v.n_untied < v.n else ""
        why = f" ({v.reason})" if v.reason else ""
        if v.verdict == NOT_TESTABLE:
            rows.append(f"{where}| {v.claim} | – | – | – | – | **{v.verdict}**{why} |")
            continue
        if v.kind in ("equal", "share"):  # decided by the interval against the margin / share alone
            decides = "equivalence: interval vs margin" if v.kind == "equal" else "share of trials"
            rows.append(
                f"{where}| {v.claim} | {v.interval_text(fmt)} | – | – ({decides}) | "
                f"{v.n}{dropped} | **{v.verdict}**{why} |"
            )
            continue
        rows.append(
            f"{where}| {v.claim} | {v.interval_text(fmt)} | {v.fraction_greater:.0%} | {v.p_value:.2g} | "
            f"{v.n}{untied}{dropped} | **{v.verdict}**{why} |"
        )
    return "\n".join(rows)
