"""``jaxfed.stats`` is one face over four parts (summary, quantiles, intervals, verdicts): the names it had as
one module still there, the public ones in ``__all__``, the parts' import order (function lengths: tests/project/test_function_length.py)."""

import ast
import inspect
import pathlib

from jaxfed import stats
from jaxfed.stats import intervals, quantiles, summary, verdicts

PARTS = (summary, quantiles, intervals, verdicts)
BEFORE_THE_SPLIT = [
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


def test_the_face_has_every_name_the_module_had_and_exports_the_parts_public_names_once():
    """``__all__`` is the public names (the parts'); the names the one module exported before
    (the summary internals the engine and the store use included) are all in the parts."""
    assert all(any(hasattr(part, name) for part in PARTS) for name in BEFORE_THE_SPLIT)
    parts_all = [name for part in PARTS for name in part.__all__]
    assert len(parts_all) == len(set(parts_all)) and parts_all == stats.__all__
    for part in PARTS:
        for name in part.__all__:
            value = vars(part)[name]
            assert getattr(stats, name) is value
            if inspect.isfunction(value) or inspect.isclass(value):
                assert value.__module__ == part.__name__, name


def _stats_imports(part) -> set[str]:
    """The jaxfed.stats modules a part imports (read from its source)."""
    tree = ast.parse(pathlib.Path(part.__file__).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxfed.stats"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if node.module == "jaxfed.stats")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("jaxfed.stats"))
    return found


def test_the_parts_import_one_another_in_order_only():
    assert _stats_imports(summary) == set()
    assert _stats_imports(quantiles) == {"jaxfed.stats.summary"}
    assert _stats_imports(intervals) == set()
    assert _stats_imports(verdicts) <= {"jaxfed.stats.intervals", "jaxfed.stats.summary"}
