"""The package's import graph, read from the source with ``ast`` (nothing is imported): no cycle,
counting imports inside functions; every import points down the floors of :data:`FLOORS` (or
stays in its room); a function imports only a heavy optional dependency, with the reason on its
line or the line above."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jaxfed"

LAZY_ALLOWED = ("xarray", "pandas", "matplotlib", "h5netcdf", "pyarrow", "networkx", "distributed")
"""The only packages a function may import (heavy, or optional: `import jaxfed` must not load them;
``distributed`` is Dask's, the dask extra's, for jaxfed.runs.distributed)."""

FLOORS = (
    (
        "jaxfed._version",
        "jaxfed.builds",
        "jaxfed.jaxcompat",
        "jaxfed.numerics",
        "jaxfed.registry",
        "jaxfed.validation",
    ),  # foundations
    ("jaxfed.stats",),  # summaries, intervals, verdicts
    ("jaxfed.gfvl", "jaxfed.oac", "jaxfed.store"),  # kernels and models; the stored run
    ("jaxfed.scenarios", "jaxfed.plotting", "jaxfed.engine"),  # data; figures; sweeps
    ("jaxfed.experiment",),  # what an experiment is
    ("jaxfed.experiments", "jaxfed.results"),  # the definitions; labelled data and the reports
    ("jaxfed.runs",),  # how any experiment is run
    ("jaxfed.cli",),  # the command
    ("jaxfed",),  # the package's face
)
"""The package's rooms (a module, or a folder and everything under it) from the bottom floor up:
a module imports only modules of its own room or of a lower floor (docs/layout.md)."""


class Import:
    """One import statement's target module inside the package (or outside it), where it is."""

    def __init__(self, source: str, target: str, line: int, in_function: bool):
        self.source, self.target, self.line, self.in_function = source, target, line, in_function

    def __repr__(self) -> str:
        where = "in a function" if self.in_function else "at module level"
        return f"{self.source}:{self.line} imports {self.target} {where}"


def module_files(root: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
    """Module name -> file, for every module of the package (``jaxfed.engine`` for its __init__.py)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules) -> list[str]:
    """The modules an import statement loads: ``from P import x`` is ``P.x`` when that is a module
    of the package, else ``P``; relative imports are resolved against ``module``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]


def imports(root: pathlib.Path = PACKAGE) -> list[Import]:
    """Every import statement of the package, module-level and inside functions (``if
    TYPE_CHECKING`` blocks count: they are the same dependency)."""
    modules = module_files(root)
    out = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"

        def visit(node, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, module, is_package, modules):
                        out.append(Import(module, target, child.lineno, in_function))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text(), str(path)), False)
    return out


