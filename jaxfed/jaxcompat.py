"""JAX across the versions jaxfed supports (pyproject.toml's range, each tested by ``.ci/run``).

Two kinds of thing live here and nowhere else:

- **Public names that moved** between those versions (``jax.enable_x64`` was
  ``jax.experimental.enable_x64`` before JAX 0.8; ``jax.extend.core.jaxprs_in_params`` is new in
  0.7; ``jax.sharding.SingleDeviceSharding`` is deprecated from 0.12.1): one function each that
  works on every supported version.
- **The only uses of JAX's private modules** (``jax._src``), each a :class:`Seam`: a private
  function looked up and checked, on first use, for the parameters jaxfed passes or reads. A
  seam that is missing, takes other parameters, or raises anything inside jaxfed's own code is
  given up for the rest of the process with one note, and JAX's own path runs: a run never fails
  because of a seam and computes the same values, only without that optimisation
  (docs/performance.md says which JAX versions get which).

A wrapped private function is installed once however many runs (or threads) hold it, and put
back when the last one lets go (:meth:`Seam.held`), so runs in several threads of one process
never wrap each other's wrapper.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.experimental
import jax.numpy
import jax.scipy.special
from jax.extend import core as _jax_core


# --------------------------------------------------------------------------- public names that moved
def enable_x64(enabled: bool = True):
    """A context in which JAX computes in 64-bit (``jax.enable_x64``, or before JAX 0.8
    ``jax.experimental.enable_x64``).

    Args:
        enabled: 64-bit inside the block (True) or 32-bit (False).

    Returns:
        A context manager.
    """
    context: Any = getattr(jax, "enable_x64", None)  # (a config State from JAX 0.8: no truth value)
    if context is None:  # (JAX < 0.8; getattr: newer JAX's type information has no such name)
        context = getattr(jax.experimental, "enable_x64")  # noqa: B009
    return context(enabled)


def single_device_sharding(device) -> jax.sharding.Sharding:
    """The sharding that places a whole array on ``device`` (``make_single_device_sharding`` where
    JAX has it, from 0.12.1, whose ``SingleDeviceSharding`` name is deprecated; the class before).

    Args:
        device: a ``jax.Device``.

    Returns:
        A ``jax.sharding.Sharding``.
    """
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    return make(device) if make is not None else jax.sharding.SingleDeviceSharding(device)


def jaxprs_in_params(params: dict) -> Iterator:
    """The jaxprs (closed or not) among an equation's parameters, also inside tuples and lists
    (``jax.extend.core.jaxprs_in_params`` where JAX has it, from 0.7).

    Args:
        params: a ``JaxprEqn.params`` dict.

    Returns:
        An iterator of ``Jaxpr`` and ``ClosedJaxpr`` values.
    """
    public = getattr(_jax_core, "jaxprs_in_params", None)
    if public is not None:
        yield from public(params)
        return
    stack = list(params.values())
    while stack:
        value = stack.pop(0)
        if isinstance(value, (_jax_core.Jaxpr, _jax_core.ClosedJaxpr)):
            yield value
        elif isinstance(value, (tuple, list)):
            stack[:0] = list(value)


def erfcx(x: jax.Array) -> jax.Array:
    """The scaled complementary error function e^(x²) erfc(x) (``jax.scipy.special.erfcx``, from JAX 0.7).

    Before JAX 0.7, e^(x²) erfc(x) computed as written: as accurate as erfc (which forms its e^(−x²) from
    the same rounded x²) until erfc underflows (x ≈ 9 in float32, 26 in float64); jaxfed calls it below 3.

    Args:
        x: a float array.

    Returns:
        erfcx(x), elementwise.
    """
    public = getattr(jax.scipy.special, "erfcx", None)
    if public is not None:
        return public(x)
    return jax.numpy.exp(x * x) * jax.scipy.special.erfc(x)


def is_var(value) -> bool:
    """Whether a jaxpr atom is a variable (not a literal)."""
    return isinstance(value, _jax_core.Var)


def is_drop_var(value) -> bool:
    """Whether a jaxpr output is a dropped one (``_``; ``jax.extend.core.DropVar`` from JAX 0.7)."""
    drop = getattr(_jax_core, "DropVar", None)
    return isinstance(value, drop) if drop is not None else type(value).__name__ == "DropVar"


# --------------------------------------------------------------------------- private seams
class Seam:
    """One private JAX function jaxfed calls or wraps, checked before first use.

    Args:
        module: the private module's name (``"jax._src.compiler"``).
        name: the function's name in it.
        needs: the parameter names jaxfed reads or passes: the seam is usable only where the
            function takes every one of them.
        offers: the parameter names jaxfed can pass (default ``needs``): the seam is usable only
            where every parameter without a default is among them.
        wrapper: whether jaxfed only wraps the function, passing on whatever JAX's own caller
            passed (then ``offers`` does not apply).
    """

    def __init__(
        self, module: str, name: str, needs: tuple[str, ...] = (), offers: tuple[str, ...] | None = None, wrapper=False
    ):
        self.module_name, self.name, self.needs = module, name, needs
        self.offers: tuple[str, ...] | None = None if wrapper else (needs if offers is None else offers)
        self._lock = threading.RLock()
        self._module: Any = None
        self._original: Callable | None = None
        self._checked = False
        self._given_up: str | None = None  # why it is no longer used in this process
        self._holders = 0
        self._installed: Callable | None = None
        self._notes: list[Callable[[str], None]] = []

    def __repr__(self) -> str:
        return f"Seam({self.module_name}.{self.name})"

    @property
    def given_up(self) -> str | None:
        """Why this seam is not used in this process (None while it is usable)."""
        self.function()
        return self._given_up

    def parameters(self) -> tuple[str, ...]:
        """The private function's parameter names (empty where it is missing)."""
        function = self.function()
        return tuple(inspect.signature(function).parameters) if function is not None else ()

    def function(self) -> Callable | None:
        """JAX's own function, checked once per process; None where it is missing, takes other
        parameters or was given up."""
        with self._lock:
            if not self._checked:
                self._checked = True
                self._check()
            if self._given_up is not None:
                return None
            return self._original

    def _check(self) -> None:
        try:
            self._module = importlib.import_module(self.module_name)
            function = getattr(self._module, self.name)
            parameters = inspect.signature(function).parameters
        except Exception as err:  # (ImportError, AttributeError, no signature: another JAX)
            self._given_up = f"{self.module_name}.{self.name} is not in JAX {jax.__version__} ({_one_line(err)})"
            return
        missing = [n for n in self.needs if n not in parameters]
        required = [
            n
            for n, p in parameters.items()
            if p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and self.offers is not None
            and n not in self.offers
        ]
        if missing or required:
            self._given_up = (
                f"{self.module_name}.{self.name} takes ({', '.join(parameters)}) in JAX {jax.__version__}: "
                + (f"no {', '.join(missing)}" if missing else f"jaxfed cannot pass {', '.join(required)}")
            )
            return
        self._original = function

    def give_up(self, err: BaseException | str, note: Callable[[str], None] | None = None) -> None:
        """Stops using the seam for the rest of the process, with one note: ``note``, else that of
        the latest run that holds it."""
        with self._lock:
            if self._given_up is not None:
                return
            self._given_up = f"{self.module_name}.{self.name} failed in JAX {jax.__version__} ({_one_line(err)})"
        (note or self.note)(f"{self._given_up}; jaxfed stopped using it for this process (JAX's own path: same values)")

    def note(self, message: str) -> None:
        """Says ``message`` through the note of the latest run that holds the seam (none: nothing)."""
        with self._lock:
            notes = list(self._notes[-1:])
        for note in notes:
            note(message)

    @contextlib.contextmanager
    def held(self, make_wrapper: Callable[[Callable], Callable], note: Callable[[str], None] = lambda m: None):
        """While active, the private function is ``make_wrapper(original)``: installed by the first
        holder, put back by the last (where nobody else replaced it meanwhile). Yields whether the
        wrapper is in place (False: the seam is not usable in this JAX, and nothing changed).

        Args:
            make_wrapper: builds the replacement from JAX's function.
            note: called with one line if the seam is given up while held.
        """
        with self._lock:
            original = self.function()
            if original is None:
                active = False
            else:
                if self._holders == 0:
                    self._installed = make_wrapper(original)
                    setattr(self._module, self.name, self._installed)
                self._holders += 1
                active = True
            self._notes.append(note)
        try:
            yield active
        finally:
            with self._lock:
                self._notes.remove(note)
                if active:
                    self._holders -= 1
                    if self._holders == 0:
                        if getattr(self._module, self.name, None) is self._installed:
                            setattr(self._module, self.name, original)
                        self._installed = None


