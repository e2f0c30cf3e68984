"""The modules that moved in 0.2 (Architecture IV) keep their old import paths for one minor
version: the same module object, with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import jaxfed
from jaxfed import _aliases


@pytest.mark.parametrize("old, new", sorted(_aliases.MOVED.items()))
def test_an_old_path_gives_the_module_at_its_new_place_with_a_warning(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    sys.modules.pop(old, None)  # (the next test warns again)


def test_from_jaxfed_import_an_old_name_warns_at_the_callers_line(monkeypatch):
    # Set by an `import jaxfed.gossip` earlier in this worker, or not (then the module's __getattr__
    # answers, and monkeypatch.delattr, which asks hasattr first, would fail to delete it).
    if "gossip" in vars(jaxfed):
        monkeypatch.delattr(jaxfed, "gossip")
    with pytest.warns(DeprecationWarning, match="jaxfed.gossip moved to jaxfed.gfvl.gossip") as caught:
        gossip = jaxfed.gossip
    assert gossip is jaxfed.gfvl.gossip
    # (the first import of a module in this worker may warn too, a library's own deprecation: only ours counts)
    ours = [w for w in caught if "jaxfed.gossip moved to" in str(w.message)]
    assert len(ours) == 1 and ours[0].filename == __file__


def test_the_rebuilt_module_of_re_exports_gives_each_name_from_its_new_home():
    sys.modules.pop("jaxfed.experiments.base", None)
    with pytest.warns(DeprecationWarning, match="jaxfed.experiments.base moved to"):
        base = importlib.import_module("jaxfed.experiments.base")
    from jaxfed.experiments import gfvl_checks, spec
    from jaxfed.store import rundir

    assert base.make_config is spec.make_config
    assert base.check_natgrad_setting is gfvl_checks.check_natgrad_setting
    assert base.load_results is rundir.load_results
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        base.nothing  # noqa: B018
    sys.modules.pop("jaxfed.experiments.base", None)


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'expfamily'"):
        jaxfed.expfamily  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("jaxfed.nothing_here")


def test_a_fresh_interpreter_imports_the_package_without_a_warning():
    """The package itself uses only the new paths (an old one would warn on ``import jaxfed``)."""
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", "import jaxfed, jaxfed.cli, jaxfed.results.report"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    "module, name, home",
    [
        ("jaxfed.engine", "chunk_function", "jaxfed.engine.testing"),
        ("jaxfed.engine", "Progress", "jaxfed.engine.progress"),
        ("jaxfed.engine", "atomic_write_json", "jaxfed.store"),
        ("jaxfed.stats", "chunk_summary", "jaxfed.stats.summary"),
        ("jaxfed.stats", "percent", "jaxfed.stats.verdicts"),
        ("jaxfed.gfvl.natgrad", "beta_sample_score", "jaxfed.gfvl.expfam"),
        ("jaxfed.experiments.spec", "JSON_TYPES", "jaxfed.store.rundir"),
    ],
)
def test_a_name_that_left_a_face_is_found_at_its_new_home_with_a_warning(module, name, home):
    with pytest.warns(DeprecationWarning, match=f"use {home}.{name}") as caught:
        value = getattr(importlib.import_module(module), name)
    assert value is getattr(importlib.import_module(home), name)
    assert caught[0].filename == __file__
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        importlib.import_module(module).no_such_name  # noqa: B018
