"""Names that left a module in 0.2 (Architecture IV), still found there until 0.3.

:func:`forwarding` makes a module ``__getattr__`` (PEP 562) that finds each such name at its new
home with a :class:`DeprecationWarning` saying where that is. A foundation: it imports no jaxfed
module at import time, so any layer may use it.
"""

from __future__ import annotations

import importlib
import warnings


def forwarding(module: str, homes: dict[str, str], reason: str = "is no longer public", stacklevel: int = 2):
    """A module ``__getattr__`` for ``module``: a name of ``homes`` (name -> the module it lives in
    now, or ``"module:new_name"`` for a name that was renamed) is that module's attribute, with a
    DeprecationWarning attributed ``stacklevel`` frames up (2: the line that reads the name); any
    other name an AttributeError."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, new = homes[name].partition(":")
        warnings.warn(
            f"{module}.{name} {reason} since jaxfed 0.2; use {home}.{new or name} (the old path goes in 0.3)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return getattr(importlib.import_module(home), new or name)

    return __getattr__
