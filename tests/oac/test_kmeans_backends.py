"""Aggregation back-ends and channel models as values (docs/kmeans.md, "Adding a channel", "Adding an
aggregator"): the built-in ones reproduce the outputs recorded from the implementation they
replaced (bit for bit on the JAX they were recorded with, within a few ulps on another: see
:func:`assert_recorded`); a user-made aggregator and a user-registered channel run through the round
and the CLI."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from test_kmeans import blobs

from jaxfed import oac
from jaxfed.oac import aggregators, kmeans

# Recorded on fixed keys with the string settings (Settings(aggregation=..., beta=..., digits=...,
# channel=..., snr_db=..., symbol_energy=...)) and the channel if-chain they replaced.
REFERENCE = np.load(pathlib.Path(__file__).parents[1] / "data" / "kmeans_backends_reference.npz")
FIELDS = ("loss", "vmax", "next_vmax", "aggregate", "dead_zone", "reinitialised")

RECORDED_ULPS = 16
"""How far a recorded float array may move, in ulps of its largest value. The references were recorded
on JAX 0.10.2, which reproduces every bit; XLA's CPU code for JAX 0.6.2 and 0.12.1 rounds some sums and
transcendental functions differently in the last bit, and the six rounds feed those bits back: measured
worst 5.3 ulps of the array's largest value (ota_explicit's energy, JAX 0.12.1; 1.5 on JAX 0.6.2); 23 of
the 60 history values of oac_aggregate move on both, by up to 7 ulps of their own. A changed algorithm, key or setting moves
values by orders more; the booleans (dead zone, re-initialisation) must match exactly."""


def assert_recorded(got, name: str) -> None:
    """``got`` equals the recorded ``REFERENCE[name]``: exactly for integers and booleans, within
    :data:`RECORDED_ULPS` ulps of the largest recorded value for floats (the last bits are XLA's to
    round: a sum's small values carry the rounding of its large terms)."""
    got, want = np.asarray(got), REFERENCE[name]
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.dtype, want.shape)
    if not np.issubdtype(want.dtype, np.floating):
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    atol = RECORDED_ULPS * float(np.finfo(want.dtype).eps) * scale
    np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=f"{name} (scale {scale:g})")


X, INIT, OWNER = blobs(21, n=300, dim=2)  # the sizes the reference outputs were recorded with
DATA = kmeans.flat_data(X, OWNER)
CASES = {
    "ideal": lambda: kmeans.Settings(aggregators.ideal()),
    "quantized": lambda: kmeans.Settings(aggregators.quantized(3, 2), vmax_rule="signed-previous"),
    "oac_aggregate": lambda: kmeans.Settings(aggregators.oac("aggregate", 3, 3, 10.0)),
    "oac_explicit": lambda: kmeans.Settings(
        aggregators.oac("explicit", 3, 2, 0.0, float(np.sqrt(3.0))), adaptive_vmax=False, vmax=30.0
    ),
}


# The default suite checks the OAC path (adaptive v_max, the channel, re-initialisation); `-m slow` all of them.
SLOW = pytest.mark.slow  # a compilation each (the explicit channel's ~5 s on 2 cores)


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c == "oac_aggregate" else SLOW) for c in sorted(CASES)])
def test_builtin_backends_reproduce_the_recorded_outputs(case):
    s = CASES[case]()
    history, info = jax.jit(lambda k: kmeans.federated_rounds(k, DATA, 7, INIT, 6, s))(jax.random.key(5))
    assert_recorded(history, f"{case}/history")
    for field in FIELDS:
        assert_recorded(getattr(info, field), f"{case}/{field}")


@SLOW
def test_snr_sweep_is_a_vmap_and_reproduces_the_recorded_outputs():
    """The SNR is traced: the aggregator is built inside the vmapped function."""

    def run(snr):
        s = kmeans.Settings(aggregators.oac("aggregate", 3, 2, snr))
        return kmeans.federated_rounds(jax.random.key(6), DATA, 7, INIT, 4, s)[0]

    history = jax.jit(jax.vmap(run))(jnp.array([0.0, 10.0, 30.0]))
    assert_recorded(history, "oac_sweep/history")


@pytest.mark.parametrize("mode", [pytest.param(m, marks=SLOW if m == "explicit" else []) for m in oac.MODES])
def test_builtin_channels_reproduce_the_recorded_outputs(mode):
    values = jnp.asarray(np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32))
    active = jnp.array([True, True, False, True, True, True])
    out = oac.over_the_air_sum(jax.random.key(7), values, 3, 3, 2.5, 5.0, mode, active=active)
    assert_recorded(out.estimate, f"ota_{mode}/estimate")
    assert_recorded(out.energy, f"ota_{mode}/energy")


