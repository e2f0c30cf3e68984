"""Named values that users extend: the one registry behind every extension point.

Each extension point keeps a :class:`Registry` and offers the same three functions over it:

- ``register(...)`` adds a value under its name (registering a name again replaces its value);
- ``get(name)`` returns it, or raises the one error for an unknown name, which lists the known ones;
- ``names()`` is the registered names in registration order (built-ins first).

They are :func:`jaxfed.oac.channel.register` (channel models), :func:`jaxfed.oac.aggregators.register`
(k-means aggregation methods), :func:`jaxfed.gfvl.models.register` (conjugate data models),
:func:`jaxfed.gfvl.expfam.register` (exponential families) and :func:`jaxfed.experiments.register`
(experiments). A leaf module: it imports nothing from jaxfed.

>>> shapes = Registry("shape")
>>> shapes.register("square", 4)
4
>>> shapes.get("square"), shapes.names()
(4, ('square',))
>>> shapes.get("circle")
Traceback (most recent call last):
...
ValueError: unknown shape 'circle'; choose one of: square
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

V = TypeVar("V")
_REQUIRED = object()  # get() without a default raises for an unknown name

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""What a registered name may be: what ``--set key=NAME`` and ``--set key=a,b`` can select (no
comma, colon, ``=``, space or markup), a letter or digit first, at most 64 characters."""


class Registry(Generic[V]):
    """Values of one kind by name, which also reads and writes like a dict (``name in r``, ``r[name]``,
    ``r[name] = value`` for :meth:`register`, ``del r[name]``, ``len``, iteration over the names,
    ``items()``, ``values()``, ``get(name, default)``; so ``monkeypatch.setitem`` works on it).

    Args:
        kind: what a value is, in the error for an unknown name (e.g. ``"channel"``).
        hint: text appended to that error (e.g. another way to name a value).
    """

    def __init__(self, kind: str, hint: str = ""):
        self.kind = kind
        self.hint = hint
        self._values: dict[str, V] = {}

    def register(self, name: str, value: V) -> V:
        """Adds ``value`` under ``name`` (:data:`NAME`: letters, digits, ``_ . -``), replacing a value
        of that name, and returns it.

        Args:
            name: the value's name, matching :data:`NAME`.
            value: the value to register.

        Returns:
            ``value``.

        Raises:
            ValueError: ``name`` is not a valid name.
        """
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(
                f"name must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit "
                f"(what --set can select; the {self.kind}'s name), got {name!r}"
            )
        self._values[name] = value
        return value

    def unregister(self, name: str) -> None:
        """Removes ``name`` if registered (for tests that register a value of their own).

        Args:
            name: the name to remove (an unknown name is ignored).
        """
        self._values.pop(name, None)

    def get(self, name: str, default=_REQUIRED):
        """The value called ``name``; for an unknown name ``default`` if given (as ``dict.get``), else
        :meth:`unknown`'s ValueError.

        Args:
            name: the registered name.
            default: what to return for an unknown name; without it, an unknown name raises.

        Returns:
            The registered value, or ``default``.

        Raises:
            ValueError: an unknown name and no ``default`` (``unknown KIND 'name'; choose one of: …``).
        """
        if isinstance(name, str) and name in self._values:
            return self._values[name]
        if default is not _REQUIRED:
            return default
        raise self.unknown(name)

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order.

        Returns:
            A tuple of names.
        """
        return tuple(self._values)

    def unknown(self, name: object, known: tuple[str, ...] | None = None) -> ValueError:
        """The error for an unknown name: ``unknown KIND 'name'; choose one of: a, b, c`` and the hint
        (``known``: the names to list, by default :meth:`names`).

        Args:
            name: the unknown name.
            known: the names to list, or None for :meth:`names`.

        Returns:
            The ValueError (not raised: the caller raises it).
        """
        listed = ", ".join(self.names() if known is None else known)
        return ValueError(f"unknown {self.kind} {name!r}; choose one of: {listed}{self.hint}")

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __getitem__(self, name: str) -> V:
        return self.get(name)

    def __setitem__(self, name: str, value: V) -> None:
        self.register(name, value)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def items(self):
        """The registered ``(name, value)`` pairs, in registration order.

        Returns:
            A view of the pairs (as ``dict.items``).
        """
        return self._values.items()

    def values(self):
        """The registered values, in registration order.

        Returns:
            A view of the values (as ``dict.values``).
        """
        return self._values.values()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._values)})"
