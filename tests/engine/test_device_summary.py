"""Summaries computed on the device: equal to the host's, whatever the chunking, devices or kills."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, stats, store
from jaxfed.jaxcompat import enable_x64

N = 150  # two whole sum blocks and a partial one of 22 trials


def trial(key, point):
    """Signed values over many decades, exact zeros and some NaN/inf trials."""
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (4,)) * 10.0 ** jax.random.uniform(k2, (4,), minval=-13, maxval=9) * point["scale"]
    x = x.at[0].set(jnp.where(x[1] > 1.0, 0.0, x[0]))
    x = x.at[2].set(jnp.where(jnp.abs(x[3]) > 1e7, jnp.inf, x[2]))
    return {"x": x, "s": jnp.where(x[1] < -1e6, jnp.nan, x[1] * 2)}


POINTS = [{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(-3.0)}]


def assert_summaries_equal(a, b):
    for name in a:
        for field in stats.Summary._fields:
            np.testing.assert_array_equal(getattr(a[name], field), getattr(b[name], field), err_msg=f"{name}/{field}")


@pytest.fixture(scope="module")
def raw():
    return engine.run(trial, POINTS, N, seed=5)


@pytest.fixture(scope="module")
def device_summary():
    return engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=N)


def test_device_summary_equals_the_host_summary_of_the_same_trials(raw, device_summary):
    for name, values in raw.items():
        host = stats.summary.SummaryAccumulator(values.shape[:1] + values.shape[2:])
        host.add(values)
        want, got = host.result(), device_summary[name]
        for field in ("count", "nan_count", "hist"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{name}/{field}")
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=0)
        np.testing.assert_allclose(got.se, want.se, rtol=1e-9, atol=0)
    assert (
        device_summary["s"].nan_count.sum() > 0 and (device_summary["x"].hist[..., stats.summary.N_BINS // 2] > 0).any()
    )


@pytest.mark.parametrize("chunk_size", [pytest.param(1, marks=pytest.mark.slow), 7])
def test_bit_identical_for_any_chunk_size(device_summary, chunk_size):
    out = engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=chunk_size)
    assert out.info["chunk_sizes"] == [stats.summary.SUMMARY_BLOCK]  # rounded up to whole sum blocks
    assert_summaries_equal(out, device_summary)


def test_bin_index_is_the_same_in_numpy_and_xla():
    edges = stats.summary._EDGES.astype(np.float32)
    x = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, np.inf), -edges, [0.0, 1e30, -1e-30]])
    x = x.astype(np.float32)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda v: stats.summary.bin_index(v, jnp))(x)), stats.summary.bin_index(x, np)
    )
    index = stats.summary.bin_index(edges[:-1], np)  # each edge opens its own bin
    np.testing.assert_array_equal(index, stats.summary.N_BINS // 2 + 1 + np.arange(edges.size - 1))


@pytest.mark.slow
def test_growth_and_a_kill_between_chunks_resume_bit_identically(tmp_path, device_summary, monkeypatch):
    grown = str(tmp_path / "grown")
    engine.run(trial, POINTS, 100, seed=5, keep="summary", out_dir=grown, identity={})  # ends inside a block
    assert_summaries_equal(
        engine.run(trial, POINTS, N, seed=5, keep="summary", out_dir=grown, identity={}), device_summary
    )

    killed, saves = str(tmp_path / "killed"), []
    real = store.Store.save_summary

    def save_then_die(self, *args):
        real(self, *args)
        saves.append(max(args[1]))  # (spec, per-point trials, chunk size, states)
        if len(saves) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(store.Store, "save_summary", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=64, out_dir=killed, identity={}, checkpoint_every=0)  # fmt: skip
    assert saves == [64, 128]
    monkeypatch.setattr(store.Store, "save_summary", real)
    assert_summaries_equal(
        engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=64, out_dir=killed, identity={}), device_summary
    )


def test_histograms_kept_on_the_device_between_stores_give_the_same_summaries(tmp_path, device_summary, monkeypatch):
    """As on an accelerator (forced here on the CPU): the chunks' histograms are added on the
    device and pulled when the state is stored; the same bits in one run, grown, and resumed
    after a kill between chunks; the host never folds a chunk's histogram."""
    from jaxfed.engine import core, sinks

    monkeypatch.setattr(core, "hists_on_device", lambda machine: True)
    added, folded = [], []
    real_running, real_fold = sinks._running_hist, stats.summary.fold
    monkeypatch.setattr(sinks, "_running_hist", lambda running, hist: added.append(1) or real_running(running, hist))
    monkeypatch.setattr(stats.summary, "fold", lambda state, part, *a, **k: folded.append("hist" in part) or real_fold(state, part, *a, **k))  # fmt: skip
    out = engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=64)
    assert_summaries_equal(out, device_summary)
    # three chunks of two metrics added on the device; the two with whole blocks folded on the host
    # without their histograms (the folds with one: the host's summaries of the last partial block)
    assert len(added) == 6 and folded == [False] * 4 + [True] * 2

    killed, saves = str(tmp_path / "killed"), []
    real_save = store.Store.save_summary

    def save_then_die(self, *args):
        real_save(self, *args)
        saves.append(max(args[1]))
        if len(saves) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(store.Store, "save_summary", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=64, out_dir=killed, identity={}, checkpoint_every=0)  # fmt: skip
    monkeypatch.setattr(store.Store, "save_summary", real_save)
    resumed = engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=64, out_dir=killed, identity={}, checkpoint_every=1e9)  # fmt: skip
    assert_summaries_equal(resumed, device_summary)
    grown = str(tmp_path / "grown")
    engine.run(trial, POINTS, 100, seed=5, keep="summary", chunk_size=64, out_dir=grown, identity={}, checkpoint_every=1e9)  # fmt: skip
    assert_summaries_equal(
        engine.run(trial, POINTS, N, seed=5, keep="summary", out_dir=grown, identity={}), device_summary
    )


