"""docs/layout.md is true to the code: its module table names every module of the package, and
only those (a module added, moved or deleted without its row fails here)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_layout_table_names_every_module_and_only_those():
    text = (ROOT / "docs" / "layout.md").read_text()
    documented = set(re.findall(r"^\| `(jaxfed/[\w/]+\.py)` \|", text, re.M))
    present = {str(p.relative_to(ROOT)) for p in (ROOT / "jaxfed").rglob("*.py")}
    assert documented == present, (
        f"docs/layout.md's module table is stale: missing {sorted(present - documented)}, "
        f"no longer there {sorted(documented - present)}"
    )
