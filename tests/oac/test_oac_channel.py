"""Over-the-air channel (docs/kmeans.md §B4): resource mapping, modes, energy detector and estimator statistics.

Monte Carlo tolerances come from the exact moments of the model, never from trying seeds: with
θ_l = E_s K_l + σ², |y_l|² = θ_l X_l with X_l ~ Exp(1) independent across resources.
"""

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxfed import jaxcompat
from jaxfed.jaxcompat import enable_x64
from jaxfed.oac import balanced, channel

BETA, DIGITS = 3, 3
N_DEV, N_VAL = 6, 3  # one shape throughout, so that each mode compiles once
ALL = np.ones(N_DEV, bool)
N_TRIALS = 20000

# Compiled once per (mode, dtype): compiling the explicit mode's random draws takes seconds on CPU.
ota = jax.jit(channel.over_the_air_sum, static_argnames=("beta", "digits", "mode"))


def quantised_sum(values, beta, digits, vmax, active=None):
    """Σ_k of the docs/kmeans.md §B3 quantised values, in float64 (independent of the library)."""
    xi = (beta**digits - 1) // 2
    clamped = np.clip(np.asarray(values, np.float64), -vmax, vmax)
    level = np.floor(xi * clamped / vmax + 0.5)  # n − ξ
    if active is not None:
        level = level * np.asarray(active)[:, None]
    return vmax / xi * level.sum(axis=0)


def counts_reference(values, beta, digits, vmax, active=None):
    """K_{q,d,j} by explicit loops over devices, values and digits (docs/kmeans.md §B3/B4)."""
    numerals = np.asarray(balanced.encode(jnp.asarray(values, jnp.float32), beta, digits, vmax))
    n_dev, n_val = numerals.shape[:2]
    counts = np.zeros(channel.n_resources(n_val, beta, digits), np.int64)
    for k in range(n_dev):
        if active is not None and not active[k]:
            continue
        for q in range(n_val):
            for d in range(digits):
                j = numerals[k, q, d] + (beta - 1) // 2
                counts[beta * digits * q + beta * d + j] += 1
    return counts


def fixed_values(n_dev, n_val, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n_dev, n_val)).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("mode",))
def monte_carlo(key, values, vmax, snr_db, mode, active, symbol_energy):
    """N_TRIALS independent rounds (β = BETA, D = DIGITS)."""
    keys = jax.random.split(key, N_TRIALS)
    run = lambda k: channel.over_the_air_sum(
        k, values, BETA, DIGITS, vmax, snr_db, mode, active=active, symbol_energy=symbol_energy
    )
    return jax.vmap(run)(keys)


