"""The public face of jaxfed: every name in the package's ``__all__``s, listed in
``tests/project/public_api.txt``. A name added to an ``__all__`` without being added there (or
removed without being removed there) fails here, so the public surface changes only on purpose,
with its CHANGELOG line. At most :data:`LIMIT` names; each public module has a page in the API
reference (docs/api/), and each public function and class a docstring."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil
import typing

import jaxfed

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTED = pathlib.Path(__file__).with_name("public_api.txt")
LIMIT = 300


def modules() -> list[str]:
    return ["jaxfed", *sorted(m.name for m in pkgutil.walk_packages(jaxfed.__path__, "jaxfed."))]


def surface() -> dict[str, str]:
    """``module.name`` -> what it is, for every name of every ``__all__``; a name a face re-exports
    (the same object under the same name) counts once, at the first module (in sorted order)."""
    seen: dict[tuple, str] = {}
    out = {}
    for name in modules():
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", None) or ():
            value = getattr(module, attr)
            key = (attr, id(value))
            if key in seen:
                continue
            seen[key] = name
            out[f"{name}.{attr}"] = _kind(value)
    return out


def _kind(value) -> str:
    """module, class, function or value. A parametrised alias (``Callable[[...], X]``) is a value:
    Python 3.10's inspect.isclass calls it a class (fixed in 3.11)."""
    if inspect.ismodule(value):
        return "module"
    if typing.get_origin(value) is not None:
        return "value"
    return "class" if inspect.isclass(value) else "function" if inspect.isroutine(value) else "value"


def listed() -> dict[str, str]:
    rows = [line.split() for line in LISTED.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {name: kind for name, kind in rows}


def test_the_public_surface_is_the_listed_one():
    found, expected = surface(), listed()
    added = sorted(set(found) - set(expected))
    gone = sorted(set(expected) - set(found))
    assert not added and not gone, (
        f"public names added to an __all__ but not to {LISTED.name}: {added}; listed there but no longer "
        f"public: {gone}. A change of the public API is deliberate: update {LISTED.name} and CHANGELOG.md"
    )
    assert found == expected, "a public name changed kind (module, class, function, value)"


def test_the_public_surface_is_small():
    assert len(surface()) <= LIMIT, f"{len(surface())} public names, more than {LIMIT}"


def _documented_modules() -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    return {line.split()[1] for line in text.splitlines() if line.startswith("::: ")}


def test_every_public_module_is_in_the_api_reference():
    """A module with an ``__all__`` has its page, unless every name of it is documented on the
    page of a face that re-exports it (``jaxfed.stats`` for its parts)."""
    pages = _documented_modules()
    exported = {name.rsplit(".", 1)[0] for name in surface()}
    missing = sorted(m for m in exported if m not in pages and m != "jaxfed")
    assert not missing, f"public modules without an API page (docs/api/*.md, '::: module'): {missing}"
    for page in pages:  # (an internal module has no page)
        assert getattr(importlib.import_module(page), "__all__", None), f"{page}: documented but has no __all__"


def test_every_public_function_and_class_has_a_docstring():
    undocumented = []
    for name, kind in surface().items():
        module, attr = name.rsplit(".", 1)
        value = getattr(importlib.import_module(module), attr)
        if kind in ("class", "function") and not inspect.getdoc(value):
            undocumented.append(name)
    assert not undocumented, undocumented


def test_the_check_fails_on_an_unlisted_name(monkeypatch):
    """The check itself: a name added to an ``__all__`` is caught."""
    monkeypatch.setattr(jaxfed.numerics, "__all__", [*jaxfed.numerics.__all__, "jnp"])
    found = surface()
    assert "jaxfed.numerics.jnp" in found and "jaxfed.numerics.jnp" not in listed()
