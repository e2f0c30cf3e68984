"""The notebooks execute top to bottom (nbclient), so they cannot rot (slow: CI runs them with -m slow)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.slow  # each notebook runs its experiments in a fresh kernel (~40 s each)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_notebooks_select_by_label_not_by_position():
    """The notebooks read runs as labelled datasets (``to_xarray`` and ``.sel``), not by matching
    label dicts to row numbers (``[i for i, lab in enumerate(sweep.labels) if …]``)."""
    import re

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "to_xarray" in code and ".sel(" in code, path.name
        found = re.findall(r"enumerate\(\s*sweep\.labels|sweep\.labels\[|index_of\(", code)
        assert not found, f"{path.name}: positional label matching {found}"


def test_no_cell_ends_in_a_matplotlib_call_whose_value_jupyter_would_print():
    """A cell whose last line is ``ax.set_ylabel(…)`` shows a stray ``Text(0, 0.5, '…')`` above its figure: such a
    last line ends with ``;``."""
    import re

    drawing = re.compile(r"^(ax\w*|axes\w*|plt|fig)\b.*\.(set_\w+|legend|text|annotate|axhline|axvline|plot)\(")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            lines = cell.source.rstrip().splitlines() if cell.cell_type == "code" else []
            last = lines[-1].strip() if lines else ""
            assert not (drawing.match(last) and not last.endswith(";")), f"{path.name}: {last!r} prints its value"


def test_the_notebooks_ship_their_outputs():
    """A reader browsing the repository sees each notebook as it ran: every code cell executed in
    order, every figure a cell draws stored as an image, no error (the slow test above runs them
    again from the top; ``python benchmarks/notebooks.py --write`` stores fresh outputs)."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{path.name}: not run in order"
        for cell in code:
            kinds = {o.output_type for o in cell.outputs}
            assert "error" not in kinds, path.name
            if "plt.subplots(" in cell.source:
                images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
                assert images, f"{path.name}: a cell that draws stores no figure: {cell.source[:60]!r}"
