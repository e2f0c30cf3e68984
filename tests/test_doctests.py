"""The runnable examples in the public API's docstrings (doctest)."""

import doctest

import pytest

from jaxfed import graphs, stats, validation

MODULES = [graphs, stats, validation]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
