"""The runnable examples in the public API's docstrings (doctest)."""

import doctest

import pytest

from jaxfed import graphs, stats, validation

MODULES = [graphs, stats, validation]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_docs_quote_no_measured_interval():
    """Numbers of a run (a statistic with its interval, "1.04 [1.03, 1.05]") are quoted only by the
    report a run generates, never by hand in the README or docs, where they would go stale."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    interval = re.compile(r"\d(?:\.\d+)? \[[−-]?\d+(?:\.\d+)?, [−-]?\d+(?:\.\d+)?\]")
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        quoted = interval.findall(path.read_text())
        assert not quoted, f"{path.name} quotes {quoted}"
