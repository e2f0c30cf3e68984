"""The part of a run's store identity that names its code (:func:`code_identity`)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import inspect
import os
import sys

from jaxfed.runs.catalog import DIGEST_ATTRIBUTE, JAXFED_DIR, installed_dirs, plugins, under

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
            inside = base is not None and under(path, base)
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
    installed = installed_dirs()

    def is_user(path: str) -> bool:
        if path in forced or any(under(path, d) for d in owned):
            return True
        return not under(path, JAXFED_DIR) and not any(under(path, d) for d in installed)

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
            files[path] = namespace.get(DIGEST_ATTRIBUTE)
        for value in list(namespace.values()):
            try:
                queue += _namespaces_of(value)
            except Exception:  # an exotic global (a proxy whose attributes raise): nothing to follow
                continue
    return files
