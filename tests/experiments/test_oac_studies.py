"""The OAC k-means studies of issue 26 (docs/kmeans.md §B9–B10): the impairment channels' detector
moments against their derived formulas, bad parameters, the count back-end of a round, and (slow)
the two experiments end to end.

Monte Carlo tolerances follow from the sample size N: a sample mean is within z·√(Var/N) of the
formula's mean (Var the formula's variance), a sample variance within z·√((μ₄ − Var²)/N) of the
formula's (μ₄ the fourth central moment: 9 Var² exactly for an exponential energy, otherwise the
sample's own), and a sample covariance within z·sd(centred products)/√N; z is the two-sided normal
quantile for a family-wise α = 1e-4 over each test's comparisons.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxfed import cli, oac
from jaxfed.experiment import make_config
from jaxfed.experiments.kmeans import channels as kmeans_channels
from jaxfed.experiments.kmeans import counts as kmeans_counts
from jaxfed.experiments.kmeans import trials as kmeans_trials
from jaxfed.oac import channel, impairments, kmeans

BETA, N_DEV, N_VAL, DIGITS = 3, 12, 2, 2
N = 20000
NOISE, E_S = 0.1, 3.0  # σ², E_s: a = σ²/E_s = 1/30
A = NOISE / E_S
NUMERALS = jnp.asarray(np.random.default_rng(0).integers(-1, 2, (N_DEV, N_VAL, DIGITS)), jnp.int32)
COUNTS = np.asarray(channel.resource_counts(NUMERALS, BETA), np.float64)  # K_l, L = 12 resources
ONEHOT = np.asarray(channel.activation(NUMERALS, BETA), np.float64)  # (K, L): ED k active on l


def z_for(n_comparisons: int) -> float:
    return float(stats.norm.isf(1e-4 / (2 * n_comparisons)))


def detected(name: str, param_axes: dict, fixed: dict | None = None, seed: int = 0) -> np.ndarray:
    """K̂ (P, N, L): N rounds of the channel ``name`` for each of P values of the traced parameters."""
    model = oac.resolve_channel(name)

    def one(key, params):
        m = model.with_params(**params, **(fixed or {}))
        energy = m.received_energy(key, NUMERALS, BETA, jnp.float32(NOISE), jnp.float32(E_S), None)
        return m.detected_counts(energy, NOISE, E_S)

    keys = jax.random.split(jax.random.key(seed), N)
    run = jax.jit(jax.vmap(jax.vmap(one, (0, None)), (None, 0)))
    params = {k: jnp.asarray(v, jnp.float32) for k, v in param_axes.items()}
    return np.asarray(run(keys, params), np.float64)


def assert_moments(x, mean, var, z, fourth=None, what=""):
    """Sample mean and variance of x (N, L) against the formulas (L,); ``fourth``: the exact μ₄."""
    n = x.shape[0]
    m, v = x.mean(0), x.var(0, ddof=1)
    mu4 = ((x - m) ** 4).mean(0) if fourth is None else fourth
    assert np.all(np.abs(m - mean) < z * np.sqrt(var / n)), (what, (m - mean) / np.sqrt(var / n))
    se = np.sqrt(np.maximum(mu4 - var**2, 1e-12) / n)
    assert np.all(np.abs(v - var) < z * se), (what, (v - var) / se)


# --------------------------------------------------------------------------- detector moments
def test_power_control_detector_estimates_the_gained_count_with_the_derived_moments():
    """Gains drawn per round: E K̂_l = m₁ K_l, Var K̂_l = 2 K_l (m₂ − m₁²) + (m₁ K_l + a)² at s = 0, 3, 6
    dB (s = 0: Rayleigh); the bias is visible (the mean differs from K_l). Fixed gains g: E K̂_l = G_l,
    Var K̂_l = (G_l + a)², μ₄ = 9 Var² (an exponential energy)."""
    spreads = [0.0, 3.0, 6.0]
    x = detected("power-control", {"spread_db": spreads})
    z = z_for(2 * len(spreads) * COUNTS.size + 2 * COUNTS.size + 1)
    for s, xs in zip(spreads, x):
        mean = np.asarray(impairments.power_control_mean(COUNTS, s))
        var = np.asarray(impairments.power_control_variance(COUNTS, NOISE, E_S, s))
        assert_moments(xs, mean, var, z, what=f"s = {s} dB")
        np.testing.assert_allclose(mean, np.exp((s * np.log(10) / 10) ** 2 / 2) * COUNTS, rtol=1e-6)
    biased = x[1].mean(0) - COUNTS  # s = 3 dB: m₁ = 1.269, a bias of 0.27 K_l
    busy = COUNTS >= 3
    var3 = np.asarray(impairments.power_control_variance(COUNTS, NOISE, E_S, 3.0))
    assert np.all(biased[busy] > z * np.sqrt(var3[busy] / N)), biased
    gains = np.exp(np.random.default_rng(1).normal(0, 0.5, N_DEV)).astype(np.float32)
    fixed = detected("power-control", {"spread_db": [3.0]}, {"gain": jnp.asarray(gains)}, seed=1)[0]
    gained = ONEHOT.T @ gains  # G_l
    var = (gained + A) ** 2
    assert_moments(fixed, gained, var, z, fourth=9 * var**2, what="fixed gains")


def test_rician_detector_is_unbiased_with_the_derived_variance():
    """E K̂_l = K_l, Var K̂_l = (K_l + a)² − p² K_l (p = κ/(κ+1)) at κ = 0, 1, 10, 100; at κ = 10 the
    sample variance is far from Rayleigh's (K_l + a)² where K_l >= 4 (the test can tell them apart)."""
    kappas = [0.0, 1.0, 10.0, 100.0]
    x = detected("rician-fading", {"k_factor": kappas})
    z = z_for(2 * len(kappas) * COUNTS.size + 1)
    for kappa, xk in zip(kappas, x):
        var = np.asarray(impairments.rician_variance(COUNTS, NOISE, E_S, kappa), np.float64)
        np.testing.assert_allclose(var, (COUNTS + A) ** 2 - (kappa / (kappa + 1)) ** 2 * COUNTS, rtol=1e-5)
        assert_moments(xk, COUNTS, var, z, what=f"κ = {kappa}")
    busy = COUNTS >= 4
    v = x[2].var(0, ddof=1)[busy]
    rayleigh = (COUNTS[busy] + A) ** 2
    se = np.sqrt((((x[2] - x[2].mean(0)) ** 4).mean(0)[busy] - v**2) / N)
    assert np.all(rayleigh - v > z * se), (rayleigh - v) / se


