"""The notebooks cold and warm (issue 60's target: each notebook <= 90 s cold on the 2-core CPU).

Each notebook of ``notebooks/`` runs top to bottom in a fresh Jupyter kernel (nbclient), as a
reader's "Run all": ``cold`` on an empty compilation cache of its own, then ``warm`` on the cache
the cold run filled (a second "Run all" in a new kernel, or the same notebook opened again). The
wall seconds of each whole execution (the kernel's start included) and of each code cell, and
the machine's load before and after, go to the JSON. ``--write`` stores the cold execution's
outputs in the notebook itself, so that a reader browsing the repository sees the figures
(tests/project/test_notebooks.py checks that they are there).

    python benchmarks/notebooks.py [--write] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import sys
import tempfile
import time

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, os.path.dirname(__file__))
from common import write_json  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET_S = 90.0
"""Issue 60: each notebook at most this many seconds cold."""


def execute(path: pathlib.Path, cache: str) -> tuple[nbformat.NotebookNode, float, list[float]]:
    """(the executed notebook, its wall seconds, each code cell's seconds) of ``path`` run in a
    fresh kernel whose jaxfed compiles into ``cache``."""
    nb = nbformat.read(path, as_version=4)
    os.environ["JAXFED_COMPILATION_CACHE"] = cache  # (the kernel inherits this process's environment)
    with tempfile.TemporaryDirectory(prefix="jaxfed-notebook-") as work:
        client = NotebookClient(
            nb, timeout=900, kernel_name="python3", record_timing=True, resources={"metadata": {"path": work}}
        )
        start = time.perf_counter()
        client.execute()
        wall = time.perf_counter() - start
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            timing = cell.metadata.get("execution", {})
            began = datetime.datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
            ended = datetime.datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
            cells.append((ended - began).total_seconds())
    return nb, wall, cells


def stored(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The executed notebook as it is committed: without nbclient's per-cell timestamps, and each
    run of stream outputs as a terminal shows it (joined, a line's text overwritten after a
    carriage return left out: the progress lines end as their last state)."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        outputs: list = []
        for out in cell.outputs:
            last = outputs[-1] if outputs else None
            if (
                out.output_type == "stream"
                and last is not None
                and last.output_type == "stream"
                and last.name == out.name
            ):
                last.text += out.text
            else:
                outputs.append(out)
        for out in outputs:
            if out.output_type == "stream":
                lines = (line.rsplit("\r", 1)[-1] for line in out.text.split("\n"))
                out.text = "\n".join(line for line in lines if line.strip() or not line)
        cell.outputs = outputs
    return nb


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the cold run's outputs in the notebooks")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "notebooks.json"))
    args = parser.parse_args(argv)
    rows: dict = {"cpu_count": os.cpu_count(), "load_before": os.getloadavg(), "target_s": TARGET_S, "notebooks": {}}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        with tempfile.TemporaryDirectory(prefix="jaxfed-cache-") as cache:
            executed, cold, cold_cells = execute(path, cache)
            _, warm, warm_cells = execute(path, cache)
        rows["notebooks"][path.name] = {
            "cold_s": cold,
            "warm_s": warm,
            "cold_cells_s": cold_cells,
            "warm_cells_s": warm_cells,
            "met": cold <= TARGET_S,
        }
        print(
            f"{path.name}: cold {cold:.1f} s (target {TARGET_S:g} s: {'met' if cold <= TARGET_S else 'not met'}), warm {warm:.1f} s"
        )
        if args.write:
            nbformat.write(stored(executed), path)
            print(f"stored its outputs in {path.relative_to(ROOT)}")
    rows["load_after"] = os.getloadavg()
    write_json(args.out, rows)


if __name__ == "__main__":
    main()
