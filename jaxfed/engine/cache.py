"""Compiled once: JAX's persistent compilation cache (per-user directory, ``$JAXFED_COMPILATION_CACHE``
or ``compilation_cache=``; ``off`` disables it); the memory probe's cached figures are
:mod:`jaxfed.engine.sizing`'s."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

CACHE_ENV = "JAXFED_COMPILATION_CACHE"
"""Environment variable: the compilation cache directory, or ``off``."""

_OFF = ("off", "none", "0", "false", "no")


_cache_events = {"hits": 0, "misses": 0, "listening": 0}  # counts of JAX's cache events; whether we listen


def compilation_cache_dir(option: str | None = None) -> str | None:
    """The compilation cache directory to use, or None when disabled.

    ``option`` (the ``--compilation-cache`` flag or ``compilation_cache=``) first, then
    ``$JAXFED_COMPILATION_CACHE``, then ``$XDG_CACHE_HOME/jaxfed/xla`` (``~/.cache/jaxfed/xla``);
    ``off`` (or ``none``, ``0``, ``false``, ``no``) disables the cache.
    """
    value = option if option is not None else os.environ.get(CACHE_ENV) or None
    if value is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "jaxfed", "xla")
    if value.strip().lower() in _OFF:
        return None
    return os.path.abspath(os.path.expanduser(value))


def use_compilation_cache(option: str | None = None, note=lambda message: None) -> str | None:
    """Points JAX's persistent compilation cache at :func:`compilation_cache_dir` (every
    executable is cached, however fast it compiled) and returns the directory, or None when the
    cache is off or the directory cannot be created or written (then ``note`` says why and the
    run compiles as usual). Damaged entries in the directory are skipped by JAX with a warning
    and recompiled."""
    path = compilation_cache_dir(option)
    if path is not None:
        try:
            os.makedirs(path, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(f"{path}: not writable")
        except OSError as err:
            note(f"compilation cache {path} cannot be used ({err.strerror or err}); compiling without it")
            path = None
    if jax.config.jax_compilation_cache_dir != path:  # type: ignore[attr-defined]  # (JAX's options are dynamic attributes)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax_cache.reset_cache()  # JAX decides once per process whether it uses a cache
    if not _cache_events["listening"]:
        jax.monitoring.register_event_listener(_count_cache_event)
        _cache_events["listening"] = 1
    return path


@contextlib.contextmanager
def compilation_cache(option: str | None = None, note=lambda message: None):
    """:func:`use_compilation_cache` for the duration of a ``with`` block (a run), then JAX's
    previous cache settings again, so that the engine leaves other JAX code in the process (a
    notebook's, say) with the cache it had."""
    previous = (
        jax.config.jax_compilation_cache_dir,  # type: ignore[attr-defined]
        jax.config.jax_persistent_cache_min_compile_time_secs,  # type: ignore[attr-defined]
    )
    path = use_compilation_cache(option, note)
    try:
        yield path
    finally:
        if previous[0] != path:
            jax.config.update("jax_compilation_cache_dir", previous[0])
            jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])
            jax_cache.reset_cache()


def _count_cache_event(event: str, **kwargs) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _cache_events["hits"] += 1
    elif event == "/jax/compilation_cache/cache_misses":
        _cache_events["misses"] += 1


def timed_compile(lowered) -> tuple[Any, float, bool]:
    """(executable, seconds, whether it came from the persistent cache) of a lowered function."""
    hits, misses = _cache_events["hits"], _cache_events["misses"]
    start = time.perf_counter()
    executable = lowered.compile()
    seconds = time.perf_counter() - start
    return executable, seconds, _cache_events["hits"] > hits and _cache_events["misses"] == misses
