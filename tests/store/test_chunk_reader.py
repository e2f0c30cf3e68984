"""The chunk reader views each stored array where its bytes lie (issue 58, part 6): the same arrays
as ``np.load``, writable, every damaged byte refused or harmless, other .npz files read by NumPy."""

import io
import zipfile

import numpy as np
import pytest

from jaxfed import store
from jaxfed.store import chunks, files

ARRAYS = {
    "kl": np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 5, 7) / 7,
    "counts": np.arange(6, dtype=np.int64).reshape(2, 3),
    "scalar": np.float64(2.5),
    "empty": np.zeros((2, 0, 3), np.float32),
    "flags": np.array([True, False, True]),
    "wide": np.arange(4, dtype=np.complex128),
}


def _chunk_bytes(arrays=ARRAYS) -> bytes:
    meta = {"kind": "raw", "trials": [0, 5], "point_ids": [0, 1, 2]}
    return b"".join(bytes(part) for part in chunks._pack(meta, arrays))


def test_the_reader_gives_numpys_arrays_writable(tmp_path):
    path = tmp_path / "g000_t0000000000_0000000005.npz"
    path.write_bytes(_chunk_bytes())
    meta, arrays = store.read_chunk(str(path))
    with np.load(path) as z:
        expected = {name: z[name] for name in z.files if name != "__meta__"}
    assert meta["trials"] == [0, 5] and set(arrays) == set(expected)
    for name, value in expected.items():
        got = arrays[name]
        assert got.dtype == value.dtype and got.shape == value.shape and np.array_equal(got, value), name
        assert got.flags.writeable and got.flags.aligned, name
    arrays["kl"][0, 0, 0] = -1.0  # (views of one buffer: writing one array changes no other)
    assert all(np.array_equal(arrays[n], expected[n]) for n in expected if n != "kl")


def test_every_flipped_byte_is_refused_or_reads_the_same_arrays(tmp_path):
    data = _chunk_bytes({"kl": ARRAYS["kl"], "counts": ARRAYS["counts"]})
    path = str(tmp_path / "g000_t0000000000_0000000005.npz")
    _, reference = store.read_chunk(path, data)
    refused = 0
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x5A
        try:
            _, arrays = store.read_chunk(path, damaged)
            # never more lenient than NumPy's zip reader, which reads a chunk's header alone
            with np.load(io.BytesIO(bytes(damaged)), allow_pickle=False) as z:
                [z[name] for name in z.files]
        except store.StoreError as err:
            assert str(err).startswith(path), err
            refused += 1
            continue
        assert set(arrays) == set(reference)
        assert all(np.array_equal(arrays[n], reference[n]) for n in reference), position
    assert refused > len(data) // 2


@pytest.mark.parametrize("compression", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_a_file_the_store_does_not_write_is_read_by_numpy(compression, monkeypatch):
    """A compressed member (or a Fortran-ordered array) is not viewed in place: ``np.load`` reads it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, value in {"a": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "__meta__": np.zeros(1, np.uint8)}.items():  # fmt: skip
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, value)
    assert chunks._members_in_place(buffer.getvalue()) is None
    meta_less = buffer.getvalue()
    with pytest.raises(files.StoreError, match="header"):
        chunks._unpack("x.npz", meta_less)
