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
The public names are the parts' ``__all__``; the face also carries the engine's and the store's
summary internals (``chunk_summary``, ``fold``, ``finish``, …) and the private names the tests
use, outside ``__all__`` and the API reference, so importers use ``from jaxfed import stats``. A name set on the face (a test's
monkeypatch, a benchmark's timer) is set in the parts that hold it too, so their own calls see
it, as in one module; and ``doctest.testmod(jaxfed.stats)`` runs the parts' examples (``__test__``).
"""

from __future__ import annotations

import sys
import types

import numpy as np  # noqa: F401  # the namespace of the examples that doctest.testmod(jaxfed.stats) runs

from jaxfed.stats import intervals, summary, verdicts

# Outside __all__: the engine's and the store's summary internals, and the private names tests use.
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
from jaxfed.stats.summary import HIST_LOG_MAX as HIST_LOG_MAX
from jaxfed.stats.summary import HIST_LOG_MIN as HIST_LOG_MIN
from jaxfed.stats.summary import HIST_PER_DECADE as HIST_PER_DECADE
from jaxfed.stats.summary import HISTOGRAM_METHODS as HISTOGRAM_METHODS
from jaxfed.stats.summary import N_BINS as N_BINS
from jaxfed.stats.summary import SUM_LEVELS as SUM_LEVELS
from jaxfed.stats.summary import (
    SUMMARY_BLOCK,
    Band,
    Summary,
    SummaryState,
    band,
    fraction_at_most,
    median_se,
    summary_quantile,
)
from jaxfed.stats.summary import SummaryAccumulator as SummaryAccumulator
from jaxfed.stats.summary import SummaryPass as SummaryPass
from jaxfed.stats.summary import _dyadic_sums as _dyadic_sums
from jaxfed.stats.summary import _float32_level as _float32_level
from jaxfed.stats.summary import _histogram as _histogram
from jaxfed.stats.summary import _tree_sum as _tree_sum
from jaxfed.stats.summary import bin_index as bin_index
from jaxfed.stats.summary import chunk_summary as chunk_summary
from jaxfed.stats.summary import count_into as count_into
from jaxfed.stats.summary import dyadic_pieces as dyadic_pieces
from jaxfed.stats.summary import empty_state as empty_state
from jaxfed.stats.summary import finish as finish
from jaxfed.stats.summary import fold as fold
from jaxfed.stats.summary import level_total as level_total
from jaxfed.stats.summary import merge_point_groups as merge_point_groups
from jaxfed.stats.summary import result_of as result_of
from jaxfed.stats.summary import summary_of_blocks as summary_of_blocks
from jaxfed.stats.summary import summary_pass as summary_pass
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
from jaxfed.stats.verdicts import EACH_TRIAL_SHARE as EACH_TRIAL_SHARE
from jaxfed.stats.verdicts import FEW_TRIALS_SHARE as FEW_TRIALS_SHARE
from jaxfed.stats.verdicts import VERDICT_POLICY as VERDICT_POLICY
from jaxfed.stats.verdicts import VISIBLE_FRACTION as VISIBLE_FRACTION
from jaxfed.stats.verdicts import VISIBLE_RATIO as VISIBLE_RATIO
from jaxfed.stats.verdicts import percent as percent

__all__ = [
    "Band",
    "band",
    "Summary",
    "SummaryState",
    "SUMMARY_BLOCK",
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
"""The parts' ``__all__``, each name once (tests/results/test_stats_face.py)."""

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
