"""The result store of :func:`jaxfed.engine.run`: a directory that never yields a wrong result.

Layout of ``out_dir`` (every name is built here; no name is ever read from a file):

- ``identity.json``: what identifies the run (the caller's identity plus the seed, common random
  numbers and :data:`STORE_FORMAT`). The trial count is not part of it, so a run can grow.
- ``build.json`` (:data:`BUILD_FILE`): the builds that computed its trials (JAX, jaxlib, backend,
  processor: :mod:`jaxfed.builds`), apart from the identity so that directories written before it
  was recorded keep their identity digest, which every chunk header carries.
- ``chunks/g{G}_t{START}_{STOP}.npz`` (raw mode): trials [START, STOP) of every point of group G.
- ``chunks/summary_g{G}.npz`` (summary mode): the summary state of group G after trials [0, STOP):
  counts, histograms and the binary counter of float64 sums over the whole blocks of
  ``stats.summary.SUMMARY_BLOCK`` trials [0, W), W = STOP rounded down to a block (O(log W) partial sums
  per cell, see :class:`jaxfed.stats.SummaryState`), and the raw values of trials [W, STOP) (``tail``).

Each of these ``.npz`` files is its own commit point: it is written to a temporary file, flushed
to disk and renamed over its name (``os.replace``, atomic), so after a kill at any instant a file
is either complete or absent. Besides its arrays it carries ``__meta__``, a JSON header saying
what it covers: format, kind, identity digest, group, point ids, trial range, each array's shape,
dtype and CRC-32 (the zip member's), and a SHA-256 of the header. Each file is checksummed once:
the CRC-32s that the zip format keeps anyway, computed while the arrays stream to the file and
checked by the zip reader when they are read, bind to the header by its SHA-256 (before format 5,
a second pass took a SHA-256 over every array byte). Loading verifies all of it against
what the current run expects (and, for summaries, that every cell counts exactly the trials the
header claims), so a file that is truncated, damaged, edited, copied from another run, group or
trial range is never merged: it raises :class:`StoreError`, one line naming the file and what is
wrong, or with ``overwrite`` it is deleted and its trials recomputed.

This module is the chunk format's only reader and writer: the engine, :func:`verify_record` and
the result directory (:mod:`jaxfed.store.rundir`, which decides which chunks make a run) read
chunks through its view, :class:`ChunkName`, :func:`list_chunks`, :func:`read_chunk`,
:func:`read_summary` and :func:`finish_summaries` (tests/results/test_chunk_format_owner.py).

Every write goes through the few filesystem functions at the top of this module (``_write_file``,
``_replace``, ``_remove``, ``_makedirs``), so the fault-injection tests can cut a run at any one of
them.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import stat
import zipfile
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from jaxfed import builds, stats

STORE_FORMAT = 5
"""Version of the layout above; a directory written by another version is refused as another configuration."""

SUMMARY_FIELDS = {
    "count": np.int64,
    "nan_count": np.int64,
    "total": np.float64,
    "total_sq": np.float64,
    "hist": np.int32,
}
"""Per-cell arrays of a summary state (see :class:`jaxfed.stats.SummaryState`), with their dtypes;
``total`` and ``total_sq`` have a level axis (``stats.summary.SUM_LEVELS``) after the point axis."""

SHARD_SUMMARY_FIELDS = {"left": np.float64, "left_sq": np.float64}
"""The further per-cell arrays of a shard's summary, whose trials do not start at 0 (with a level
axis, and ``first``, the first block, per point)."""

CHUNK_DIR = "chunks"
"""The folder of a result directory that holds its chunk files (the only place it is spelled)."""
_META = "__meta__"
_RAW_NAME = re.compile(r"g(\d{3,})_t(\d{10})_(\d{10})\.npz")
_SUMMARY_NAME = re.compile(r"summary_g(\d{3,})\.npz")
# Temporary files of atomic writes (name.PID.tmp) of the files this package writes, nothing else.
_TMP_NAME = re.compile(
    r"(identity\.json|build\.json|config\.json|metrics\.npz|report\.md|verdicts\.json|\.user-code-running|[A-Za-z0-9][A-Za-z0-9._-]*\.png"
    r"|g\d{3,}_t\d{10}_\d{10}\.npz|summary_g\d{3,}\.npz)\.\d+\.tmp"
)
_HINT = "delete it or use --overwrite (overwrite=True) to recompute it"


class StoreError(ValueError):
    """A result directory cannot be used as it is; the message is one line naming the file."""


class ConfigMismatch(StoreError):
    """An output directory already holds a run with a different configuration."""


class BuildMismatch(ConfigMismatch):
    """An output directory holds trials computed by another build (JAX, jaxlib, backend or processor)."""


BUILD_FILE = "build.json"
"""The file of a result directory that records which builds computed its trials (:func:`read_builds`)."""


class GroupSpec(NamedTuple):
    """What every stored file of one point group must match."""

    group: int  # group number, in the order of first appearance among the points
    point_ids: tuple  # global point indices of the group
    metrics: dict  # metric name -> (shape tuple of one trial, dtype string such as "<f4")


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
_OWN_NAMES = (".lock", CHUNK_DIR, ".user-code-running")  # (the last: jaxfed.runs.runner.MARKER)
"""What a result directory holds before its identity.json is written (a run killed that early)."""


def check_no_link(path: str) -> None:
    """StoreError if ``path`` is a symbolic link: nothing this package writes follows one."""
    if os.path.islink(path):
        raise StoreError(f"{path}: is a symbolic link; {_NOT_A_LINK}")


MAX_READ_BYTES = 1 << 34
"""The largest file read from a result directory (16 GiB): a bigger one is refused, not read."""


def open_regular(path: str, limit: int | None = None):
    """The regular file ``path`` opened for reading (binary), without following a link and
    without blocking (``O_NONBLOCK``: a FIFO, device or socket put in place of a result file is
    refused, never waited on), when it is at most ``limit`` bytes long.

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
    :data:`MAX_READ_BYTES`)."""
    limit = MAX_READ_BYTES if limit is None else limit
    with open_regular(path, limit) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise StoreError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise StoreError(f"{path}: is more than the {limit:,} bytes read from a result directory")
    return data


MAX_JSON_BYTES = 1 << 28
"""The largest JSON file read from a result directory (256 MiB): a larger one is refused before
it is read or parsed."""


def read_json(path: str, limit: int | None = None):
    """The JSON value of the regular file ``path`` (:func:`read_regular`); StoreError, one line
    naming the file, when it cannot be read or parsed (too deeply nested included)."""
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


def atomic_write_json(path: str, obj) -> None:
    """Writes ``obj`` as JSON to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def savez_bytes(arrays: dict) -> bytes:
    """The bytes of ``np.savez(arrays)`` (uncompressed .npz)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def atomic_savez(path: str, arrays: dict) -> None:
    """``np.savez`` to ``path`` atomically (see :func:`atomic_write_bytes`), the arrays written
    from where they lie (:func:`_npz_parts`)."""
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


# --------------------------------------------------------------------------- file format
def _digest(meta: dict) -> str:
    """SHA-256 of the header without its own digest (the header lists each array's CRC-32)."""
    text = json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _pack(meta: dict, arrays: dict) -> list:
    """The stored file of ``arrays`` under ``meta``, as a list of buffers: the arrays' members,
    then ``__meta__``, the header, listing each array's shape, dtype and CRC-32, with its digest."""

    def header(crcs: dict) -> dict:
        described = dict(meta, arrays={name: [list(np.shape(a)), np.asarray(a).dtype.str, crcs[name]] for name, a in arrays.items()})  # fmt: skip
        described["sha256"] = _digest(described)
        return {_META: np.frombuffer(json.dumps(described, sort_keys=True).encode(), np.uint8)}

    return _npz_parts(arrays, header)


def _one_line(err: Exception) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:200]


