"""``jaxfed.stats`` is one face over three parts (summary, intervals, verdicts): the names it had as
one module still there, the public ones in ``__all__``, the parts' import order, names set on the face reaching the parts, short functions."""

import ast
import doctest
import inspect
import pathlib

import numpy as np
import pytest

from jaxfed import stats
from jaxfed.stats import intervals, summary, verdicts

PARTS = (summary, intervals, verdicts)
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
OUTSIDE_ALL = [
    # public names that were never in __all__, and the private ones tests import from jaxfed.stats
    *("N_BINS", "VERDICT_POLICY", "VISIBLE_RATIO", "VISIBLE_FRACTION", "FEW_TRIALS_SHARE", "EACH_TRIAL_SHARE"),
    *("percent", "_EDGES", "_N_SIDE", "_ZERO", "_tree_sum", "_dyadic_sums", "_histogram"),
    *("_float32_level", "_resampled_medians", "_resampled_means", "_binomial_ranks"),
]


def test_the_face_has_every_name_the_module_had_and_exports_the_parts_public_names_once():
    """``__all__`` is the public names (the parts'); the names the one module exported before
    (summary internals included: the engine and the store use them) are still on the face."""
    assert all(hasattr(stats, name) for name in BEFORE_THE_SPLIT)
    parts_all = [name for part in PARTS for name in part.__all__]
    assert len(parts_all) == len(set(parts_all)) and parts_all == stats.__all__
    for part in PARTS:
        for name in part.__all__:
            value = vars(part)[name]
            assert getattr(stats, name) is value
            if inspect.isfunction(value) or inspect.isclass(value):
                assert value.__module__ == part.__name__, name
    for name in OUTSIDE_ALL:
        assert any(vars(part).get(name, None) is getattr(stats, name) for part in PARTS), name


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
    assert _stats_imports(intervals) == set()
    assert _stats_imports(verdicts) <= {"jaxfed.stats.intervals", "jaxfed.stats.summary"}


def test_a_summary_block_set_on_the_face_is_the_one_the_summary_uses(monkeypatch):
    """The store's and the engine's tests set stats.SUMMARY_BLOCK: the summary's own functions see it."""
    values = np.arange(32.0).reshape(1, 32)
    monkeypatch.setattr(stats, "SUMMARY_BLOCK", 8)
    assert summary.SUMMARY_BLOCK == 8
    part = stats.chunk_summary(values, 32, np)  # four blocks of 8 (a block of 64 could not reshape 32)
    assert part["sum_pieces"][0, 0] == values.sum()
    monkeypatch.undo()
    assert summary.SUMMARY_BLOCK == stats.SUMMARY_BLOCK == 64


def test_a_function_set_on_the_face_is_the_one_the_parts_call(monkeypatch):
    folds, intervals_taken = [], []
    real_fold, real_interval = stats.fold, stats.interval
    monkeypatch.setattr(stats, "fold", lambda *a, **k: folds.append(1) or real_fold(*a, **k))
    monkeypatch.setattr(stats, "interval", lambda *a, **k: intervals_taken.append(1) or real_interval(*a, **k))
    stats.finish(stats.empty_state((1,)), np.ones((1, 3)))
    stats.paired_verdict(np.arange(1.0, 31.0), np.zeros(30), "a > b")
    assert folds == [1] and intervals_taken == [1]  # finish folds once; the verdict takes one interval
    monkeypatch.undo()
    assert summary.fold is real_fold and verdicts.interval is intervals.interval is real_interval


def test_the_face_runs_every_example_of_the_parts():
    with_examples = {
        f"{part.__name__}.{name}"
        for part in PARTS
        for name, value in vars(part).items()
        if (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == part.__name__
        and ">>>" in (value.__doc__ or "")
    }
    assert with_examples and set(stats.__test__) == with_examples
    found = doctest.DocTestFinder().find(stats)
    assert {t.name.split(".__test__.")[-1] for t in found if t.examples} == with_examples


@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.__name__)
def test_no_function_of_the_parts_is_longer_than_80_lines(part):
    tree = ast.parse(pathlib.Path(part.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            assert node.end_lineno - start + 1 <= 80, node.name
