"""The store of one run: its result directory while the engine computes trials into it.

:class:`Store` opens a directory under an exclusive lock, checks that it holds this run (its
``identity.json``: the differing keys of another configuration are named, :func:`describe_differences`)
and records the builds that compute its trials (``build.json``, :mod:`jaxfed.store.buildrecord`); it then
reads and commits chunk files in the format of :mod:`jaxfed.store.chunks`. :func:`verify_record`
checks a finished run's config.json against the store; :func:`remove_empty` tidies a directory
that holds no trial.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator

import numpy as np

from jaxfed import builds
from jaxfed.store import files
from jaxfed.store.buildrecord import BUILD_FILE, build_refusal, builds_record, jax_refusal, read_builds, recorded_jax
from jaxfed.store.chunks import (
    _HINT,
    _TMP_NAME,
    CHUNK_DIR,
    SHARD_SUMMARY_FIELDS,
    SUMMARY_FIELDS,
    ChunkName,
    GroupSpec,
    StoredSummary,
    _block,
    _check_counts,
    _checked_summary_header,
    _chunk_meta,
    _header,
    _hist_dtype,
    _levels,
    _n_bins,
    _pack,
    _raw_name,
    _stored_summary,
    _summary_name,
    _unpack,
    _verify,
    chunk_dir,
    identity_digest,
    list_chunks,
)
from jaxfed.store.files import (
    StoreError,
    _lock_directory,
    atomic_write_bytes,
    atomic_write_json,
    check_no_link,
    read_json,
)


class ConfigMismatch(StoreError):
    """An output directory already holds a run with a different configuration."""


class BuildMismatch(ConfigMismatch):
    """An output directory holds trials computed by another build (JAX, jaxlib, backend or processor)."""


_OWN_NAMES = (".lock", CHUNK_DIR, BUILD_FILE, ".user-code-running")  # (the last: jaxfed.runs.runner.MARKER)
"""What a result directory holds before its identity.json is written (a run killed that early)."""


# --------------------------------------------------------------------------- identity
def describe_differences(stored, given, prefix: str = "") -> list[str]:
    """``["key: stored X, given Y", …]`` for every differing (nested) key of two JSON values, lists
    entry by entry (``points[1].topology: stored "line", given "complete"``; lists of different
    lengths also say both lengths), values whole; a SHA-256 digest (64 hex digits, e.g. a file's
    under ``code``) shows as its first 12 digits.

    Args:
        stored: the JSON value a directory holds.
        given: the JSON value of this run.
        prefix: the key path above these values (``"parameters."``), for the recursion.

    Returns:
        One line per differing leaf, in key order (empty when the values are equal).
    """
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
    reads before it opens the store: a stored run's micro-batch width, which growth keeps.

    Args:
        out_dir: a result directory.

    Returns:
        The identity (a dict), or None.
    """
    path = os.path.join(out_dir, "identity.json")
    try:
        stored = _read_json(path) if os.path.isfile(path) else None
    except StoreError:
        return None
    return stored if isinstance(stored, dict) else None


def _programs_only(differing: list[str]) -> bool:
    return bool(differing) and all(line.startswith("programs") for line in differing)


# --------------------------------------------------------------------------- a finished run's record
RECORD_KEYS = ("experiment", "parameters", "points", "seed", "dtype")
"""What a run's config.json must state exactly as its identity.json does."""


