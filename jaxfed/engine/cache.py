"""Compiled once: JAX's persistent compilation cache (per-user directory, ``$JAXFED_COMPILATION_CACHE``
or ``compilation_cache=``; ``off`` disables it), one entry for every host device
(:func:`one_entry_for_every_host_device`), one compile of a program for every process that shares
the directory (:func:`one_compile_for_every_process`), and what is in it (:func:`cache_info`,
:func:`clear_cache`)."""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from jaxfed import jaxcompat

try:
    import fcntl
except ImportError:  # pragma: no cover  (Windows: every process compiles its own)
    fcntl = None  # type: ignore[assignment]

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


class _RunsInProcess:
    """The runs of this process that hold JAX's cache setting (runs in several threads share it):
    the first sets it, the last puts back what was there before."""

    def __init__(self):
        self.lock = threading.Lock()
        self.count = 0
        self.asked: str | None = None  # the one the first run asked for (None: off or unusable)
        self.previous: tuple = ()
        self.scratch: str | None = None


_runs = _RunsInProcess()


@contextlib.contextmanager
def compilation_cache(option: str | None = None, note=lambda message: None):
    """:func:`use_compilation_cache` for the duration of a ``with`` block (a run), then JAX's
    previous cache settings again, so that the engine leaves other JAX code in the process (a
    notebook's, say) with the cache it had. Its value is the cache directory, or None when the
    cache is off or unusable: the run then caches in a scratch directory of its own, removed at
    its end, so that its host devices still share one compiled program
    (:func:`one_entry_for_every_host_device`).

    Runs in several threads of one process (a Dask worker's threads) share one setting: JAX has
    one per process. The first run sets it, later ones use it (with a note where they asked for
    another directory: the same programs, cached elsewhere), and the last one puts back what was
    there before.
    """
    with _runs.lock:
        if _runs.count == 0:
            _runs.previous = (
                jax.config.jax_compilation_cache_dir,  # type: ignore[attr-defined]
                jax.config.jax_persistent_cache_min_compile_time_secs,  # type: ignore[attr-defined]
            )
            _runs.asked = use_compilation_cache(option, note)
            _runs.scratch = None
            if _runs.asked is None:
                try:
                    _runs.scratch = tempfile.mkdtemp(prefix="jaxfed-run-cache-")
                    use_compilation_cache(_runs.scratch)
                except OSError:  # (no temporary directory: each host device compiles its own)
                    _runs.scratch = None
        elif compilation_cache_dir(option) != _runs.asked:
            note(
                f"compilation cache: another run in this process uses {_runs.asked or 'none'}; this one uses it "
                "too (JAX has one cache setting per process; the programs and values are the same)"
            )
        _runs.count += 1
        path = _runs.asked
    try:
        with one_entry_for_every_host_device(note), one_compile_for_every_process(note=note):
            yield path
    finally:
        with _runs.lock:
            _runs.count -= 1
            if _runs.count == 0:
                if _runs.previous[0] != jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]
                    jax.config.update("jax_compilation_cache_dir", _runs.previous[0])
                    jax.config.update("jax_persistent_cache_min_compile_time_secs", _runs.previous[1])
                    jax_cache.reset_cache()
                if _runs.scratch is not None:
                    shutil.rmtree(_runs.scratch, ignore_errors=True)
                _runs.scratch = _runs.asked = None


@contextlib.contextmanager
def one_entry_for_every_host_device(note=lambda message: None):
    """While active, a single-device program compiled for one host device is one entry of the
    persistent cache for every host device: JAX leaves the device out of its cache key, as it
    does on a GPU, and loads the executable with the device asked for (it passes the caller's
    compile options to the cached executable). An XLA CPU executable is machine code that does
    not depend on which host device runs it, but on a CPU JAX hashes the device into the key,
    so a run on N host devices compiled each trial program N times, side by side: now the first
    device compiles it and the others load it, the same machine code on every device.

    JAX's key function is a private seam (:data:`jaxfed.jaxcompat.CACHE_KEY_OPTIONS`): where it is
    missing, takes other arguments or fails, every device compiles its own. Only on a CPU
    backend, and restored when the last run of the process ends.
    """
    if jax.default_backend() != "cpu":
        yield
        return

    def make_wrapper(original):
        def without_the_device(hash_obj, compile_options_obj, strip_device_assignment=False):
            if jaxcompat.CACHE_KEY_OPTIONS.given_up is None:
                try:
                    return original(hash_obj, compile_options_obj, strip_device_assignment=True)
                except Exception as err:  # (jaxfed's use of the seam; JAX's own call below)
                    jaxcompat.CACHE_KEY_OPTIONS.give_up(err)
            return original(hash_obj, compile_options_obj, strip_device_assignment=strip_device_assignment)

        return without_the_device

    with jaxcompat.CACHE_KEY_OPTIONS.held(make_wrapper, note):
        yield