def _unpack(path: str) -> tuple[dict, dict, dict]:
    """(header, arrays, name -> CRC-32 of its zip member) of a stored file, read whole (the zip
    reader checks each member's bytes against its CRC-32); StoreError if it is not a complete one."""
    if os.path.islink(path):
        raise StoreError(f"{path}: is a symbolic link, not a file this engine wrote; {_HINT}")
    data = read_regular(path)  # (a FIFO or device in place of a chunk is refused, never waited on)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
            crcs = {name: z.zip.getinfo(f"{name}.npy").CRC for name in z.files}
    except Exception as err:  # noqa: BLE001 - any failure to parse means a damaged file
        raise StoreError(f"{path}: not a readable .npz file ({_one_line(err)}); {_HINT}") from None
    header = arrays.pop(_META, None)
    try:
        meta = json.loads(header.tobytes().decode()) if header is not None and header.dtype == np.uint8 else None
    except (UnicodeDecodeError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: has no valid {_META} header; {_HINT}")
    return meta, arrays, crcs


def _verify(path: str, meta: dict, arrays: dict, crcs: dict, expected: dict, specs: dict) -> None:
    """Checks header fields against ``expected``, arrays against ``specs`` (name -> (shape, dtype))
    and the checksums (the header's digest, each array's CRC-32 as the header lists it); raises
    StoreError naming the first thing that is wrong."""
    if meta.get("identity") != expected["identity"]:
        raise StoreError(f"{path}: belongs to another configuration (its identity digest differs); {_HINT}")
    for key, want in expected.items():
        if meta.get(key) != want:
            raise StoreError(
                f"{path}: header says {key} = {json.dumps(meta.get(key))}, expected {json.dumps(want)}; {_HINT}"
            )
    if set(arrays) != set(specs):
        raise StoreError(f"{path}: holds arrays {sorted(arrays)}, expected {sorted(specs)}; {_HINT}")
    if meta.get("sha256") != _digest(meta):
        raise StoreError(f"{path}: checksum mismatch (the header was changed after it was written); {_HINT}")
    for name, (shape, dtype) in specs.items():
        a = arrays[name]
        if a.shape != tuple(shape) or a.dtype.str != np.dtype(dtype).str:
            raise StoreError(
                f"{path}: array {name!r} is {a.dtype.str}{list(a.shape)}, expected {np.dtype(dtype).str}{list(shape)}; {_HINT}"
            )
        listed = meta.get("arrays")
        described = listed.get(name) if isinstance(listed, dict) else None
        if not isinstance(described, list) or described[:2] != [list(a.shape), a.dtype.str]:
            raise StoreError(f"{path}: header does not describe array {name!r} as stored; {_HINT}")
        if described[2:] != [crcs[name]]:
            raise StoreError(f"{path}: checksum mismatch (array {name!r} was changed after it was written); {_HINT}")


# --------------------------------------------------------------------------- identity
def describe_differences(stored, given, prefix: str = "") -> list[str]:
    """``["key: stored X, given Y", …]`` for every differing (nested) key of two JSON values, lists
    entry by entry (``points[1].topology: stored "line", given "complete"``; lists of different
    lengths also say both lengths), values whole; a SHA-256 digest (64 hex digits, e.g. a file's
    under ``code``) shows as its first 12 digits."""
    if isinstance(stored, dict) and isinstance(given, dict):
        out = []
        for key in sorted(set(stored) | set(given), key=str):
            out += describe_differences(stored.get(key, _ABSENT), given.get(key, _ABSENT), f"{prefix}{key}.")
        return out
    if isinstance(stored, list) and isinstance(given, list):
        # (a list's JSON cut at 60 characters hid the difference: `{"topology": "l, given … {"topology": "c`)
        key = prefix.rstrip(".")
        out = [] if len(stored) == len(given) else [f"{key}: stored {len(stored)} entries, given {len(given)}"]
        for i, (a, b) in enumerate(zip(stored, given)):
            out += describe_differences(a, b, f"{key}[{i}].")
        return out
    if stored == given:
        return []

    def show(v):
        if isinstance(v, str) and _SHA256.fullmatch(v):
            return f"sha256 {v[:12]}..."
        return "(absent)" if v is _ABSENT else json.dumps(v)

    return [f"{prefix.rstrip('.')}: stored {show(stored)}, given {show(given)}"]


_ABSENT = object()
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _read_json(path: str):
    return read_json(path)


def stored_identity(out_dir: str) -> dict | None:
    """The identity a result directory holds (its ``identity.json``), or None: absent, unreadable or
    not an object (the :class:`Store` then says why when it opens the directory). What the engine
    reads before it opens the store: a stored run's micro-batch width, which growth keeps."""
    path = os.path.join(out_dir, "identity.json")
    try:
        stored = _read_json(path) if os.path.isfile(path) else None
    except StoreError:
        return None
    return stored if isinstance(stored, dict) else None


# --------------------------------------------------------------------------- builds
def read_builds(out_dir: str) -> dict | None:
    """The builds record of a result directory (its ``build.json``), or None where it has none (a
    directory written before builds were recorded, or one that never computed a trial).

    The record is ``{"builds": [build, …], "mixed": bool}``: every build (:func:`jaxfed.builds.this_build`)
    that computed trials here, in the order they came, ``mixed`` when there is more than one (only
    ever with ``mix_builds``), and ``"unrecorded": true`` when the directory held trials before its
    builds were recorded (by a build nobody wrote down).

    Raises:
        StoreError: ``build.json`` is a link, unreadable or not such a record (one line naming it).
    """
    path = os.path.join(out_dir, BUILD_FILE)
    if not os.path.lexists(path):
        return None
    check_no_link(path)
    record = _read_json(path)
    listed = record.get("builds") if isinstance(record, dict) else None
    if not (isinstance(listed, list) and all(isinstance(b, dict) for b in listed)):
        raise StoreError(f'{path}: is not a record of builds (a JSON object with a list "builds"); {_HINT}')
    return record


def builds_record(listed: list, unrecorded: bool = False) -> dict:
    """The ``build.json`` of the builds ``listed`` (each once, in order; see :func:`read_builds`)."""
    distinct: list = []
    for build in listed:
        if not any(builds.same_bits(build, b) for b in distinct):
            distinct.append(build)
    record: dict = {"builds": distinct, "mixed": len(distinct) > 1}
    if unrecorded:
        record["unrecorded"] = True
    return record


def build_refusal(where: str, stored: dict, here: dict) -> str:
    """The one line that refuses to add trials of the build ``here`` to ``where`` (a directory),
    whose trials the build ``stored`` computed: both builds, what differs and what to do."""
    return (
        f"{where} holds trials computed by {builds.short(stored)}, this is {builds.short(here)}"
        + builds.feature_note(stored, here)
        + ": the same seed gives other last bits there; run it with the run's build "
        f"({builds.remedy(stored, here)}), use another --out directory, or pass --mix-builds (mix_builds=True) to "
        "add this build's trials and record the run as mixed"
    )


def jax_refusal(where: str, stored_jax: dict, here: dict, differing: list[str]) -> str:
    """The one line that refuses a run whose trial programs differ from those ``where`` holds, which
    a JAX of another version (``stored_jax``'s ``jax`` and ``jaxlib``) traced: mixing is impossible."""
    there = f"jax {stored_jax.get('jax')} (jaxlib {stored_jax.get('jaxlib') or stored_jax.get('jax')})"
    pip = builds.remedy(
        dict(here, jax=stored_jax.get("jax"), jaxlib=stored_jax.get("jaxlib") or stored_jax.get("jax")), here
    )
    return (
        f"{where} holds a run computed by {there}, whose trial programs this jax {here.get('jax')} (jaxlib "
        f"{here.get('jaxlib')}) traces differently (differs in {'; '.join(differing)}): the JAX version is the cause, "
        f"and trials of two JAX versions cannot be mixed; run with the run's versions ({pip}), or use another --out "
        "directory (--overwrite discards the run)"
    )


def recorded_jax(out_dir: str) -> dict | None:
    """``{"jax", "jaxlib"}`` of the build that computed the run in ``out_dir`` (its first recorded
    build; for a directory written before builds were recorded, config.json's ``versions``, which
    name JAX but not jaxlib), or None where nothing says."""
    try:
        record = read_builds(out_dir)
        if record and record["builds"]:
            first = record["builds"][0]
            return {"jax": first.get("jax"), "jaxlib": first.get("jaxlib")}
        path = os.path.join(out_dir, "config.json")
        config = _read_json(path) if os.path.isfile(path) and not os.path.islink(path) else None
    except StoreError:
        return None
    versions = config.get("versions") if isinstance(config, dict) else None
    jax_version = versions.get("jax") if isinstance(versions, dict) else None
    return {"jax": jax_version, "jaxlib": None} if isinstance(jax_version, str) else None


def _programs_only(differing: list[str]) -> bool:
    return bool(differing) and all(line.startswith("programs") for line in differing)


# --------------------------------------------------------------------------- a finished run's record
RECORD_KEYS = ("experiment", "parameters", "points", "seed", "dtype")
"""What a run's config.json must state exactly as its identity.json does."""


def identity_digest(identity: dict) -> str:
    """SHA-256 of an identity as the store computes it (the ``identity`` of every chunk header)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _header(path: str) -> dict | None:
    """A stored file's ``__meta__`` header alone (the other arrays are not read), or None."""
    try:
        with open_regular(path) as f, np.load(f, allow_pickle=False) as z:
            header = z[_META] if _META in z.files else None
        return json.loads(header.tobytes().decode()) if header is not None and header.dtype == np.uint8 else None
    except Exception:  # noqa: BLE001 - unreadable: no header
        return None


# --------------------------------------------------------------------------- the chunk view
class ChunkName(NamedTuple):
    """A chunk file's name, parsed: ``g{G}_t{START}_{STOP}.npz`` (raw: trials [start, stop) of
    group G) or ``summary_g{G}.npz`` (summary: the state of group G after trials [0, n); ``n`` is
    in its header; start and stop are 0)."""

    name: str  # the file's name as found in the folder
    kind: str  # "raw" or "summary"
    group: int
    start: int
    stop: int

    @classmethod
    def parse(cls, name: str) -> ChunkName | None:
        """The parsed name, or None for a name that is no chunk's."""
        raw = _RAW_NAME.fullmatch(name)
        if raw:
            return cls(name, "raw", int(raw[1]), int(raw[2]), int(raw[3]))
        summary = _SUMMARY_NAME.fullmatch(name)
        return cls(name, "summary", int(summary[1]), 0, 0) if summary else None

    @property
    def canonical(self) -> bool:
        """Whether the name is the one this store builds for its group and range (``g001``, not ``g0001``)."""
        built = _raw_name(self.group, self.start, self.stop) if self.kind == "raw" else _summary_name(self.group)
        return self.name == built


def chunk_dir(out_dir: str) -> str:
    """The chunk folder of the result directory ``out_dir``."""
    return os.path.join(out_dir, CHUNK_DIR)


def list_chunks(out_dir: str) -> list[ChunkName]:
    """The chunk files of ``out_dir``, sorted by name; a chunk folder that is a link is refused
    (StoreError), never followed; other names in it are not listed."""
    folder = chunk_dir(out_dir)
    check_no_link(folder)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [chunk for chunk in map(ChunkName.parse, names) if chunk is not None]


def chunk_header(path: str) -> dict | None:
    """The ``__meta__`` header of the chunk file ``path`` (its arrays are not read), or None."""
    return _header(path)


def read_chunk(path: str) -> tuple[dict, dict]:
    """(header, arrays) of the stored file ``path``, its checksums verified (the header's SHA-256,
    every array's CRC-32 as the header lists it); StoreError naming it otherwise."""
    meta, arrays, crcs = _unpack(path)
    listed = meta.get("arrays")
    trials, points = meta.get("trials"), meta.get("point_ids")
    if (
        meta.get("sha256") != _digest(meta)
        or not isinstance(listed, dict)
        or set(listed) != set(arrays)
        or any(not isinstance(listed[n], list) or listed[n][2:] != [crcs[n]] for n in arrays)
        or not (isinstance(trials, list) and len(trials) == 2 and all(type(t) is int for t in trials))
        or not (isinstance(points, list) and all(type(p) is int for p in points))
    ):
        raise StoreError(f"{path}: checksum mismatch or no valid header; {_HINT}")
    return meta, arrays


class StoredSummary(NamedTuple):
    """A group's stored summary (``summary_g{G}.npz``): per metric the state of each point's whole
    sum blocks and the raw values after them."""

    stop: int  # the trials of the points that ran furthest
    point_ids: list  # global indices of the group's points
    point_trials: np.ndarray  # (points,) int64: trials summarised per point
    chunk: int | None  # the chunk size it was computed in (a precision-targeted run resumes on it)
    states: dict  # metric -> stats.SummaryState of the whole blocks
    tails: dict  # metric -> (points, stop − whole blocks of stop, …) raw values after them


def _stored_summary(header: dict, arrays: dict) -> StoredSummary:
    """The arrays ``NAME/FIELD`` of a summary file split into each metric's state and tail."""
    fields: dict = {}
    for key, value in arrays.items():
        metric, field = key.rsplit("/", 1)
        fields.setdefault(metric, {})[field] = value
    states = {
        m: stats.SummaryState(**{f: v[f] for f in stats.SummaryState._fields if f in v}) for m, v in fields.items()
    }
    counts = np.asarray(header["point_trials"], np.int64)
    tails = {m: v["tail"] for m, v in fields.items()}
    return StoredSummary(header["trials"][1], header["point_ids"], counts, header.get("chunk"), states, tails)


def read_summary(path: str) -> StoredSummary:
    """The summary file ``path`` (:func:`read_chunk`: checksums verified), split into states and
    tails; StoreError naming it when its header has no per-point trial counts or an array is not
    a state's field."""
    header, arrays = read_chunk(path)
    counts = header.get("point_trials")
    if not (
        isinstance(counts, list) and len(counts) == len(header["point_ids"]) and all(type(n) is int for n in counts)
    ):
        raise StoreError(f"{path}: header has no valid per-point trial counts; {_HINT}")
    wanted = {*stats.SummaryState._fields, "tail"}
    if any("/" not in key or key.rsplit("/", 1)[1] not in wanted for key in arrays):
        raise StoreError(f"{path}: holds arrays that are not summary states; {_HINT}")
    try:
        return _stored_summary(header, arrays)
    except TypeError:  # a metric without every field
        raise StoreError(f"{path}: holds incomplete summary states; {_HINT}") from None


def finish_summaries(states: dict, tails: dict, point_trials) -> dict:
    """metric -> (final state, :class:`jaxfed.stats.Summary`) of a group: each state followed by its
    raw tail (:func:`jaxfed.stats.summary.finish`). The tail counts only for the points that ran to the
    end (those with the most trials); a point that stopped early (a precision target) stopped at
    a whole block. The engine's last step, and what a stored summary is checked against."""
    counts = np.asarray(point_trials, np.int64)
    whole = counts // _block() * _block()
    lengths = np.where(counts == counts.max(initial=0), counts - whole, 0)
    return {metric: stats.summary.finish(state, tails[metric], lengths) for metric, state in states.items()}


def verify_record(out_dir: str, record: dict, record_path: str) -> None:
    """Checks a finished run's record (its config.json, ``record``) against the store: the record
    names ``identity.json`` by its digest (``identity_sha256``), states every key of
    :data:`RECORD_KEYS` and every other key it shares with identity.json exactly as identity.json
    does, and every stored chunk header carries that digest. Links are refused, not followed.

    Raises:
        StoreError: one line naming the file that does not agree (an edited points label or
            parameter, an identity.json from another run, …).
    """
    path = os.path.join(out_dir, "identity.json")
    check_no_link(path)
    identity = _read_json(path)
    if not isinstance(identity, dict):
        raise StoreError(f"{path}: holds a JSON {type(identity).__name__}, expected an object")
    digest = identity_digest(identity)
    if record.get("identity_sha256") != digest:
        raise StoreError(
            f"{record_path}: does not name {path} (identity digest differs): the two files are not of one run; "
            "rerun the command to rewrite the record"
        )
    edited = [k for k in RECORD_KEYS if k not in identity or record.get(k) != identity[k]]
    edited += [k for k in identity if k not in RECORD_KEYS and k in record and record[k] != identity[k]]
    if edited:
        raise StoreError(
            f"{record_path}: {', '.join(edited)} differ(s) from {path}: the record was edited after the run; "
            "rerun the command to rewrite it"
        )
    for chunk in list_chunks(out_dir):
        file = os.path.join(chunk_dir(out_dir), chunk.name)
        check_no_link(file)
        header = _header(file)
        if not isinstance(header, dict) or header.get("identity") != digest:
            raise StoreError(f"{file}: is not a chunk of the run {path} describes; {_HINT}")


# --------------------------------------------------------------------------- the store
class Store:
    """A result directory (see the module docstring); every method is a no-op when ``out_dir`` is None.

    Args:
        out_dir: the directory (created if needed), or None for a run without a store.
        identity: JSON dict identifying the run (without the trial count).
        overwrite: discard what cannot be used (another configuration, damaged files) instead of
            raising :class:`StoreError`.
        note: called with a one-line message when something stored is discarded.
        aliases: identities that name the same computation in an older spelling (program digests
            that a run started in a terminal stored with colour codes): a directory holding one of
            them is continued under the identity it holds. An iterable, read only when the
            directory holds an identity other than ``identity`` (it may compute them lazily).
        first_trial: a shard's first trial (a multiple of the sum block): its summaries hold
            trials [first_trial, n) (:func:`jaxfed.stats.summary.range_state`); raw chunks are
            named by their trials whoever computed them.
        build: the build this process computes with (:func:`jaxfed.builds.this_build`), which
            :meth:`claim_build` records; None for a run that computes nothing (a merge's).
        mix_builds: :meth:`claim_build` adds this build's trials to another build's instead of
            refusing; without it, ``overwrite`` discards another build's trials when it opens.

    Raises:
        StoreError: ``out_dir`` cannot be created or written, or ``identity.json`` is unreadable.
        ConfigMismatch: the directory holds another configuration (the message names every
            differing key with both values; where only the trial programs differ and the stored
            run's JAX is another version, it says that this is the cause).
    """

    def __init__(
        self,
        out_dir: str | None,
        identity: dict,
        overwrite: bool = False,
        note=lambda message: None,
        aliases=(),
        first_trial: int = 0,
        build: dict | None = None,
        mix_builds: bool = False,
    ):
        self.dir, self.overwrite, self.note = out_dir or "", overwrite, note  # "": nothing is stored
        self.build, self.mix_builds = build, mix_builds
        self.first_trial = first_trial  # a shard's: its summaries cover trials [first_trial, n)
        self.digest = identity_digest(identity)
        if out_dir is None:
            return
        self.chunks = chunk_dir(out_dir)
        check_no_link(self.chunks)
        self._check_is_a_result_directory(out_dir, overwrite)
        try:
            _makedirs(self.chunks)
        except OSError as err:
            raise StoreError(f"{out_dir}: cannot be used as a result directory ({err.strerror or err})") from None
        self._lock = _lock_directory(out_dir)
        try:
            self._remove_temporaries()
            path = os.path.join(out_dir, "identity.json")
            if os.path.lexists(path):
                try:
                    stored = _read_json(path)
                    if not isinstance(stored, dict):
                        raise StoreError(f"{path}: holds a JSON {type(stored).__name__}, expected an object")
                except StoreError as err:
                    if not overwrite:
                        raise StoreError(
                            f"{err}; use another --out directory or --overwrite to discard the run"
                        ) from None
                    stored = None
                if stored is not None and stored != identity and stored in list(aliases):
                    identity = stored  # the same computation; its chunks name this identity's digest
                    self.digest = identity_digest(identity)
                if stored != identity:
                    if stored is not None and not overwrite:
                        raise ConfigMismatch(self._mismatch(stored, identity))
                    self._discard_all()
                elif overwrite and not mix_builds and self._other_build():
                    self._discard_all("of another build")  # (--overwrite: trials of another build are not used)
            atomic_write_json(path, identity)
        except BaseException:  # a refused directory is not left locked
            self.close()
            raise

    def _mismatch(self, stored: dict, identity: dict) -> str:
        """The one line refusing a directory that holds the identity ``stored``, not ``identity``:
        the differing keys; where only the trial programs differ and the run's JAX is another
        version than this one's, that the JAX version is the cause (:func:`jax_refusal`)."""
        differing = describe_differences(stored, identity)
        if _programs_only(differing) and self.build is not None:
            there = recorded_jax(self.dir)
            if there is not None and there.get("jax") != self.build.get("jax"):
                return jax_refusal(self.dir, there, self.build, differing)
        return (
            f"{self.dir} holds a run with a different configuration (differs in "
            + "; ".join(differing)
            + "); use another --out directory or --overwrite to discard it"
        )

    def _other_build(self) -> bool:
        """Whether the directory records builds, none of them this store's."""
        try:
            record = read_builds(self.dir)
        except StoreError:
            return False  # (claim_build writes it anew, with overwrite)
        listed = record["builds"] if record else []
        return self.build is not None and bool(listed) and not any(builds.same_bits(self.build, b) for b in listed)

    def claim_build(self) -> None:
        """Records this store's build (``build``) among those that computed the directory's trials,
        before it computes any: a no-op where it is recorded already, or without a build.

        A directory written before builds were recorded grows as it always did (its record then
        says ``"unrecorded": true`` when it held trials); one that holds trials of another build
        is refused, unless ``mix_builds`` (``--mix-builds``): then the record lists both and says
        ``"mixed": true``.

        Raises:
            BuildMismatch: another build computed the stored trials (one line: both builds, what
                to do), and not ``mix_builds``.
            StoreError: ``build.json`` is unreadable (with ``overwrite`` it is written anew).
        """
        if not self.dir or self.build is None:
            return
        try:
            record = read_builds(self.dir)
        except StoreError:
            if not self.overwrite:
                raise
            record = None
        if record is None:
            record = builds_record([], unrecorded=bool(self._chunks()))
        listed = record["builds"]
        if any(builds.same_bits(self.build, b) for b in listed):
            return
        if listed and not self.mix_builds:
            raise BuildMismatch(build_refusal(self.dir, listed[0], self.build))
        if listed:
            self.note(
                f"{self.dir}: adding trials of {builds.short(self.build)} to those of {builds.short(listed[0])} (--mix-builds)"
            )
        atomic_write_json(
            os.path.join(self.dir, BUILD_FILE), builds_record([*listed, self.build], bool(record.get("unrecorded")))
        )

    @staticmethod
    def _check_is_a_result_directory(out_dir: str, overwrite: bool) -> None:
        """StoreError if ``out_dir`` holds files but no ``identity.json``: someone else's files,
        which a run would replace (config.json, metrics.npz, …) unless ``overwrite``."""
        try:
            names = sorted(os.listdir(out_dir))
        except FileNotFoundError:
            return
        except OSError as err:
            raise StoreError(f"{out_dir}: cannot be used as a result directory ({err.strerror or err})") from None
        if "identity.json" in names or overwrite:
            return
        foreign = [n for n in names if n not in _OWN_NAMES and not _TMP_NAME.fullmatch(n)]
        if foreign:
            shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
            raise StoreError(
                f"{out_dir}: holds files that are not a jaxfed run ({shown}) and no identity.json; use a new or "
                "empty --out directory, or --overwrite to write the run there (its files of the same names are replaced)"
            )

    def close(self) -> None:
        """Releases the directory's lock (also released when the process ends, however it ends)."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None:
            lock.close()

    def _chunks(self) -> list[ChunkName]:
        try:
            return list_chunks(self.dir)
        except OSError as err:
            raise StoreError(f"{self.chunks}: cannot be listed ({err.strerror or err})") from None

    def _remove_temporaries(self) -> None:
        """Removes temporary files left by writes a kill interrupted (never a committed file)."""
        for folder in (self.dir, self.chunks):
            for name in os.listdir(folder):
                path = os.path.join(folder, name)
                if _TMP_NAME.fullmatch(name) and (os.path.islink(path) or os.path.isfile(path)):
                    _remove(path)  # a link itself, never its target

    def _discard_all(self, of: str = "of another configuration") -> None:
        self.note(f"{self.dir}: discarding the stored results {of}")
        for chunk in self._chunks():
            _remove(os.path.join(self.chunks, chunk.name))
        for name in ("manifest.json", "config.json", "metrics.npz", BUILD_FILE):  # manifest.json: store format 1
            if os.path.lexists(os.path.join(self.dir, name)):
                _remove(os.path.join(self.dir, name))

    def _rejected(self, path: str, err: StoreError) -> None:
        """Raises ``err``, or with ``overwrite`` deletes the file so its trials are recomputed."""
        if not self.overwrite:
            raise err
        self.note(f"{err}; discarded, recomputing")
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # a directory squatting on a name this engine builds
        else:
            _remove(path)

    # ---------------------------------------------------------------- raw chunks
    def raw_chunks(self, spec: GroupSpec, n_trials: int) -> Iterator[tuple[int, int, dict]]:
        """Yields (start, stop, arrays) of every verified stored chunk of the group that
        overlaps trials [0, ``n_trials``), arrays (points, stop − start, …), one file at a time."""
        if not self.dir:
            return
        for chunk in self._chunks():
            if chunk.kind != "raw" or chunk.group != spec.group or not chunk.canonical:
                continue  # another group's, or a name this engine never builds ("g0001", …)
            name, start, stop = chunk.name, chunk.start, chunk.stop
            if start >= n_trials:  # a larger run's trials: kept, not needed now
                continue
            path = os.path.join(self.chunks, name)
            try:
                if not start < stop:
                    raise StoreError(f"{path}: empty trial range in its name; {_HINT}")
                meta, arrays, crcs = _unpack(path)
                expected = self._expected("raw", spec, start, stop)
                specs = {
                    m: ((len(spec.point_ids), stop - start, *shape), dt) for m, (shape, dt) in spec.metrics.items()
                }
                _verify(path, meta, arrays, crcs, expected, specs)
            except StoreError as err:
                self._rejected(path, err)
                continue
            yield start, stop, arrays

    def save_raw(self, spec: GroupSpec, start: int, stop: int, arrays: dict) -> None:
        """Commits trials [start, stop) of a group: one atomic file."""
        if not self.dir:
            return
        name = _raw_name(spec.group, start, stop)
        atomic_write_bytes(os.path.join(self.chunks, name), _pack(self._expected("raw", spec, start, stop), arrays))

    # ---------------------------------------------------------------- summaries
    def load_summary(self, spec: GroupSpec, n_trials: int) -> StoredSummary | None:
        """A group's stored summary, or None.

        Its states cover each point's whole blocks; its tails are the raw values (points, trials,
        …) after the whole blocks of ``stop`` (zeros for a point with fewer trials). Every point
        has ``stop`` trials, except in a precision-targeted run where a point stops on its own at
        a chunk boundary (a multiple of the block).

        Raises:
            StoreError: the file is not a verified summary of this group, or it already covers
                more than ``n_trials`` trials (a summary cannot be cut down; with ``overwrite``
                it is discarded and recomputed).
        """
        if not self.dir:
            return None
        path = os.path.join(self.chunks, _summary_name(spec.group))
        if not os.path.lexists(path):
            return None
        try:
            meta, arrays, crcs = _unpack(path)
            stop = _checked_summary_header(path, meta, len(spec.point_ids), self.first_trial)
            _verify(
                path,
                meta,
                arrays,
                crcs,
                self._expected("summary", spec, self.first_trial, stop),
                self._summary_specs(spec, stop - stop // _block() * _block()),
            )
            stored = _stored_summary(meta, arrays)
            _check_counts(path, stored, self.first_trial)
            if stop > n_trials:
                raise StoreError(
                    f"{path}: summarises {stop} trials, more than the {n_trials} asked for; a summary "
                    f"cannot be cut down: ask for >= {stop} trials, or use another --out directory or --overwrite"
                )
        except StoreError as err:
            self._rejected(path, err)
            return None
        return stored

    def save_summary(self, spec: GroupSpec, point_trials: list, chunk: int, states: dict) -> None:
        """Commits a group's summary state after trials [0, point_trials[p]) of each point,
        computed in chunks of ``chunk`` trials: one atomic file."""
        if not self.dir:
            return
        arrays = {
            f"{metric}/{field}": value
            for metric, s in states.items()
            for field, value in s.items()
            if value is not None
        }
        stop = max(point_trials)
        meta = dict(
            self._expected("summary", spec, self.first_trial, stop), point_trials=list(point_trials), chunk=chunk
        )
        atomic_write_bytes(os.path.join(self.chunks, _summary_name(spec.group)), _pack(meta, arrays))

    def _summary_specs(self, spec: GroupSpec, n_tail: int) -> dict:
        specs = {}
        for metric, (shape, dtype) in spec.metrics.items():
            cells = (len(spec.point_ids), *shape)
            shard = SHARD_SUMMARY_FIELDS if self.first_trial else {}
            for field, field_dtype in {**SUMMARY_FIELDS, **shard}.items():
                if field in ("total", "total_sq", "left", "left_sq"):
                    field_shape = (cells[0], _levels(), *cells[1:])
                else:
                    field_shape = cells + ((_n_bins(),) if field == "hist" else ())
                specs[f"{metric}/{field}"] = (field_shape, field_dtype)
            specs[f"{metric}/nonfinite_trials"] = ((len(spec.point_ids),), np.int64)
            specs[f"{metric}/blocks"] = ((len(spec.point_ids),), np.int64)
            if self.first_trial:
                specs[f"{metric}/first"] = ((len(spec.point_ids),), np.int64)
            specs[f"{metric}/tail"] = ((len(spec.point_ids), n_tail, *shape), dtype)
        return specs

    def _expected(self, kind: str, spec: GroupSpec, start: int, stop: int) -> dict:
        return _chunk_meta(kind, self.digest, spec.group, spec.point_ids, start, stop)


def _chunk_meta(kind: str, digest: str, group: int, point_ids, start: int, stop: int) -> dict:
    """A chunk file's header (before its arrays' descriptions and checksums)."""
    return {
        "format": STORE_FORMAT,
        "kind": kind,
        "identity": digest,
        "group": group,
        "point_ids": list(point_ids),
        "trials": [start, stop],
    }


def remove_empty(out_dir: str, keep: tuple = ()) -> None:
    """Removes the store in ``out_dir`` when it holds no trial: ``identity.json``, the lock and an
    empty chunk folder (and the directory, when nothing else is left; names in ``keep`` stay, and
    so does the store when anything else is there). Errors are ignored: it only tidies."""
    if not os.path.isdir(out_dir) or os.path.islink(out_dir):
        return
    try:
        entries = set(os.listdir(out_dir))
        chunks = chunk_dir(out_dir)
        if not entries <= {"identity.json", BUILD_FILE, ".lock", CHUNK_DIR, *keep} or (
            os.path.isdir(chunks) and os.listdir(chunks)
        ):
            return
        for name in entries - {*keep, CHUNK_DIR}:
            os.remove(os.path.join(out_dir, name))
        if CHUNK_DIR in entries:
            os.rmdir(chunks)
        if not os.listdir(out_dir):
            os.rmdir(out_dir)
    except OSError:
        pass


def summary_path(out_dir: str, group: int) -> str:
    """The file of group ``group``'s summary in the result directory ``out_dir``."""
    return os.path.join(chunk_dir(out_dir), _summary_name(group))


