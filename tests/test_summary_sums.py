"""The summary's float64 sums (a binary counter of aligned block ranges) and its histogram
methods: the same bits whatever the chunking, on the host and on the device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import stats
from jaxfed.stats import _dyadic_sums, _histogram


def adversarial(rng, shape):
    """Magnitudes 1e-8 … 1e8 of both signs: any other grouping of the additions rounds differently."""
    return rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 9, shape)


def dyadic(block_sums: np.ndarray, j: int, k: int) -> np.ndarray:
    """D(j, k) by its definition, D(j, k) = D(j − 1, 2k) + D(j − 1, 2k + 1): blocks (points, N, …)."""
    if j == 0:
        return block_sums[:, k]
    return dyadic(block_sums, j - 1, 2 * k) + dyadic(block_sums, j - 1, 2 * k + 1)


def canonical_total(block_sums: np.ndarray) -> np.ndarray:
    """The total over blocks [0, N) by the definition: the binary decomposition of N, largest first."""
    total = np.zeros(block_sums.shape[:1] + block_sums.shape[2:])
    start = 0
    for j in range(stats.SUM_LEVELS - 1, -1, -1):
        if block_sums.shape[1] >> j & 1:
            total = total + dyadic(block_sums, j, start >> j)
            start += 1 << j
    return total


@pytest.mark.parametrize("first, n", [(0, 0), (0, 1), (3, 10), (5, 1), (8, 8), (7, 25), (1, 30), (1023, 3), (64, 50)])
def test_dyadic_pieces_tile_the_range_with_aligned_ranges(first, n):
    pieces = stats.dyadic_pieces(first, n)
    at = first
    for j, k in pieces:
        assert k << j == at  # contiguous and aligned to its own size
        at += 1 << j
    assert at == first + n
    for level in range(40):
        assert sum(j == level for j, _ in pieces) <= 2


@pytest.mark.parametrize("width", [1, 3, 8, 33])
def test_dyadic_sums_on_host_and_device_equal_the_definition(width):
    """Every (first, n ≤ width) of a chunk of ``width`` blocks; the device's first and n traced."""
    rng = np.random.default_rng(width)
    n_global = 200
    global_sums = adversarial(rng, (2, n_global, 3))
    with jax.enable_x64(True):
        on_device = jax.jit(lambda b, f, n: _dyadic_sums(b, f, n, jnp))
        for first in sorted({0, 1, 5, 63, 64, 127, int(rng.integers(0, n_global - width))}):
            if first + width > n_global:
                continue
            blocks = global_sums[:, first : first + width]
            for n in sorted({0, 1, width // 2, width - 1, width} - {-1}):
                pieces = stats.dyadic_pieces(first, n)
                want = np.stack([dyadic(global_sums, j, k) for j, k in pieces], 1) if pieces else None
                host = _dyadic_sums(blocks, first, n, np)
                device = np.asarray(on_device(blocks, np.uint32(first), np.uint32(n)))
                assert host.shape == device.shape == (2, 2 * width.bit_length(), 3)
                for got in (host, device):
                    if pieces:
                        np.testing.assert_array_equal(got[:, : len(pieces)], want)
                    assert not got[:, len(pieces) :].any()  # zeros after the pieces


def state_after(values: np.ndarray, chunks: list) -> stats.SummaryState:
    """The state of trials values[:, :sum(chunks) * 64] folded chunk by chunk (sizes in blocks)."""
    state = stats.empty_state(values.shape[:1] + values.shape[2:])
    start = 0
    for size in chunks:
        part = stats.chunk_summary(values[:, start * 64 : (start + size) * 64], size * 64, np, first_block=start)
        state = stats.fold(state, part, size)
        start += size
    return state


@pytest.mark.parametrize("n_blocks", [1, 5, 37, 64])
def test_the_state_does_not_depend_on_the_chunking(n_blocks):
    rng = np.random.default_rng(n_blocks)
    values = adversarial(rng, (2, n_blocks * 64, 3)).astype(np.float32)
    whole = state_after(values, [n_blocks])
    sizes = [1] * n_blocks, [7] * (n_blocks // 7) + [n_blocks % 7], list(rng.multinomial(n_blocks, [0.2] * 5))
    for chunks in sizes:
        state = state_after(values, [c for c in chunks if c])
        for field in stats.SummaryState._fields:
            np.testing.assert_array_equal(getattr(state, field), getattr(whole, field), err_msg=f"{chunks}: {field}")
    clean = values.astype(np.float64).reshape(2, n_blocks, 64, 3)
    block_sums = stats._tree_sum(clean, 2)
    np.testing.assert_array_equal(stats.level_total(whole.total), canonical_total(block_sums))
    np.testing.assert_allclose(stats.result_of(whole).mean, values.astype(np.float64).mean(1), rtol=1e-12, atol=1e-6)


def test_a_chunk_hands_the_host_sums_that_do_not_grow_with_it():
    """O(log n) partial sums per cell: 2·bit_length(blocks) pieces, not one per block."""
    values = np.ones((1, 64 * 1024, 2), np.float32)
    part = stats.chunk_summary(values, 64 * 1024, np)
    assert part["sum_pieces"].shape == (1, 22, 2)


def test_the_device_chunk_summary_equals_the_host_one_at_any_offset():
    rng = np.random.default_rng(3)
    values = adversarial(rng, (3, 640, 2)).astype(np.float32)
    values[0, 5] = np.nan
    values[1, 70:80] = np.inf
    with jax.enable_x64(True):
        fn = jax.jit(lambda v, n, f: stats.chunk_summary(v, n, jnp, f))
        for first, n_valid in [(0, 640), (13, 640), (13, 320), (1, 0)]:
            host = stats.chunk_summary(values, n_valid, np, first_block=first)
            device = fn(values, np.uint32(n_valid), np.uint32(first))
            for key, want in host.items():
                np.testing.assert_array_equal(np.asarray(device[key]), want, err_msg=f"{first}, {n_valid}: {key}")


def histogram_cases():
    edges = stats._EDGES.astype(np.float32)
    every_bin = np.concatenate([-edges[::-1][1:], [0.0], edges[:-1]]).astype(np.float32)  # one per bin
    rng = np.random.default_rng(0)
    return {
        "one bin": np.zeros((2, 640, 3), np.float32),
        "all non-finite": np.full((2, 128, 3), np.nan, np.float32) * np.array([1, -np.inf, np.inf], np.float32),
        "bin edges": np.broadcast_to(np.concatenate([edges, -edges])[:2048], (1, 3, 2048)).transpose(0, 2, 1).copy(),
        "every bin once": every_bin[: every_bin.size // 64 * 64].reshape(1, -1, 1),
        "mixed": adversarial(rng, (3, 256, 4)).astype(np.float32),
    }


@pytest.mark.parametrize("case", list(histogram_cases()))
def test_histogram_methods_give_the_same_counts(case):
    values = histogram_cases()[case]
    n_trials = values.shape[1]
    used = np.isfinite(values) & (np.arange(n_trials) < n_trials - 5).reshape(1, -1, *([1] * (values.ndim - 2)))
    bins = stats.bin_index(values, np)
    want = _histogram(bins, used, np, "scatter")
    assert want.sum() == used.sum()
    for method in stats.HISTOGRAM_METHODS:
        got = jax.jit(lambda b, u, m=method: _histogram(b, u, jnp, m))(bins, used)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=method)
    if case == "every bin once":  # the values are the bins' lower edges, in order
        np.testing.assert_array_equal(bins.ravel(), np.arange(bins.size))


def test_an_unknown_histogram_method_names_the_choices():
    with pytest.raises(ValueError, match="histogram='dense': expected one of scatter, sort"):
        _histogram(jnp.zeros((1, 64), jnp.int32), jnp.ones((1, 64), bool), jnp, "dense")


def test_the_float32_bin_from_the_bits_is_the_bin_of_the_definition():
    """stats.bin_index reads a float32's level from its top 16 bits and one edge comparison; the
    definition is the edge interval holding |x| (searched in the float32 edges), the zero bin below
    1e-12 and the sign. Compared on every edge and its neighbours up to 3 ulp, subnormals, ±0,
    the largest floats and a million random bit patterns (all 2^32 agreed once, off the suite)."""
    edges = stats._EDGES.astype(np.float32)
    near, up, down = [edges], edges, edges
    for _ in range(3):  # 1, 2 and 3 ulp either side of every edge
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(0))
        near += [up, down]
    special = np.array([0.0, 1e-45, 1e-40, 1.1754942e-38, 3.4028235e38, 1e8, 9.999999e7], np.float32)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    magnitudes = np.concatenate(near + [special, np.abs(bits[np.isfinite(bits)])])
    x = np.concatenate([magnitudes, -magnitudes])
    level = np.clip(np.searchsorted(edges, np.abs(x), side="right") - 1, 0, stats._N_SIDE - 1)
    want = np.where(
        np.abs(x) < edges[0], stats._ZERO, np.where(x > 0, stats._ZERO + 1 + level, stats._ZERO - 1 - level)
    )
    np.testing.assert_array_equal(stats.bin_index(x, np), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: stats.bin_index(v, jnp))(x)), want)
