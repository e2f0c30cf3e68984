"""The result store of :func:`jaxfed.engine.run`: a directory that never yields a wrong result.

This face re-exports its modules' names (``jaxfed.store.NAME``); the code is in:

- :mod:`jaxfed.store.files`: safe file I/O below the chunk format: atomic writes (a temporary
  file, ``fsync``, ``os.replace``), reads that follow no link and never block, the directory lock;
- :mod:`jaxfed.store.chunks`: the chunk format (the layout of a result directory, each chunk
  file's header and checksums), its only reader and writer;
- :mod:`jaxfed.store.buildrecord`: ``build.json``, the builds that computed a directory's trials;
- :mod:`jaxfed.store.runstore`: the :class:`Store` of one run (its identity, builds and lock; the
  chunks it reads and commits), :func:`verify_record`, :func:`remove_empty`;
- :mod:`jaxfed.store.rundir`: the result directory of a finished run (config.json, metrics.npz,
  verdicts.json), not imported here.

The first four import only the ones above them in this list, never this face (rundir, the
last, uses the store through this face).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

# ruff: noqa: F401 (a face: every import below is a re-export)

from jaxfed.store.buildrecord import BUILD_FILE, build_refusal, builds_record, jax_refusal, read_builds, recorded_jax
from jaxfed.store.chunks import (
    CHUNK_DIR,
    DAMAGE_HINT,
    SHARD_SUMMARY_FIELDS,
    STORE_FORMAT,
    SUMMARY_FIELDS,
    ChunkName,
    GroupSpec,
    StoredSummary,
    chunk_dir,
    chunk_header,
    finish_summaries,
    identity_digest,
    list_chunks,
    read_chunk,
    read_summary,
    summary_path,
    write_summary,
)
from jaxfed.store.chunks import _pack as _pack  # (tests rewrite a chunk file with these two)
from jaxfed.store.chunks import _unpack as _unpack
from jaxfed.store.files import (
    MAX_JSON_BYTES,
    MAX_READ_BYTES,
    StoreError,
    atomic_link_or_write,
    atomic_savez,
    atomic_write_bytes,
    atomic_write_json,
    check_no_link,
    open_regular,
    read_json,
    read_regular,
    savez_bytes,
)
from jaxfed.store.runstore import (
    RECORD_KEYS,
    BuildMismatch,
    ConfigMismatch,
    Store,
    describe_differences,
    remove_empty,
    remove_leftovers,
    stored_identity,
    verify_record,
)