def write_summary(out_dir: str, group: int, point_ids, point_trials: list, chunk: int, states: dict) -> None:
    """Writes group ``group``'s summary of trials [0, max(point_trials)) into ``out_dir`` under the
    identity its identity.json holds (a merge of shards: :mod:`jaxfed.runs.sharding`), as
    :meth:`Store.save_summary` does; ``states``: metric -> {field: array} (None fields left out)."""
    digest = identity_digest(_read_json(os.path.join(out_dir, "identity.json")))
    arrays = {
        f"{metric}/{field}": value for metric, s in states.items() for field, value in s.items() if value is not None
    }
    meta = dict(_chunk_meta("summary", digest, group, point_ids, 0, max(point_trials)), point_trials=list(point_trials), chunk=chunk)  # fmt: skip
    atomic_write_bytes(summary_path(out_dir, group), _pack(meta, arrays))


def _checked_summary_header(path: str, meta: dict, n_points: int, first: int = 0) -> int:
    """The trials of a summary file's header (``trials`` [first, n]: a shard's from its first
    trial), after checking its per-point trial counts (each n, or a whole number of blocks below
    it) and its chunk size."""
    trials, counts, chunk = meta.get("trials"), meta.get("point_trials"), meta.get("chunk")
    if not (isinstance(trials, list) and len(trials) == 2 and trials[0] == first and type(trials[1]) is int):
        raise StoreError(f"{path}: header has no trial range [{first}, n]; {_HINT}")
    stop = trials[1]
    if not (
        isinstance(counts, list)
        and len(counts) == n_points
        and max(counts, default=-1) == stop
        and all(type(n) is int and 0 <= n and (n == stop or n % _block() == 0) for n in counts)
        and type(chunk) is int
        and chunk >= 1
    ):
        raise StoreError(f"{path}: header has no valid per-point trial counts and chunk size; {_HINT}")
    return stop


def _check_counts(path: str, stored: StoredSummary, first: int = 0) -> None:
    """StoreError unless every cell of every state counts exactly its point's whole blocks of
    trials (from ``first``, a shard's first trial)."""
    whole = stored.point_trials // _block() * _block() - first
    for metric, state in stored.states.items():
        counted = state.count + state.nan_count
        if (
            np.any(counted != whole.reshape((-1,) + (1,) * (counted.ndim - 1)))
            or np.any(state.hist.sum(-1, dtype=np.int64) != state.count)
            or np.any((state.nonfinite_trials < 0) | (state.nonfinite_trials > whole))
            or np.any(state.blocks != whole // _block())
            or (first and np.any(state.first != first // _block()))
        ):
            raise StoreError(f"{path}: counts of {metric!r} do not add up to its trials in whole blocks; {_HINT}")


def _raw_name(group: int, start: int, stop: int) -> str:
    return f"g{group:03d}_t{start:010d}_{stop:010d}.npz"


def _summary_name(group: int) -> str:
    return f"summary_g{group:03d}.npz"


def _n_bins() -> int:
    return stats.summary.N_BINS


def _levels() -> int:
    return stats.summary.SUM_LEVELS


def _block() -> int:
    return stats.summary.SUMMARY_BLOCK
