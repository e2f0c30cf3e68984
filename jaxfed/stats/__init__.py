"""Summaries over the trial axis, intervals and tests, and verdicts on claims: one face, four parts.

- :mod:`jaxfed.stats.summary`: the engine's streaming summary: the signed log-spaced histogram,
  the device's per-chunk part and its fold into a :class:`SummaryState` on the host, the
  :class:`Summary` a run returns;
- :mod:`jaxfed.stats.quantiles`: medians and credible bands (:func:`band`) from raw trials or a
  :class:`Summary`, its quantiles (:func:`summary_quantile`), :func:`median_se` and
  :func:`fraction_at_most`;
- :mod:`jaxfed.stats.intervals`: the exact interval of a quantile (:func:`quantile_interval`),
  the seeded percentile bootstrap (:func:`bootstrap_interval`), :func:`interval` and the exact
  sign test (:func:`sign_test`);
- :mod:`jaxfed.stats.verdicts`: the verdicts on a paper's claims (:func:`paired_verdict`, read by
  an ordered list of rules), their policy and their Markdown (:func:`verdict_table`).

The parts import one another in that order only (summary imports none, quantiles only summary,
intervals neither, verdicts not quantiles). This face re-exports the parts' public names
(``__all__``); the engine and the store use the summary's internals from
:mod:`jaxfed.stats.summary` itself.
"""

from jaxfed.stats import intervals as intervals  # (the parts, as attributes of the face)
from jaxfed.stats import quantiles as quantiles
from jaxfed.stats import summary as summary
from jaxfed.stats import verdicts as verdicts
from jaxfed.stats.intervals import (
    bootstrap_interval,
    interval,
    quantile_interval,
    sign_test,
)
from jaxfed.stats.quantiles import Band, band, fraction_at_most, median_se, summary_quantile
from jaxfed.stats.summary import SUMMARY_BLOCK, Summary, SummaryState
from jaxfed.stats.verdicts import (
    DIRECTION_ONLY,
    EQUAL_RATIO_MARGIN,
    INCONCLUSIVE,
    MIN_UNTIED_PAIRS,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    SIGN_TEST_ALPHA,
    Verdict,
    not_testable,
    paired_verdict,
    share_verdict,
    verdict_table,
)

__all__ = [
    "Summary",
    "SummaryState",
    "SUMMARY_BLOCK",
    "Band",
    "band",
    "summary_quantile",
    "median_se",
    "fraction_at_most",
    "bootstrap_interval",
    "quantile_interval",
    "interval",
    "sign_test",
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
"""The parts' ``__all__``, each name once (tests/stats/test_stats_face.py)."""
