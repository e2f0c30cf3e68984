"""Aggregation back-ends and channel models as values (docs/kmeans.md, "Adding a channel", "Adding an
aggregator"): the built-in ones reproduce the outputs recorded from the implementation they
replaced, bit for bit; a user-made aggregator and a user-registered channel run through the round
and the CLI."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import kmeans, oac
from jaxfed.oac import aggregators

# Recorded on fixed keys with the string settings (Settings(aggregation=..., beta=..., digits=...,
# channel=..., snr_db=..., symbol_energy=...)) and the channel if-chain they replaced.
REFERENCE = np.load(pathlib.Path(__file__).parent / "data" / "kmeans_backends_reference.npz")
FIELDS = ("loss", "vmax", "next_vmax", "aggregate", "dead_zone", "reinitialised")


def blobs(seed, n=300, centres=5, dim=2, spread=1.0):
    rng = np.random.default_rng(seed)
    c = rng.uniform(-20, 20, (centres, dim))
    x = np.concatenate([rng.normal(ci, spread, (n // centres, dim)) for ci in c]).astype(np.float32)
    init = x[rng.choice(len(x), centres, replace=False)]
    owner = rng.integers(0, 7, len(x))
    return x, init, owner


X, INIT, OWNER = blobs(21)
DATA = kmeans.flat_data(X, OWNER)
CASES = {
    "ideal": lambda: kmeans.Settings(aggregators.ideal()),
    "quantized": lambda: kmeans.Settings(aggregators.quantized(3, 2), vmax_rule="signed-previous"),
    "oac_aggregate": lambda: kmeans.Settings(aggregators.oac("aggregate", 3, 3, 10.0)),
    "oac_explicit": lambda: kmeans.Settings(
        aggregators.oac("explicit", 3, 2, 0.0, float(np.sqrt(3.0))), adaptive_vmax=False, vmax=30.0
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_backends_reproduce_the_recorded_outputs(case):
    s = CASES[case]()
    history, info = jax.jit(lambda k: kmeans.federated_rounds(k, DATA, 7, INIT, 6, s))(jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(history), REFERENCE[f"{case}/history"])
    for field in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(info, field)), REFERENCE[f"{case}/{field}"], err_msg=field)


def test_snr_sweep_is_a_vmap_and_reproduces_the_recorded_outputs():
    """The SNR is traced: the aggregator is built inside the vmapped function."""

    def run(snr):
        s = kmeans.Settings(aggregators.oac("aggregate", 3, 2, snr))
        return kmeans.federated_rounds(jax.random.key(6), DATA, 7, INIT, 4, s)[0]

    history = jax.jit(jax.vmap(run))(jnp.array([0.0, 10.0, 30.0]))
    np.testing.assert_array_equal(np.asarray(history), REFERENCE["oac_sweep/history"])


@pytest.mark.parametrize("mode", oac.MODES)
def test_builtin_channels_reproduce_the_recorded_outputs(mode):
    values = jnp.asarray(np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32))
    active = jnp.array([True, True, False, True, True, True])
    out = oac.over_the_air_sum(jax.random.key(7), values, 3, 3, 2.5, 5.0, mode, active=active)
    np.testing.assert_array_equal(np.asarray(out.estimate), REFERENCE[f"ota_{mode}/estimate"])
    np.testing.assert_array_equal(np.asarray(out.energy), REFERENCE[f"ota_{mode}/energy"])