def verify_record(out_dir: str, record: dict, record_path: str) -> None:
    """Checks a finished run's record (its config.json, ``record``) against the store: the record
    names ``identity.json`` by its digest (``identity_sha256``), states every key of
    :data:`RECORD_KEYS` and every other key it shares with identity.json exactly as identity.json
    does, and every stored chunk header carries that digest. Links are refused, not followed.

    Args:
        out_dir: the result directory.
        record: its config.json, parsed.
        record_path: the path of config.json, named in the messages.

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
        if not isinstance(header, dict):
            raise StoreError(
                f"{file}: is not a chunk of the run {path} describes (damaged or truncated: no readable header); {_HINT}"
            )
        if header.get("identity") != digest:
            raise StoreError(f"{file}: is not a chunk of the run {path} describes (it is another run's); {_HINT}")


# --------------------------------------------------------------------------- the store
class Store:
    """A result directory (its layout: :mod:`jaxfed.store.chunks`); every method is a no-op when ``out_dir`` is None.

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
            files._makedirs(self.chunks)
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
                    files._remove(path)  # a link itself, never its target

    def _discard_all(self, of: str = "of another configuration") -> None:
        self.note(f"{self.dir}: discarding the stored results {of}")
        for chunk in self._chunks():
            files._remove(os.path.join(self.chunks, chunk.name))
        for name in ("manifest.json", "config.json", "metrics.npz", BUILD_FILE):  # manifest.json: store format 1
            if os.path.lexists(os.path.join(self.dir, name)):
                files._remove(os.path.join(self.dir, name))

    def _rejected(self, path: str, err: StoreError) -> None:
        """Raises ``err``, or with ``overwrite`` deletes the file so its trials are recomputed."""
        if not self.overwrite:
            raise err
        self.note(f"{err}; discarded, recomputing")
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # a directory squatting on a name this engine builds
        else:
            files._remove(path)

    # ---------------------------------------------------------------- raw chunks
    def raw_chunks(self, spec: GroupSpec, n_trials: int) -> Iterator[tuple[int, int, dict]]:
        """Yields (start, stop, arrays) of every verified stored chunk of the group that
        overlaps trials [0, ``n_trials``), arrays (points, stop − start, …), one file at a time.

        Args:
            spec: the group's points and metrics.
            n_trials: the trials the run asks for.

        Returns:
            An iterator of (start, stop, arrays), arrays metric -> (points, stop − start, …).

        Raises:
            StoreError: a chunk file is not a verified chunk of this group (with ``overwrite`` it is
                deleted instead, and its trials recomputed).
        """
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
        """Commits trials [start, stop) of a group: one atomic file.

        Args:
            spec: the group's points and metrics.
            start: the first trial.
            stop: the trial after the last.
            arrays: metric -> (points, stop − start, …).

        Raises:
            StoreError: the file cannot be written.
        """
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

        Args:
            spec: the group's points and metrics.
            n_trials: the trials the run asks for.

        Returns:
            The :class:`~jaxfed.store.chunks.StoredSummary`, or None where none is stored (or it was discarded).

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
                self._summary_specs(spec, stop),
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
        computed in chunks of ``chunk`` trials: one atomic file.

        Args:
            spec: the group's points and metrics.
            point_trials: the trials summarised per point.
            chunk: the chunk size.
            states: metric -> {field: array} (None fields left out).

        Raises:
            StoreError: the file cannot be written.
        """
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

    def _summary_specs(self, spec: GroupSpec, stop: int) -> dict:
        """The arrays of a summary file of trials [first_trial, ``stop``): their levels and the
        histograms' dtype are those of its whole blocks (:func:`jaxfed.stats.summary.levels_for`,
        :func:`~jaxfed.stats.summary.hist_dtype`: the fixed layout up to 2^31 − 1 trials)."""
        specs, whole = {}, stop // _block() * _block() - self.first_trial
        n_tail, n_levels = stop - stop // _block() * _block(), _levels(whole // _block())
        for metric, (shape, dtype) in spec.metrics.items():
            cells = (len(spec.point_ids), *shape)
            shard = SHARD_SUMMARY_FIELDS if self.first_trial else {}
            fields = {**SUMMARY_FIELDS, "hist": _hist_dtype(whole), **shard}
            for field, field_dtype in fields.items():
                if field in ("total", "total_sq", "left", "left_sq"):
                    field_shape = (cells[0], n_levels, *cells[1:])
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


def remove_leftovers(out_dir: str) -> bool:
    """Removes what a run or merge killed before its identity.json was written leaves in
    ``out_dir`` (temporary files of jaxfed's atomic writes, an empty chunk folder), where that is all
    there is.

    Args:
        out_dir: a directory without identity.json.

    Returns:
        Whether ``out_dir`` held only such leftovers (now removed; the directory stays).
    """
    try:
        names = os.listdir(out_dir)
        chunks = chunk_dir(out_dir)
        if any(n not in _OWN_NAMES and not _TMP_NAME.fullmatch(n) for n in names):
            return False
        if os.path.isdir(chunks) and any(not _TMP_NAME.fullmatch(n) for n in os.listdir(chunks)):
            return False
        for folder in (out_dir, chunks):
            for name in os.listdir(folder) if os.path.isdir(folder) else []:
                path = os.path.join(folder, name)
                if _TMP_NAME.fullmatch(name) and (os.path.islink(path) or os.path.isfile(path)):
                    files._remove(path)  # a link itself, never its target
        return True
    except OSError:
        return False


def remove_empty(out_dir: str, keep: tuple = ()) -> None:
    """Removes the store in ``out_dir`` when it holds no trial: ``identity.json``, the lock and an
    empty chunk folder (and the directory, when nothing else is left; names in ``keep`` stay, and
    so does the store when anything else is there). Errors are ignored: it only tidies.

    Args:
        out_dir: a result directory.
        keep: names in it that stay (and that do not count as something else being there).
    """
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
