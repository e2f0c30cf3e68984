"""The micro-batch width rule (jaxfed.engine.sizing.choose_width) on described devices, a stored
run's width kept by growth whatever the rule says on the machine that grows it, and the values of
widths chosen for different memory budgets on one platform: bit for bit the same."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine, stats
from jaxfed.engine import core, sizing
from jaxfed.engine.sizing import MICRO_BATCH, MIN_WIDTH, DeviceSpec, choose_width

GIB, MIB = 2**30, 2**20
H200 = DeviceSpec("gpu", 26 * GIB)  # a quarter of what XLA may allocate on an H200 (the default budget)


def test_a_cpu_keeps_its_width_whatever_its_memory_or_trial():
    for memory in (GIB // 64, 8 * GIB, 2**40):
        for trial_bytes in (0, 10**3, 10**9):
            assert choose_width(DeviceSpec("cpu", memory), trial_bytes, 10**8) == MICRO_BATCH["cpu"] == 512


def test_an_accelerator_fills_its_memory_with_small_trials():
    assert choose_width(H200, 16_600, 10**8) == 262_144  # a Fig. 3 trial (gfvl-topologies: ~17 KB)
    assert choose_width(DeviceSpec("tpu", 16 * GIB), 1_000, 10**8) == MICRO_BATCH["tpu"]
    assert choose_width(DeviceSpec("rocm", 16 * GIB), 1_000, 10**8) == MICRO_BATCH["gpu"]  # (another accelerator)


def test_large_trials_get_fewer_lanes_bounded_by_the_memory_fraction():
    kmeans_mall = 643_500  # kmeans-convergence at its defaults: ~640 KB of working set per trial
    width = choose_width(H200, kmeans_mall, 10**8)
    assert width == 8192
    assert width * kmeans_mall <= sizing.WIDTH_FRACTION * H200.memory_bytes < 2 * width * kmeans_mall
    assert choose_width(DeviceSpec("gpu", 2 * H200.memory_bytes), kmeans_mall, 10**8) == 2 * width
    assert choose_width(H200, 10**12, 10**8) == MIN_WIDTH  # a trial beyond the budget: the floor (refused later)


@pytest.mark.parametrize("memory", [GIB, 7 * GIB, 26 * GIB, 80 * GIB])
@pytest.mark.parametrize("trial_bytes", [0, 1, 999, 16_600, 643_500, 40 * 2**20])
def test_every_width_is_a_power_of_two_in_range(memory, trial_bytes):
    width = choose_width(DeviceSpec("gpu", memory), trial_bytes, 10**8)
    assert MIN_WIDTH <= width <= MICRO_BATCH["gpu"] and width & (width - 1) == 0
    assert width % stats.summary.SUMMARY_BLOCK == 0  # a summary needs whole sum blocks per micro-batch
    assert width == MIN_WIDTH or width * trial_bytes <= sizing.WIDTH_FRACTION * memory
    narrower = choose_width(DeviceSpec("gpu", memory // 2), trial_bytes, 10**8)
    assert narrower <= width  # less memory never widens


def test_a_small_run_pads_at_most_to_the_next_power_of_two():
    assert choose_width(H200, 16_600, 20_000) == 32_768
    assert choose_width(H200, 16_600, 32_768) == 32_768
    assert choose_width(H200, 16_600, 10) == MIN_WIDTH


def test_the_working_set_of_a_trial_counts_its_largest_live_values():
    def small(key, point):
        return {"x": jax.random.normal(key) * point}

    def large(key, point):  # 100,000 float32 live at once inside a loop body
        def body(carry, _):
            return carry + jnp.sort(jax.random.normal(key, (100_000,))).sum(), None

        total, _ = jax.lax.scan(body, point, None, length=3)
        return {"x": total}

    key, point = jax.random.key(0), jnp.float32(1.0)
    small_bytes = sizing.trial_live_bytes(jax.make_jaxpr(small)(key, point))
    large_bytes = sizing.trial_live_bytes(jax.make_jaxpr(large)(key, point))
    assert small_bytes < 1_000
    assert 400_000 <= large_bytes < 4_000_000  # a few 400 KB arrays of the body at once (bits, normals, sorted)


def _trial(key, point):
    k1, k2 = jax.random.split(key)
    x = jax.random.normal(k1, (40,)) * point["scale"]
    walk = jnp.cumsum(jnp.exp(-jnp.abs(x)) + jax.random.uniform(k2, (40,)))
    return {"last": walk[-1], "mean": jnp.tanh(walk).mean(), "path": walk[::8]}


POINTS = [{"scale": np.asarray(0.5, np.float32)}, {"scale": np.asarray(2.0, np.float32)}]


TRIAL_BYTES = 2**18
"""What a trial takes on the described accelerator of :func:`_as_accelerator`: the width the rule
chooses at a budget of W MiB is W (W · 256 KiB = a quarter of it)."""


def _as_accelerator(monkeypatch):
    """The engine's rule as on a described accelerator whose budget is the run's ``max_memory`` and
    on which each trial takes :data:`TRIAL_BYTES` (this CPU computes it), with the floor at one sum
    block so that small budgets give small widths; returns the widths it chose."""
    monkeypatch.setattr(sizing, "MIN_WIDTH", stats.summary.SUMMARY_BLOCK)
    chosen: list = []

    def rule(device, trial_bytes, n_trials):
        assert trial_bytes > 0  # the engine's estimate of this trial (replaced by the described one)
        chosen.append(choose_width(DeviceSpec("gpu", device.memory_bytes), TRIAL_BYTES, n_trials))
        return chosen[-1]

    monkeypatch.setattr(core, "choose_width", rule)
    return chosen


def _keys_trial(key, point):
    """Draws and elementwise maths only: each lane's values are its own key's, whatever the width."""
    x = jax.random.normal(key, (5,)) * point["scale"]
    return {"bits": jax.random.bits(key, (3,)), "y": jnp.exp(-jnp.abs(x)) + jnp.tanh(x)}


def test_widths_chosen_for_different_budgets(monkeypatch, tmp_path):
    """Three budgets of one described platform choose widths 64, 128 and 256, and each run stores
    its width. A trial's key is fold_in(…, t) of its index alone, so draws and elementwise maths
    are bit for bit the same at every width; a reduction inside a trial (a sum over its 40 values)
    is compiled for the micro-batch's shape, and XLA may order it differently at another width
    (docs/results.md): equal to float32 rounding, and bit for bit whenever the width is equal
    (another budget choosing the same width)."""
    chosen = _as_accelerator(monkeypatch)
    keys, sums = {}, {}
    for budget in (64 * MIB, 128 * MIB, 256 * MIB, 300 * MIB):
        out_dir = str(tmp_path / str(budget))
        keys[budget] = engine.run(_keys_trial, POINTS, 300, seed=5, max_memory=budget, keep="raw", out_dir=out_dir, identity={})  # fmt: skip
        with open(os.path.join(out_dir, "identity.json")) as f:
            assert json.load(f)["micro_batch"] == chosen[-1]
        if budget in (64 * MIB, 256 * MIB, 300 * MIB):
            sums[budget] = engine.run(_trial, POINTS, 300, seed=5, max_memory=budget, keep="raw", compilation_cache="off")  # fmt: skip
    assert chosen == [64, 64, 128, 256, 256, 256, 256]
    for budget, out in keys.items():
        for name in ("bits", "y"):
            np.testing.assert_array_equal(out[name], keys[64 * MIB][name], err_msg=f"{name} at {budget} bytes")
    for name in ("last", "mean", "path"):
        np.testing.assert_array_equal(sums[300 * MIB][name], sums[256 * MIB][name])  # one width: the same bits
        np.testing.assert_allclose(sums[256 * MIB][name], sums[64 * MIB][name], rtol=1e-6)


def test_growth_keeps_the_stored_width_whatever_the_rule_says_now(monkeypatch, tmp_path):
    """A run begun where the rule chose 64 grows (and resumes) at 64 on a machine of the same
    platform whose budget makes the rule choose 256, and equals a fresh run at 64; an explicit
    width still overrides the rule, and one that differs from the stored width is refused."""
    chosen = _as_accelerator(monkeypatch)
    d = str(tmp_path / "run")
    engine.run(_trial, POINTS, 100, seed=1, max_memory=64 * MIB, out_dir=d, identity={}, keep="raw")
    assert chosen == [64]
    grown = engine.run(_trial, POINTS, 300, seed=1, max_memory=256 * MIB, out_dir=d, identity={}, keep="raw")
    assert len(chosen) == 1  # the rule was not asked: the stored width was taken
    with open(os.path.join(d, "identity.json")) as f:
        assert json.load(f)["micro_batch"] == 64
    fresh = engine.run(_trial, POINTS, 300, seed=1, micro_batch=64, keep="raw", compilation_cache="off")
    for name in fresh:
        np.testing.assert_array_equal(grown[name], fresh[name])
    with pytest.raises(engine.ConfigMismatch, match="micro_batch: stored 64, given 128"):
        engine.run(_trial, POINTS, 400, seed=1, micro_batch=128, out_dir=d, identity={}, keep="raw")
    fresh_dir = str(tmp_path / "explicit")
    engine.run(_trial, POINTS, 100, seed=1, micro_batch=128, out_dir=fresh_dir, identity={}, keep="raw")
    assert len(chosen) == 1  # an explicit width: no rule
    with open(os.path.join(fresh_dir, "identity.json")) as f:
        assert json.load(f)["micro_batch"] == 128
    # with overwrite the stored width is not kept: the rule decides the new run's
    engine.run(_trial, POINTS, 300, seed=1, max_memory=256 * MIB, out_dir=d, identity={}, overwrite=True)
    assert chosen[-1] == 256


def test_a_cpu_run_without_a_width_stores_512(tmp_path):
    d = str(tmp_path / "cpu")
    engine.run(_trial, POINTS[:1], 10, out_dir=d, identity={}, keep="raw")
    with open(os.path.join(d, "identity.json")) as f:
        stored = json.load(f)
    assert stored["micro_batch"] == 512 and stored["platform"] == jax.devices()[0].platform == "cpu"
