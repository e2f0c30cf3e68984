import itertools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

from jaxfed.gfvl import expfam
from jaxfed.gfvl.expfam import BETA, beta_kl, beta_natural
from jaxfed.jaxcompat import enable_x64


def kl_by_quadrature(a1, b1, a2, b2):
    """Reference KL(Beta(a1,b1) ‖ Beta(a2,b2)) = ∫ p log(p/q) dθ by tanh-sinh quadrature at 40 digits.

    Independent of the library: mpmath's Beta function and quadrature, split at the mode region.
    """
    with mpmath.workdps(40):
        a1, b1, a2, b2 = (mpmath.mpf(float(x)) for x in (a1, b1, a2, b2))
        log_norm_p, log_norm_q = mpmath.log(mpmath.beta(a1, b1)), mpmath.log(mpmath.beta(a2, b2))

        def integrand(t):
            if not 0 < t < 1:  # the nodes nearest the ends round to 0 or 1; their mass is < 1e-30
                return mpmath.mpf(0)
            log_p = (a1 - 1) * mpmath.log(t) + (b1 - 1) * mpmath.log1p(-t) - log_norm_p
            log_q = (a2 - 1) * mpmath.log(t) + (b2 - 1) * mpmath.log1p(-t) - log_norm_q
            return mpmath.exp(log_p) * (log_p - log_q)

        mean = a1 / (a1 + b1)
        sd = mpmath.sqrt(a1 * b1 / ((a1 + b1) ** 2 * (a1 + b1 + 1)))
        cuts = sorted(
            {mpmath.mpf(0), max(mean - 8 * sd, mpmath.mpf(0)), mean, min(mean + 8 * sd, mpmath.mpf(1)), mpmath.mpf(1)}
        )
        return float(mpmath.quad(integrand, cuts))


SHAPES = [0.5, 2.0, 30.0, 700.0]
PERTURB = [(1.0, 1.0005), (1.02, 0.99), (1.5, 1.0), (0.3, 2.0)]
GRID = [(a, b, a * fa, b * fb) for (a, b), (fa, fb) in itertools.product(itertools.product(SHAPES, SHAPES), PERTURB)]


# slow (11 s): float64 quadrature over the whole grid
@pytest.mark.slow
def test_beta_kl_matches_quadrature_float64():
    ref = np.array([kl_by_quadrature(*c) for c in GRID])
    with enable_x64(True):
        got = np.asarray(beta_kl(*[jnp.asarray([c[i] for c in GRID], jnp.float64) for i in range(4)]))
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_beta_kl_float32_accurate_near_convergence():
    """In float32 the KL is accurate to ~1e-3 relative down to 1e-9.

    Reference: the same float32-rounded parameters in float64 (the rounding of the *inputs*
    changes small divergences noticeably, which is not the KL's error).
    """
    rng = np.random.default_rng(0)
    a = np.float32(10 ** rng.uniform(-1, 3.5, 400))
    b = np.float32(10 ** rng.uniform(-1, 3.5, 400))
    step = 10 ** rng.uniform(-5, 0, (2, 400)) * rng.choice([-1, 1], (2, 400))
    a2 = np.float32(a * np.exp(step[0]))
    b2 = np.float32(b * np.exp(step[1]))
    cases = np.array([[702, 302, 702, 302.05], [632, 272, 702, 302], [2, 2, 702, 302]], np.float32)
    a, b, a2, b2 = (np.concatenate([x, cases[:, i]]) for i, x in enumerate((a, b, a2, b2)))
    got = np.asarray(beta_kl(a, b, a2, b2), np.float64)
    with enable_x64(True):
        ref = np.asarray(beta_kl(*(jnp.asarray(x, jnp.float64) for x in (a, b, a2, b2))))
    keep = ref > 1e-9
    assert keep.sum() > 350
    rel = np.abs(got[keep] - ref[keep]) / ref[keep]
    assert rel.max() < 1e-3, rel.max()
    # The naive formula fails exactly here: it is off by orders of magnitude.
    naive = float(expfam.kl_direct(BETA, beta_natural(702.0, 302.0), beta_natural(702.0, 302.05)))
    assert abs(naive - 2.9e-6) > 1e-5


def test_beta_kl_zero_on_equal_arguments_and_broadcasts():
    a = jnp.asarray([0.3, 2.0, 700.0, 1e4])
    assert np.all(np.asarray(beta_kl(a, a[::-1], a, a[::-1])) == 0.0)
    out = beta_kl(jnp.ones((3, 1)) * 2.0, 3.0, jnp.asarray([1.0, 2.0, 4.0]), 3.0)
    assert out.shape == (3, 3) and np.all(np.asarray(out)[:, 1] == 0.0) and np.all(np.asarray(out) >= 0)


def test_beta_kl_for_far_apart_parameters():
    # Shape ratios of 1e6, beyond what the generic quadrature resolves: the closed form has no such limit.
    with enable_x64(True):
        got = float(beta_kl(jnp.float64(1e4), 1e4, 0.01, 0.01))
    assert got == pytest.approx(kl_by_quadrature(1e4, 1e4, 0.01, 0.01), rel=1e-6)


