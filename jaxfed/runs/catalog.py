"""Finding experiments and describing their parameters.

An experiment is found by name among

- the registered ones (:data:`jaxfed.experiments.REGISTRY`, :func:`jaxfed.experiments.register`, ``jaxfed list``);
- a user's file: ``path/to/file.py:ATTRIBUTE`` names an :class:`~jaxfed.experiment.Experiment`
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

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import site
import sys
import sysconfig

from jaxfed import validation
from jaxfed.experiment import Experiment
from jaxfed.experiments import REGISTRY
from jaxfed.registry import Registry

ENTRY_POINT_GROUP = "jaxfed.experiments"


def find(name: str, registry: Registry[Experiment] = REGISTRY) -> Experiment:
    """The experiment ``name``: built-in, ``file.py:ATTRIBUTE`` or an installed plugin.

    A file experiment comes back with ``source`` set to the absolute ``path:ATTRIBUTE``, which the
    result directory records so that ``jaxfed plot`` finds it again; a plugin's with ``plugin`` set
    to its entry point's name (its distribution and version join the run's identity).

    Args:
        name: as ``jaxfed run`` takes it: a registered name, ``path/to/file.py:ATTRIBUTE`` or a
            plugin's entry-point name.
        registry: where registered names are looked up (default: the built-ins,
            :data:`jaxfed.experiments.REGISTRY`).

    Returns:
        The :class:`~jaxfed.experiment.Experiment`.

    Raises:
        ValueError: an unknown name (listing the known ones) or a file that defines no such experiment.
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
        out[name] = getattr(module, DIGEST_ATTRIBUTE)
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
    if module is None or getattr(module, DIGEST_ATTRIBUTE, None) != digest:
        module = importlib.util.module_from_spec(spec)
        setattr(module, DIGEST_ATTRIBUTE, digest)
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
            what = f"{type(err).__name__}{f': {err}' if str(err) else ''}"
            if isinstance(getattr(err, "call", None), str):  # (the command's stand-in for os._exit, os.abort, …)
                what = f"it called {err.call}"  # type: ignore[attr-defined]
            raise ValueError(f"user experiment file {where} failed to import: {what}{hint}") from err
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
    installed = installed_dirs()
    frames = _frames(err.__traceback__)
    for tb in reversed(frames[-1:] if raised_there else frames):
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if os.path.isfile(path) and not under(path, JAXFED_DIR) and not any(under(path, d) for d in installed):
            return path, tb.tb_lineno
    return None


def plugins() -> dict:
    """Installed plugin experiments: entry-point name -> entry point (loaded on use)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


DIGEST_ATTRIBUTE = "__jaxfed_sha256__"  # on a user experiment file's module: SHA-256 of the bytes executed
JAXFED_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's own code


@functools.cache
def installed_dirs() -> tuple[str, ...]:
    """Directories of installed code: the standard library and site-packages."""
    paths = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    if hasattr(site, "getsitepackages"):  # absent from some virtual environments' site module
        paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    paths.update(p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages"))
    return tuple(os.path.abspath(p) for p in paths if p)


def under(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or inside it (both absolute)."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)
