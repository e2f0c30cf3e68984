"""Bit-identity as users break it: every built-in experiment, at small settings, gives the same
values whatever the chunk size (1, 7, 37, 64, the micro-batch width W and all: two micro-batches),
after growth, after a resume with another chunk size and in a targeted run whose points stop one
by one; with 1 or 2 devices (one experiment of each kind of trial); and a user trial with three
traced points. The default suite checks the user trial (chunk sizes 1, 7, 64, 192, all, growth,
one point per group); the slow suite runs the whole matrix for the issue's two reproducers
(non-conjugate G-FVL and over-the-air k-means at chunk size 64 vs all) and the two kinds of trial
run on two devices; ``-m long`` runs it for every other experiment."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from support import SMALL

from jaxfed import engine, stats
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY

REPRODUCED = ("gfvl-local-iters", "kmeans-snr")  # the two the issue reproduced
# Each device runs the one-device program on its share of the trials, whatever the trial: the
# reproducers (non-conjugate G-FVL, over-the-air k-means at the 64 width), and the conjugate G-FVL
# update and every k-means method (kmeans-convergence), one compiled group each. Every experiment on two
# devices compiled each group twice more and took ~10 minutes of the CI's slow suite.
DEVICE_KINDS = ("gfvl-topologies", "kmeans-convergence")
SEED = 11


def test_every_built_in_experiment_has_small_settings():
    assert set(SMALL) == set(REGISTRY)


@functools.cache  # one trial function per experiment: its compiled chunk programs are kept between runs
def sweep_of(name: str):
    exp = REGISTRY[name]
    sweep = exp.build(make_config(exp.config_cls, SMALL[name]))
    width = exp.width_on("cpu") or engine.testing.MICRO_BATCH["cpu"]
    return exp, sweep, width


def run(name, n_trials, **kwargs):
    exp, sweep, _ = sweep_of(name)
    if "out_dir" in kwargs:
        kwargs.setdefault("identity", {"experiment": name})
    micro = exp.width_on("cpu")
    return engine.run(
        sweep.trial,
        sweep.points,
        n_trials,
        seed=SEED,
        common_random_numbers=exp.common_random_numbers,
        progress=False,
        micro_batch=micro,
        **kwargs,
    )


def assert_same(a: dict, b: dict, what: str):
    assert set(a) == set(b)
    for name in a:
        if isinstance(a[name], stats.Summary):
            for field in a[name]._fields:
                x, y = np.asarray(getattr(a[name], field)), np.asarray(getattr(b[name], field))
                assert np.array_equal(x, y, equal_nan=True), f"{what}: {name}.{field} differs"
        else:
            differ = ~((a[name] == b[name]) | (np.isnan(a[name]) & np.isnan(b[name])))
            assert not differ.any(), f"{what}: {name} differs in {int(differ.sum())} of {differ.size} values"


def matrix_trials(width: int) -> int:
    """Trials of the matrix: more than one micro-batch and fewer than two, so that "all" runs the
    chunk program over two micro-batches and every smaller chunk size over one."""
    return width + min(70, width - 6)


def check_matrix(name: str, tmp_path) -> None:
    """Fresh runs at chunk sizes 37, 64, W and all (W the micro-batch width, "all" two micro-batches);
    chunk sizes W, 7 and 1 through growth; a resume with a missing chunk and another chunk size;
    summaries; a targeted run that drops points. Three compiled programs per group (one micro-batch
    raw and summary, two micro-batches raw): the many chunk sizes are one program over different
    lanes, which the construction has to keep apart."""
    _, sweep, width = sweep_of(name)
    n = matrix_trials(width)
    reference = run(name, n, chunk_size=n)
    for size in sorted({37, 64, width}):
        assert_same(run(name, n, chunk_size=size), reference, f"{name}, chunk size {size}")

    grown = str(tmp_path / "grown")
    run(name, n - 20, chunk_size=width, out_dir=grown)
    run(name, n - 3, chunk_size=7, out_dir=grown)  # growth in chunks of 7 …
    assert_same(run(name, n, chunk_size=1, out_dir=grown), reference, f"{name}, grown in chunks of {width}, 7 and 1")

    resumed = str(tmp_path / "resumed")
    run(name, n, chunk_size=64, out_dir=resumed)
    chunks = sorted(os.listdir(os.path.join(resumed, "chunks")))
    os.remove(os.path.join(resumed, "chunks", chunks[len(chunks) // 2]))  # as if killed before it was stored
    assert_same(run(name, n, chunk_size=37, out_dir=resumed), reference, f"{name}, resumed at another chunk size")

    # Every metric's summary over chunks of 37 = the host's summary of the raw values in trial order.
    summary = run(name, n, chunk_size=37, keep="summary")
    assert_same(dict(summary), {m: host_summary(v) for m, v in reference.items()}, f"{name}, summaries in chunks of 37")
    metric = next(m for m, (shape, _) in _specs(reference).items() if np.issubdtype(reference[m].dtype, np.floating))
    per_point = np.abs(reference[metric]).reshape(len(sweep.points), n, -1).max(-1)
    se = float(np.median(per_point.std(1)) / np.sqrt(200))  # some points stop early, some do not
    targeted = run(name, n, chunk_size=64, keep="summary", target_se=max(se, 1e-30), target_metric=metric)
    stops = targeted.info["target"]["trials_per_point"]
    for p, stop in enumerate(stops):  # the targeted summary of each point = its first `stop` trials
        host = host_summary(reference[metric][p : p + 1, :stop])
        for field in host._fields:
            x, y = np.asarray(getattr(targeted[metric], field))[p], np.asarray(getattr(host, field))[0]
            assert np.array_equal(x, y, equal_nan=True), f"{name}, targeted point {p} (stop {stop}): {field}"


def host_summary(values: np.ndarray) -> stats.Summary:
    """The summary of raw values (points, trials, …), computed on the host in trial order."""
    block = stats.summary.SUMMARY_BLOCK
    whole = values.shape[1] // block * block
    state = stats.summary.empty_state((values.shape[0],) + values.shape[2:])
    if whole:
        state = stats.summary.fold(state, stats.summary.chunk_summary(values[:, :whole], whole, np), whole // block)
    return stats.summary.finish(state, values[:, whole:])[1]


def _specs(result):
    return {name: (value.shape[2:], value.dtype) for name, value in result.items()}


# Three compiles per group, 20-200 s each on the 2-core CPU: the slow suite runs the matrix for the
# issue's two reproducers and the two kinds of trial run on two devices below; the other thirteen
# experiments are marked long (-m long), beyond the CI's time beside the rest of the slow suite.
MATRIX_IN_CI = REPRODUCED + DEVICE_KINDS


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow if n in MATRIX_IN_CI else pytest.mark.long) for n in sorted(SMALL)]
)
def test_bit_identical_across_chunk_sizes_growth_resume_and_targets(name, tmp_path):
    check_matrix(name, tmp_path)


TWO_DEVICES = """
import sys, numpy as np
sys.path[:0] = [{tests!r}, {tests!r} + '/..']  # the module's folder and tests/ (support.py)
from test_determinism import run
out = {{}}
for name in {names!r}:
    result = run(name, {n_trials}, chunk_size=200, devices=2)
    out.update({{f"{{name}}/{{metric}}": value for metric, value in result.items()}})
