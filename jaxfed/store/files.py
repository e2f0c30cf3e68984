"""Safe file I/O below the chunk format: what every file of a result directory is written and read with.

- writes are atomic (:func:`atomic_write_bytes`, :func:`atomic_write_json`, :func:`atomic_savez`):
  a new temporary file beside the target, flushed to disk (``fsync``) and renamed over it
  (``os.replace``, the rename itself made durable), never through a symbolic link, so after a kill
  at any instant a file is either complete or absent;
- reads (:func:`open_regular`, :func:`read_regular`, :func:`read_json`) follow no link, never
  block on a FIFO or device put in place of a file and refuse a file larger than a limit;
- :func:`_lock_directory`: the exclusive lock of a result directory (``flock``);
- :func:`_npz_parts`: an uncompressed ``.npz`` streamed as a list of buffers, each array's bytes
  written from where they lie and its CRC-32 computed once, by the zip writer.

Every write goes through the few filesystem functions here (``_write_file``, ``_replace``,
``_remove``, ``_makedirs``), called through this module, so the fault-injection tests can cut a run
at any one of them (``monkeypatch.setattr(jaxfed.store.files, "_write_file", …)``).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import stat
import zipfile

import numpy as np


class StoreError(ValueError):
    """A result directory cannot be used as it is; the message is one line naming the file."""


def _lock_directory(out_dir: str):
    """An exclusive lock on ``out_dir/.lock`` for this process (``flock``: the kernel releases it
    when the process ends, a kill included), or :class:`StoreError` naming the process that holds
    it: two runs writing one directory would compute the same chunks twice or discard each
    other's. The lock file is opened without following a link (a ``.lock`` that is a symbolic
    link is refused, so no file outside the directory is ever truncated)."""
    path = os.path.join(out_dir, ".lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        if os.path.islink(path):
            raise StoreError(f"{path}: is a symbolic link; {_NOT_A_LINK}") from None
        raise StoreError(f"{path}: cannot be opened ({err.strerror or err})") from None
    handle = os.fdopen(fd, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise StoreError(
            f"{out_dir}: another jaxfed run ({holder}) is writing to this directory; wait for it or use another --out"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


_NOT_A_LINK = "jaxfed writes only files it creates itself inside the result directory; remove the link"


def check_no_link(path: str) -> None:
    """StoreError if ``path`` is a symbolic link: nothing this package writes follows one.

    Args:
        path: a path inside a result directory.

    Raises:
        StoreError: ``path`` is a symbolic link (one line naming it).
    """
    if os.path.islink(path):
        raise StoreError(f"{path}: is a symbolic link; {_NOT_A_LINK}")


MAX_READ_BYTES = 1 << 34
"""The largest file read from a result directory (16 GiB): a bigger one is refused, not read."""


def open_regular(path: str, limit: int | None = None):
    """The regular file ``path`` opened for reading (binary), without following a link and
    without blocking (``O_NONBLOCK``: a FIFO, device or socket put in place of a result file is
    refused, never waited on), when it is at most ``limit`` bytes long.

    Args:
        path: the file to read.
        limit: the largest size read, in bytes (default :data:`MAX_READ_BYTES`).

    Returns:
        The file, open for binary reading (the caller closes it).

    Raises:
        StoreError: one line naming ``path``: absent, a link, not a regular file, too large, unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if os.path.islink(path):
            raise StoreError(f"{path}: is a symbolic link; {_NOT_A_LINK}") from None
        raise StoreError(f"{path}: cannot be read ({err.strerror or err})") from None
    limit = MAX_READ_BYTES if limit is None else limit
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StoreError(f"{path}: is not a regular file (a FIFO, device, socket or directory); not read")
        raise StoreError(f"{path}: is {info.st_size:,} bytes, more than the {limit:,} read from a result directory")
    return os.fdopen(fd, "rb")


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`; ``limit`` default
    :data:`MAX_READ_BYTES`).

    Args:
        path: the file to read.
        limit: the largest size read, in bytes (default :data:`MAX_READ_BYTES`).

    Returns:
        The file's bytes.

    Raises:
        StoreError: as :func:`open_regular`, or the file grew past ``limit`` or a read failed.
    """
    limit = MAX_READ_BYTES if limit is None else limit
    with open_regular(path, limit) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise StoreError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise StoreError(f"{path}: is more than the {limit:,} bytes read from a result directory")
    return data


def read_regular_writable(path: str, limit: int | None = None) -> bytearray:
    """:func:`read_regular` into a ``bytearray``, read once, so that arrays viewed in it are
    writable without a copy.

    Args:
        path: the file to read.
        limit: the largest size read, in bytes (default :data:`MAX_READ_BYTES`).

    Returns:
        The file's bytes.

    Raises:
        StoreError: as :func:`read_regular`, or the file changed size while it was read.
    """
    limit = MAX_READ_BYTES if limit is None else limit
    with open_regular(path, limit) as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        try:
            read = f.readinto(data)
        except OSError as err:
            raise StoreError(f"{path}: cannot be read ({err.strerror or err})") from None
    if read != size:
        raise StoreError(f"{path}: changed size while it was read ({read:,} of {size:,} bytes)")
    return data


MAX_JSON_BYTES = 1 << 28
"""The largest JSON file read from a result directory (256 MiB): a larger one is refused before
it is read or parsed."""


def read_json(path: str, limit: int | None = None):
    """The JSON value of the regular file ``path`` (:func:`read_regular`); StoreError, one line
    naming the file, when it cannot be read or parsed (too deeply nested included).

    Args:
        path: the JSON file to read.
        limit: the largest size read, in bytes (default :data:`MAX_JSON_BYTES`).

    Returns:
        The parsed JSON value.

    Raises:
        StoreError: as :func:`read_regular`, or the bytes are not JSON.
    """
    data = read_regular(path, MAX_JSON_BYTES if limit is None else limit)
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise StoreError(f"{path}: not readable JSON ({_one_line(err)[:120]})") from None


# --------------------------------------------------------------------------- filesystem layer
def _write_file(path: str, parts: list) -> None:
    """Creates ``path`` (a new file: never through a link or over an existing one) with the
    buffers ``parts`` one after another (bytes, or views of arrays: written from where they lie)
    and flushes it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        for part in parts:
            f.write(part)
        f.flush()
        os.fsync(f.fileno())


def _replace(src: str, dst: str) -> None:
    os.replace(src, dst)
    try:  # make the rename itself durable; not every filesystem lets a directory be opened
        fd = os.open(os.path.dirname(dst) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    os.remove(path)


def _makedirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def atomic_write_bytes(path: str, data) -> None:
    """Writes ``data`` (bytes, or a list of buffers written one after another) to ``path`` via a
    new temporary file beside it and ``os.replace``: never half-written, never through a symbolic link.

    Args:
        path: the file to write (created or replaced).
        data: bytes, or a list of buffers (bytes, memoryviews) written one after another.

    Raises:
        StoreError: ``path`` is a symbolic link, or the file cannot be written (permissions, full
            disk, …), naming it.
    """
    check_no_link(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if os.path.lexists(tmp):  # left by a killed process that had this pid (a link is removed, not followed)
            _remove(tmp)
        _write_file(tmp, [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data))
        _replace(tmp, path)
    except OSError as err:
        try:  # a full disk leaves no half-written temporary behind
            if os.path.lexists(tmp):
                _remove(tmp)
        except OSError:
            pass
        raise StoreError(f"cannot write {path}: {err.strerror or err}") from None


def atomic_link_or_write(path: str, source: str, data, source_stat: os.stat_result | None) -> None:
    """Makes ``path`` a file holding ``data``, the bytes read from ``source`` (whose ``os.lstat``
    before the read was ``source_stat``): a hard link to ``source`` where the filesystem allows
    one and ``source`` is still the file that was read (its inode, size and modification time),
    else ``data`` written
    (:func:`atomic_write_bytes`). Atomic either way; a merge links its shards' chunks instead of
    writing hundreds of megabytes again. Nothing of this package writes into a stored file in
    place (every write replaces it), so the two names never see each other's changes.

    Args:
        path: the file to make (created or replaced).
        source: the regular file ``data`` was read from.
        data: its bytes.
        source_stat: ``os.lstat(source)`` taken before ``data`` was read (None: written, not linked).

    Raises:
        StoreError: as :func:`atomic_write_bytes`.
    """
    check_no_link(path)
    if source_stat is None:
        return atomic_write_bytes(path, data)
    tmp = f"{path}.{os.getpid()}.tmp"
    was_read = (source_stat.st_ino, source_stat.st_dev, len(data), source_stat.st_mtime_ns)
    try:
        if os.path.lexists(tmp):
            _remove(tmp)
        os.link(source, tmp, follow_symlinks=False)
        linked = os.lstat(tmp)
        if (
            stat.S_ISREG(linked.st_mode)
            and (linked.st_ino, linked.st_dev, linked.st_size, linked.st_mtime_ns) == was_read
        ):
            _replace(tmp, path)
            return
    except OSError:  # no hard links here (another filesystem, a filesystem without them, permissions)
        pass
    try:
        if os.path.lexists(tmp):
            _remove(tmp)
    except OSError:
        pass
    atomic_write_bytes(path, data)


def atomic_write_json(path: str, obj) -> None:
    """Writes ``obj`` as JSON to ``path`` atomically (see :func:`atomic_write_bytes`).

    Args:
        path: the file to write (created or replaced).
        obj: a JSON-serialisable value, written indented with sorted keys.

    Raises:
        StoreError: as :func:`atomic_write_bytes`.
    """
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def savez_bytes(arrays: dict) -> bytes:
    """The bytes of ``np.savez(arrays)`` (uncompressed .npz).

    Args:
        arrays: name -> array.

    Returns:
        The bytes of the .npz file.
    """
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def atomic_savez(path: str, arrays: dict) -> None:
    """``np.savez`` to ``path`` atomically (see :func:`atomic_write_bytes`), the arrays written
    from where they lie (:func:`_npz_parts`).

    Args:
        path: the file to write (created or replaced).
        arrays: name -> array.

    Raises:
        StoreError: as :func:`atomic_write_bytes`.
    """
    atomic_write_bytes(path, _npz_parts(arrays))


class _Buffers:
    """A write-only stream that keeps what is written as a list of buffers, copying nothing:
    :mod:`zipfile` streams an .npz into it (a stream without ``seek``: each member's sizes and
    CRC-32 follow its data)."""

    def __init__(self):
        self.parts: list = []
        self.size = 0

    def write(self, data: bytes, /) -> int:
        view = memoryview(data)
        self.parts.append(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _npz_parts(arrays: dict, last=None) -> list:
    """The bytes of an uncompressed .npz of ``arrays`` as a list of buffers: what ``np.savez``
    writes (``np.load`` reads it), but each array's bytes are views of the array itself (of each
    row, for an array that is contiguous only row by row, as a slice of some points' trials), and
    their CRC-32 is computed once, by the zip writer. ``last(crcs)`` (name -> CRC-32 of its
    member), if given, returns more arrays, written after these (the store's header)."""
    out = _Buffers()
    with zipfile.ZipFile(out, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:

        def add(name, value):
            a = np.asarray(value)
            with archive.open(f"{name}.npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(a))
                for piece in [a] if a.flags.c_contiguous or a.ndim == 0 else a:
                    if piece.size:  # (an empty view cannot be cast to bytes)
                        member.write(np.ascontiguousarray(piece).data.cast("B"))
            return archive.getinfo(f"{name}.npy").CRC

        crcs = {name: add(name, value) for name, value in arrays.items()}
        for name, value in (last(crcs) if last is not None else {}).items():
            add(name, value)
    return out.parts


def _one_line(err: Exception) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:200]