def graph(found: list[Import], root: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = set(module_files(root))
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for i in found:
        if i.target in modules:
            edges[i.source].add(i.target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself),
    each as its sorted modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges[node]:
                    out.append(sorted(component))
    return out


def closed_path(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A path from the component's first module back to itself, inside the component (shown in a failure)."""
    inside = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(edges[node] & inside):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if child not in previous:
                    previous[child] = node
                    nxt.append(child)
        frontier = nxt
    return component


def room_of(module: str, floors=FLOORS) -> tuple[int, str]:
    """(floor, room) of a module: the longest room name that is the module or a folder above it."""
    rooms = [(f, r) for f, names in enumerate(floors) for r in names if module == r or module.startswith(r + ".")]
    if not rooms:
        raise KeyError(f"{module}: in no room of FLOORS; add it to one")
    return max(rooms, key=lambda fr: len(fr[1]))


def floor_violations(edges: dict[str, set[str]], floors=FLOORS) -> list[str]:
    """``a -> b`` for every import of a module ``b`` in another room on the same floor or above."""
    out = []
    for module in sorted(edges):
        floor, room = room_of(module, floors)
        for target in sorted(edges[module]):
            up, other = room_of(target, floors)
            if other != room and up >= floor:
                out.append(f"{module} -> {target} (floor {floor} imports floor {up})")
    return out


def lazy_violations(found: list[Import], root: pathlib.Path = PACKAGE) -> list[str]:
    """Imports inside functions of anything but :data:`LAZY_ALLOWED`, or without a reason comment."""
    files = module_files(root)
    lines = {m: p.read_text().splitlines() for m, p in files.items()}
    out = []
    seen = set()
    for i in found:
        if not i.in_function or (i.source, i.line, i.target) in seen:
            continue
        seen.add((i.source, i.line, i.target))
        if i.target.split(".")[0] not in LAZY_ALLOWED:
            out.append(f"{i!r}: move it to the top of the module (only {', '.join(LAZY_ALLOWED)} are imported late)")
            continue
        text = lines[i.source]
        here, above = text[i.line - 1], text[i.line - 2].strip() if i.line > 1 else ""
        if "#" not in here and not above.startswith("#"):
            out.append(f"{i!r}: say why it is imported late, in a comment on its line or the line above")
    return out


def test_the_package_has_no_import_cycle():
    edges = graph(imports())
    found = cycles(edges)
    assert not found, "import cycles (counting imports inside functions):\n" + "\n".join(
        f"  {len(c)} modules ({', '.join(c)}), e.g. " + " -> ".join(closed_path(c, edges)) for c in found
    )


def test_every_import_points_down_a_floor():
    edges = graph(imports())
    assert not floor_violations(edges), "imports running up or across:\n  " + "\n  ".join(floor_violations(edges))


def test_the_floors_hold_every_module():
    for module in graph(imports()):
        room_of(module)  # (KeyError naming a module in no room)


def test_functions_import_only_heavy_optional_dependencies():
    wrong = lazy_violations(imports())
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- the checker itself
def _package(tmp_path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "jaxfed"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_a_cycle_through_a_function_level_and_a_relative_import(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from jaxfed import b\n",
            "b.py": "def f():\n    from . import c\n",
            "c.py": "import jaxfed.a\n",
            "d.py": "from jaxfed import __version__\n",
        },
    )
    found = imports(root)
    edges = graph(found, root)
    assert cycles(edges) == [["jaxfed.a", "jaxfed.b", "jaxfed.c"]]
    assert closed_path(cycles(edges)[0], edges) == ["jaxfed.a", "jaxfed.b", "jaxfed.c", "jaxfed.a"]
    assert {(i.source, i.target) for i in found} >= {("jaxfed.b", "jaxfed.c"), ("jaxfed.d", "jaxfed")}
    assert lazy_violations(found, root) == [
        "jaxfed.b:2 imports jaxfed.c in a function: move it to the top of the "
        "module (only xarray, pandas, matplotlib, h5netcdf, pyarrow, networkx, "
        "distributed are imported late)"
    ]


def test_the_checker_finds_an_import_up_or_across(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "from jaxfed import results\n",
            "results.py": "from jaxfed import stats\n",
            "stats.py": "def f():\n    import pandas  # heavy\n    import xarray\n\n\nfrom jaxfed.experiments import x\n",
            "experiments/__init__.py": "",
            "experiments/x.py": "",
            "engine/__init__.py": "from jaxfed.engine import core\n",
            "engine/core.py": "from jaxfed import __version__, plotting\n",
            "plotting.py": "",
        },
    )
    floors = (("jaxfed.stats",), ("jaxfed.engine", "jaxfed.plotting"), ("jaxfed.experiments",), ("jaxfed.results",), ("jaxfed",))  # fmt: skip
    found = imports(root)
    edges = graph(found, root)
    assert floor_violations(edges, floors) == [
        "jaxfed.engine.core -> jaxfed (floor 1 imports floor 4)",
        "jaxfed.engine.core -> jaxfed.plotting (floor 1 imports floor 1)",
        "jaxfed.stats -> jaxfed.experiments.x (floor 0 imports floor 2)",
    ]
    assert cycles(edges) == []  # the engine's root import runs up a floor, but is not (here) a cycle
    assert lazy_violations(found, root) == [
        "jaxfed.stats:3 imports xarray in a function: say why it is imported late, in a comment on its line or "
        "the line above"
    ]