def test_fisher_is_hessian_of_log_partition_and_mean_is_gradient():
    with enable_x64(True):
        for a, b in [(0.7, 3.0), (2.0, 2.0), (700.0, 300.0)]:
            eta = jnp.asarray([a, b])
            np.testing.assert_allclose(BETA.mean(eta), jax.grad(BETA.log_partition)(eta), rtol=1e-10)
            # central finite differences of A, step relative to the shapes
            h = 1e-4 * eta
            fd = np.zeros((2, 2))
            for i, j in itertools.product(range(2), range(2)):
                ei, ej = np.eye(2)[i] * h[i], np.eye(2)[j] * h[j]
                fd[i, j] = (
                    BETA.log_partition(eta + ei + ej)
                    - BETA.log_partition(eta + ei - ej)
                    - BETA.log_partition(eta - ei + ej)
                    + BETA.log_partition(eta - ei - ej)
                ) / (4 * h[i] * h[j])
            np.testing.assert_allclose(BETA.fisher(eta), fd, rtol=1e-5)
            d = jnp.asarray([0.3, -1.7])
            assert float(BETA.fisher_quadratic(eta, d)) == pytest.approx(float(d @ BETA.fisher(eta) @ d), rel=1e-10)


def test_log_prob_is_the_beta_density():
    theta = jnp.asarray([0.05, 0.4, 0.93])
    got = expfam.log_prob(BETA, beta_natural(2.5, 4.0), theta)
    np.testing.assert_allclose(got, stats.beta(2.5, 4.0).logpdf(np.asarray(theta)), rtol=1e-5)


def test_mean_parameters_are_expected_sufficient_statistics():
    eta = beta_natural(3.0, 5.0)
    theta = BETA.sample(jax.random.key(0), eta, (200_000,))
    t = np.asarray(BETA.sufficient_stats(theta), np.float64)
    se = t.std(0) / np.sqrt(t.shape[0])
    assert np.all(np.abs(t.mean(0) - np.asarray(BETA.mean(eta))) < 4 * se)


def test_project_keeps_domain():
    out = np.asarray(BETA.project(jnp.asarray([[-5.0, 2.0], [0.0, 1e-9]])))
    assert np.all(out >= expfam.BETA_MIN_SHAPE) and out[0, 1] == 2.0


# --------------------------------------------------------------------------- stated accuracies
def _kl_closed_form_50_digits(a1, b1, a2, b2):
    """log B(a2, b2) − log B(a1, b1) + (a1 − a2)ψ(a1) + (b1 − b2)ψ(b1) + (a2 − a1 + b2 − b1)ψ(a1 + b1) at
    50 digits, where its cancellation is harmless (the quadrature reference above misses mass near θ = 0 or 1
    when a shape is well below 1: off by 5× at shapes (17.8, 0.107))."""
    with mpmath.workdps(50):
        a1, b1, a2, b2 = (mpmath.mpf(float(x)) for x in (a1, b1, a2, b2))
        return float(
            mpmath.log(mpmath.beta(a2, b2))
            - mpmath.log(mpmath.beta(a1, b1))
            + (a1 - a2) * mpmath.digamma(a1)
            + (b1 - b2) * mpmath.digamma(b1)
            + (a2 - a1 + b2 - b1) * mpmath.digamma(a1 + b1)
        )


def _beta_kl_cases():
    """400 random pairs (shapes 0.1 .. 3000, each changed by a factor up to e) and 48 with a shape changing
    10- to 9000-fold (boundary ratios up to _GRADED_LIMIT = 1e4), exact in float32."""
    rng = np.random.default_rng(0)
    a, b = (np.float32(10 ** rng.uniform(-1, 3.5, 400)) for _ in range(2))
    step = 10 ** rng.uniform(-5, 0, (2, 400)) * rng.choice([-1, 1], (2, 400))
    near = np.stack([a, b, np.float32(a * np.exp(step[0])), np.float32(b * np.exp(step[1]))], -1)
    far = [
        case
        for s in (0.5, 2.0, 30.0)
        for r in (10.0, 100.0, 1e3, 9e3)
        for case in ((s, s, s * r, s), (s * r, s, s, s), (s, 2 * s, s * r, 2 * s * r), (s * r, s * r, s, s))
    ]
    return np.concatenate([near, np.array(far, np.float32)]).astype(np.float64), len(near)


