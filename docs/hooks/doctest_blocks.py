"""MkDocs hook: the docstrings' doctest examples become code blocks, Sphinx roles plain code.

The docstrings are written for ``help()`` and doctest: an example is a run of ``>>>`` lines and
their output, a reference a Sphinx role (:func:`name`). Markdown would read ``>>>`` as nested
quotes and an output line ``[0.5]`` after ``[...]`` as a reference link; this preprocessor wraps
each example in a ``pycon`` fence and drops the roles' prefixes, in the pages and in the API
reference that mkdocstrings renders with the same Markdown extensions.
"""

import re

from markdown import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

ROLE = re.compile(r":(?:py:)?(?:func|mod|class|data|attr|meth|obj|exc|const):(?=`)")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


class DoctestBlocks(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fence = None  # the marker of the fenced block we are in
        example = None  # the indentation of the doctest example we are in
        for line in lines:
            stripped = line.lstrip()
            indent = line[: len(line) - len(stripped)]
            if example is not None:
                if stripped:
                    out.append(line)
                    continue
                out.append(example + "```")
                example = None
            opened = FENCE.match(line)
            if fence is not None:
                if opened and opened.group(1).startswith(fence) and not stripped[len(opened.group(1)) :].strip():
                    fence = None
                out.append(line)
            elif opened:
                fence = opened.group(1)
                out.append(line)
            elif stripped.startswith(">>>"):
                if out and out[-1].strip():
                    out.append("")
                out.extend([indent + "```pycon", line])
                example = indent
            else:
                out.append(ROLE.sub("", line))
        if example is not None:
            out.append(example + "```")
        return out


class DoctestBlocksExtension(Extension):
    def extendMarkdown(self, md):  # Python-Markdown's name for the hook
        # after whitespace normalisation (30), before the fenced-code preprocessors (25)
        md.preprocessors.register(DoctestBlocks(md), "doctest_blocks", 27)


@event_priority(100)  # before mkdocstrings takes the Markdown extensions
def on_config(config):
    config.markdown_extensions.append(DoctestBlocksExtension())
    return config
