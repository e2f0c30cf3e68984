"""The summary's float64 sums (a binary counter of aligned block ranges) and its histogram
methods: the same bits whatever the chunking, on the host and on the device; the one pass over the
values (stats.summary.summary_pass) is the bits of the separate passes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import stats
from jaxfed.jaxcompat import enable_x64
from jaxfed.stats.summary import _dyadic_sums, _histogram


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
    for j in range(stats.summary.SUM_LEVELS - 1, -1, -1):
        if block_sums.shape[1] >> j & 1:
            total = total + dyadic(block_sums, j, start >> j)
            start += 1 << j
    return total


@pytest.mark.parametrize("first, n", [(0, 0), (0, 1), (3, 10), (5, 1), (8, 8), (7, 25), (1, 30), (1023, 3), (64, 50)])
def test_dyadic_pieces_tile_the_range_with_aligned_ranges(first, n):
    pieces = stats.summary.dyadic_pieces(first, n)
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
    with enable_x64(True):
        on_device = jax.jit(lambda b, f, n: _dyadic_sums(b, f, n, jnp))
        for first in sorted({0, 1, 5, 63, 64, 127, int(rng.integers(0, n_global - width))}):
            if first + width > n_global:
                continue
            blocks = global_sums[:, first : first + width]
            for n in sorted({0, 1, width // 2, width - 1, width} - {-1}):
                pieces = stats.summary.dyadic_pieces(first, n)
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
    state = stats.summary.empty_state(values.shape[:1] + values.shape[2:])
    start = 0
    for size in chunks:
        part = stats.summary.chunk_summary(
            values[:, start * 64 : (start + size) * 64], size * 64, np, first_block=start
        )
        state = stats.summary.fold(state, part, size)
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
    block_sums = stats.summary._tree_sum(clean, 2)
    np.testing.assert_array_equal(stats.summary.level_total(whole.total), canonical_total(block_sums))
    np.testing.assert_allclose(
        stats.summary.result_of(whole).mean, values.astype(np.float64).mean(1), rtol=1e-12, atol=1e-6
    )


def test_a_chunk_hands_the_host_sums_that_do_not_grow_with_it():
    """O(log n) partial sums per cell: 2·bit_length(blocks) pieces, not one per block."""
    values = np.ones((1, 64 * 1024, 2), np.float32)
    part = stats.summary.chunk_summary(values, 64 * 1024, np)
    assert part["sum_pieces"].shape == (1, 22, 2)


def test_the_device_chunk_summary_equals_the_host_one_at_any_offset():
    rng = np.random.default_rng(3)
    values = adversarial(rng, (3, 640, 2)).astype(np.float32)
    values[0, 5] = np.nan
    values[1, 70:80] = np.inf
    with enable_x64(True):
        fn = jax.jit(lambda v, n, f: stats.summary.chunk_summary(v, n, jnp, f))
        for first, n_valid in [(0, 640), (13, 640), (13, 320), (1, 0)]:
            host = stats.summary.chunk_summary(values, n_valid, np, first_block=first)
            device = fn(values, np.uint32(n_valid), np.uint32(first))
            for key, want in host.items():
                np.testing.assert_array_equal(np.asarray(device[key]), want, err_msg=f"{first}, {n_valid}: {key}")


def histogram_cases():
    edges = stats.summary._EDGES.astype(np.float32)
    every_bin = np.concatenate([-edges[::-1][1:], [0.0], edges[:-1]]).astype(np.float32)  # one per bin
    rng = np.random.default_rng(0)
    return {
        "one bin": np.zeros((2, 640, 3), np.float32),
        "all non-finite": np.full((2, 128, 3), np.nan, np.float32) * np.array([1, -np.inf, np.inf], np.float32),
        "bin edges": np.broadcast_to(np.concatenate([edges, -edges])[:2048], (1, 3, 2048)).transpose(0, 2, 1).copy(),
        "every bin once": every_bin[: every_bin.size // 64 * 64].reshape(1, -1, 1),
        "mixed": adversarial(rng, (3, 256, 4)).astype(np.float32),
    }


def fused_cases():
    """histogram_cases and more: ±inf and NaN among finite values, subnormals, float64 values."""
    cases = dict(histogram_cases())
    rng = np.random.default_rng(1)
    mixed = adversarial(rng, (2, 192, 3)).astype(np.float32)
    mixed[0, 3, 1], mixed[0, 70, 0], mixed[1, 100] = np.nan, np.inf, -np.inf
    cases["with nan and inf"] = mixed
    tiny = np.array([1e-45, -1e-45, 1e-40, -1e-38, 0.0, -0.0, 1e-12, 9.9999e-13], np.float32)
    cases["subnormals and zeros"] = np.tile(tiny, 24).reshape(1, 192, 1)
    cases["float64"] = adversarial(rng, (2, 128, 2))
    return cases


def separate_passes(values, valid, xp, method: str) -> dict:
    """The summary's parts each from its own pass over ``values`` (points, T, *cells): the block sums
    and the sums of squares in two trees, the bins counted with the counted values as weights, the
    non-finite trials from the values again (the engine before issue 35): the reference of
    :func:`jaxfed.stats.summary.summary_pass`."""
    n_points, n_trials = values.shape[:2]
    cells = tuple(values.shape[2:])
    finite = xp.isfinite(values)
    used = finite & valid
    clean = xp.where(used, values, 0).astype(np.float64)
    blocks = clean.reshape((n_points, n_trials // stats.summary.SUMMARY_BLOCK, stats.summary.SUMMARY_BLOCK) + cells)
    bins = stats.summary.bin_index(values, xp)
    n_cells = n_points * int(np.prod(cells))
    if xp is np or method == "scatter":
        flat = (xp.arange(n_cells, dtype=np.int32).reshape((n_points, 1) + cells) * stats.summary.N_BINS + bins).ravel()
        weights = used.astype(np.int32).ravel()
        if xp is np:
            hist = np.bincount(flat, weights, minlength=n_cells * stats.summary.N_BINS).astype(np.int32)
        else:
            hist = xp.zeros(n_cells * stats.summary.N_BINS, np.int32).at[flat].add(weights)
        hist = hist.reshape((n_points,) + cells + (stats.summary.N_BINS,))
    else:  # (sorted with the uncounted values last: the sentinel)
        hist = _histogram(xp.where(used, bins, stats.summary.N_BINS), xp, method)
    return {
        "sums": stats.summary._tree_sum(blocks, 2),
        "squares": stats.summary._tree_sum(blocks * blocks, 2),
        "hist": hist,
        "nonfinite_trials": ((~finite) & valid).reshape(n_points, n_trials, -1).any(-1).sum(1, dtype=np.int32),
    }


def _fused(values, valid, xp, method: str) -> dict:
    one = stats.summary.summary_pass(values, valid, xp)
    hist = _histogram(one.bins, xp, method)
    running = jnp.zeros((2,) + hist.shape[1:], np.int32) if xp is jnp else None
    out = {"sums": one.sums, "squares": one.squares, "hist": hist, "nonfinite_trials": one.nonfinite_trials}
    if running is not None:  # the engine's loop: each point's bins counted into row 1 of a running histogram
        out["counted"] = jnp.stack(
            [stats.summary.count_into(running, 1, one.bins[p], jnp, method)[1] for p in range(len(hist))]
        )
    return out


@functools.cache
def _on_device(fn, method: str):
    """``fn(values, valid, jnp, method)`` jitted (compiled once per shape, kept across the cases)."""
    return jax.jit(lambda v, u: fn(v, u, jnp, method))


@pytest.mark.parametrize("case", list(fused_cases()))
def test_the_fused_pass_is_the_bits_of_the_separate_passes(case):
    """stats.summary.summary_pass (values read once) against the separate passes, on the host and jitted
    with each histogram method, with every trial valid and with the last 5 (a partial block) and
    the first 100 (not a multiple of the sum block) left out; sums compared as bits. For float64
    values the sums of squares only to rounding: a float64 square rounds, and XLA may fuse it into
    its sum (an FMA, one rounding less) in one program and not another (so it did before)."""
    values = fused_cases()[case]
    n_trials = values.shape[1]
    shape = (1, n_trials) + (1,) * (values.ndim - 2)
    for n_valid in (n_trials, n_trials - 5, min(100, n_trials)):
        valid = (np.arange(n_trials) < n_valid).reshape(shape)
        host = separate_passes(values, valid, np, "scatter")
        assert host["hist"].sum() == (np.isfinite(values) & valid).sum()
        checks = [("numpy", _fused(values, valid, np, "scatter"), host)]
        with enable_x64(True):
            for method in stats.summary.HISTOGRAM_METHODS:
                reference = _on_device(separate_passes, method)(values, valid)
                fused = _on_device(_fused, method)(values, valid)
                if values.dtype == np.float32:
                    checks.append((f"{method}: separate passes vs the host", reference, host))
                    checks.append((method, fused, reference))
                else:  # a float64 square rounds: XLA may fuse it into its sum (an FMA) in one program, not another
                    np.testing.assert_allclose(np.asarray(fused["squares"]), host["squares"], rtol=1e-15)
                    checks.append((method, dict(fused, squares=host["squares"]), host))
        for where, got, want in checks:
            for key, array in want.items():
                bits = np.asarray(got[key]).view(np.uint8)
                np.testing.assert_array_equal(
                    bits, np.asarray(array).view(np.uint8), err_msg=f"{n_valid}, {where}: {key}"
                )
            if "counted" in got:
                np.testing.assert_array_equal(np.asarray(got["counted"]), host["hist"], err_msg=f"{where}: count_into")
    if case == "every bin once":  # the values are the bins' lower edges, in order
        np.testing.assert_array_equal(stats.summary.bin_index(values, np).ravel(), np.arange(values.size))
    if case == "all non-finite":
        assert host["hist"].sum() == 0 and host["nonfinite_trials"].tolist() == [n_valid, n_valid]


def test_an_unknown_histogram_method_names_the_choices():
    with pytest.raises(ValueError, match="histogram='dense': expected one of scatter, sort"):
        _histogram(jnp.zeros((1, 64), jnp.int32), jnp, "dense")


def test_the_float32_bin_from_the_bits_is_the_bin_of_the_definition():
    """stats.summary.bin_index reads a float32's level from its top 16 bits and one edge comparison; the
    definition is the edge interval holding |x| (searched in the float32 edges), the zero bin below
    1e-12 and the sign. Compared on every edge and its neighbours up to 3 ulp, subnormals, ±0,
    the largest floats and a million random bit patterns (all 2^32 agreed once, off the suite)."""
    edges = stats.summary._EDGES.astype(np.float32)
    near, up, down = [edges], edges, edges
    for _ in range(3):  # 1, 2 and 3 ulp either side of every edge
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(0))
        near += [up, down]
    special = np.array([0.0, 1e-45, 1e-40, 1.1754942e-38, 3.4028235e38, 1e8, 9.999999e7], np.float32)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    magnitudes = np.concatenate(near + [special, np.abs(bits[np.isfinite(bits)])])
    x = np.concatenate([magnitudes, -magnitudes])
    level = np.clip(np.searchsorted(edges, np.abs(x), side="right") - 1, 0, stats.summary._N_SIDE - 1)
    want = np.where(
        np.abs(x) < edges[0],
        stats.summary._ZERO,
        np.where(x > 0, stats.summary._ZERO + 1 + level, stats.summary._ZERO - 1 - level),
    )
    np.testing.assert_array_equal(stats.summary.bin_index(x, np), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: stats.summary.bin_index(v, jnp))(x)), want)
