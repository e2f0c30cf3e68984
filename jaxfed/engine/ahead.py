"""A run's programs compiled before the run (:func:`compile_ahead`), so that ``jaxfed reproduce``
compiles its next experiment while the one before it computes.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxfed.engine.core import _compilation_cache, _compile_group, plan
from jaxfed.engine.options import RunOptions
from jaxfed.engine.points import Trial


def compile_ahead(
    trial: Trial, points: list, n_trials: int, options: RunOptions, stopped: Callable[[], bool] = lambda: False
) -> int:
    """Compiles, without computing anything, the chunk function of each group of points that
    :func:`jaxfed.engine.run` would compile for a fresh run of ``trial`` over ``points`` (no
    stored trials in ``options.out_dir``), sized as that run sizes it, and keeps each in the
    process (:data:`jaxfed.engine.compiled.KEPT_CHUNK_FNS`) and in the compilation cache: a run
    of the same trial object (the same function, not an equal one), points and options then
    finds its programs compiled (its record says 0 s of compiling, from the cache).

    Nothing is written but the compilation cache's entries (the store is not opened: the plan is
    made without ``out_dir``), so the values of the later run are those it computes without this:
    compiling is deterministic, and a program compiled ahead is the one it would compile.

    Args:
        trial, points, n_trials: as :func:`jaxfed.engine.run` takes them.
        options: the later run's :class:`RunOptions` (its ``out_dir``, identity and progress are
            not used).
        stopped: asked before each group: True ends the compiles there (an XLA compile under way
            cannot be stopped, so a process that ends waits for that one only).

    Returns:
        The number of groups whose chunk function was compiled (0 without jit).

    Raises:
        ValueError: what :func:`jaxfed.engine.plan` refuses, or an error compiling.
    """
    options = dataclasses.replace(options, out_dir=None, progress=False)
    with plan(trial, points, n_trials, options) as made:
        if made.machine.mesh is None:
            return 0
        with _compilation_cache(made) as cache_dir:
            for compiled, gp in enumerate(made.groups):
                if stopped():
                    return compiled
                _compile_group(made, gp, cache_dir)
        return len(made.groups)
