"""The NumPy references of benchmarks/gfvl_logistic.py run the same algorithm as jaxfed's kernel: the
vectorised one agrees with jaxfed in distribution, and with the per-trial loop on the same draws."""

import os
import sys

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))

import gfvl_logistic as bench  # noqa: E402

from jaxfed.experiment import make_config  # noqa: E402
from jaxfed.experiments.gfvl import logistic as gfvl_logistic


@pytest.fixture(scope="module")
def setting():
    cfg = make_config(gfvl_logistic.Config, {"n_slots": "40", "splits": "iid", "topologies": "complete"})
    return cfg, gfvl_logistic.prepare(cfg)


class _OneTrialRng:
    """Feeds numpy_vectorised (one trial) the draws numpy_trial makes, in numpy_trial's order."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def integers(self, high, size):
        return np.array([self.rng.integers(high)])

    def random(self, size):
        return np.array([self.rng.random()])

    def standard_normal(self, shape):
        return self.rng.standard_normal(shape[1:])[None]


@pytest.mark.slow  # ~7 s of the default suite's 7 minutes
def test_vectorised_numpy_is_the_loop_on_the_same_draws(setting):
    """One trial fed the loop's random numbers: the first slot (the first agent's draw, then L iterations of
    S × d normals, gradient, step, projection and the KL) agrees to rounding. Later slots draw the neighbour
    differently (``choice`` vs a CDF), so only the first is replayed exactly."""
    cfg, problem = setting
    loop = bench.numpy_trial(np.random.default_rng(3), cfg, problem, {"sampling": 0.0})
    vec = bench.numpy_vectorised(_OneTrialRng(3), cfg, problem, 1, {"sampling": 0.0})[0]
    np.testing.assert_allclose(vec[0], loop[0], rtol=1e-10)
    assert np.all(np.isfinite(vec))


@pytest.mark.slow
def test_vectorised_numpy_matches_jaxfed_in_distribution(setting):
    cfg, problem = setting
    run, _ = bench.jaxfed_runner(cfg, problem, 200)
    kl_jax = np.concatenate([np.asarray(x) for x in run()])
    kl_np = bench.numpy_vectorised(np.random.default_rng(0), cfg, problem, 200, {"sampling": 0.0})
    for slot in (4, 19, 39):
        assert stats.ks_2samp(kl_jax[:, slot], kl_np[:, slot]).pvalue > 1e-3, slot