COMPILE_WAIT_S = 600.0
"""How long a process waits for another that compiles the same program into the shared cache,
before it compiles the program itself (the same machine code either way)."""

LOCKS_DIR = "jaxfed-compiling"
"""The subdirectory of a compilation cache that holds a lock file per program (empty files)."""

REJECTED_DIR = "jaxfed-rejected"
"""The subdirectory of a compilation cache that names (empty files) the programs JAX compiled
again although the cache held them (:func:`cache_info`'s ``rejected``)."""

REJECTED_NOTE = (
    "the compilation cache {path} holds {what} but JAX compiled it again instead of loading it, so every "
    "process pays the compile (JAX rejects some CPU entries on some processors: jax-ml/jax#38445); "
    "`jaxfed cache clear` starts the cache afresh, --compilation-cache off stops using it"
)
"""The one line a run prints when JAX misses a program its cache holds (once per process)."""

_rejected = {"noted": False}


@contextlib.contextmanager
def one_compile_for_every_process(wait_s: float = COMPILE_WAIT_S, note=lambda message: None):
    """While active, of the processes that miss the same program in one persistent cache at once,
    one compiles it and the others wait for it and load it from the cache: a program missing from
    the cache is compiled under an exclusive lock on ``<cache>/jaxfed-compiling/<key>``, and the
    cache is read again once the lock is held. Dask workers that start a run's tasks together (or
    pytest workers, or a SLURM array on a shared file system) each compiled the same program side
    by side, and XLA's compiler uses more than one core. Programs already in the cache take no lock.

    Whatever the lock does, each process gets the same executable: the lock only decides who
    compiles. Where the file system takes no lock (``ENOLCK``, ``ENOSYS``…) or after ``wait_s``
    seconds of waiting, a process compiles as before. JAX's miss path and cache read are private
    seams (:data:`jaxfed.jaxcompat.COMPILE_ON_MISS`, :data:`~jaxfed.jaxcompat.CACHE_READ`): where
    either is missing, takes other arguments or fails, JAX compiles as it would without jaxfed.

    On the way it sees a program that JAX missed although the cache holds its entry (JAX rejected
    it): ``note`` says so once per process, and :func:`cache_info` counts such programs.
    """
    if fcntl is None or jaxcompat.CACHE_READ.function() is None:
        yield
        return

    def make_wrapper(original):
        signature = inspect.signature(original)

        def compile_once(*args, **kwargs):
            fd = None
            try:
                if jaxcompat.COMPILE_ON_MISS.given_up is None and jaxcompat.CACHE_READ.given_up is None:
                    named = signature.bind(*args, **kwargs).arguments
                    directory = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
                    fd = _program_lock(directory, named["cache_key"], wait_s, note)
                    if fd is not None:  # (whoever held it before may have written the program)
                        executable = _read_again(named)
                        if executable is not None:
                            jax.monitoring.record_event("/jax/compilation_cache/cache_hits")
                            _release(fd)
                            return executable
                        _check_not_rejected(directory, named["cache_key"])
            except Exception as err:  # (jaxfed's use of the seams; JAX's own compile below)
                _release(fd)
                fd = None
                if jaxcompat.CACHE_READ.given_up is None:
                    jaxcompat.COMPILE_ON_MISS.give_up(err)
            try:
                return original(*args, **kwargs)
            finally:
                _release(fd)

        return compile_once

    with jaxcompat.COMPILE_ON_MISS.held(make_wrapper, note):
        yield


def _read_again(named: dict):
    """JAX's cache read of the program of a miss-path call's arguments ``named`` (its parameters
    among them, by name)."""
    read = jaxcompat.CACHE_READ.function()
    if read is None:
        return None
    try:
        executable, _ = read(**{name: named[name] for name in jaxcompat.CACHE_READ.parameters()})
    except Exception as err:  # (given up: the caller compiles through JAX's own path)
        jaxcompat.CACHE_READ.give_up(err, note=jaxcompat.COMPILE_ON_MISS.note)  # (said by the runs holding that one)
        raise
    return executable


