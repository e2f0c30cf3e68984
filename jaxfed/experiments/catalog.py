"""Finding experiments and describing their parameters.

An experiment is found by name among

- the built-in ones (:data:`jaxfed.experiments.REGISTRY`, ``jaxfed list``);
- a user's file: ``path/to/file.py:ATTRIBUTE`` names an :class:`~jaxfed.experiments.Experiment`
  defined in that file, run with the same CLI, store, resume and report as a built-in one;
- installed packages that declare an entry point in the group ``jaxfed.experiments``
  (``[project.entry-points."jaxfed.experiments"] my-exp = "my_pkg.module:EXPERIMENT"``).

:func:`parameters` lists a config class's parameters with default, type and meaning; the meaning
is the comment that follows the field in the class body (``name: float = 1.0  # meaning``).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import textwrap
import typing

__all__ = ["ENTRY_POINT_GROUP", "find", "from_file", "plugins", "parameters", "describe"]

ENTRY_POINT_GROUP = "jaxfed.experiments"


def find(name: str, registry: dict):
    """The experiment ``name``: built-in, ``file.py:ATTRIBUTE`` or an installed plugin.

    A file experiment comes back with ``source`` set to the absolute ``path:ATTRIBUTE``, which the
    result directory records so that ``jaxfed plot`` finds it again.
    """
    if name in registry:
        return registry[name]
    path, sep, attribute = name.rpartition(":")
    if sep and path.endswith(".py"):
        return from_file(path, attribute)
    found = plugins()
    if name in found:
        return found[name].load()
    known = sorted(registry) + sorted(found)
    raise ValueError(
        f"unknown experiment {name!r}; choose one of: {', '.join(known)}, or give a user experiment as path/to/file.py:NAME"
    )


def from_file(path: str, attribute: str):
    """Loads ``attribute`` (an Experiment) from the Python file ``path``; ValueError naming what is wrong."""
    from jaxfed.experiments.base import Experiment

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"user experiment file {path} does not exist")
    # One module per file path: loading the same file twice reuses it (its classes stay identical).
    module_name = "jaxfed_user_" + hashlib.sha256(path.encode()).hexdigest()[:16]
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"user experiment file {path} is not a Python file (*.py)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses resolve their annotations through it
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise ValueError(f"user experiment file {path} failed to import: {type(err).__name__}: {err}") from err
    candidates = sorted(k for k, v in vars(module).items() if isinstance(v, Experiment))
    value = getattr(module, attribute, None)
    if not isinstance(value, Experiment):
        what = "is not defined" if value is None else f"is a {type(value).__name__}, not an Experiment"
        raise ValueError(
            f"{attribute!r} in {path} {what}; Experiments defined there: {', '.join(candidates) or 'none'}"
        )
    return dataclasses.replace(value, source=f"{path}:{attribute}")


def plugins() -> dict:
    """Installed plugin experiments: entry-point name -> entry point (loaded on use)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


class Parameter(typing.NamedTuple):
    name: str
    type: str
    default: object
    meaning: str


def parameters(config_cls: type) -> list[Parameter]:
    """Every field of a config dataclass: name, type, default and the comment that documents it."""
    comments = _field_comments(config_cls)
    hints = typing.get_type_hints(config_cls)
    out = []
    for f in dataclasses.fields(config_cls):
        hint = hints.get(f.name, f.type)
        type_name = getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
        if typing.get_origin(hint) is tuple:
            type_name = f"comma-separated {getattr(typing.get_args(hint)[0], '__name__', 'value')}s"
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(Parameter(f.name, type_name, default, comments.get(f.name, "")))
    return out


def _field_comments(config_cls: type) -> dict:
    """Trailing ``# comment`` of each annotated field in the class bodies of ``config_cls``'s MRO."""
    comments: dict = {}
    for cls in reversed(config_cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node in body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                # A comment may continue on the following comment-only lines.
                end = node.end_lineno or node.lineno
                text = lines[end - 1][node.end_col_offset :]
                parts = [text.split("#", 1)[1].strip()] if "#" in text else []
                for line in lines[end:]:
                    if not line.strip().startswith("#"):
                        break
                    parts.append(line.strip()[1:].strip())
                if parts:
                    comments[node.target.id] = " ".join(parts)
    return comments


def describe(exp) -> str:
    """``jaxfed show NAME``: the experiment's description, default trials and parameter table."""
    rows = [f"{exp.name}: {exp.description}", f"default trials per point: {exp.default_trials}", ""]
    params = parameters(exp.config_cls)
    width = max(len(p.name) for p in params) if params else 0
    for p in params:
        default = ",".join(map(str, p.default)) if isinstance(p.default, tuple) else p.default
        rows.append(f"  {p.name:<{width}}  {p.type} = {default}")
        if p.meaning:
            rows.append(
                textwrap.fill(p.meaning, 100, initial_indent=" " * (width + 4), subsequent_indent=" " * (width + 4))
            )
    presets = getattr(exp.config_cls, "PRESETS", None)
    if presets:
        rows += ["", "presets (--set preset=NAME, other --set values apply on top):"]
        rows += [f"  {name}: {', '.join(f'{k}={v}' for k, v in values.items())}" for name, values in presets.items()]
    rows += ["", "override with --set NAME=VALUE; a bad name or value is a one-line error"]
    return "\n".join(rows)
