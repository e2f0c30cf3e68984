"""No function of the package is over 80 lines, its decorators and docstring included: a longer
one is split into named steps (Architecture IV)."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "jaxfed"
LIMIT = 80


def long_functions(root: pathlib.Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - start + 1 > LIMIT:
                    out.append(
                        f"{path.relative_to(root.parent)}:{start} {node.name} ({node.end_lineno - start + 1} lines)"
                    )
    return out


def test_no_function_is_over_80_lines():
    assert long_functions() == []


def test_the_check_counts_decorators_and_docstrings(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 2))
    (tmp_path / "m.py").write_text(f'@dec\ndef f():\n    """Doc."""\n{body}\n')
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:1 f ({LIMIT + 1} lines)"]