# --------------------------------------------------------------------------- resources
def test_resource_count_and_mapping():
    assert channel.n_resources(20, 3, 4) == 240  # L·C·β·D for L = 2, C = 10
    assert channel.n_resources(1, 7, 2) == 14
    q, d, j = np.meshgrid(np.arange(4), np.arange(DIGITS), np.arange(BETA), indexing="ij")
    l = channel.resource_index(q, d, j, BETA, DIGITS).ravel()
    np.testing.assert_array_equal(l, np.arange(4 * DIGITS * BETA))  # a bijection onto 0..L−1
    # The document's inverse: q = ⌊l/(Dβ)⌋, d = ⌊l/β⌋ mod D, j = l mod β.
    np.testing.assert_array_equal(l // (DIGITS * BETA), q.ravel())
    np.testing.assert_array_equal((l // BETA) % DIGITS, d.ravel())
    np.testing.assert_array_equal(l % BETA, j.ravel())


def test_activation_and_counts_match_loops():
    values = fixed_values(N_DEV, N_VAL, 0)
    active = np.array([1, 1, 0, 1, 1, 0], bool)
    numerals = balanced.encode(jnp.asarray(values), BETA, DIGITS, 1.0)
    onehot = np.asarray(channel.activation(numerals, BETA, active))
    assert onehot.shape == (N_DEV, N_VAL * DIGITS * BETA)
    # Every active ED uses exactly one resource per (q, d); inactive EDs none.
    per_qd = onehot.reshape(N_DEV, N_VAL, DIGITS, BETA).sum(-1)
    np.testing.assert_array_equal(per_qd, np.broadcast_to(active[:, None, None], per_qd.shape))
    for act in (None, active):
        np.testing.assert_array_equal(
            channel.resource_counts(numerals, BETA, act), counts_reference(values, BETA, DIGITS, 1.0, act)
        )


@pytest.mark.parametrize("beta,n_dev", [(3, 1), (3, 1023), (3, 1024), (5, 64), (7, 15)])
def test_bit_field_counts_match_one_hot(beta, n_dev):
    """resource_counts packs 32 // bit_length(K) counts per word: check the word boundaries
    (β = 3 fits one word up to K = 1023 and needs two from 1024; β = 5 and 7 need several)."""
    rng = np.random.default_rng(n_dev * beta)
    numerals = rng.integers(-(beta // 2), beta // 2 + 1, (n_dev, 2, 2))
    numerals[:, 0, 0] = beta // 2  # one resource holds every ED: K_l = K
    numerals = jnp.asarray(numerals, jnp.int32)
    active = rng.random(n_dev) < 0.8
    for act in (None, active):
        expected = np.asarray(channel.activation(numerals, beta, act)).sum(axis=0)
        np.testing.assert_array_equal(channel.resource_counts(numerals, beta, act), expected)


def test_qpsk_symbols_uniform_and_unit_modulus():
    """All four symbols, each with frequency 1/4 within 5 s.e. (per cell, Bonferroni over 4 cells)."""
    r = np.asarray(channel.qpsk(jax.random.key(0), (200, 101)))
    assert r.dtype == np.complex64
    np.testing.assert_allclose(np.abs(r), 1.0, rtol=1e-6)
    cell = (r.real > 0).astype(int) + 2 * (r.imag > 0)
    freq = np.bincount(cell.ravel(), minlength=4) / r.size
    assert np.all(np.abs(freq - 0.25) < 5 * np.sqrt(0.25 * 0.75 / r.size)), freq
    # Neighbouring symbols (which share a random word) are independent: the four pair cells of
    # the real-part signs of consecutive symbols are equally likely.
    pair = (r.real.ravel()[:-1] > 0).astype(int) + 2 * (r.real.ravel()[1:] > 0)
    freq = np.bincount(pair, minlength=4) / pair.size
    assert np.all(np.abs(freq - 0.25) < 5 * np.sqrt(0.25 * 0.75 / pair.size)), freq


# --------------------------------------------------------------------------- ideal and noiseless
def test_ideal_mode_is_the_exact_quantised_sum():
    values = fixed_values(N_DEV, N_VAL, 1) * 1.3  # some beyond the range
    xi = (BETA**DIGITS - 1) // 2
    active = np.array([1, 0, 1, 1, 0, 1], bool)
    for act in (ALL, active):
        # v_max = ξ: the quantised values are integers and the estimate must be exact.
        out = ota(jax.random.key(0), values * xi, BETA, DIGITS, float(xi), 0.0, "ideal", active=act)
        np.testing.assert_array_equal(out.estimate, quantised_sum(values * xi, BETA, DIGITS, xi, act))
        counts = counts_reference(values * xi, BETA, DIGITS, float(xi), act)
        np.testing.assert_array_equal(out.energy, BETA * counts)
        # Any v_max: exact up to the final float32 scaling by v_max/ξ.
        out = ota(jax.random.key(0), values, BETA, DIGITS, 1.0, 0.0, "ideal", active=act)
        np.testing.assert_allclose(out.estimate, quantised_sum(values, BETA, DIGITS, 1.0, act), rtol=2**-21, atol=1e-7)
    # A v_max per value, ξ times powers of two: exact again.
    vmax = xi * np.array([1.0, 2.0, 4.0], np.float32)
    out = ota(jax.random.key(0), values * vmax, BETA, DIGITS, jnp.asarray(vmax), 0.0, "ideal", active=ALL)
    np.testing.assert_array_equal(out.estimate, quantised_sum(values * vmax, BETA, DIGITS, vmax))


@pytest.mark.parametrize("mode", ["explicit", "aggregate"])
def test_noiseless_energy_only_on_occupied_resources(mode):
    """At snr_db = +inf only resources with K_l > 0 receive energy; with every ED silent, none."""
    values = fixed_values(N_DEV, N_VAL, 2)
    counts = counts_reference(values, BETA, DIGITS, 1.0)
    out = ota(jax.random.key(3), values, BETA, DIGITS, 1.0, np.inf, mode, active=ALL)
    energy = np.asarray(out.energy)
    assert np.all(energy[counts == 0] == 0) and np.all(energy[counts > 0] > 0)
    silent = ota(jax.random.key(3), values, BETA, DIGITS, 1.0, np.inf, mode, active=np.zeros(N_DEV, bool))
    np.testing.assert_array_equal(silent.energy, 0.0)
    np.testing.assert_array_equal(silent.estimate, 0.0)


# --------------------------------------------------------------------------- explicit vs aggregate
def _energies(key, values, snr_db, mode, active, symbol_energy=float(BETA)):
    return np.asarray(monte_carlo(key, jnp.asarray(values), 1.0, snr_db, mode, active, symbol_energy).energy)


def test_explicit_and_aggregate_agree_in_distribution():
    """Two-sample KS test per count level K_l (Bonferroni over the levels, family-wise α = 1e-3);
    one-sample KS of the explicit energies normalised by E_s K_l + σ² against Exp(1) per level;
    and a negative control, aggregate with E_s = √β (the document's literal E_s) instead of β,
    that the same tests must reject."""
    values, snr_db = fixed_values(N_DEV, N_VAL, 3), 5.0
    active = np.array([1, 1, 1, 1, 1, 0], bool)
    counts = counts_reference(values, BETA, DIGITS, 1.0, active)
    levels = np.unique(counts)
    assert len(levels) >= 4  # the test covers several superposition sizes, 0 included
    alpha = 1e-3 / (2 * len(levels))
    sigma2 = 10 ** (-snr_db / 10)
    explicit = _energies(jax.random.key(10), values, snr_db, "explicit", active)
    aggregate = _energies(jax.random.key(11), values, snr_db, "aggregate", active)
    wrong = _energies(jax.random.key(12), values, snr_db, "aggregate", active, np.sqrt(BETA))
    wrong_p = []
    for level in levels:
        on = counts == level
        e, a, w = explicit[:, on].ravel(), aggregate[:, on].ravel(), wrong[:, on].ravel()
        assert stats.ks_2samp(e, a).pvalue > alpha, level
        assert stats.kstest(e / (BETA * level + sigma2), "expon").pvalue > alpha, level
        wrong_p.append(stats.ks_2samp(e, w).pvalue)
    assert all(p < alpha for p, level in zip(wrong_p, levels) if level > 0), wrong_p


# --------------------------------------------------------------------------- estimator moments
@pytest.mark.parametrize("mode", ["explicit", "aggregate"])
def test_estimator_unbiased_with_predicted_variance(mode):
    """At −10, 10 and 30 dB (E_s = β) and at 10 dB with E_s = √β (the overridable [choice]):
    mean(v̂_q) = the quantised sum within z s.e., and the sample variance
    = (v_max/ξ)² Σ_d β^{2d} Σ_j s_j² (K_{q,d,j} + σ²/E_s)² within z s.e.

    v̂_q = const + Σ_l a_l X_l with a_l = (v_max/ξ) β^d s_j (K_l + σ²/E_s) and X_l ~ Exp(1)
    independent (κ2 = 1, κ4 = 6): Var = Σ a², and the sample variance has variance
    (μ4 − Var²)/N = (6 Σ a⁴ + 2 (Σ a²)²)/N. z is the two-sided normal quantile for a family-wise
    α = 1e-4 over the 2 × 4 settings × Q comparisons of a mode.
    """
    n_val, vmax, n_trials = N_VAL, 2.0, N_TRIALS
    values = fixed_values(N_DEV, n_val, 4) * vmax
    xi = (BETA**DIGITS - 1) // 2
    counts = counts_reference(values, BETA, DIGITS, vmax).reshape(n_val, DIGITS, BETA).astype(np.float64)
    s = np.arange(BETA) - (BETA - 1) // 2
    c = vmax / xi * (BETA ** np.arange(DIGITS))[:, None] * s  # (D, β)
    truth = quantised_sum(values, BETA, DIGITS, vmax)
    settings = [(-10.0, BETA), (10.0, BETA), (30.0, BETA), (10.0, np.sqrt(BETA))]
    z = stats.norm.isf(1e-4 / (2 * 2 * len(settings) * n_val))
    for i, (snr_db, e_s) in enumerate(settings):
        sigma2 = 10 ** (-snr_db / 10)
        a = c * (counts + sigma2 / e_s)  # (Q, D, β)
        var = np.sum(a**2, axis=(1, 2))
        var_se = np.sqrt((6 * np.sum(a**4, axis=(1, 2)) + 2 * var**2) / n_trials)
        out = monte_carlo(jax.random.key(i), jnp.asarray(values), vmax, snr_db, mode, ALL, float(e_s))
        est = np.asarray(out.estimate, np.float64)
        mean_err = np.abs(est.mean(0) - truth)
        assert np.all(mean_err < z * np.sqrt(var / n_trials)), (snr_db, e_s, mean_err / np.sqrt(var / n_trials))
        var_err = np.abs(est.var(0, ddof=1) - var)
        assert np.all(var_err < z * var_se), (snr_db, e_s, var_err / var_se)


# --------------------------------------------------------------------------- dtypes, jit, vmap
def wide_arrays(jaxpr) -> set:
    """dtypes of the float64/complex128 arrays (not scalars) that a jaxpr computes, sub-jaxprs included."""
    found = set()
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            aval = var.aval
            if getattr(aval, "ndim", 0) > 0 and aval.dtype in (np.float64, np.complex128):
                found.add(str(aval.dtype))
        for sub in jaxcompat.jaxprs_in_params(eqn.params):  # (jax.extend.core's from JAX 0.7)
            found |= wide_arrays(sub)
    return found


@pytest.mark.parametrize("mode", channel.MODES)
def test_float32_by_default(mode):
    """complex64/float32 throughout, even with x64 enabled, for float32 values. (jax.random casts its
    own scalar parameters, so only arrays are inspected.)"""
    values = jnp.asarray(fixed_values(N_DEV, N_VAL, 5))
    out = ota(jax.random.key(0), values, BETA, DIGITS, 1.0, 10.0, mode, active=ALL)
    assert out.estimate.dtype == jnp.float32 and out.energy.dtype == jnp.float32
    assert out.estimate.shape == (N_VAL,) and out.energy.shape == (N_VAL * DIGITS * BETA,)
    with enable_x64(True):
        fn = lambda k, v: channel.over_the_air_sum(k, v, BETA, DIGITS, 1.0, 10.0, mode)
        closed = jax.make_jaxpr(fn)(jax.random.key(0), values)
        assert wide_arrays(closed.jaxpr) == set()
        if mode == "explicit":
            assert "c64" in str(closed)


@pytest.mark.parametrize("mode", channel.MODES)
def test_float64_on_request(mode):
    with enable_x64(True):
        values = jnp.asarray(fixed_values(N_DEV, N_VAL, 5), jnp.float64)
        out = ota(jax.random.key(0), values, BETA, DIGITS, 1.0, 10.0, mode, active=ALL)
        assert out.estimate.dtype == jnp.float64 and out.energy.dtype == jnp.float64
        if mode == "explicit":
            fn = lambda k, v: channel.over_the_air_sum(k, v, BETA, DIGITS, 1.0, 10.0, mode)
            assert "complex128" in wide_arrays(jax.make_jaxpr(fn)(jax.random.key(0), values).jaxpr)
        if mode == "ideal":
            np.testing.assert_allclose(out.estimate, quantised_sum(values, BETA, DIGITS, 1.0), rtol=1e-14)


@pytest.mark.parametrize("mode", channel.MODES)
def test_jit_and_vmap_agree_with_unbatched_calls(mode):
    """A call vmapped over keys and SNRs agrees with unbatched jitted calls, and these with eager
    calls (not in the explicit mode, whose op-by-op compilation alone takes seconds)."""
    values = jnp.asarray(fixed_values(N_DEV, N_VAL, 6))
    active = np.array([True, True, False, True, True, True])
    keys = jax.random.split(jax.random.key(7), 3)
    snrs = [-10.0, 0.0, 30.0]
    call = lambda k, s: channel.over_the_air_sum(k, values, BETA, DIGITS, 1.0, s, mode, active=active)
    batched = jax.jit(jax.vmap(call))(keys, jnp.asarray(snrs))
    for i, (key, snr_db) in enumerate(zip(keys, snrs)):
        ref = ota(key, values, BETA, DIGITS, 1.0, snr_db, mode, active=active)
        others = [jax.tree.map(lambda x: x[i], batched)] + ([] if mode == "explicit" else [call(key, snr_db)])
        for got in others:
            np.testing.assert_allclose(got.energy, ref.energy, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got.estimate, ref.estimate, rtol=1e-5, atol=1e-5)


def test_estimate_sum_accepts_leading_axes():
    counts_hat = jnp.asarray(np.random.default_rng(0).normal(size=(4, 2 * DIGITS * BETA)), jnp.float32)
    batched = channel.estimate_sum(counts_hat, BETA, DIGITS, 1.5)
    assert batched.shape == (4, 2)
    np.testing.assert_allclose(batched[2], channel.estimate_sum(counts_hat[2], BETA, DIGITS, 1.5), rtol=1e-6)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"beta": 4}, "beta"),
        ({"beta": 1}, "beta"),
        ({"digits": 0}, "digits"),
        ({"beta": 3, "digits": 20}, "int32"),
        ({"mode": "coherent"}, "unknown channel 'coherent'; choose one of: explicit, aggregate, ideal"),
        ({"snr_db": 1000.0}, "decibels"),
        ({"snr_db": float("nan")}, "decibels"),
        ({"snr_db": -np.inf}, "decibels"),
        ({"snr_db": jnp.zeros(2)}, "scalar"),
        ({"values": jnp.zeros(3)}, "values"),
        ({"vmax": jnp.ones((4, 3))}, "vmax"),
        ({"active": jnp.ones(3, bool)}, "active"),
    ],
)
def test_invalid_arguments(kwargs, match):
    args = dict(key=jax.random.key(0), values=jnp.zeros((4, 3)), beta=3, digits=2, vmax=1.0, snr_db=10.0)
    args["mode"] = "aggregate"
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        channel.over_the_air_sum(**args)


def test_other_validation():
    with pytest.raises(ValueError, match="n_values"):
        channel.n_resources(0, 3, 2)
    with pytest.raises(ValueError, match="beta"):
        channel.resource_index(0, 0, 0, 2, 2)
    with pytest.raises(ValueError, match="counts_hat"):
        channel.estimate_sum(jnp.zeros(7), 3, 2, 1.0)


def test_onehot_and_scatter_superposition_agree():
    """The GPU default (one-hot reduction over EDs) and the CPU default (scatter-add) form the same
    sum in another order."""
    numerals = jax.random.randint(jax.random.key(3), (50, 6, 3), -1, 2)
    active = jax.random.bernoulli(jax.random.key(4), 0.8, (50,))
    args = (jax.random.key(5), numerals, 3, jnp.float32(0.1), jnp.float32(3.0), active)
    scatter = channel.explicit_energy(*args, superpose="scatter")
    onehot = channel.explicit_energy(*args, superpose="onehot")
    np.testing.assert_allclose(onehot, scatter, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="superpose"):
        channel.explicit_energy(*args, superpose="fft")


# --------------------------------------------------------------------------- no silent garbage
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"vmax": 0.0}, "vmax must be finite and > 0"),
        ({"vmax": -1.0}, "vmax must be finite and > 0"),
        ({"vmax": np.inf}, "vmax must be finite and > 0"),
        ({"vmax": np.nan}, "vmax must be finite and > 0"),
        ({"vmax": jnp.array([1.0, 0.0, 1.0])}, "vmax must be finite and > 0"),
        ({"symbol_energy": 0.0}, "symbol_energy must be finite and > 0"),
        (
            {"values": jnp.zeros((4, 3)).at[1, 2].set(jnp.nan)},
            r"values must be finite, got \[0.0, 0.0, nan\] at index 1",
        ),
        ({"values": jnp.zeros((4, 3)).at[0, 0].set(jnp.inf)}, "values must be finite"),
        ({"values": jnp.zeros((0, 3))}, "at least one ED"),
    ],
)
def test_bad_concrete_inputs_raise(kwargs, match):
    args = dict(key=jax.random.key(0), values=jnp.zeros((4, 3)), beta=3, digits=2, vmax=1.0, snr_db=10.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        channel.over_the_air_sum(**args)


def test_bad_traced_inputs_give_nan_not_numbers(mode="aggregate"):
    """Under jit nothing can raise: a bad v_max, E_s or SNR makes every estimate NaN, a NaN or
    infinite value of an active ED makes its own estimate NaN (and nothing else)."""
    values = jnp.asarray(fixed_values(N_DEV, N_VAL, 5))

    @jax.jit
    def run(values, vmax, snr_db, symbol_energy):
        return channel.over_the_air_sum(
            jax.random.key(0), values, BETA, DIGITS, vmax, snr_db, mode, symbol_energy=symbol_energy
        ).estimate

    good = np.asarray(run(values, 2.0, 20.0, 3.0))
    assert np.isfinite(good).all()
    for vmax, snr_db, e_s in [
        (0.0, 20.0, 3.0),
        (-1.0, 20.0, 3.0),
        (np.inf, 20.0, 3.0),
        (np.nan, 20.0, 3.0),
        (2.0, np.nan, 3.0),
        (2.0, -np.inf, 3.0),
        (2.0, -300.0, 3.0),
        (2.0, 20.0, 0.0),
    ]:
        assert np.isnan(run(values, vmax, snr_db, e_s)).all(), (vmax, snr_db, e_s)
    assert np.isfinite(run(values, 2.0, np.inf, 3.0)).all()  # +inf dB: no noise, allowed
    for bad in (np.nan, np.inf, -np.inf):
        out = np.asarray(run(values.at[2, 1].set(bad), 2.0, 20.0, 3.0))
        assert np.isnan(out[1]) and np.isfinite(out[[0, 2]]).all(), (bad, out)
    # An inactive ED's values are not sent: its NaN poisons nothing.
    inactive = jax.jit(
        lambda v: (
            channel.over_the_air_sum(
                jax.random.key(0), v, BETA, DIGITS, 2.0, 20.0, mode, active=jnp.arange(N_DEV) != 2
            ).estimate
        )
    )
    assert np.isfinite(inactive(values.at[2, 1].set(np.nan))).all()


def test_estimate_variance_is_the_formula():
    """estimate_variance against the formula written out with the reference counts (the same
    expression the Monte Carlo test above checks the estimator's sample variance against)."""
    vmax = 2.0
    values = fixed_values(N_DEV, N_VAL, 4) * vmax
    xi = (BETA**DIGITS - 1) // 2
    counts = counts_reference(values, BETA, DIGITS, vmax)
    s = np.arange(BETA) - (BETA - 1) // 2
    c = vmax / xi * (BETA ** np.arange(DIGITS))[:, None] * s
    for sigma2, e_s in [(0.1, 3.0), (1e-3, np.sqrt(3.0)), (0.0, 3.0)]:
        expected = np.sum((c * (counts.reshape(N_VAL, DIGITS, BETA) + sigma2 / e_s)) ** 2, axis=(1, 2))
        got = channel.estimate_variance(jnp.asarray(counts), BETA, DIGITS, vmax, sigma2, e_s)
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    # The noise-free limit keeps the fading's self-noise: > 0 whenever a nonzero numeral is sent.
    floor = np.asarray(channel.estimate_variance(jnp.asarray(counts), BETA, DIGITS, vmax, 0.0, 3.0))
    assert np.all(floor > 0)
