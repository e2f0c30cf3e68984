"""``engine.recompute`` (what ``jaxfed verify`` asks the engine for): the values, or the summary and
raw tail, of given trials of given points, bit for bit those a run computed, without a run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, stats, store


def signed(key, point):
    """Two groups: the static ``sign`` splits the points."""
    x = jax.random.normal(key, (4,)) * point["scale"] * point["sign"]
    return {"x": x, "total": x.sum()}


POINTS = [
    {"scale": jnp.float32(1.0), "sign": 1},
    {"scale": jnp.float32(2.0), "sign": -1},
    {"scale": jnp.float32(3.0), "sign": 1},
]
N, WIDTH = 300, 64


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_the_groups_are_numbered_as_a_run_numbers_them():
    assert engine.point_groups(POINTS) == [(0, 2), (1,)]


@pytest.mark.parametrize("common", [False, True])
def test_recomputed_trials_are_the_runs_bit_for_bit(common):
    ran = engine.run(signed, POINTS, N, seed=7, micro_batch=WIDTH, keep="raw", common_random_numbers=common, progress=False)  # fmt: skip
    options = engine.RunOptions(seed=7, micro_batch=WIDTH, common_random_numbers=common)
    ranges = [(0, N), (100, 137), (250, N), (5, 6)]
    for (start, stop), values in zip(ranges, engine.recompute(signed, POINTS, ranges, options)):
        assert set(values) == {"x", "total"}
        assert all(_same(values[m], ran[m][:, start:stop]) for m in values)
    (values,) = engine.recompute(signed, POINTS, [(60, 70)], options, point_ids=[2, 1])  # (across groups, in order)
    assert all(_same(values[m], ran[m][[2, 1], 60:70]) for m in values)


def test_a_recomputed_summary_is_the_stored_state_bit_for_bit(tmp_path):
    out = str(tmp_path / "run")
    engine.run(signed, POINTS, N, seed=3, micro_batch=WIDTH, keep="summary", chunk_size=128, out_dir=out, identity={}, progress=False)  # fmt: skip
    options = engine.RunOptions(seed=3, micro_batch=WIDTH)
    block = stats.summary.SUMMARY_BLOCK
    for g, ids in enumerate(engine.point_groups(POINTS)):
        stored = store.read_summary(store.summary_path(out, g))
        whole = int(stored.states["x"].blocks.max()) * block  # 256: one aligned piece of 4 blocks
        ranges = [(0, whole), (whole, N)]
        (parts, none), (empty, tails) = engine.recompute(signed, POINTS, ranges, options, point_ids=ids, summary=True)
        assert empty == {} and none["x"].shape == (len(ids), 0, 4)
        for metric, state in stored.states.items():
            assert _same(parts[metric]["sum_pieces"][:, 0], state.total[:, 2])
            assert _same(parts[metric]["sq_pieces"][:, 0], state.total_sq[:, 2])
            assert _same(tails[metric], stored.tails[metric])


@pytest.mark.parametrize(
    "ranges, kw, match",
    [
        ([(0, 64)], dict(options=engine.RunOptions(seed=1)), "micro_batch"),
        ([(10, 5)], {}, "range"),
        ([(-1, 5)], {}, "range"),
        ([(32, 96)], dict(summary=True), "multiple of 64"),
        ([(0, 64)], dict(point_ids=[3]), "point_ids"),
    ],
)
def test_what_cannot_be_recomputed_is_refused_at_the_call(ranges, kw, match):
    args = dict(options=engine.RunOptions(seed=1, micro_batch=WIDTH)) | kw
    options = args.pop("options")
    with pytest.raises(ValueError, match=match):
        engine.recompute(signed, POINTS, ranges, options, **args)