def _check_not_rejected(directory: str, key: str) -> None:
    """Where the cache holds ``key``'s entry that JAX and jaxfed both failed to load: names it in
    ``REJECTED_DIR`` (where it can) and, once per process, says so."""
    if not os.path.isfile(os.path.join(directory, key + "-cache")):
        return
    try:
        os.makedirs(os.path.join(directory, REJECTED_DIR), exist_ok=True)
        open(os.path.join(directory, REJECTED_DIR, key), "a").close()
    except OSError:  # (a cache we may read but not write: the note below still says it)
        pass
    if not _rejected["noted"]:
        _rejected["noted"] = True
        jaxcompat.COMPILE_ON_MISS.note(REJECTED_NOTE.format(path=directory, what=f"a program ({key[:48]})"))


def _program_lock(directory: str | None, key: str, wait_s: float, note=lambda message: None) -> int | None:
    """An open descriptor holding an exclusive ``flock`` on ``directory/jaxfed-compiling/key``,
    taken within ``wait_s`` seconds; None where there is no directory, no lock on this file
    system or the wait ran out. :func:`_release` closes it (a process's end does too); the lock
    files stay (empty, one per program; ``jaxfed cache clear`` removes them). While another
    process holds it (or another thread of this one: ``jaxfed reproduce`` compiles its next
    experiment ahead), ``note`` is told so at once and every :data:`WAIT_NOTE_EVERY_S` seconds
    (:func:`waiting_notes`)."""
    if not directory or os.sep in key or not key:
        return None
    try:
        folder = os.path.join(directory, LOCKS_DIR)
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, key), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    if _flock(fd, wait_s, waiting_notes(os.path.join(folder, key), wait_s, note, lambda: _held_here(key))):
        with _HELD_LOCK:
            _HELD[fd] = key
        return fd
    os.close(fd)
    return None


_HELD: dict[int, str] = {}  # this process's held lock descriptors -> their program keys
_HELD_LOCK = threading.Lock()


def _held_here(key: str) -> bool:
    """Whether a thread of this process holds ``key``'s lock (it compiles the program)."""
    with _HELD_LOCK:
        return key in _HELD.values()


WAIT_NOTE_EVERY_S = 30.0
"""How often a process waiting for another's compile says it still waits."""


def waiting_notes(lock: str, wait_s: float, note, here: Callable[[], bool] = lambda: False) -> Callable[[float], None]:
    """The notes of a process waiting on ``lock``, held by another process compiling the same
    program: called with the seconds waited so far (at each look), it gives ``note`` one line at
    the first look and one every :data:`WAIT_NOTE_EVERY_S` seconds, each saying what it waits for,
    for how long so far, and until when it waits before compiling the program itself.

    Args:
        lock: the program's lock file (its name is the program's key).
        wait_s: the longest wait (:data:`COMPILE_WAIT_S`).
        note: where the lines go.
        here: whether the compile waited for is this process's own (another thread's: the
            compile ahead of ``jaxfed reproduce``'s next experiment); the lines say so.

    Returns:
        The function to call with the seconds waited.
    """
    said: dict[str, float | None] = {"at": None}

    def waited(seconds: float) -> None:
        if said["at"] is not None and seconds - said["at"] < WAIT_NOTE_EVERY_S:
            return
        said["at"] = seconds
        whose = "another thread's compile in this process" if here() else "another process's compile"
        note(
            f"waiting for {whose} of the same program (lock {lock}): {seconds:,.0f} s so far, "
            f"at most {wait_s:,.0f} s, then compiling it here; its program is loaded from the cache when it ends"
        )

    return waited


def _release(fd: int | None) -> None:
    if fd is not None:
        with _HELD_LOCK:
            _HELD.pop(fd, None)
        os.close(fd)  # (releases the lock)


def _flock(fd: int, wait_s: float, waited=lambda seconds: None) -> bool:
    """Takes an exclusive lock on ``fd`` within ``wait_s`` seconds (looking every 20 ms: a blocking
    ``flock`` cannot be given a deadline from a thread), calling ``waited`` with the seconds
    waited at each look that finds it held; False where it could not."""
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= start + wait_s:
                return False  # (no locks here, ENOLCK/ENOSYS/EOPNOTSUPP, or waited long enough)
        waited(time.monotonic() - start)
        time.sleep(0.02)


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


