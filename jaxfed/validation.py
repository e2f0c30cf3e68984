"""Argument checks shared by every public entry point.

Each function raises one ``ValueError`` of one line, ``"<name> must be <allowed>, got <value>"``
(naming the parameter, what is allowed and the value given), and otherwise returns the value, so
a check reads as an assignment::

    n_agents = validation.integer("n_agents", n_agents, 2)
    validation.positive("alpha", alpha)
    validation.one_of("family", family, FAMILIES)

The command line turns these errors into ``jaxfed: error: …`` and exit status 2.

Values that JAX is tracing (a numeric leaf of a sweep's point, inside ``jit`` or ``vmap``) have
no concrete value to check: the numeric checks (:func:`number` and the functions built on it,
:func:`finite_array`, :func:`index`) pass them through unchanged; the experiment's config checked
the values they came from. Shapes are static, so :func:`shape` checks traced arrays too.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from typing import Any, NoReturn, TypeVar

import jax
import numpy as np

__all__ = [
    "MAX_TRIALS",
    "SEED_LIMIT",
    "check",
    "fail",
    "finite_array",
    "index",
    "integer",
    "non_negative",
    "number",
    "one_of",
    "positive",
    "probability",
    "seed",
    "shape",
    "trial_count",
]

MAX_TRIALS = 2**53
"""Trials per point at most: trial indices, counts and summary totals are exact in int64 and in a
float64 (2^53), and indices from 2^32 on fold both 32-bit halves into their keys."""
INT32_RANGE = (-(2**31), 2**31 - 1)
"""The sizes a parameter may give (slots, data points, agents, rounds): they reach the device as int32."""
INT32_NOTE = " (a size reaches the device as a 32-bit integer)"
SEED_LIMIT = 2**32  # seeds are 32-bit: [0, 2**32)

T = TypeVar("T")


def fail(name: str, value: Any, allowed: str) -> NoReturn:
    """Raises ``ValueError("<name> must be <allowed>, got <value!r>")``.

    Args:
        name: the checked argument's name, as the message starts.
        value: the value given (shown with ``repr``).
        allowed: what the argument must be ("an integer >= 2").

    Raises:
        ValueError: always, ``"<name> must be <allowed>, got <value!r>"``.
    """
    raise ValueError(f"{name} must be {allowed}, got {value!r}")


def check(name: str, value: Any, ok: bool, allowed: str) -> None:
    """The general form: :func:`fail` unless ``ok`` (for conditions the other functions do not cover,
    e.g. ``check("sizes", sizes, len(sizes) == k, f"a list of n_agents = {k} counts")``).

    Args:
        name: the argument's name, as the message starts.
        value: the value given (shown with ``repr``).
        ok: whether the value is allowed.
        allowed: what the argument must be.

    Raises:
        ValueError: ``ok`` is false, ``"<name> must be <allowed>, got <value!r>"``.
    """
    if not ok:
        fail(name, value, allowed)


def is_traced(value: Any) -> bool:
    """True for a value JAX is tracing (no concrete value to check)."""
    return isinstance(value, jax.core.Tracer)


def integer(name: str, value: Any, low: int | None = None, high: int | None = None, *, note: str = "") -> int:
    """``value`` as an ``int``: a Python or NumPy integer (or anything ``operator.index`` accepts, but
    not a bool or a traced value: a static size) in [``low``, ``high``] (either bound may be None). ``note`` is appended to the allowed range in the message.

    Args:
        name: the argument's name, for the message.
        value: the value to check.
        low: the smallest allowed value, or None.
        high: the largest allowed value, or None.
        note: text appended to the allowed range in the message.

    Returns:
        ``value`` as a Python ``int``.

    Raises:
        ValueError: ``value`` is not an integer (a bool or a traced value included) or lies outside
            [``low``, ``high``].

    Examples:
        >>> integer("n_agents", 1, 2)
        Traceback (most recent call last):
        ...
        ValueError: n_agents must be an integer >= 2, got 1
    """
    if low is None and high is None:
        allowed = "an integer"
    elif high is None:
        allowed = f"an integer >= {low}"
    elif low is None:
        allowed = f"an integer <= {high}"
    else:
        allowed = f"an integer in [{low}, {high}]"
    allowed += note
    if isinstance(value, (bool, np.bool_)) or is_traced(value):
        fail(name, value, allowed)
    try:
        result = operator.index(value)  # int, NumPy integer or a concrete integer array scalar
    except TypeError:
        fail(name, value, allowed)
    if (low is not None and result < low) or (high is not None and result > high):
        fail(name, value, allowed)
    return result


def index(name: str, value: T, size: int, what: str = "an index") -> T:
    """An integer in [0, ``size``) (``what`` names it in the message: ``"an agent index"``). Traced
    values pass through.

    Args:
        name: the argument's name, for the message.
        value: the index (a Python or NumPy integer, or a traced value).
        size: the number of valid indices.
        what: what the index is, for the message.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: ``value`` is not an integer in [0, ``size``).
    """
    if is_traced(value):
        return value
    valid = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not (valid and 0 <= operator.index(value) < size):  # type: ignore[arg-type]  # an integer after `valid`
        fail(name, value, f"{what} in [0, {size})")
    return value


def _number_text(low: float | None, high: float | None, low_open: bool, high_open: bool, finite: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        bound = f"{'>' if low_open else '>='} {low}"
    elif high is not None:
        bound = f"{'<' if high_open else '<='} {high}"
    else:
        return "a finite number" if finite else "a number"
    return ("finite and " if finite else "") + bound


def number(
    name: str,
    value: T,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> T:
    """A real number (or an array of them, every entry checked) in the interval from ``low`` to
    ``high`` (either may be None; ``low_open``/``high_open`` exclude the bound), finite unless
    ``finite=False``. Returns ``value`` unchanged; traced values pass through.

    Args:
        name: the argument's name, for the message.
        value: a number or an array of numbers (or a traced value, not checked).
        low: the lower bound, or None.
        high: the upper bound, or None.
        low_open: exclude ``low`` itself.
        high_open: exclude ``high`` itself.
        finite: require finite values (``False`` allows ±inf, never NaN).

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: an entry is not a real number in the interval, ``"<name> must be in [0, 0.5), got 0.5"``.

    Examples:
        >>> number("epsilon", 0.5, 0, 0.5, high_open=True)
        Traceback (most recent call last):
        ...
        ValueError: epsilon must be in [0, 0.5), got 0.5
    """
    allowed = _number_text(low, high, low_open, high_open, finite)
    if is_traced(value):
        return value
    if isinstance(value, (bool, np.bool_, str, bytes)):
        fail(name, value, allowed)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        fail(name, value, allowed)
    ok = np.isfinite(array) if finite else ~np.isnan(array)
    if low is not None:
        ok &= array > low if low_open else array >= low
    if high is not None:
        ok &= array < high if high_open else array <= high
    if not np.all(ok):
        fail(name, value.tolist() if isinstance(value, np.ndarray | jax.Array) else value, allowed)
    return value


def positive(name: str, value: T, *, finite: bool = True) -> T:
    """A number (or array) > 0, finite unless ``finite=False``: ``"<name> must be finite and > 0"``.

    Args:
        name: the argument's name, for the message.
        value: a number or array (traced values pass through).
        finite: require finite values.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: an entry is not > 0 (or not finite).
    """
    return number(name, value, 0, low_open=True, finite=finite)


def non_negative(name: str, value: T, *, finite: bool = True) -> T:
    """A number (or array) >= 0, finite unless ``finite=False``.

    Args:
        name: the argument's name, for the message.
        value: a number or array (traced values pass through).
        finite: require finite values.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: an entry is negative (or not finite).
    """
    return number(name, value, 0, finite=finite)


def probability(name: str, value: T, *, low_open: bool = False, high_open: bool = False) -> T:
    """A number in [0, 1]; ``low_open``/``high_open`` exclude 0 or 1 (``(0, 1)`` for a level or mass).

    Args:
        name: the argument's name, for the message.
        value: a number or array (traced values pass through).
        low_open: exclude 0.
        high_open: exclude 1.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: an entry lies outside the interval.
    """
    return number(name, value, 0, 1, low_open=low_open, high_open=high_open)


def one_of(name: str, value: T, allowed: Collection[Any]) -> T:
    """``value`` if it is one of ``allowed`` (named in the message as a tuple).

    Args:
        name: the argument's name, for the message.
        value: the value to check.
        allowed: the allowed values.

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: ``value`` is not in ``allowed`` (or is unhashable), ``"<name> must be one of (...)"``.
    """
    try:
        ok = value in allowed
    except TypeError:  # unhashable, e.g. a list given for a string
        ok = False
    if not ok:
        fail(name, value, f"one of {tuple(allowed)}")
    return value


def finite_array(name: str, value: Any, mask: Any = None) -> None:
    """Every entry of ``value`` finite (rows along the first axis where ``mask`` is False are not
    checked); the message shows the first row with a non-finite entry and its index. Traced arrays
    pass through.

    Args:
        name: the argument's name, for the message.
        value: an array of any shape (traced arrays pass through).
        mask: optional, a boolean array over the first axis; rows where it is False are not checked.

    Raises:
        ValueError: an entry is NaN or ±inf, ``"<name> must be finite, got <row> at index <i>"``.

    Examples:
        >>> finite_array("points", [[0.0, 1.0], [float("nan"), 2.0]])
        Traceback (most recent call last):
        ...
        ValueError: points must be finite, got [nan, 2.0] at index 1
    """
    if is_traced(value) or is_traced(mask):
        return
    array = np.asarray(value)
    bad = ~np.isfinite(array)
    if mask is not None:
        bad &= np.asarray(mask, bool).reshape(bad.shape[:1] + (1,) * (bad.ndim - 1))
    if not bad.any():
        return
    if array.ndim == 0:
        fail(name, array.item(), "finite")
    row = int(np.argwhere(bad)[0][0])
    raise ValueError(f"{name} must be finite, got {array[row].tolist()!r} at index {row}")


def shape(name: str, value: Any, expected: Sequence[int | None], described: str | None = None) -> tuple[int, ...]:
    """The shape of ``value``, which must have ``len(expected)`` axes, each the given size (None:
    any). ``described`` is how the message writes the expected shape (e.g. ``"(K, N_max, L)"``).

    Args:
        name: the argument's name, for the message.
        value: an array (or anything ``np.shape`` accepts).
        expected: the size of each axis, None for any size.
        described: how the message writes the expected shape, e.g. ``"(K, N_max, L)"``.

    Returns:
        The shape of ``value``, a tuple of ints.

    Raises:
        ValueError: a different number of axes or a different size, ``"<name> must have shape (K, 2), got (3,)"``.

    Examples:
        >>> shape("points", [[0.0, 1.0]], (None, 2))
        (1, 2)
    """
    got = tuple(np.shape(value))
    if len(got) != len(expected) or any(e is not None and g != e for g, e in zip(got, expected)):
        text = described if described is not None else "(" + ", ".join("*" if e is None else str(e) for e in expected)
        if described is None:
            text += ",)" if len(expected) == 1 else ")"
        raise ValueError(f"{name} must have shape {text}, got {got}")
    return got


def seed(value: Any, name: str = "seed") -> int:
    """A root seed: an integer in [0, 2**32).

    Args:
        value: the seed.
        name: the argument's name, for the message.

    Returns:
        The seed as a Python ``int``.

    Raises:
        ValueError: not an integer in [0, 2**32).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 0 <= value < SEED_LIMIT:
        fail(name, value, "an integer in [0, 2**32)")
    return operator.index(value)


def trial_count(value: Any, name: str = "n_trials") -> int:
    """A number of trials per point: an integer in [1, 2**53] (:data:`MAX_TRIALS`).

    Args:
        value: the number of trials.
        name: the argument's name, for the message.

    Returns:
        The count as a Python ``int``.

    Raises:
        ValueError: not an integer in [1, 2**53].
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_TRIALS:
        fail(name, value, "an integer in [1, 2**53] (trial counts and indices are exact up to 2**53 in a float64)")
    return operator.index(value)
