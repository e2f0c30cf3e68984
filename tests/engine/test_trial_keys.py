"""Trial indices beyond 2^32: a trial below 2^32 keeps the key (and the bits) it always had, a trial
from 2^32 on gets the Threefry hash of its whole 64-bit index (:func:`jaxfed.engine.compiled.trial_key`),
and the engine computes such trials whatever their chunk."""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

from jaxfed import engine
from jaxfed.engine.compiled import moved, trial_halves, trial_index, trial_key
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.stats import summary

LOW = np.array([0, 1, 2, 63, 64, 511, 512, 12_345, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1], np.uint32)


def _keys(base, high, low):
    return np.asarray(jax.jit(jax.vmap(lambda h, t: jax.random.key_data(trial_key(base, h, t))))(high, low))


def test_a_trial_below_2_32_keeps_the_key_of_fold_in():
    for base in (jax.random.key(0), jax.random.fold_in(jax.random.key(11), 3)):  # common, and a point's
        old = np.asarray(jax.vmap(lambda t: jax.random.key_data(jax.random.fold_in(base, t)))(LOW))
        assert np.array_equal(_keys(base, np.zeros_like(LOW), LOW), old)


def test_a_trial_from_2_32_on_hashes_its_whole_index():
    base = jax.random.fold_in(jax.random.key(5), 2)
    high = np.array([1, 1, 23, 2**21 - 1], np.uint32)  # (2**21 − 1: the top half of 2^53 − 1)
    low = np.array([0, 7, 12_345, 2**32 - 1], np.uint32)
    got = _keys(base, high, low)
    want = [np.asarray(threefry_2x32(jax.random.key_data(base), jnp.asarray([h, t], jnp.uint32))) for h, t in zip(high, low)]  # fmt: skip
    assert np.array_equal(got, np.stack(want))
    below = _keys(base, np.zeros_like(low), low)
    assert not (got == below).all(axis=1).any()  # trial 2^32·h + t is not trial t
    assert len({tuple(k) for k in got}) == len(got)


def test_halves_carry_into_the_high_word():
    assert trial_index(trial_halves(2**53 - 1)) == 2**53 - 1
    assert trial_index(trial_halves(2**32)) == 2**32 and trial_index(np.uint32(77)) == 77
    high, low = moved(jnp.asarray(trial_halves(2**32 - 2)), jnp.arange(4, dtype=jnp.uint32))
    assert [int(h) << 32 | int(t) for h, t in zip(high, low)] == [2**32 - 2 + i for i in range(4)]


def _sweep():
    exp = REGISTRY["gfvl-topologies"]
    return exp.build(make_config(exp.config_cls, {"n_slots": "5"}))


def test_a_run_keeps_the_bits_of_trial_indices_below_2_32():
    """Digests of the values computed by main at 644ea46 (before indices grew past 32 bits), by this
    very code: a raw run and a summary run with common random numbers and a partial last block."""
    sweep = _sweep()
    raw = engine.run(sweep.trial, sweep.points, 256, seed=7, keep="raw", progress=False, chunk_size=128)
    digest = hashlib.sha256()
    for name in sorted(raw):
        digest.update(np.ascontiguousarray(raw[name]).tobytes())
    assert digest.hexdigest() == "47874c74bdfff7a56f32cad16d0dcd096d4348f1af4eeeffff84c1761dac08ed"
    summarised = engine.run(
        sweep.trial, sweep.points, 320, seed=7, keep="summary", progress=False, chunk_size=128, common_random_numbers=True
    )  # fmt: skip
    digest = hashlib.sha256()
    for name in sorted(summarised):
        for field in summarised[name]:
            digest.update(np.ascontiguousarray(field).tobytes())
    assert digest.hexdigest() == "300bc47061362d43f295d041c4fd409d2096200b1ad148a34a54b88e54fef7f1"


def test_trials_across_2_32_do_not_depend_on_where_their_micro_batch_starts():
    sweep = _sweep()
    options = engine.RunOptions(seed=7, micro_batch=64)
    wide, late, low = engine.recompute(
        sweep.trial, sweep.points, [(2**32 - 64, 2**32 + 64), (2**32, 2**32 + 64), (0, 64)], options
    )
    for name in wide:
        assert np.array_equal(wide[name][:, 64:], late[name])
        assert not np.array_equal(late[name], low[name])  # trial 2^32 + t is not trial t
        assert np.isfinite(late[name]).all()


def test_a_state_past_2_32_blocks_gets_levels_and_int64_histograms():
    """Folding 2 × 2^39 blocks (2^46 trials): the counter grows a level per bit (its sum lands at
    level 40), the histograms turn int64 before a bin passes 2^31 − 1, and below both the layout
    is the stored one (32 levels, int32)."""
    cells = (1, 2)
    state = summary.empty_state(cells)
    assert state.total.shape[1] == summary.SUM_LEVELS and state.hist.dtype == np.int32
    half = 2**39

    def part(value):
        trials = half * summary.SUMMARY_BLOCK
        hist = np.zeros(cells + (summary.N_BINS,), np.int32)
        return dict(
            count=np.full(cells, trials, np.int64), nan_count=np.zeros(cells, np.int64), hist=hist,
            nonfinite_trials=np.zeros(1, np.int64), sum_pieces=np.full((1, 1, 2), value), sq_pieces=np.full((1, 1, 2), value),
        )  # fmt: skip

    state = summary.fold(state, part(3.0), half)
    state = summary.fold(state, part(5.0), half)
    assert state.total.shape[1] == 41 and state.total[0, 40, 0] == 8.0 and not state.total[0, :40].any()
    assert state.hist.dtype == np.int64 and int(state.count[0, 0]) == 2**46
    assert summary.hist_dtype(2**31 - 1) == np.int32 and summary.hist_dtype(2**31) == np.int64
    assert summary.levels_for(2**32 - 1) == 32 and summary.levels_for(2**47) == 48


def test_shards_past_2_32_blocks_join_into_the_state_of_one_run():
    """Two shards of 2^33 blocks each ([0, 2^33) and [2^33, 2^34): 2^40 trials) joined as a merge
    joins them: the run's counter, its sum at level 34 and nothing below, as one fold of it all."""
    cells, n = (1, 1), 2**33

    def part(value, blocks):
        return dict(
            count=np.full(cells, blocks * summary.SUMMARY_BLOCK, np.int64), nan_count=np.zeros(cells, np.int64),
            hist=np.zeros(cells + (summary.N_BINS,), np.int32), nonfinite_trials=np.zeros(1, np.int64),
            sum_pieces=np.full((1, 1, 1), value), sq_pieces=np.full((1, 1, 1), value),
        )  # fmt: skip

    first = summary.fold(summary.empty_state(cells), part(1.5, n), n)
    second = summary.fold(summary.range_state(cells, n), part(2.5, n), n)
    joined = summary.joined(first, second)
    whole = summary.fold(summary.empty_state(cells), part(4.0, 2 * n), 2 * n)
    assert joined.total.shape[1] == whole.total.shape[1] == 35
    assert np.array_equal(joined.total, whole.total) and joined.total[0, 34, 0] == 4.0
    assert joined.hist.dtype == np.int64 and int(joined.count[0, 0]) == 2**40