_CHILD = """
import numpy as np, sys
sys.path[:0] = [{tests!r}, {tests!r} + '/..']  # the module's folder and tests/ (support.py)
from test_device_summary import trial, POINTS, N
from jaxfed import engine, stats
out = engine.run(trial, POINTS, N, seed=5, keep="summary", chunk_size=128)
assert out.info["devices"] == 4, out.info
np.savez({path!r}, **{{f"{{m}}/{{f}}": getattr(s, f) for m, s in out.items() for f in stats.Summary._fields}})
"""


@pytest.mark.slow
def test_four_forced_cpu_devices_give_identical_summaries(tmp_path, device_summary):
    path = str(tmp_path / "four.npz")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    code = _CHILD.format(tests=os.path.dirname(__file__), path=path)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    with np.load(path) as z:
        for name, summary in device_summary.items():
            for field in stats.Summary._fields:
                np.testing.assert_array_equal(z[f"{name}/{field}"], getattr(summary, field), err_msg=f"{name}/{field}")


_SHARES = """
import sys
sys.path[:0] = [{tests!r}, {tests!r} + '/..']  # the module's folder and tests/ (support.py)
from test_device_summary import trial, POINTS, N, assert_summaries_equal
from jaxfed import engine
go = dict(seed=5, micro_batch=64, keep="summary", progress=False)
one = engine.run(trial, POINTS, N, devices=1, chunk_size=N, **go)
for chunk in (64, 128, N):  # within one device's share, over two, and with the tail in the third
    four = engine.run(trial, POINTS, N, devices=4, chunk_size=chunk, **go)
    assert four.info["devices"] == 4 and four.info["chunk_sizes"] == [chunk], four.info
    assert_summaries_equal(four, one)
"""


def test_the_devices_shares_of_a_summary_chunk_fold_to_one_devices_summary():
    """Each device summarises its own share of a chunk (64 trials each here, one sum block); the
    host folds the shares in trial order: the summaries of four devices at chunk sizes whose
    whole blocks end in the first, second and third share (where the tail of 22 trials is) are
    the bits of one device's."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    code = _SHARES.format(tests=os.path.dirname(__file__))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr


def runs_trial(key, point):
    """A trajectory with runs of equal values (a KL after the cover time), zeros, values on bin
    edges and non-finite slots: what the micro-batch loop's histogram and block sums see."""
    k1, k2, k3 = jax.random.split(key, 3)
    level = jax.random.normal(k1, (12,)) * 10.0 ** jax.random.uniform(k2, (12,), minval=-13, maxval=9)
    x = jnp.repeat(level, 4)[:40] * point["scale"]
    x = x.at[5].set(jnp.float32(stats.summary._EDGES[700]))
    x = x.at[6].set(jnp.where(jax.random.uniform(k3) < 0.1, jnp.nan, x[6]))
    return {"kl": x.reshape(2, 20), "last": jnp.where(x[0] > 1e7, -jnp.inf, x[-1])}


# The CPU counts by scatter; the accelerators' sort in the slow suite (~10 s: both methods give the same
# counts on adversarial data in the default suite, tests/engine/test_summary_sums.py).
@pytest.mark.parametrize("histogram", ["scatter", pytest.param("sort", marks=pytest.mark.slow)])
def test_the_loops_summary_is_the_bits_of_the_summary_of_the_stored_values(histogram):
    """The compiled share summary (counted micro-batch by micro-batch inside the loop, the values
    never stored) equals share_summary of the same trials' values for every output, wherever the
    share's valid trials end (the raw tail block in the first, a middle and the last micro-batch)
    and wherever its blocks start."""
    from jaxfed.engine import compiled
    from jaxfed.engine.points import group_points

    group, traced = group_points([{"scale": jnp.float32(1.0)}, {"scale": jnp.float32(-1e-3)}])[0]
    width, local = 128, 384
    ids = np.asarray(group.point_ids, np.uint32)
    steps = np.int32(len(ids) * local // width)
    metrics = jax.jit(compiled.batched_metrics(runs_trial, group, local, width))
    loop = jax.jit(compiled.batched_summary(runs_trial, group, local, width, False, histogram))
    values = metrics(np.uint32(3), ids, traced, np.uint32(640), steps)
    assert np.isnan(values["kl"]).any() and np.isinf(values["last"]).any()
    reference = jax.jit(lambda v, n, f: compiled.share_summary(v, n, f, histogram))
    for n_valid, first_block in [(local, 10), (64, 10), (192, 3), (256, 0), (0, 7)]:
        got = loop(np.uint32(3), ids, traced, np.uint32(640), steps, np.uint32(n_valid), np.uint32(first_block))
        for name, v in values.items():
            with enable_x64(True):  # as the engine: float64 sums, the trial as it is
                want = reference(v, np.uint32(n_valid), np.uint32(first_block))
                assert set(got[name]) == set(want)
                for key, w in want.items():
                    np.testing.assert_array_equal(
                        np.asarray(got[name][key]), np.asarray(w), err_msg=f"{n_valid}, {first_block}: {name}/{key}"
                    )