# --------------------------------------------------------------------------- a user-made aggregator
def _coherent(noise_std):
    """Analog coherent over-the-air sum with perfect power control, built outside the package:
    Σ_k v_k + n, n ~ N(0, noise_std² I); exact values, so no v_max."""

    def aggregate(key, values, active, vmax):
        return jnp.sum(values, axis=0) + noise_std * jax.random.normal(key, values.shape[1:], values.dtype)

    return kmeans.Aggregator(aggregate)


def _rounding(step_fraction):
    """Each ED rounds its values to a grid of step_fraction · v_max before an exact sum."""

    def quantize(values, vmax):
        step = step_fraction * vmax
        return step * jnp.round(values / step)

    return kmeans.Aggregator(lambda key, values, active, vmax: jnp.sum(quantize(values, vmax), axis=0), quantize)


def test_user_aggregators_run_through_the_round():
    run = jax.jit(lambda s: kmeans.federated_rounds(jax.random.key(5), DATA, 7, INIT, 6, s), static_argnums=0)
    history, info = run(kmeans.Settings(_coherent(0.0)))
    # + 0·n is the exact sum: every bit of the built-in ideal back-end's output on this JAX
    np.testing.assert_array_equal(np.asarray(history), np.asarray(run(kmeans.Settings(aggregators.ideal()))[0]))
    assert_recorded(history, "ideal/history")
    assert np.all(np.asarray(info.vmax) == 0)
    info = jax.jit(
        lambda s: kmeans.federated_round(jax.random.key(0), jnp.asarray(INIT), DATA, 7, s)[1], static_argnums=0
    )(kmeans.Settings(_rounding(0.25), reinit=False))
    deltas = kmeans.local_statistics(DATA, jnp.asarray(INIT), 7)[1].reshape(7, -1)
    assert float(info.vmax) == pytest.approx(float(jnp.max(jnp.abs(deltas))))  # v_max computed for a codec
    step = 0.25 * float(info.vmax)
    np.testing.assert_allclose(info.aggregate / step, np.round(info.aggregate / step), atol=1e-3)
    with pytest.raises(ValueError, match="aggregator must be an Aggregator"):
        run(kmeans.Settings("oac"))


# --------------------------------------------------------------------------- a channel the paper lacks
N_TRIALS = 20000


@pytest.mark.parametrize("n_antennas", [pytest.param(2, marks=SLOW), 4])
def test_energy_combining_estimator_moments(n_antennas):
    """M-antenna energy combining (jaxfed.oac.antennas): mean(v̂_q) = the quantised sum and the sample
    variance = (v_max/ξ)² Σ_d β^{2d} Σ_j s_j² (K_{q,d,j} + σ²/E_s)²/M, each within z standard errors.

    v̂_q = const + Σ_l a_l Y_l with a_l = (v_max/ξ) β^d s_j (K_l + σ²/E_s) and Y_l = G_l/M,
    G_l ~ Gamma(M, 1) independent (κ2 = 1/M, κ4 = 6/M³): Var = Σ a²/M, and the sample variance has
    variance (μ4 − Var²)/N = (6 Σ a⁴/M³ + 2 Var²)/N. z: two-sided normal quantile for a family-wise
    α = 1e-4 over 2 moments × 2 SNRs × Q values.
    """
    beta, digits, vmax, n_dev, n_val = 3, 3, 2.0, 6, 3
    name = f"combining-{n_antennas}"
    values = np.random.default_rng(4).uniform(-vmax, vmax, (n_dev, n_val)).astype(np.float32)
    numerals = np.asarray(oac.encode(jnp.asarray(values), beta, digits, vmax))  # (K, Q, D)
    s = np.arange(beta) - (beta - 1) // 2
    counts = (numerals[..., None] == s).sum(0).astype(np.float64)  # (Q, D, β) K_{q,d,j}
    xi = (beta**digits - 1) // 2
    c = vmax / xi * (beta ** np.arange(digits))[:, None] * s  # (D, β)
    truth = np.sum(c * counts, axis=(1, 2))  # Σ_k of the quantised values
    snrs = (0.0, 30.0)
    z = stats.norm.isf(1e-4 / (2 * 2 * len(snrs) * n_val))

    @jax.jit
    def estimates(key, snr_db):
        run = lambda k: oac.over_the_air_sum(k, jnp.asarray(values), beta, digits, vmax, snr_db, name).estimate  # noqa: E731
        return jax.vmap(run)(jax.random.split(key, N_TRIALS))

    for i, snr_db in enumerate(snrs):
        sigma2 = 10 ** (-snr_db / 10)
        a = c * (counts + sigma2 / beta)
        var = np.sum(a**2, axis=(1, 2)) / n_antennas
        var_se = np.sqrt((6 * np.sum(a**4, axis=(1, 2)) / n_antennas**3 + 2 * var**2) / N_TRIALS)
        est = np.asarray(estimates(jax.random.key(i), snr_db), np.float64)
        mean_z = np.abs(est.mean(0) - truth) / np.sqrt(var / N_TRIALS)
        var_z = np.abs(est.var(0, ddof=1) - var) / var_se
        assert np.all(mean_z < z) and np.all(var_z < z), (snr_db, mean_z, var_z)
        formula = oac.channel.estimate_variance(counts.reshape(-1), beta, digits, vmax, sigma2, float(beta), name)
        np.testing.assert_allclose(formula, var, rtol=1e-5)