np.savez({path!r}, **out)
"""


def check_two_devices(names, tmp_path, n_trials=300):
    path = str(tmp_path / "two.npz")
    script = TWO_DEVICES.format(tests=os.path.dirname(__file__), names=list(names), n_trials=n_trials, path=path)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=900)
    two = np.load(path)
    for name in names:
        one = run(name, n_trials, chunk_size=n_trials)
        assert_same({m: two[f"{name}/{m}"] for m in one}, dict(one), f"{name}, 2 devices vs 1")


@pytest.mark.slow  # 110 s and 211 s on two quiet workers (before one compile served every device)
@pytest.mark.parametrize("names", [REPRODUCED, DEVICE_KINDS])
def test_two_devices_give_the_values_of_one(tmp_path, names):
    check_two_devices(names, tmp_path)


ALL_CORES = """
import sys, numpy as np
from jaxfed import engine
devices = engine.use_all_cores()  # before anything uses JAX
scope = {{}}
exec({trial!r}, scope)
f = np.float32
points = [{{"scale": f(0.3 + p), "shift": f(p / 7), "decay": f(0.9 - p / 10)}} for p in range(3)]
out = engine.run(scope["trial"], points, 300, seed=3, micro_batch=64, chunk_size=300, progress=False)
assert out.info["devices"] == devices, (out.info["devices"], devices)
np.savez(sys.argv[1], devices=devices, **out)
"""


def _clean_env() -> dict:
    """This environment without host device flags or a scheduler's variables."""
    return {k: v for k, v in os.environ.items() if k != "XLA_FLAGS" and not k.startswith(("SLURM_", "OMPI_"))}


def _on_cores(cores: set, argv: list) -> None:
    subprocess.run(argv, check=True, env=_clean_env(), timeout=600, preexec_fn=lambda: os.sched_setaffinity(0, cores))


def _two_cores() -> list:
    return sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []


def _assert_same_bytes(a, b, names) -> None:
    for name in names:
        assert a[name].tobytes() == b[name].tobytes(), name


@pytest.mark.slow  # ~10 s on the quiet 2-core CPU (one compile, whatever the device count)
@pytest.mark.skipif(len(_two_cores()) < 2, reason="needs 2 cores")
def test_every_core_is_a_host_device_by_default_with_the_values_of_one(tmp_path):
    """``engine.use_all_cores()`` makes one host device per core the process may run on: bound to
    one core a run of the user trial shards over one device, bound to two over two, and the values
    are the same bytes (the slow suite runs `jaxfed run gfvl-topologies` the same way)."""
    cores, script = _two_cores(), ALL_CORES.format(trial=USER_TRIAL)
    for name, bound in (("one", {cores[0]}), ("two", set(cores))):
        _on_cores(bound, [sys.executable, "-c", script, str(tmp_path / f"{name}.npz")])
    one, two = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert (int(one["devices"]), int(two["devices"])) == (1, 2) and sorted(one.files) == sorted(two.files)
    _assert_same_bytes(one, two, [f for f in one.files if f != "devices"])


