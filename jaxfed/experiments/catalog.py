"""Finding experiments and describing their parameters.

An experiment is found by name among

- the registered ones (:data:`jaxfed.experiments.REGISTRY`, :func:`jaxfed.experiments.register`, ``jaxfed list``);
- a user's file: ``path/to/file.py:ATTRIBUTE`` names an :class:`~jaxfed.experiments.Experiment`
  defined in that file, run with the same CLI, store, resume and report as a built-in one;
- installed packages that declare an entry point in the group ``jaxfed.experiments``
  (``[project.entry-points."jaxfed.experiments"] my-exp = "my_pkg.module:EXPERIMENT"``).

:func:`parameters` lists a config class's parameters with default, type and meaning; the meaning
is the comment that follows the field in the class body (``name: float = 1.0  # meaning``, continued
on comment-only lines below it; for a field without one, the comment-only lines above it), where ``one of MODULE.NAME`` (or ``MODULE.FUNCTION()``, or ``NAME``),
a tuple or dict of names in the class's module, is written out as the values it holds: ``jaxfed
show`` lists the values the code accepts, never a stale copy.

:func:`code_identity` is the part of a run's store identity that names its code: the SHA-256 of
every user file the experiment runs (the experiment file, the modules its functions, classes and
registered channels come from) and, for a plugin, its distribution and version; a rerun on the
same ``--out`` after any of these files changed is refused as another configuration.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import io
import os
import re
import site
import sys
import sysconfig
import textwrap
import tokenize
import typing

from jaxfed import validation
from jaxfed.experiments.spec import Experiment, check_config_class

ENTRY_POINT_GROUP = "jaxfed.experiments"


def find(name: str, registry):
    """The experiment ``name``: built-in, ``file.py:ATTRIBUTE`` or an installed plugin.

    A file experiment comes back with ``source`` set to the absolute ``path:ATTRIBUTE``, which the
    result directory records so that ``jaxfed plot`` finds it again; a plugin's with ``plugin`` set
    to its entry point's name (its distribution and version join the run's identity).
    """
    if name in registry:
        return registry[name]
    path, sep, attribute = name.rpartition(":")
    if sep and path.endswith(".py"):
        return from_file(path, attribute)
    found = plugins()
    if name in found:
        value = found[name].load()
        return dataclasses.replace(value, plugin=name) if isinstance(value, Experiment) else value
    raise registry.unknown(name, tuple(sorted(registry) + sorted(found)))


def from_file(path: str, attribute: str):
    """Loads ``attribute`` (an Experiment) from the Python file ``path``; ValueError naming what is wrong."""
    path = os.path.abspath(path)
    module = load_file(path)
    candidates = sorted(k for k, v in vars(module).items() if isinstance(v, Experiment))
    value = getattr(module, attribute, _MISSING)
    if not isinstance(value, Experiment):
        what = f"is a {type(value).__name__}, not an Experiment"
        if value is None or value is _MISSING:  # (`NAME = None` was reported as "is not defined")
            what = "is not defined" if value is _MISSING else "is None, not an Experiment"
        raise ValueError(
            f"{attribute!r} in {path} {what}; Experiments defined there: {', '.join(candidates) or 'none'}"
        )
    return dataclasses.replace(value, source=f"{path}:{attribute}")


def import_extensions(paths) -> dict[str, str]:
    """Executes the user files ``paths`` (``jaxfed … --import FILE``: channels, conjugate models or
    anything else they register) and returns ``{file name: SHA-256}``, which a run's identity and
    record hold (``imports``), so that growth, resume and ``jaxfed plot`` need the same files.

    Raises:
        ValueError: a file that cannot be loaded (naming it and the line), or two files of one name.
    """
    out: dict[str, str] = {}
    for path in paths:
        module = load_file(os.path.abspath(path))
        name = os.path.basename(path)
        validation.check("import", path, name not in out, f"files of distinct names ({name} is imported twice)")
        out[name] = getattr(module, _DIGEST_ATTRIBUTE)
    return out


def load_file(path: str):
    """The module of the Python file ``path`` (absolute), executed once per content; ValueError
    naming the file and the line of what went wrong."""
    if os.path.isdir(path):
        raise ValueError(f"user experiment file {path} is a directory; give a Python file as path/to/file.py:NAME")
    if not os.path.isfile(path):
        raise ValueError(f"user experiment file {path} does not exist")
    # One module per file path: loading the same file twice reuses it (its classes stay identical)
    # while its bytes are unchanged; an edited file is executed again. The module keeps the SHA-256
    # of the bytes it was executed from, which is what the run's identity records.
    module_name = "jaxfed_user_" + hashlib.sha256(path.encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"user experiment file {path} is not a Python file (*.py)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise ValueError(f"user experiment file {path} cannot be read ({err.strerror or err})") from None
    digest = hashlib.sha256(data).hexdigest()
    module = sys.modules.get(module_name)
    if module is None or getattr(module, _DIGEST_ATTRIBUTE, None) != digest:
        module = importlib.util.module_from_spec(spec)
        setattr(module, _DIGEST_ATTRIBUTE, digest)
        sys.modules[module_name] = module  # dataclasses resolve their annotations through it
        try:
            # Executes exactly the bytes digested (dont_inherit: not this module's __future__ flags), with
            # the file's own directory importable, as for `python FILE`: a helper module beside it imports.
            with _importable(os.path.dirname(path)):
                exec(compile(data, path, "exec", dont_inherit=True), module.__dict__)
        except BaseException as err:  # SystemExit and KeyboardInterrupt too: a file that exits is an error, not a run
            del sys.modules[module_name]
            line = _line_in(err, path)
            where = f"{path}:{line}" if line is not None else path
            hint = (
                " (the file is imported: it must define experiments, not exit)" if isinstance(err, SystemExit) else ""
            )
            if isinstance(err, ModuleNotFoundError):
                hint = (
                    f" (modules in {os.path.dirname(path)} import; one elsewhere needs its directory on PYTHONPATH, "
                    "e.g. PYTHONPATH=path/to/dir jaxfed run …, or the package installed)"
                )
            raise ValueError(
                f"user experiment file {where} failed to import: {type(err).__name__}{f': {err}' if str(err) else ''}{hint}"
            ) from err
    return module


@contextlib.contextmanager
def _importable(directory: str):
    """``directory`` first on ``sys.path`` while the block runs (then as it was): a user file's imports
    of modules beside it resolve, and the modules stay imported (``sys.modules``) for the run, whose
    code identity counts their files (:func:`code_identity`)."""
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        yield
    finally:
        if added and directory in sys.path:
            sys.path.remove(directory)


_MISSING = object()


def _line_in(err: BaseException, path: str) -> int | None:
    """The line of ``path`` where ``err`` was raised: the innermost frame of its traceback in that
    file, or the line a SyntaxError names there; None when neither is known."""
    if isinstance(err, SyntaxError) and err.filename == path:
        return err.lineno
    lines = [tb.tb_lineno for tb in _frames(err.__traceback__) if tb.tb_frame.f_code.co_filename == path]
    return lines[-1] if lines else None


def _frames(tb) -> list:
    """The traceback entries of ``tb``, outermost first."""
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def user_frame(err: BaseException, raised_there: bool = False) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of ``err``'s traceback in a user file (a Python file
    outside the jaxfed package, the standard library and site-packages: see :func:`code_identity`),
    or None when it was raised in jaxfed's or installed code alone. ``raised_there``: only when
    the innermost frame of all is that user frame (the user's code raised ``err`` itself)."""
    installed = _installed_dirs()
    frames = _frames(err.__traceback__)
    for tb in reversed(frames[-1:] if raised_there else frames):
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if os.path.isfile(path) and not _under(path, _JAXFED_DIR) and not any(_under(path, d) for d in installed):
            return path, tb.tb_lineno
    return None


