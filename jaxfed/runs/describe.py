"""An experiment's parameters, described (``jaxfed show``)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import sys
import textwrap
import tokenize
import typing

from jaxfed.experiment import check_config_class


class Parameter(typing.NamedTuple):
    name: str
    type: str
    default: object
    meaning: str


def parameters(config_cls: type) -> list[Parameter]:
    """Every field of a config dataclass: name, type, default and the comment that documents it
    (ValueError for a class that is not a config dataclass: see :func:`~jaxfed.experiment.check_config_class`)."""
    hints = check_config_class(config_cls)
    comments = _field_comments(config_cls)
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
    """The ``# comment`` of each annotated field in the class bodies of ``config_cls``'s MRO, its
    choice references written out (:func:`_written_out`): the comment on the field's lines (a long
    default that the formatter wraps in parentheses carries it inside), continued on the
    comment-only lines below; for a field without one, the comment-only lines directly above it
    (then not a continuation of the field before)."""
    comments: dict = {}
    for cls in reversed(config_cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        comment_at = {
            token.start[0]: token.string[1:].strip()
            for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT
        }

        def block(row: int, step: int) -> tuple[list[str], int]:
            """The comments of the comment-only lines from ``row`` on (``step`` ±1), and the row after them."""
            found = []
            while row in comment_at and lines[row - 1].strip().startswith("#"):
                found.append(comment_at[row])
                row += step
            return (found if step > 0 else found[::-1]), row

        module = sys.modules.get(cls.__module__)
        namespace = vars(module) if module is not None else {}
        tree = ast.parse(source)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        fields = [  # (name, first line, last line)
            (node.target.id, node.lineno, node.end_lineno or node.lineno)
            for node in body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        ]
        own = {
            first: [comment_at[row] for row in range(first, last + 1) if row in comment_at] for _, first, last in fields
        }
        bare = {first for first, parts in own.items() if not parts}  # fields that take the comment above them
        for name, first, last in fields:
            parts = own[first]
            if parts:
                below, after = block(last + 1, 1)
                parts = parts + (below if after not in bare else [])
            else:
                parts = block(first - 1, -1)[0]
            if parts:
                comments[name] = _written_out(" ".join(parts), namespace)
    return comments


_CHOICE_REFERENCE = re.compile(r"one of ((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*|[A-Z][A-Z0-9_]+)(\(\))?")
"""``one of MODULE.NAME``, ``one of MODULE.FUNCTION()`` or ``one of NAME`` (upper case: a constant of
the class's own module) in a field's comment."""


def _written_out(text: str, namespace: dict) -> str:
    """``text`` with each reference of :data:`_CHOICE_REFERENCE` (a function: its result) that
    names, from ``namespace``, a non-empty tuple, list or dict (its keys) of strings replaced by
    ``one of "a", "b", …``; other references stay as they are."""

    def values(match: re.Match) -> str:
        head, *attributes = match.group(1).split(".")
        value = namespace.get(head)
        for attribute in attributes:
            value = getattr(value, attribute, None)
        if match.group(2) and callable(value):
            value = value()
        if isinstance(value, (tuple, list, dict)) and value and all(isinstance(v, str) for v in value):
            return "one of " + ", ".join(f'"{v}"' for v in value)
        return match.group(0)

    return _CHOICE_REFERENCE.sub(values, text)


CHOICE_LEGEND = (
    "[choice]: a value or reading jaxfed chose where the paper is silent or inconsistent "
    "(each one is documented in docs/gfvl.md or docs/kmeans.md)"
)
"""What ``jaxfed show`` says "[choice]" in a parameter's meaning stands for."""


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
    if any("[choice]" in p.meaning for p in params):
        rows += ["", CHOICE_LEGEND]
    presets = getattr(exp.config_cls, "PRESETS", None)
    if presets:
        rows += ["", "presets (--set preset=NAME, other --set values apply on top):"]
        rows += [f"  {name}: {', '.join(f'{k}={v}' for k, v in values.items())}" for name, values in presets.items()]
    rows += ["", "override with --set NAME=VALUE; a bad name or value is a one-line error"]
    return "\n".join(rows)