class CacheInfo(NamedTuple):
    """What ``jaxfed cache info`` shows of a compilation cache directory (:func:`cache_info`)."""

    path: str | None  # the directory (None: the cache is off)
    exists: bool
    entries: int  # compiled programs (JAX's ``*-cache`` files)
    bytes: int  # their size, with their access-time files
    writable: bool  # a run can add to it
    rejected: int = 0  # programs it holds that JAX compiled again instead of loading (jax-ml/jax#38445)


PROGRAM_KEY = re.compile(r"[A-Za-z0-9_.\-]+-[0-9a-f]{64}")
"""A compiled program's key as JAX names it: the program's name, a dash and the SHA-256 of what
was compiled (``jit_on_device-0027…e3-cache``). A file whose name is not a key with one of JAX's
suffixes is not the cache's, whatever it ends with."""

ENTRY_FILE = re.compile(PROGRAM_KEY.pattern + r"-(cache|atime)")
"""The files JAX's cache writes per program: the executable and its last access time."""


def _regular_files(folder: str, name: re.Pattern) -> list[str]:
    """The regular files directly in ``folder`` whose whole name matches ``name``: never a symlink
    (its target may be anyone's) nor anything in a subfolder."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [e.path for e in entries if name.fullmatch(e.name) and e.is_file(follow_symlinks=False)]


def _entry_files(path: str) -> list[str]:
    """The files of JAX's cache entries directly in ``path`` (nothing else there is counted or removed)."""
    return _regular_files(path, ENTRY_FILE)


def cache_info(option: str | None = None) -> CacheInfo:
    """The compilation cache a run would use (:func:`compilation_cache_dir` of ``option``): its
    directory, compiled programs and bytes, whether it is writable, and how many of its programs
    JAX compiled again instead of loading them (:func:`one_compile_for_every_process`). Reads only.

    Args:
        option: the cache a run is given (a directory, ``"off"``, or None for the default:
            ``JAXFED_COMPILATION_CACHE`` or the user cache directory).

    Returns:
        A :class:`CacheInfo` (path None when the cache is off).
    """
    path = compilation_cache_dir(option)
    if path is None:
        return CacheInfo(None, False, 0, 0, False)
    files = _entry_files(path)
    size = sum(os.path.getsize(f) for f in files if os.path.exists(f))
    entries = sum(f.endswith("-cache") for f in files)
    exists = os.path.isdir(path)
    writable = os.access(path if exists else _existing_parent(path), os.W_OK | os.X_OK)
    try:
        named = os.listdir(os.path.join(path, REJECTED_DIR))
    except OSError:
        named = []
    rejected = sum(os.path.isfile(os.path.join(path, key + "-cache")) for key in named)
    return CacheInfo(path, exists, entries, size, writable, rejected)


def _existing_parent(path: str) -> str:
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def clear_cache(option: str | None = None) -> CacheInfo:
    """Removes the compiled programs of the compilation cache :func:`compilation_cache_dir` of
    ``option`` and returns what was there (:func:`cache_info`). The next run of each program
    compiles it again.

    Only files that jaxfed or JAX wrote and that their names prove so are removed: JAX's entry files
    (:data:`ENTRY_FILE`: a program key, SHA-256 included, with ``-cache`` or ``-atime``) and the
    lock and rejected-program files of :func:`one_compile_for_every_process` (a program key, in
    their folders, which are removed only when that leaves them empty). Regular files only, never
    through a symlink, never in another folder: a cache pointed at a directory that holds other
    files (``browser-cache``, a folder of the user's named like jaxfed's) keeps them.

    Args:
        option: the cache, as :func:`cache_info` takes it.

    Returns:
        What was there before, a :class:`CacheInfo`.

    Raises:
        OSError: an entry could not be removed (a read-only directory), naming the file.
    """
    before = cache_info(option)
    if before.path is None:
        return before
    if os.path.islink(before.path):
        raise OSError(
            f"the compilation cache {before.path} is a symlink (to {os.path.realpath(before.path)}), which jaxfed did "
            "not create: clear the directory it points to by naming it (--compilation-cache DIR)"
        )
    folders = [os.path.join(before.path, name) for name in (LOCKS_DIR, REJECTED_DIR)]
    folders = [f for f in folders if os.path.isdir(f) and not os.path.islink(f)]
    for name in _entry_files(before.path) + [p for f in folders for p in _regular_files(f, PROGRAM_KEY)]:
        try:
            os.remove(name)
        except FileNotFoundError:  # (removed meanwhile, by JAX's own eviction or another clear)
            pass
    for folder in folders:
        with contextlib.suppress(OSError):  # (not empty: it holds files that are not jaxfed's)
            os.rmdir(folder)
    return before
