"""The chunk format: the files of a result directory's ``chunks/`` folder, written and read only here.

Layout of ``out_dir`` (every name is built here or in :mod:`jaxfed.store.runstore`; no name is
ever read from a file):

- ``identity.json``: what identifies the run (the caller's identity plus the seed, common random
  numbers and :data:`STORE_FORMAT`). The trial count is not part of it, so a run can grow.
- ``build.json`` (:data:`jaxfed.store.runstore.BUILD_FILE`): the builds that computed its trials
  (JAX, jaxlib, backend, processor: :mod:`jaxfed.builds`), apart from the identity so that
  directories written before it was recorded keep their identity digest, which every chunk
  header carries.
- ``chunks/g{G}_t{START}_{STOP}.npz`` (raw mode): trials [START, STOP) of every point of group G.
- ``chunks/summary_g{G}.npz`` (summary mode): the summary state of group G after trials [0, STOP):
  counts, histograms and the binary counter of float64 sums over the whole blocks of
  ``stats.summary.SUMMARY_BLOCK`` trials [0, W), W = STOP rounded down to a block (O(log W) partial sums
  per cell, see :class:`jaxfed.stats.SummaryState`), and the raw values of trials [W, STOP) (``tail``).

Each of these ``.npz`` files is its own commit point (:func:`jaxfed.store.files.atomic_write_bytes`),
so after a kill at any instant a file is either complete or absent. Besides its arrays it carries
``__meta__``, a JSON header saying what it covers: format, kind, identity digest, group, point
ids, trial range, each array's shape, dtype and CRC-32 (the zip member's), and a SHA-256 of the
header. Each file is checksummed once: the CRC-32s that the zip format keeps anyway, computed
while the arrays stream to the file and checked by the zip reader when they are read, bind to the
header by its SHA-256 (before format 5, a second pass took a SHA-256 over every array byte).
Loading verifies all of it against what the current run expects (and, for summaries, that every
cell counts exactly the trials the header claims), so a file that is truncated, damaged, edited,
copied from another run, group or trial range is never merged: it raises
:class:`~jaxfed.store.files.StoreError`, one line naming the file and what is wrong, or with
``overwrite`` it is deleted and its trials recomputed.

This module is the chunk format's only reader and writer: the engine, the store
(:mod:`jaxfed.store.runstore`), :func:`jaxfed.store.verify_record` and the result directory
(:mod:`jaxfed.store.rundir`, which decides which chunks make a run) read chunks through its view,
:class:`ChunkName`, :func:`list_chunks`, :func:`read_chunk`, :func:`read_summary` and
:func:`finish_summaries` (tests/store/test_chunk_format_owner.py).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
import zlib
from typing import NamedTuple

import numpy as np

from jaxfed import stats
from jaxfed.store import files
from jaxfed.store.files import (
    StoreError,
    _npz_parts,
    _one_line,
    atomic_write_bytes,
    check_no_link,
    open_regular,
    read_json,
)

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
DAMAGE_HINT = _HINT
"""The advice that ends the store's refusals of a damaged file (a command without ``--overwrite``,
``jaxfed merge``, puts its own in its place)."""


class GroupSpec(NamedTuple):
    """What every stored file of one point group must match."""

    group: int  # group number, in the order of first appearance among the points
    point_ids: tuple  # global point indices of the group
    metrics: dict  # metric name -> (shape tuple of one trial, dtype string such as "<f4")


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


def _unpack(path: str, data: bytes | bytearray | None = None) -> tuple[dict, dict, dict]:
    """(header, arrays, name -> CRC-32 of its zip member) of a stored file, read whole, each
    member's bytes checked against its CRC-32 (:func:`_members_in_place`), or of its bytes
    ``data`` already read; StoreError if it is not a complete one."""
    if data is None and os.path.islink(path):
        raise StoreError(f"{path}: is a symbolic link, not a file this engine wrote; {_HINT}")
    if data is None:
        data = files.read_regular_writable(path)  # (a FIFO or device in place of a chunk is refused, never waited on)
    try:
        viewed = _members_in_place(data)
        if viewed is not None:
            arrays, crcs = viewed
        else:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}
                crcs = {name: z.zip.getinfo(f"{name}.npy").CRC for name in z.files}
    except Exception as err:  # noqa: BLE001 - any failure to parse means a damaged file
        raise StoreError(
            f"{path}: not a readable .npz file ({_one_line(err)}): damaged or truncated; {_HINT}"
        ) from None
    header = arrays.pop(_META, None)
    try:
        meta = json.loads(header.tobytes().decode()) if header is not None and header.dtype == np.uint8 else None
    except (UnicodeDecodeError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: has no valid {_META} header; {_HINT}")
    return meta, arrays, crcs


_PLAIN_FLAGS = 0x808
"""Zip flag bits of a member :func:`_npz_parts` writes: sizes after the data (3), UTF-8 name (11)."""


def _members_in_place(data) -> tuple[dict, dict] | None:
    """(name -> array, name -> CRC-32) of an uncompressed .npz's ``.npy`` members, each array a view
    of ``data`` where its member's bytes lie (a copy only where they are not aligned for its dtype),
    each member's bytes checked against its CRC-32 as the zip reader would; or None for a file this
    store does not write that way (a compressed or non-``.npy`` member, Fortran order, an object
    dtype), which ``np.load`` then reads. Reading through ``np.load`` copies every member twice;
    a merge reads hundreds of megabytes of chunks.

    Raises:
        ValueError: a member whose bytes do not match its CRC-32, or a local header or ``.npy``
            header that is not one (the caller's "damaged or truncated").
    """
    whole = memoryview(data).cast("B")
    with zipfile.ZipFile(io.BytesIO(whole)) as archive:  # (reads only the central directory)
        members = archive.infolist()
    arrays, crcs = {}, {}
    for info in members:
        if (
            info.compress_type != zipfile.ZIP_STORED
            or info.compress_size != info.file_size
            or info.flag_bits & ~_PLAIN_FLAGS  # (encrypted, patched, …: for the zip reader to refuse)
            or not info.filename.endswith(".npy")
        ):
            return None
        local = whole[info.header_offset : info.header_offset + 30]
        if len(local) < 30 or bytes(local[:4]) != b"PK\x03\x04":
            raise ValueError(f"member {info.filename}: no local header")
        name_length, extra_length = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
        # The zip reader's checks of the local header: its name is the directory's (decoded as it says).
        local_name = bytes(whole[info.header_offset + 30 : info.header_offset + 30 + name_length])
        utf8 = int.from_bytes(local[6:8], "little") & 0x800
        if local_name.decode("utf-8" if utf8 else "cp437", errors="replace") != info.orig_filename:
            raise ValueError(f"member {info.filename}: its local header names another file")
        start = info.header_offset + 30 + name_length + extra_length
        member = whole[start : start + info.file_size]
        if len(member) != info.file_size or zlib.crc32(member) != info.CRC:
            raise ValueError(f"member {info.filename}: bad CRC-32 or truncated")
        version = np.lib.format.read_magic(io.BytesIO(bytes(member[:8])))
        size_bytes = 2 if version == (1, 0) else 4
        header_end = 8 + size_bytes + int.from_bytes(member[8 : 8 + size_bytes], "little")
        head = io.BytesIO(bytes(member[:header_end]))
        np.lib.format.read_magic(head)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(head)
        if fortran or dtype.hasobject:
            return None
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(member, dtype, count, offset=header_end).reshape(shape)
        name = info.filename[: -len(".npy")]
        arrays[name] = array if array.flags.aligned else array.copy()
        crcs[name] = info.CRC
    return arrays, crcs


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


def identity_digest(identity: dict) -> str:
    """SHA-256 of an identity as the store computes it (the ``identity`` of every chunk header).

    Args:
        identity: the run's identity (a JSON object).

    Returns:
        The SHA-256 of its JSON text with sorted keys, as 64 hex digits.
    """
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
    """The chunk folder of the result directory ``out_dir``.

    Args:
        out_dir: a result directory.

    Returns:
        The path of its chunk folder.
    """
    return os.path.join(out_dir, CHUNK_DIR)


def list_chunks(out_dir: str) -> list[ChunkName]:
    """The chunk files of ``out_dir``, sorted by name; a chunk folder that is a link is refused
    (StoreError), never followed; other names in it are not listed.

    Args:
        out_dir: a result directory.

    Returns:
        The parsed names of its chunk files (none when it has no chunk folder).

    Raises:
        StoreError: the chunk folder is a symbolic link.
    """
    folder = chunk_dir(out_dir)
    check_no_link(folder)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [chunk for chunk in map(ChunkName.parse, names) if chunk is not None]


def chunk_header(path: str) -> dict | None:
    """The ``__meta__`` header of the chunk file ``path`` (its arrays are not read), or None.

    Args:
        path: a chunk file.

    Returns:
        Its header (a dict), or None when it has none or cannot be read.
    """
    return _header(path)


def read_chunk(path: str, data: bytes | bytearray | None = None) -> tuple[dict, dict]:
    """(header, arrays) of the stored file ``path``, its checksums verified (the header's SHA-256,
    every array's CRC-32 as the header lists it); StoreError naming it otherwise.

    Args:
        path: a chunk file (raw or summary).
        data: its bytes, already read (None: read from ``path``).

    Returns:
        (header, arrays): the header dict and name -> array.

    Raises:
        StoreError: the file is not a complete, unaltered chunk file (one line naming it).
    """
    meta, arrays, crcs = _unpack(path, data)
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
        raise StoreError(f"{path}: checksum mismatch or no valid header: damaged; {_HINT}")
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
    a state's field.

    Args:
        path: a summary chunk file (``summary_g{G}.npz``).

    Returns:
        The :class:`StoredSummary` it holds.

    Raises:
        StoreError: as :func:`read_chunk`, or the arrays are not complete summary states.
    """
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
    a whole block. The engine's last step, and what a stored summary is checked against.

    Args:
        states: metric -> :class:`jaxfed.stats.SummaryState` of the group's whole blocks.
        tails: metric -> the raw values after them, (points, trials, …).
        point_trials: the trials of each point of the group.

    Returns:
        metric -> (final state, :class:`jaxfed.stats.Summary`).
    """
    counts = np.asarray(point_trials, np.int64)
    whole = counts // _block() * _block()
    lengths = np.where(counts == counts.max(initial=0), counts - whole, 0)
    return {metric: stats.summary.finish(state, tails[metric], lengths) for metric, state in states.items()}


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


def summary_path(out_dir: str, group: int) -> str:
    """The file of group ``group``'s summary in the result directory ``out_dir``.

    Args:
        out_dir: a result directory.
        group: the point group's number.

    Returns:
        The path of the group's summary chunk file.
    """
    return os.path.join(chunk_dir(out_dir), _summary_name(group))


def write_summary(out_dir: str, group: int, point_ids, point_trials: list, chunk: int, states: dict) -> None:
    """Writes group ``group``'s summary of trials [0, max(point_trials)) into ``out_dir`` under the
    identity its identity.json holds (a merge of shards: :mod:`jaxfed.runs.sharding`), as
    :meth:`Store.save_summary` does; ``states``: metric -> {field: array} (None fields left out).

    Args:
        out_dir: a result directory holding an ``identity.json``.
        group: the point group's number.
        point_ids: the global indices of the group's points.
        point_trials: the trials summarised per point.
        chunk: the chunk size the summary was computed in.
        states: metric -> {field: array}.

    Raises:
        StoreError: ``identity.json`` is unreadable, or the file cannot be written.
    """
    digest = identity_digest(read_json(os.path.join(out_dir, "identity.json")))
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


def _levels(blocks: int = 0) -> int:
    return stats.summary.levels_for(blocks)


def _hist_dtype(trials: int) -> np.dtype:
    return stats.summary.hist_dtype(trials)


def _block() -> int:
    return stats.summary.SUMMARY_BLOCK