def _one_line(err: BaseException | str) -> str:
    text = str(err) if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


CACHE_KEY_OPTIONS = Seam(
    "jax._src.cache_key",
    "_hash_serialized_compile_options",
    needs=("hash_obj", "compile_options_obj", "strip_device_assignment"),
)
"""How JAX hashes a program's compile options into its cache key (jaxfed.engine.cache: one entry
for every host device)."""

COMPILE_ON_MISS = Seam(
    "jax._src.compiler",
    "_compile_and_write_cache",
    needs=("backend", "computation", "executable_devices", "compile_options", "module_name", "cache_key"),
    wrapper=True,
)
"""Where JAX compiles a program its persistent cache misses (jaxfed.engine.cache: one compile for
every process)."""

CACHE_READ = Seam(
    "jax._src.compiler",
    "_cache_read",
    needs=("cache_key",),
    offers=("module_name", "cache_key", "compile_options", "backend", "executable_devices", "host_callbacks"),
)
"""JAX's read of its persistent cache, called with the parameters it takes among those of
:data:`COMPILE_ON_MISS`'s call (JAX 0.12 added ``host_callbacks``)."""

BACKENDS_STARTED = Seam("jax._src.xla_bridge", "backends_are_initialized")
"""Whether JAX has initialised its backends (JAX offers no public test)."""


def backends_started() -> bool:
    """Whether JAX has initialised its backends (after which ``XLA_FLAGS`` have no effect); False
    where JAX's private test is missing or fails (setting the flags then is harmless)."""
    function = BACKENDS_STARTED.function()
    if function is None:
        return False
    try:
        return bool(function())
    except Exception as err:
        BACKENDS_STARTED.give_up(err)
        return False


def seams() -> tuple[Seam, ...]:
    """Every private seam, for ``jaxfed cache info`` and docs/performance.md's table."""
    return (CACHE_KEY_OPTIONS, COMPILE_ON_MISS, CACHE_READ, BACKENDS_STARTED)