def plugins() -> dict:
    """Installed plugin experiments: entry-point name -> entry point (loaded on use)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


# --------------------------------------------------------------------------- the code in the identity
_DIGEST_ATTRIBUTE = "__jaxfed_sha256__"  # on a user experiment file's module: SHA-256 of the bytes executed
_JAXFED_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's own code


_REGISTRY_MODULES = (
    "jaxfed.oac.channel",
    "jaxfed.oac.aggregators",
    "jaxfed.gfvl.models",
    "jaxfed.gfvl.expfam",
    "jaxfed.gfvl.graphs",
)
"""The modules whose registries (``names()``, ``get(name)``) a string parameter may name a value of."""


def code_identity(exp, config) -> dict:
    """What a run's identity holds about its code, besides the experiment's name (empty for a
    built-in experiment that uses no user code):

    - ``"code"``: ``{file: SHA-256 of its bytes}`` for every user file the run executes: the
      experiment file (the bytes that were executed); the modules that define the experiment's
      ``build``, ``plot``, ``report`` and ``config_cls``; the functions of every registered channel,
      aggregation method, conjugate model, family or graph (:data:`_REGISTRY_MODULES`) named by a
      string parameter (``channel=NAME``, ``family=NAME``, ``topologies=NAME``); and,
      transitively, every user module named in the globals of a module already counted (an
      ``import helpers``, a ``from helpers import lossy``, or an Aggregator, ExpFamily or channel
      value built there). A user file is a Python source file outside the jaxfed package, the
      standard library and site-packages; a plugin's own package counts wherever it is installed.
      Files are named relative to the experiment file's directory (a plugin: the directory holding
      its top-level package; otherwise the directory of ``build``'s file) when they lie under it,
      absolute otherwise, so a moved project still resumes.
    - ``"plugin"``: for an installed plugin experiment, its entry point's name (``entry_point``) and
      ``value``, its distribution's name (``distribution``) and ``version``; the entry-point module's
      file is in ``"code"``.
    """
    roots: list = [exp]
    forced: list[str] = []  # files counted wherever they lie
    owned: list[str] = []  # directories (or files) whose files count as user files: a plugin's package
    base = None
    out: dict = {}
    if exp.source:
        path = os.path.abspath(exp.source.rpartition(":")[0])
        base = os.path.dirname(path)
        forced.append(path)
        module = sys.modules.get("jaxfed_user_" + hashlib.sha256(path.encode()).hexdigest()[:16])
        if module is not None:
            roots.append(module)
    if exp.plugin:
        ep = plugins().get(exp.plugin)
        plugin: dict = {"entry_point": exp.plugin}
        if ep is not None:
            dist = getattr(ep, "dist", None)
            plugin.update(
                value=ep.value,
                distribution=dist.name if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
            module, top = sys.modules.get(ep.module), sys.modules.get(ep.module.partition(".")[0])
            entry_file = _source_file(module)
            if module is not None and entry_file:
                roots.append(module)
                forced.append(entry_file)
            top_file = _source_file(top)
            if top_file:
                package = hasattr(top, "__path__")
                owned.append(os.path.dirname(top_file) if package else top_file)
                base = os.path.dirname(os.path.dirname(top_file) if package else top_file)
        out["plugin"] = plugin
    files = _user_files(roots + _registered_values(config), forced, owned)
    if base is None:
        base = os.path.dirname(_source_file(exp.build) or "") or None
    code = {}
    for path, digest in files.items():
        digest = digest or _file_digest(path)
        if digest is not None:
            inside = base is not None and _under(path, base)
            code[os.path.relpath(path, base) if inside else path] = digest
    if code:
        out["code"] = code
    return out


def _registered_values(config) -> list:
    """The values of the registries (:data:`_REGISTRY_MODULES`) that a string parameter of ``config`` names."""
    values = dataclasses.asdict(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else {}
    found = []
    for module_name in _REGISTRY_MODULES:
        module = sys.modules.get(module_name)  # not imported: nothing registered there
        if module is not None:
            for text in _strings(values):
                name = text.partition(":")[0]  # "NAME", or a channel's "NAME:key=value"
                if name in module.names():
                    found.append(module.get(name))
    return found


def _strings(value) -> list[str]:
    """Every string in a JSON-like value (dicts, lists, tuples)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _source_file(obj) -> str | None:
    """The absolute path of the Python source file defining ``obj``, or None (built-in, interactive)."""
    if obj is None:
        return None
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return None
    return os.path.abspath(path) if path and os.path.isfile(path) else None