@pytest.mark.parametrize(
    "dtype, rtol, rtol_large", [(jnp.float32, 8e-6, 1e-6), (jnp.float64, 1e-12, 1e-13)], ids=["float32", "float64"]
)
def test_beta_kl_meets_its_stated_accuracy(dtype, rtol, rtol_large):
    """expfam.kl for the Beta (its closed form, expfam.beta._beta_kl) within the bounds jaxfed.gfvl.expfam states, for
    KL >= 1e-9, and tighter where every shape is at least 4 (measured worst: 4.1e-6 / 3.8e-14 overall on JAX
    0.6.2 and 0.10.2, 5.6e-6 / 2.6e-14 on JAX 0.12.1, whose XLA rounds float32 log and log1p differently, at
    shapes (0.2455, 6.944) against (0.2455, 2.999); 4.3e-7 / 2.1e-15 with shapes >= 4 on all three; the
    quadrature it replaced: 9.6e-6 / 2.9e-14 overall)."""
    cases, _ = _beta_kl_cases()
    ref = np.array([_kl_closed_form_50_digits(*c) for c in cases])
    with enable_x64(dtype == jnp.float64):
        got = np.asarray(beta_kl(*(jnp.asarray(cases[:, i], dtype) for i in range(4))), np.float64)
    keep = ref > 1e-9
    assert keep.sum() > 420
    rel = np.where(keep, np.abs(got - ref) / np.where(keep, ref, 1.0), 0.0)
    assert rel.max() < rtol, (rel.max(), cases[np.argmax(rel)])
    large = cases.min(axis=1) >= 4
    assert large.sum() > 100
    assert rel[large].max() < rtol_large, (rel[large].max(), cases[large][np.argmax(rel[large])])


def test_beta_kl_agrees_with_the_integral_form():
    """The closed form and the generic quadrature (kl_integral, the Fisher quadratic integrated) are two
    independent computations of one divergence: in float64 they agree to 1e-12 relative on the stated cases
    whose boundary ratios the quadrature resolves."""
    cases, n_near = _beta_kl_cases()
    with enable_x64(True):
        eta1 = beta_natural(jnp.asarray(cases[:n_near, 0]), jnp.asarray(cases[:n_near, 1]))
        eta2 = beta_natural(jnp.asarray(cases[:n_near, 2]), jnp.asarray(cases[:n_near, 3]))
        closed = np.asarray(expfam.kl(BETA, eta1, eta2))
        integral = np.asarray(expfam.kl_integral(BETA, eta1, eta2))
    keep = integral > 1e-9
    np.testing.assert_allclose(closed[keep], integral[keep], rtol=1e-12)


def test_beta_log_partition_is_accurate_to_its_terms():
    """log B(a, b) = log Γ(a) + log Γ(b) − log Γ(a + b) in float64 within 16 ulps of Σ|log Γ| (measured 13), for
    shapes 1e-3 .. 1e5 (on this grid jax.scipy.special.betaln is off by up to 2.4e-7 relative, jax 0.10)."""
    a = np.concatenate([np.geomspace(1e-3, 1, 30), np.geomspace(1, 1e4, 20)])
    aa, bb = (x.ravel() for x in np.meshgrid(a, [1e-3, 0.01, 0.1, 0.5, 1.5, 3.0, 30.0, 1e3, 1e5]))
    with enable_x64(True):
        got = np.asarray(BETA.log_partition(jnp.stack([jnp.asarray(aa), jnp.asarray(bb)], -1)))
    with mpmath.workdps(40):
        ref = np.array([float(mpmath.log(mpmath.beta(x, y))) for x, y in zip(aa, bb)])
        terms = np.array(
            [
                float(abs(mpmath.loggamma(x)) + abs(mpmath.loggamma(y)) + abs(mpmath.loggamma(x + y)))
                for x, y in zip(aa, bb)
            ]
        )
    eps = float(np.finfo(np.float64).eps)
    assert np.max(np.abs(got - ref) / terms) < 16 * eps


def test_proposals_per_round_miss_s_acceptances_rarely():
    """The binomial tail behind _ACCEPT_RATE's comment: with R = ⌈S/0.88 + 6√(0.13 S)⌉ proposals accepted at
    0.88, P(fewer than S accepted) <= 3.6e-5 for S >= 10 (2.0e-5 at 10, 1.2e-6 at 100, 1.4e-7 at 1000); and
    Cheng's BB accepts at about 0.88 for large shapes."""

    def miss(s):
        r = math.ceil(s / expfam.beta._ACCEPT_RATE + 6.0 * math.sqrt(0.13 * s))
        return stats.binom.cdf(s - 1, r, expfam.beta._ACCEPT_RATE)

    assert max(miss(s) for s in range(10, 3001)) < 3.7e-5
    assert miss(10) < 2.1e-5 and miss(100) < 1.3e-6 and miss(1000) < 1.5e-7
    accept, _, _ = expfam.beta._cheng_proposals(jax.random.key(0), jnp.float32(700.0), jnp.float32(300.0), 200_000)
    assert abs(float(jnp.mean(accept)) - 0.88) < 0.01


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_open_uniform_is_strictly_inside_and_exact(dtype):
    """U = (k + ½)·2^−m: every value strictly inside (0, 1) and exactly of that form in the dtype."""
    with enable_x64(dtype == jnp.float64):
        u = np.asarray(expfam.beta._open_uniform(jax.random.key(5), (200_000,), dtype))
        m = jnp.finfo(dtype).nmant
    assert u.dtype == dtype and np.all(u > 0) and np.all(u < 1)
    k = u.astype(np.float64) * 2.0**m - 0.5
    assert np.all(k == np.floor(k)) and k.min() >= 0 and k.max() <= 2**m - 1