@pytest.mark.slow  # two `jaxfed run`s: ~40 s on the loaded 2-core CPU
@pytest.mark.skipif(len(_two_cores()) < 2, reason="needs 2 cores")
def test_jaxfed_run_uses_every_core_by_default_with_the_values_of_one(tmp_path):
    """``jaxfed run`` without --devices or XLA_FLAGS: one device bound to one core, two bound to
    two, the stored metrics the same bytes."""
    cores, records = _two_cores(), {}
    args = ["run", "gfvl-topologies", "--trials", "700", "--set", "n_slots=20", "--quiet", "--out"]
    for name, bound in (("one", {cores[0]}), ("two", set(cores))):
        _on_cores(bound, [sys.executable, "-m", "jaxfed.cli", *args, str(tmp_path / name)])
        records[name] = json.loads((tmp_path / name / "config.json").read_text())["engine"]
    assert (records["one"]["devices"], records["two"]["devices"]) == (1, 2)
    one, two = np.load(tmp_path / "one" / "metrics.npz"), np.load(tmp_path / "two" / "metrics.npz")
    assert sorted(one.files) == sorted(two.files)
    _assert_same_bytes(one, two, one.files)


# --------------------------------------------------------------------------- a user trial
USER_TRIAL = textwrap.dedent(
    """
    def trial(key, point):
        # Float work XLA likes to fuse and contract (a·b + c), a scan and a reduction.
        import jax, jax.numpy as jnp
        x = jax.random.normal(key, (33,)) * point["scale"] + point["shift"]
        def step(c, v):
            return c * point["decay"] + v * v * point["scale"], c
        final, path = jax.lax.scan(step, jnp.float32(0.0), x)
        return {"final": final, "path": jnp.cumsum(path) / (1 + jnp.abs(x)), "norm": jnp.linalg.norm(x)}
    """
)


def user_trial():
    scope: dict = {}
    exec(USER_TRIAL, scope)
    return scope["trial"]


def user_points(n_points=3):
    f = np.float32
    return [{"scale": f(0.3 + p), "shift": f(p / 7), "decay": f(0.9 - p / 10)} for p in range(n_points)]


# 64 takes chunk sizes 1 and 7 in the default suite; the CPU's default width, 512, the slow suite (~8 s).
@pytest.mark.parametrize("micro_batch", [64, pytest.param(512, marks=pytest.mark.slow)])
def test_a_user_trial_with_three_traced_points(tmp_path, micro_batch):
    trial, points = user_trial(), user_points()

    def go(chunk_size, points=points, **kwargs):
        return engine.run(trial, points, 700, seed=3, chunk_size=chunk_size, micro_batch=micro_batch, **kwargs)

    reference = go(700)
    # 1, 7 and 64 share one compiled batch of 64; 192 and all (704) are two more; 128 and 513 at the 512 width.
    sizes = (1, 7, 64, 192) if micro_batch == 64 else (350, 77, 64, 128, 192, 513)
    for size in sizes:
        assert_same(go(size), reference, f"chunk size {size}")
    one_point = go(192, points=points[:1])  # one point per compiled group: the same values
    assert_same({m: v[:1] for m, v in reference.items()}, dict(one_point), "one point")
    d = str(tmp_path / "grown")
    go(100, out_dir=d, identity={})
    assert_same(go(300, out_dir=d, identity={}), reference, "grown from 100 trials")


def test_growth_on_another_micro_batch_width_is_refused(tmp_path):
    trial, points = user_trial(), user_points()
    d = str(tmp_path / "w")
    engine.run(trial, points, 10, micro_batch=64, out_dir=d, identity={})
    with pytest.raises(engine.ConfigMismatch, match="micro_batch: stored 64, given 128"):
        engine.run(trial, points, 20, micro_batch=128, out_dir=d, identity={})
    stored = json.load(open(os.path.join(d, "identity.json")))
    assert stored["micro_batch"] == 64 and stored["platform"] == jax.devices()[0].platform


def test_growth_with_another_trial_program_is_refused(tmp_path):
    trial, points = user_trial(), user_points()
    d = str(tmp_path / "p")
    engine.run(trial, points, 10, out_dir=d, identity={})

    def edited(key, point):
        out = trial(key, point)
        return dict(out, final=out["final"] + 1)

    with pytest.raises(engine.ConfigMismatch, match="programs"):
        engine.run(edited, points, 20, out_dir=d, identity={})


def test_a_micro_batch_that_is_not_a_multiple_of_the_sum_block_is_refused():
    with pytest.raises(ValueError, match="micro_batch.*multiple of 64"):
        engine.run(user_trial(), user_points(), 10, micro_batch=100)
