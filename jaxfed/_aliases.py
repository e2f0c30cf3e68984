"""Old import paths of moved modules, kept for one minor version (removed in 0.3).

Architecture IV (0.2) grouped the package into folders by layer (docs/layout.md). A module that
moved is still found under its old name: ``import jaxfed.expfam``, ``from jaxfed import rundir``
and ``jaxfed.report`` give the module at its new place (the same object, so state and patches
are shared) with a :class:`DeprecationWarning` naming the new path. ``jaxfed.experiments.base``,
a module of re-exports, is rebuilt from the modules its names came from.

:data:`FINDER` is appended to ``sys.meta_path`` by ``jaxfed/__init__.py``: after the regular
finders, so it is asked only for a name no file of the package has.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

MOVED = {
    "jaxfed.expfam": "jaxfed.gfvl.expfam",
    "jaxfed.likelihoods": "jaxfed.gfvl.likelihoods",
    "jaxfed.models": "jaxfed.gfvl.models",
    "jaxfed.graphs": "jaxfed.gfvl.graphs",
    "jaxfed.gossip": "jaxfed.gfvl.gossip",
    "jaxfed.natgrad": "jaxfed.gfvl.natgrad",
    "jaxfed.quadrature": "jaxfed.gfvl.quadrature",
    "jaxfed.logistic": "jaxfed.gfvl.logistic",
    "jaxfed.rundir": "jaxfed.store.rundir",
    "jaxfed.report": "jaxfed.results.report",
    "jaxfed.report_html": "jaxfed.results.report_html",
}
"""Old module path -> new module path."""

REBUILT = {
    "jaxfed.experiments.base": {
        "jaxfed.experiments.spec": (
            "Experiment Reading Sweep PARAMETER_TYPES band_table check check_config_class check_finite "
            "check_representable check_sweep make_config preset_variant"
        ),
        "jaxfed.experiments.gfvl_checks": "check_bernoulli_setting check_loss_normalisation check_natgrad_setting",
        "jaxfed.store.rundir": "AXES_NUMBERED_FROM_1 JSON_TYPES axis_coords check_json load_results nonfinite_lines",
        "jaxfed.experiments.runner": "run_experiment",
    },
}
"""Old module path of re-exports -> {module its names come from: the names}."""


def moved(old: str, stacklevel: int = 2) -> types.ModuleType:
    """The module ``old`` names (a key of :data:`MOVED` or :data:`REBUILT`), with a DeprecationWarning
    attributed ``stacklevel`` frames up (2: the caller)."""

    def warn(new: str) -> None:
        message = f"{old} moved to {new} in jaxfed 0.2; the old path goes in 0.3"
        warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)

    if old in MOVED:
        warn(MOVED[old])
        return importlib.import_module(MOVED[old])
    module = types.ModuleType(old, f"Deprecated: the names of {old}, now in {', '.join(REBUILT[old])}.")
    sources = {name: source for source, names in REBUILT[old].items() for name in names.split()}

    def __getattr__(name: str):
        if name not in sources:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return getattr(importlib.import_module(sources[name]), name)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__all__ = sorted(sources)  # type: ignore[attr-defined]
    warn(" and ".join(REBUILT[old]))
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` and :data:`REBUILT` (and nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED or fullname in REBUILT:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return moved(spec.name)  # (the module at its new place: its own name and spec are kept)

    def exec_module(self, module) -> None:
        pass


FINDER = _Finder()


def install() -> None:
    """Appends :data:`FINDER` to ``sys.meta_path`` (once)."""
    if FINDER not in sys.meta_path:
        sys.meta_path.append(FINDER)