def _file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@functools.cache
def _installed_dirs() -> tuple[str, ...]:
    """Directories of installed code: the standard library and site-packages."""
    paths = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    if hasattr(site, "getsitepackages"):  # absent from some virtual environments' site module
        paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    paths.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return tuple(os.path.abspath(p) for p in paths if p)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _namespaces_of(value) -> list[dict]:
    """The global namespaces of the modules that define ``value``: a module's own, a function's
    ``__globals__`` (the module it was executed in, even one since executed again), a class's
    module's, a partial's function's, and for an instance its class's and its fields' (a NamedTuple
    or a dataclass: an Aggregator, an ExpFamily, a ChannelModel, an Experiment)."""
    if inspect.ismodule(value):
        return [vars(value)]
    if isinstance(value, functools.partial):
        return _namespaces_of(value.func)
    if inspect.isfunction(value):
        return [value.__globals__]
    if inspect.isclass(value):
        for attribute in vars(value).values():  # a method's globals: the module the class was executed in
            if inspect.isfunction(attribute) and attribute.__globals__.get("__name__") == value.__module__:
                return [attribute.__globals__]
        module = sys.modules.get(getattr(value, "__module__", None) or "")
        return [vars(module)] if module is not None else []
    namespaces = _namespaces_of(type(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = list(value)
    elif dataclasses.is_dataclass(value):
        fields = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    else:
        fields = []
    for item in fields:
        if inspect.isfunction(item) or inspect.isclass(item) or isinstance(item, functools.partial):
            namespaces += _namespaces_of(item)
    return namespaces


def _user_files(roots: list, forced: list[str], owned: list[str]) -> dict[str, str | None]:
    """The user files (see :func:`code_identity`) that define ``roots`` and those of every user
    module named in their modules' globals, transitively; ``forced`` files count wherever they lie.
    Maps each file to the digest of the bytes its module was executed from where that is known (a
    user experiment file), else None."""
    installed = _installed_dirs()

    def is_user(path: str) -> bool:
        if path in forced or any(_under(path, d) for d in owned):
            return True
        return not _under(path, _JAXFED_DIR) and not any(_under(path, d) for d in installed)

    files: dict[str, str | None] = dict.fromkeys(forced)
    seen: set[int] = set()
    queue = collections.deque(ns for value in roots for ns in _namespaces_of(value))
    while queue:
        namespace = queue.popleft()
        if id(namespace) in seen:
            continue
        seen.add(id(namespace))
        name = namespace.get("__file__")
        path = os.path.abspath(name) if isinstance(name, str) and name.endswith(".py") else None
        if path is None or not os.path.isfile(path) or not is_user(path):
            continue
        if files.get(path) is None:  # the first namespace seen for a file gives its executed digest
            files[path] = namespace.get(_DIGEST_ATTRIBUTE)
        for value in list(namespace.values()):
            try:
                queue += _namespaces_of(value)
            except Exception:  # an exotic global (a proxy whose attributes raise): nothing to follow
                continue
    return files


class Parameter(typing.NamedTuple):
    name: str
    type: str
    default: object
    meaning: str


def parameters(config_cls: type) -> list[Parameter]:
    """Every field of a config dataclass: name, type, default and the comment that documents it
    (ValueError for a class that is not a config dataclass: see :func:`~jaxfed.experiments.spec.check_config_class`)."""
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