# --------------------------------------------------------------------------- a channel registered here, through the CLI
def _no_fading(key, numerals, beta, noise_var, symbol_energy, active):
    """A line-of-sight channel without fading: |y_l|² = E_s K_l + |w_l|², |w_l|² = σ² Exp(1)."""
    counts = oac.channel.resource_counts(numerals, beta, active).astype(jnp.result_type(symbol_energy))
    return symbol_energy * counts + noise_var * jax.random.exponential(key, counts.shape, counts.dtype)


def _no_fading_variance(counts, noise_var, symbol_energy):
    """Var K̂_l = (σ²/E_s)²: only the noise's energy fluctuates."""
    return jnp.zeros_like(counts) + jnp.square(noise_var / symbol_energy)


@pytest.mark.slow  # compiles four methods' trials and draws the figure (~50 s on 2 cores)
def test_channel_registered_outside_the_package_runs_through_the_cli(tmp_path):
    from jaxfed import cli
    from jaxfed.store.rundir import load_results

    oac.channel.register("test-no-fading", _no_fading, variance=_no_fading_variance)
    assert "test-no-fading" in oac.channel.names()
    small = [
        "rows=2",
        "cols=2",
        "n_points=60",
        "n_components=3",
        "n_clusters=3",
        "n_rounds=3",
        "snrs_db=10",
        "channel=test-no-fading",
    ]
    out = tmp_path / "run"
    args = ["run", "kmeans-convergence", "--trials", "2", "--out", str(out), "--quiet"]
    assert cli.main(args + [item for kv in small for item in ("--set", kv)]) == 0
    meta, results = load_results(str(out))
    assert meta["parameters"]["channel"] == "test-no-fading"
    assert np.isfinite(np.asarray(results["loss"])).all()
    with pytest.raises(
        ValueError, match="^unknown channel 'test-rayleigh'; choose one of: explicit, aggregate, .*test-no-fading"
    ):
        oac.channel.get("test-rayleigh")


def test_channel_registered_outside_the_package_runs_through_the_round():
    """The default suite's share of the CLI test above: the registered name configures the
    experiment and drives the oac back-end of a round; without noise its estimate is the quantised sum."""
    from jaxfed.experiment import make_config
    from jaxfed.experiments.kmeans import mall as kmeans_mall

    oac.channel.register("test-no-fading", _no_fading, variance=_no_fading_variance)
    cfg = make_config(kmeans_mall.ConvergenceConfig, {"channel": "test-no-fading"})
    assert cfg.channel == "test-no-fading"
    backend = aggregators.oac(cfg.channel, 3, 4, float("inf"))
    aggregate = jax.jit(
        lambda s: kmeans.federated_round(jax.random.key(0), jnp.asarray(INIT), DATA, 7, s)[1].aggregate,
        static_argnums=0,
    )
    np.testing.assert_allclose(
        aggregate(kmeans.Settings(backend)),
        aggregate(kmeans.Settings(aggregators.quantized(3, 4))),
        rtol=1e-5,
        atol=1e-3,
    )
    with pytest.raises(ValueError, match="^unknown channel 'wired'; choose one of: "):
        make_config(kmeans_mall.ConvergenceConfig, {"channel": "wired"})


@SLOW  # two more compilations of the round (~4 s)
def test_docs_examples_run():
    """docs/kmeans.md §B7's examples and the docstring examples of oac.channel.register and federated."""
    import doctest
    import re

    text = (pathlib.Path(__file__).parents[2] / "docs" / "kmeans.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text.split("## B7.")[1], re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/kmeans.md", "exec"), {})
    for fn in (oac.channel.register, kmeans.federated):
        finder = doctest.DocTestFinder().find(fn, fn.__name__, globs=vars(__import__(fn.__module__, fromlist=["_"])))
        for test in finder:
            assert doctest.DocTestRunner().run(test).failed == 0, fn.__name__
