"""The layout shows the architecture: a folder's face (``__init__.py``) is a short re-export list
and no module is so long that a reader cannot hold it (issue 57: faces ≤ 150 lines, modules ≤ 700)."""

from __future__ import annotations

import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jaxfed"
FACE_LINES = 150
MODULE_LINES = 700


def _lines(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def test_every_face_is_short():
    long = {
        str(p.relative_to(PACKAGE.parent)): _lines(p) for p in PACKAGE.rglob("__init__.py") if _lines(p) > FACE_LINES
    }
    assert not long, f"faces over {FACE_LINES} lines (move the code into a named module): {long}"


def test_every_module_fits_in_700_lines():
    long = {str(p.relative_to(PACKAGE.parent)): _lines(p) for p in PACKAGE.rglob("*.py") if _lines(p) > MODULE_LINES}
    assert not long, f"modules over {MODULE_LINES} lines (split them by concern): {long}"