def test_block_fading_keeps_rayleigh_marginals_and_correlates_resources_within_a_block():
    """E K̂_l = K_l, Var K̂_l = (K_l + a)² (μ₄ = 9 Var²) for B = 1, βD, L; Cov(K̂_l, K̂_l′) = n_ll′
    (EDs active on both) within a block, 0 otherwise. A traced B gives the same energies as the
    concrete one."""
    n_res = COUNTS.size
    blocks = [1.0, float(BETA * DIGITS), float(n_res)]  # i.i.d., a value's resources, the round's
    x = detected("block-fading", {"block": blocks})
    shared = ONEHOT.T @ ONEHOT  # n_ll′
    pairs = ~np.eye(n_res, dtype=bool)
    z = z_for(len(blocks) * (2 * n_res + int(pairs.sum())))
    var = (COUNTS + A) ** 2
    for block, xb in zip(blocks, x):
        assert_moments(xb, COUNTS, var, z, fourth=9 * var**2, what=f"B = {block}")
        same = (np.arange(n_res)[:, None] // int(block)) == (np.arange(n_res)[None, :] // int(block))
        expected = np.where(same, shared, 0.0)
        c = xb - xb.mean(0)
        cov = c.T @ c / (N - 1)
        se = np.sqrt(np.einsum("ni,nj->ij", c**2, c**2) / N - cov**2) / np.sqrt(N)
        assert np.all(np.abs(cov - expected)[pairs] < (z * se)[pairs]), (block, ((cov - expected) / se)[pairs].max())
    assert np.any(np.where(same, shared, 0.0)[pairs] > 0)  # the whole-round block does correlate resources
    model = oac.resolve_channel("block-fading")
    args = (NUMERALS, BETA, jnp.float32(NOISE), jnp.float32(E_S), None)
    key = jax.random.key(3)
    concrete = jax.jit(lambda: model.with_params(block=6.0).received_energy(key, *args))()  # B a Python number
    traced = jax.jit(lambda b: model.with_params(block=b).received_energy(key, *args))(jnp.float32(6.0))
    np.testing.assert_allclose(traced, concrete, rtol=1e-6)
    bad = jax.jit(lambda b: model.with_params(block=b).received_energy(key, *args))(jnp.float32(5.0))
    assert np.all(np.isnan(bad))  # a traced block that does not divide L = 12


# --------------------------------------------------------------------------- bad parameters
@pytest.mark.parametrize(
    "spec, match",
    [
        ("power-control:spread_db=-1", r"^spread_db must be finite and >= 0, got -1.0$"),
        ("rician-fading:k_factor=-0.5", r"^k_factor must be finite and >= 0, got -0.5$"),
        ("block-fading:block=0", r"^block must be an integer >= 1"),
        ("block-fading:block=2.5", r"^block must be an integer >= 1"),
    ],
)
def test_a_bad_channel_parameter_is_one_line_naming_it(spec, match):
    with pytest.raises(ValueError, match=match) as err:
        oac.resolve_channel(spec)
    assert "\n" not in str(err.value)


def test_a_block_that_does_not_divide_the_resources_is_refused_where_the_resources_are_known():
    values = jnp.zeros((4, 2))  # Q = 2, β = 3, D = 2: L = 12
    with pytest.raises(ValueError, match=r"^block must be a divisor of the 12 resources of a round"):
        oac.over_the_air_sum(jax.random.key(0), values, 3, 2, 1.0, 20.0, "block-fading:block=5")
    with pytest.raises(ValueError, match=r"^blocks must be integers >= 1 dividing the 240 resources"):
        make_config(kmeans_channels.ChannelsConfig, {"blocks": "1,7"})


@pytest.mark.parametrize(
    "setting, match",
    [
        ("spreads_db=0,-1", "spreads_db must be finite and >= 0"),
        ("k_factors=0,-2", "k_factors must be finite and >= 0"),
        ("blocks=1,7", "blocks must be integers >= 1 dividing the 240 resources"),
        ("channel=rician-fading --set channel_sweep=k_factor=1,2", "channel_sweep must be empty"),
    ],
)
def test_the_channels_study_refuses_bad_values_in_one_line_before_any_work(setting, match, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["run", "kmeans-channels", "--set", *setting.split(" "), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and match in err, err
    assert not out.exists()


def test_a_channel_sweep_checks_every_value():
    with pytest.raises(ValueError, match="k_factor must be finite and >= 0, got -1.0"):
        make_config(kmeans_trials.MallConfig, {"channel": "rician-fading", "channel_sweep": "k_factor=0,-1"})


# --------------------------------------------------------------------------- counts through a back-end
def test_a_count_back_end_replaces_the_sizes_the_server_reads():
    """count_aggregator=None is the exact count; ideal() gives the same round; quantized(β, D) makes
    the ES read Σ_k Q(|S_{k,c}|) with v_max = the largest per-ED count."""
    rng = np.random.default_rng(2)
    points = rng.uniform(0, 10, (60, 2)).astype(np.float32)
    data = kmeans.flat_data(points, rng.integers(0, 5, 60))
    init = jnp.asarray(points[:3])
    key = jax.random.key(0)

    def round_with(count_aggregator):
        s = kmeans.Settings(oac.aggregators.ideal(), count_aggregator=count_aggregator, reinit=False)
        return jax.jit(lambda k: kmeans.federated_round(k, init, data, 5, s))(key)

    exact, info = round_with(None)
    assert info.estimated_sizes is None
    same, info_ideal = round_with(oac.aggregators.ideal())
    np.testing.assert_array_equal(same, exact)
    np.testing.assert_array_equal(info_ideal.estimated_sizes, info.cluster_sizes)
    _, info_q = round_with(oac.aggregators.quantized(3, 1))  # levels {−v_max, 0, v_max}
    counts, _ = kmeans.local_statistics(data, init, 5)
    vmax = float(np.max(counts))
    expected = np.sum(np.asarray(oac.balanced.quantize(counts, 3, 1, vmax)), axis=0)
    np.testing.assert_allclose(info_q.estimated_sizes, expected, rtol=1e-6)
    np.testing.assert_array_equal(info_q.cluster_sizes, info.cluster_sizes)
    with pytest.raises(ValueError, match="count_aggregator must be None"):
        kmeans.federated_rounds(key, data, 5, init, 2, kmeans.Settings(count_aggregator="oac"))


def test_the_counts_study_counts_its_resources():
    cfg = make_config(kmeans_counts.CountsConfig, {})
    res = kmeans_counts.resources(cfg)
    # L·C·β·D = 2·10·3·4; C·K·⌈log2 2001⌉/2 = 10·100·11/2; C·β·D_c = 10·3·4; K·11/2
    assert res == {"changes": 240, "orthogonal counts": 5500.0, "OAC counts": 120, "count v_max reports": 550.0}


# --------------------------------------------------------------------------- the experiments (slow)
SMALL = ["--set", "n_points=300", "--set", "n_rounds=5", "--set", "rows=3", "--set", "cols=3", "--trials", "12"]


@pytest.mark.slow  # compiles two k-means programs
def test_the_counts_study_runs_reports_and_replots(tmp_path):
    out = tmp_path / "counts"
    assert cli.main(["run", "kmeans-oac-counts", *SMALL, "--out", str(out), "--quiet"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert sum(lab["counts"] == "oac" for lab in config["points"]) == 4  # 3 SNRs with re-init, one without
    metrics = np.load(out / "metrics.npz")
    exact = [i for i, lab in enumerate(config["points"]) if lab["counts"] == "exact"]
    assert np.all(metrics["count_error"][exact] == 0) and np.all(metrics["spurious_reinits"][exact] == 0)
    report = (out / "report.md").read_text()
    assert "OAC counts ≈ exact counts at 20 dB" in report and "count v_max reports" in report
    assert cli.main(["plot", str(out)]) == 0


@pytest.mark.slow  # compiles four k-means programs
def test_the_channels_study_runs_and_reports_every_channel(tmp_path):
    out = tmp_path / "channels"
    args = ["run", "kmeans-channels", *SMALL, "--set", "blocks=1,24", "--out", str(out), "--quiet"]
    assert cli.main(args) == 0
    config = json.loads((out / "config.json").read_text())
    assert {lab["channel"] for lab in config["points"]} == {"power-control", "rician-fading", "block-fading"}
    assert np.all(np.isfinite(np.load(out / "metrics.npz")["loss"]))
    report = (out / "report.md").read_text()
    for claim in ("power control: final loss with s = 3 dB above s = 0", "Rician κ = 10 ≈ Rayleigh", "recovers loss"):
        assert claim in report
