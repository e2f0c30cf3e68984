"""Compiled once: JAX's persistent compilation cache (per-user directory, ``$JAXFED_COMPILATION_CACHE``
or ``compilation_cache=``; ``off`` disables it); an executable compiled once is loaded
on every host device (:func:`loaded_on`)."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import time
from typing import Any

import jax
from jax.experimental import serialize_executable
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


def loaded_on(executable, device) -> Any | None:
    """``executable`` (a compiled single-device program, ``jax.jit(...).lower(...).compile()``)
    loaded for another ``device`` of the same CPU client without compiling it again, or None
    where this JAX cannot (the caller then compiles for ``device`` as usual).

    An XLA CPU executable is machine code that does not depend on which host device runs it, but
    JAX compiles one per device (the device is part of an executable's options, and of the
    persistent cache's key on a CPU): a run on two host devices compiled each trial program twice,
    side by side (3.5 s where one compile takes 2.6 s on the 2-core machine; on 16 host devices,
    16 times). The executable is serialised and loaded back with ``device`` in place of its own:
    the same machine code on every device, so the same bits by construction. It goes through
    JAX's executable serialisation with the device mapping replaced, a private seam: any failure
    (another JAX version) is a None, never a wrong program, and the loaded executable is checked
    to run on ``device``.
    """
    if device.platform != "cpu":
        return None
    try:
        from jax._src import compiler  # (the compile options JAX itself would give ``device``)

        serialized, in_tree, out_tree = serialize_executable.serialize(executable)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1, device_assignment=[device])
        unloaded, args_info, no_kwargs = _OnDevice(io.BytesIO(serialized), device, options).load()
        loaded = jax.stages.Compiled(unloaded.load(), [], in_tree.unflatten(args_info), out_tree, no_kwargs=no_kwargs)
        return loaded if list(loaded.runtime_executable().local_devices()) == [device] else None
    except Exception:  # (a private seam of JAX: compile instead)
        return None


class _OnDevice(getattr(serialize_executable, "_JaxPjrtUnpickler", pickle.Unpickler)):  # type: ignore[misc]
    """JAX's unpickler of a serialised executable, with every device it names read as ``device``
    and the executable loaded with ``options`` (whose device assignment is ``device``)."""

    def __init__(self, file, device, options):
        super().__init__(file, device.client, [device])
        self.device, self.options = device, options

    def persistent_load(self, pid):
        if pid[0] == "device":
            return self.device
        if pid[0] == "exec":
            return self.backend.deserialize_executable(
                pid[1], executable_devices=self.execution_devices, compile_options=self.options
            )
        return super().persistent_load(pid)
