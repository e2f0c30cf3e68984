"""The runnable examples in the public API's docstrings (doctest) and in the README; the README and docs/ as
pages: no hand-quoted result, links that resolve, every page in the site."""

import contextlib
import doctest
import io
import pathlib
import re
import types

import numpy as np
import pytest

from jaxfed import registry, stats, validation
from jaxfed.gfvl import expfam, graphs
from jaxfed.oac import aggregators

MODULES = [
    graphs,
    stats.summary,
    stats.quantiles,
    stats.intervals,
    stats.verdicts,
    validation,
    registry,
    expfam.generic,  # (the face re-exports; its parts hold the examples)
    aggregators,
]


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_docs_quote_no_measured_interval():
    """Numbers of a run (a statistic with its interval, "1.04 [1.03, 1.05]") are quoted only by the
    report a run generates, never by hand in the README or docs, where they would go stale."""
    root = pathlib.Path(__file__).resolve().parents[2]
    interval = re.compile(r"\d(?:\.\d+)? \[[−-]?\d+(?:\.\d+)?, [−-]?\d+(?:\.\d+)?\]")
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        quoted = interval.findall(path.read_text())
        assert not quoted, f"{path.name} quotes {quoted}"


ROOT = pathlib.Path(__file__).resolve().parents[2]
README_TEST_COMMAND = 'python -m pip install -e ".[test]" && python -m pytest'
README_MAIN_COMMAND = "python -m pip install . && jaxfed reproduce"


def _pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "api").glob("*.md"))]


def _links(text):
    """The targets of the Markdown links of a page, outside code blocks and code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(path):
    """The heading ids of a page, as Python-Markdown's toc (and GitHub, for these headings) writes them."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    ids = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\s-]", "", heading).strip().lower()
        ids.add(re.sub(r"[-\s]+", "-", slug))
    return ids


def test_the_readme_is_a_landing_page_with_the_two_commands():
    """The README stays short (everything else is in docs/), keeps the two commands, and CI runs its test command
    and builds the documentation site in strict mode."""
    readme = (ROOT / "README.md").read_text()
    # (135: the first questions answered where they are asked: the times, a venv, presets, verdict words; issue 60)
    assert len(readme.splitlines()) <= 135, "README.md is a landing page: move the detail into docs/"
    assert README_MAIN_COMMAND in readme and README_TEST_COMMAND in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert README_TEST_COMMAND in ci
    assert '-e ".[docs]"' in ci and "mkdocs build --strict" in ci


def test_every_local_link_of_the_readme_and_the_docs_resolves():
    """Relative links (and their anchors) point at files that exist; a docs page links only inside docs/, which
    is what the site holds (`mkdocs build --strict` checks the same when the docs extra is installed)."""
    for page in _pages():
        for target in _links(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.relative_to(ROOT)} links to a missing {target}"
            if page != ROOT / "README.md":
                assert resolved.is_relative_to(ROOT / "docs"), f"{page.relative_to(ROOT)} links outside docs/: {target}"
            if anchor and resolved.suffix == ".md":
                assert anchor in _anchors(resolved), (
                    f"{page.relative_to(ROOT)}: no heading #{anchor} in {path or page.name}"
                )


def test_the_site_has_every_page_and_an_api_page_per_public_module():
    import jaxfed

    config = (ROOT / "mkdocs.yml").read_text()
    nav = re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", config, flags=re.MULTILINE)
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in _pages()[1:]]
    assert sorted(nav) == sorted(pages), "mkdocs.yml's nav lists every page of docs/ once"
    assert re.search(r"^strict: true$", config, flags=re.MULTILINE)
    documented = {
        m
        for p in pages
        if p.startswith("api/")
        for m in re.findall(r"^::: (\S+)$", (ROOT / "docs" / p).read_text(), re.M)
    }
    modules = [n for n in jaxfed.__all__ if isinstance(getattr(jaxfed, n), types.ModuleType)]
    extra = [
        "experiment",
        "experiments",
        "experiments.kmeans.trials",
        "experiments.gfvl.trials",
        "runs",
        "registry",
        "plotting",
    ]
    kernels = [
        "gfvl.expfam",
        "gfvl.likelihoods",
        "gfvl.models",
        "gfvl.graphs",
        "gfvl.gossip",
        "gfvl.natgrad",
        "oac.kmeans",
    ]
    for name in [*modules, *extra, *kernels, "gfvl.quadrature", "gfvl.logistic"]:
        assert f"jaxfed.{name}" in documented, f"no API page renders jaxfed.{name}"


def test_the_readmes_times_are_the_measured_ones():
    """Every time the README puts next to a command (``7 min 19 s``, ``0.82 s``, ``67 s``) is one of
    docs/performance.md's measured figures, which name the machine, commit, load and date; the two commands and the
    ten lines have one."""
    readme = (ROOT / "README.md").read_text()
    performance = (ROOT / "docs" / "performance.md").read_text()
    times = re.findall(r"\d+ min \d+ s|(?<![\d.])\d+(?:\.\d+)? s\b", readme)
    assert len(times) >= 6
    for time in times:
        figure = time if "min" in time else time.removesuffix(" s")
        assert figure in performance, f"README quotes {time!r}, which docs/performance.md does not record"
    commands = [line for line in readme.splitlines() if "jaxfed reproduce" in line or "python -m pytest -n" in line]
    assert all(re.search(r"\d+ min \d+ s", line) for line in commands[:2]), commands[:2]


def test_the_readme_example_prints_what_the_readme_says():
    """The ten-line example runs and prints the numbers quoted under it (float32 on a CPU)."""
    readme = (ROOT / "README.md").read_text()
    code, printed = re.search(r"```python\n(.*?)```\n.*?```\n(.*?)```", readme, flags=re.DOTALL).groups()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})
    number = r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?"
    expected = np.array([float(v) for v in re.findall(number, printed)])
    got = np.array([float(v) for v in re.findall(number, out.getvalue())])
    assert expected.size == 9 and got.shape == expected.shape, out.getvalue()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=0)
