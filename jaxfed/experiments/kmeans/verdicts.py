"""The k-means experiments' verdict helpers: final values per point, points found by their
labels, paired ratio and difference verdicts, and the markdown block that shows them.
:mod:`jaxfed.experiments.kmeans.trials` re-exports them for a user's study built on that layer."""

from __future__ import annotations

import math

import numpy as np

from jaxfed import stats

EQUAL_MARGIN = stats.EQUAL_RATIO_MARGIN  # "≈": the paired median ratio's interval lies within [1/1.05, 1.05]


def final_values(results: dict, name: str = "loss"):
    """(point, trial) values of the last round (or of a per-trial metric); None for summaries.

    Args:
        results: the run's results, {metric: array or Summary}.
        name: the metric.

    Returns:
        (n_points, n_trials) NumPy array, or None.
    """
    value = results[name]
    if isinstance(value, stats.Summary):
        return None
    value = np.asarray(value)
    return value[..., -1] if value.ndim == 3 else value


def index_of(labels: list[dict], **match) -> int:
    """Index of the first label whose items include ``match``.

    Args:
        labels: the sweep labels.
        **match: the label items to match.

    Returns:
        The index.

    Raises:
        KeyError: no label matches.

    Examples:
        >>> index_of([{"method": "ideal"}, {"method": "oac", "digits": 2}], method="oac")
        1
    """
    for i, lab in enumerate(labels):
        if all(lab.get(k) == v for k, v in match.items()):
            return i
    raise KeyError(match)


def ratio_verdict(final, a: int, b: int, claim: str, expect: str):
    """Paired verdict on the per-trial ratio final[a]/final[b] (expect "less", "greater" or
    "equal", the last within ±:data:`EQUAL_MARGIN`).

    Args:
        final: (n_points, n_trials) final values (:func:`final_values`).
        a: the first point's index.
        b: the second point's index.
        claim: the claim's text.
        expect: "less", "greater" or "equal".

    Returns:
        The verdict, a :class:`jaxfed.stats.Verdict`.
    """
    margin = math.log1p(EQUAL_MARGIN) if expect == "equal" else 0.0
    return stats.paired_verdict(final[a], final[b], claim, expect=expect, transform="log_ratio", margin=margin)


def difference_verdict(final, a: int, b: int, claim: str, expect: str = "less"):
    """Paired verdict on the mean per-trial difference final[a] − final[b] (m²): the statistic for
    an effect that shows in a minority of trials (e.g. re-initialisation rescuing a run), where
    the median of the pairs is 0.

    Args:
        final: (n_points, n_trials) final values.
        a: the first point's index.
        b: the second point's index.
        claim: the claim's text.
        expect: "less", "greater" or "equal".

    Returns:
        The verdict, a :class:`jaxfed.stats.Verdict`.
    """
    return stats.paired_verdict(final[a], final[b], claim, expect=expect, statistic="mean")


RATIO_TEXT = "per-trial ratio a/b of final losses; median with its 95% interval"


DIFFERENCE_TEXT = "per-trial difference a − b of final losses (m²); mean with its 95% bootstrap interval"


def verdict_block(verdicts, how: str = RATIO_TEXT, what: str = "median ratio a/b") -> str:
    """A report's verdicts paragraph: how the effect is measured (``how``), the meaning of "≈"
    when a claim uses it, and :func:`jaxfed.stats.verdict_table` of ``verdicts`` (column ``what``).

    Args:
        verdicts: the :class:`jaxfed.stats.Verdict` list.
        how: how the effect is measured.
        what: the statistic's column header.

    Returns:
        The Markdown paragraph and table.
    """
    equal = f'; "≈" means within ±{EQUAL_MARGIN:.0%}' if any("≈" in v.claim for v in verdicts) else ""
    return (
        f"**Verdicts** ({how}, over the same trials{equal}; exact sign test):\n\n"
        + stats.verdict_table(verdicts, what)
        + "\n"
    )
