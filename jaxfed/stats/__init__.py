"""Summaries over the trial axis, intervals and tests, and verdicts on claims: one face, three parts.

- :mod:`jaxfed.stats.summary`: the engine's streaming summary core: medians and credible bands
  (:func:`band`), the signed log-spaced histogram, :class:`SummaryAccumulator`, the device's
  per-chunk part (:func:`chunk_summary`) and its fold into a :class:`SummaryState` on the host;
- :mod:`jaxfed.stats.intervals`: the exact interval of a quantile (:func:`quantile_interval`),
  the seeded percentile bootstrap (:func:`bootstrap_interval`), :func:`interval` and the exact
  sign test (:func:`sign_test`);
- :mod:`jaxfed.stats.verdicts`: the verdicts on a paper's claims (:func:`paired_verdict`, read by
  an ordered list of rules), their policy and their Markdown (:func:`verdict_table`).

The parts import one another in that order only (summary imports neither, intervals not verdicts).
This face re-exports every name ``jaxfed.stats`` had before it was split (``__all__`` as it was;
the names imported ``as`` themselves are the public ones outside it and the private ones tests
use), so importers use ``from jaxfed import stats`` as before. A name set on the face (a test's
monkeypatch, a benchmark's timer) is set in the parts that hold it too, so their own calls see
it, as in one module; and ``doctest.testmod(jaxfed.stats)`` runs the parts' examples (``__test__``).
"""

from __future__ import annotations

import sys
import types

import numpy as np  # noqa: F401  # the namespace of the examples that doctest.testmod(jaxfed.stats) runs

from jaxfed.stats import intervals, summary, verdicts
from jaxfed.stats.intervals import _binomial_ranks as _binomial_ranks
from jaxfed.stats.intervals import _resampled_means as _resampled_means
from jaxfed.stats.intervals import _resampled_medians as _resampled_medians
from jaxfed.stats.intervals import (
    bootstrap_interval,
    interval,
    quantile_interval,
    sign_test,
)
from jaxfed.stats.summary import _EDGES as _EDGES
from jaxfed.stats.summary import _N_SIDE as _N_SIDE
from jaxfed.stats.summary import _ZERO as _ZERO
from jaxfed.stats.summary import (
    HIST_LOG_MAX,
    HIST_LOG_MIN,
    HIST_PER_DECADE,
    HISTOGRAM_METHODS,
    SUM_LEVELS,
    SUMMARY_BLOCK,
    Band,
    Summary,
    SummaryAccumulator,
    SummaryPass,
    SummaryState,
    band,
    bin_index,
    chunk_summary,
    count_into,
    dyadic_pieces,
    empty_state,
    finish,
    fold,
    fraction_at_most,
    level_total,
    median_se,
    merge_point_groups,
    result_of,
    summary_of_blocks,
    summary_pass,
    summary_quantile,
)
from jaxfed.stats.summary import N_BINS as N_BINS
from jaxfed.stats.summary import _dyadic_sums as _dyadic_sums
from jaxfed.stats.summary import _float32_level as _float32_level
from jaxfed.stats.summary import _histogram as _histogram
from jaxfed.stats.summary import _tree_sum as _tree_sum
from jaxfed.stats.verdicts import DIRECTION_ONLY as DIRECTION_ONLY
from jaxfed.stats.verdicts import EACH_TRIAL_SHARE as EACH_TRIAL_SHARE
from jaxfed.stats.verdicts import (
    EQUAL_RATIO_MARGIN,
    MIN_UNTIED_PAIRS,
    SIGN_TEST_ALPHA,
    Verdict,
    not_testable,
    paired_verdict,
    verdict_table,
)
from jaxfed.stats.verdicts import FEW_TRIALS_SHARE as FEW_TRIALS_SHARE
from jaxfed.stats.verdicts import INCONCLUSIVE as INCONCLUSIVE
from jaxfed.stats.verdicts import NOT_REPRODUCED as NOT_REPRODUCED
from jaxfed.stats.verdicts import NOT_TESTABLE as NOT_TESTABLE
from jaxfed.stats.verdicts import REPRODUCED as REPRODUCED
from jaxfed.stats.verdicts import VERDICT_POLICY as VERDICT_POLICY
from jaxfed.stats.verdicts import VISIBLE_FRACTION as VISIBLE_FRACTION
from jaxfed.stats.verdicts import VISIBLE_RATIO as VISIBLE_RATIO
from jaxfed.stats.verdicts import percent as percent
from jaxfed.stats.verdicts import share_verdict as share_verdict

__all__ = [
    "Band",
    "Verdict",
    "EQUAL_RATIO_MARGIN",
    "MIN_UNTIED_PAIRS",
    "SIGN_TEST_ALPHA",
    "bootstrap_interval",
    "quantile_interval",
    "interval",
    "sign_test",
    "paired_verdict",
    "not_testable",
    "verdict_table",
    "band",
    "Summary",
    "SummaryAccumulator",
    "SummaryState",
    "SUMMARY_BLOCK",
    "SUM_LEVELS",
    "HISTOGRAM_METHODS",
    "bin_index",
    "chunk_summary",
    "summary_of_blocks",
    "summary_pass",
    "SummaryPass",
    "count_into",
    "dyadic_pieces",
    "level_total",
    "empty_state",
    "fold",
    "finish",
    "result_of",
    "summary_quantile",
    "median_se",
    "fraction_at_most",
    "merge_point_groups",
    "HIST_LOG_MIN",
    "HIST_LOG_MAX",
    "HIST_PER_DECADE",
]
"""The names of the parts' ``__all__``, each once (tests/results/test_stats_face.py)."""

_PARTS = (summary, intervals, verdicts)

__test__ = {
    f"{part.__name__}.{name}": value
    for part in _PARTS
    for name, value in vars(part).items()
    if getattr(value, "__module__", None) == part.__name__ and ">>>" in (getattr(value, "__doc__", None) or "")
}
"""The parts' functions and classes with examples, which ``doctest.testmod(jaxfed.stats)`` runs too."""

_HOMES = {
    name: homes
    for name, value in list(globals().items())
    if not name.startswith("__") and (homes := tuple(p for p in _PARTS if name in vars(p) and vars(p)[name] is value))
}
"""Each name of the face -> the parts that hold the same object (where it is defined, and imported)."""


class _Face(types.ModuleType):
    """The module ``jaxfed.stats``: setting a name sets it in the parts that hold it too (:data:`_HOMES`)."""

    def __setattr__(self, name: str, value) -> None:
        for part in _HOMES.get(name, ()):
            setattr(part, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Face
