"""The shell commands in docs/examples/*.py's docstrings run as written (sizes made tiny: ``--trials``, and for the
k-means examples fewer rounds, SNRs and digit counts by ``--set``)."""

import ast
import pathlib
import re
import shlex

import pytest

from jaxfed import cli

ROOT = pathlib.Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
TINY_TRIALS = "4"
TINY_SETTINGS = {  # (a k-means example at its default size compiles a program per digit count: minutes under load)
    "rician_channel": {"digits_list": "4", "snrs_db": "10,30", "n_rounds": "5"},
    "power_gains": {"n_rounds": "5"},
}


def documented_commands(path: pathlib.Path) -> list[list[str]]:
    """The ``jaxfed …`` lines of the module docstring of ``path`` (a trailing backslash continues a line), as
    argument lists without the leading ``jaxfed``."""
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=True) or ""
    commands, pending = [], ""
    for line in doc.splitlines():
        text = line.strip()
        if pending:
            text = pending + " " + text
        elif not text.startswith("jaxfed "):
            continue
        pending = text[:-1].rstrip() if text.endswith("\\") else ""
        if not pending:
            commands.append(shlex.split(text)[1:])
    return commands


def test_every_example_documents_commands_and_names_its_experiment_where_a_directory_needs_it():
    """Each example documents how to run it; a ``plot``/``report``/``verify`` of a directory a user experiment
    wrote names that experiment (``--experiment``): without it the command exits 2."""
    assert EXAMPLES
    for path in EXAMPLES:
        commands = documented_commands(path)
        assert any(c[:1] == ["run"] for c in commands), f"{path.name}: no documented `jaxfed run`"
        for command in commands:
            if command[0] in ("plot", "report", "verify"):
                assert "--experiment" in command, f"{path.name}: `jaxfed {shlex.join(command)}` exits 2"


def _tiny(command: list[str], out: pathlib.Path, settings: dict) -> list[str]:
    """``command`` with ``--trials`` made tiny, a run's ``settings`` added as ``--set``, and its ``results/…``
    directories under ``out``."""
    argv = [str(out / a) if re.match(r"results/", a) else a for a in command]
    if "--trials" in argv:
        argv[argv.index("--trials") + 1] = TINY_TRIALS
    if argv[0] != "run":
        return argv
    return argv + [a for key, value in settings.items() for a in ("--set", f"{key}={value}")] + ["--quiet"]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_examples_documented_commands_run_as_written(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the commands name docs/examples/… from the repository's root
    for command in documented_commands(path):
        argv = _tiny(command, tmp_path, TINY_SETTINGS.get(path.stem, {}))
        assert cli.main(argv) == 0, f"{path.name}: jaxfed {shlex.join(command)}"
