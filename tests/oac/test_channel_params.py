"""Channels with parameters (issue: architecture II, extension points): a user channel registered with a
parameter runs through the plain CLI, is swept over traced points, grows and replots; "NAME:key=value"
fixes a value; per-ED parameters reach the channel through the mall trial's ``channel_for`` hook."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import cli, engine, oac
from jaxfed.experiment import make_config
from jaxfed.experiments.kmeans import trials as kmeans_trials
from jaxfed.runs import catalog

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "rician_channel.py")
SMALL = ["--set", "n_points=200", "--set", "n_rounds=3", "--set", "rows=2", "--set", "cols=2"]
SMALL += ["--set", "digits_list=2", "--set", "snrs_db=20"]


@pytest.fixture(scope="module")
def rician():
    catalog.from_file(EXAMPLE, "EXPERIMENT")  # registers "rician"
    return oac.resolve_channel("rician")


def test_a_channel_spec_sets_parameters_and_bad_ones_are_one_line_errors(rician):
    assert dict(rician.params) == {"k_factor": 0.0}
    assert dict(oac.resolve_channel("rician:k_factor=3").params) == {"k_factor": 3.0}
    with pytest.raises(ValueError, match=r"channel parameter must be one of \['k_factor'\], got 'kappa'"):
        oac.resolve_channel("rician:kappa=3")
    with pytest.raises(ValueError, match="channel parameter k_factor must be a number, got 'big'"):
        oac.resolve_channel("rician:k_factor=big")


def test_the_parameter_is_traced_and_the_detector_unbiased(rician):
    values = jnp.ones((50, 2))

    def estimate(key, kappa):
        model = rician.with_params(k_factor=kappa)
        return oac.over_the_air_sum(key, values, 3, 2, 4.0, 60.0, model).estimate

    keys = jax.random.split(jax.random.key(0), 400)
    out = jax.jit(jax.vmap(jax.vmap(estimate, (0, None)), (None, 0)))(keys, jnp.array([0.0, 100.0]))
    means = np.asarray(out).mean(axis=1)  # (κ, Q)
    np.testing.assert_allclose(means, 50.0, rtol=0.05)
    assert not np.array_equal(out[0], out[1])  # κ reaches the channel (the draws are the same)


def _run_swept(tmp_path, trials_list):
    spec = f"{EXAMPLE}:EXPERIMENT"
    out = str(tmp_path / "rician")
    args = ["run", spec, "--out", out, "--quiet", "--set", "channel=rician", "--set", "channel_sweep=k_factor=0,30"]
    for n_trials in trials_list:
        assert cli.main([*args, *SMALL, "--trials", str(n_trials)]) == 0
    config = json.loads((tmp_path / "rician" / "config.json").read_text())
    swept = [lab.get("k_factor") for lab in config["points"] if lab["method"] == "oac"]
    assert sorted(swept) == [0.0, 0.0, 30.0, 30.0]  # OAC at 20 dB and noise-free, each at both κ
    loss = np.load(tmp_path / "rician" / "metrics.npz")["loss"]
    assert loss.shape[1:] == (trials_list[-1], 3) and np.all(np.isfinite(loss))
    assert cli.main(["plot", out, "--experiment", spec]) == 0
    return loss


@pytest.mark.slow  # ~17 s: two CLI runs and a replot (the default suite runs the channel in process)
def test_a_swept_user_channel_runs_and_replots_through_the_plain_cli(tmp_path, rician):
    _run_swept(tmp_path, [4])


@pytest.mark.slow
def test_a_swept_user_channel_run_grows_to_the_fresh_run(tmp_path, rician):
    grown = _run_swept(tmp_path / "grown", [4, 8])
    np.testing.assert_array_equal(grown, _run_swept(tmp_path / "fresh", [8]))


@pytest.mark.slow  # three compiled k-means programs (~10 s)
def test_per_device_state_reaches_the_channel_through_the_trial_hook():
    """Residual power-control gains g_k, drawn once per trial from the hook's key and kept for every
    round (a (K,) channel parameter): |y_l|² ~ (E_s Σ_k g_k 1[k on l] + σ²)·Exp(1). With g = 1 it is the
    built-in "aggregate" channel bit for bit (the hook's key is a stream of its own)."""

    def gained(key, numerals, beta, noise_var, symbol_energy, active, gain):
        weighted = jnp.asarray(gain, noise_var.dtype) @ oac.channel.activation(numerals, beta, active)
        return oac.channel.aggregate_energy(key, weighted, noise_var, symbol_energy)

    oac.channel.register("test-gains", gained, params={"gain": 1.0})
    cfg = make_config(kmeans_trials.MallConfig, {"n_points": "200", "n_rounds": "4", "rows": "2", "cols": "2"})
    labels = [{"method": "oac", "digits": 2, "snr_db": 20.0}]

    def run(channel_for=None, channel="aggregate"):
        sweep = kmeans_trials.mall_sweep(
            make_config(type(cfg), {**_small(cfg), "channel": channel}), labels, channel_for=channel_for
        )
        return np.asarray(engine.run(sweep.trial, sweep.points, 8, seed=0, progress=False)["loss"])

    def unit_gains(key, point):
        return oac.channel.get("test-gains").with_params(gain=jnp.ones(4))

    def residual_gains(key, point):  # log-normal, 3 dB spread, per trial
        return oac.channel.get("test-gains").with_params(gain=10 ** (3.0 * jax.random.normal(key, (4,)) / 10))

    plain = run()
    np.testing.assert_array_equal(run(unit_gains, "test-gains"), plain)
    gained_loss = run(residual_gains, "test-gains")
    assert np.all(np.isfinite(gained_loss)) and not np.array_equal(gained_loss, plain)


def _small(cfg):
    return {"n_points": "200", "n_rounds": "4", "rows": "2", "cols": "2"}


@pytest.mark.slow  # compiles the k-means programs (~20 s); tests/gfvl/test_models.py checks --import in the default suite
def test_a_channel_file_loaded_with_import_runs_a_built_in_experiment_and_must_be_given_to_read_it(tmp_path, capsys):
    """`jaxfed run kmeans-snr --import FILE --set channel=NAME`: the plain command loads a user's channel;
    the file's digest joins the run's identity and record; plot and report need the same file."""
    channel_file = tmp_path / "flat.py"
    channel_file.write_text(
        "import jax.numpy as jnp\nfrom jaxfed import oac\n\n\n"
        "def flat(key, numerals, beta, noise_var, symbol_energy, active, level):\n"
        "    counts = oac.channel.resource_counts(numerals, beta, active).astype(jnp.float32)\n"
        "    return symbol_energy * counts * level + noise_var\n\n\n"
        "oac.channel.register('flat-test', flat, variance=None, params={'level': 1.0})\n"
    )
    out = str(tmp_path / "flat")
    args = ["run", "kmeans-convergence", "--import", str(channel_file), "--out", out, "--quiet", "--trials", "2"]
    args += ["--set", "channel=flat-test:level=1", "--set", "snrs_db=20", *SMALL[:8]]
    assert cli.main(args) == 0
    config = json.loads((tmp_path / "flat" / "config.json").read_text())
    assert list(config["imports"]) == ["flat.py"] and len(config["imports"]["flat.py"]) == 64
    assert (tmp_path / "flat" / "report.md").exists()  # `jaxfed run` writes the experiment's report
    capsys.readouterr()
    assert cli.main(["report", out]) == 2  # the channel file is not taken from the directory
    assert "was run with --import flat.py" in capsys.readouterr().err
    assert cli.main(["report", out, "--import", str(channel_file)]) == 0
    assert cli.main(["plot", out, "--import", str(channel_file)]) == 0
    channel_file.write_text(channel_file.read_text() + "# edited\n")
    capsys.readouterr()
    assert cli.main(["plot", out, "--import", str(channel_file)]) == 2
    assert "differs in flat.py: stored sha256" in capsys.readouterr().err


@pytest.mark.slow  # compiles the mall programs (~25 s)
def test_the_power_gains_study_runs_through_the_plain_cli(tmp_path):
    """docs/examples/power_gains.py: per-ED residual gains (a (K,) channel parameter drawn per trial
    by the channel_for hook) swept over their spread; a 3 dB spread makes OAC worse than 0 dB."""
    spec = os.path.join(os.path.dirname(EXAMPLE), "power_gains.py") + ":EXPERIMENT"
    out = str(tmp_path / "gains")
    args = ["run", spec, "--trials", "20", "--out", out, "--quiet", "--set", "n_points=400", "--set", "n_rounds=10"]
    assert cli.main(args) == 0
    assert cli.main(["report", out, "--experiment", spec]) == 0
    report = (tmp_path / "gains" / "report.md").read_text()
    assert "larger with gains spread 3 dB than 0 dB (ratio)" in report and "**reproduced**" in report


@pytest.mark.parametrize(
    "result, shown", [("jnp.complex64", "complex64"), ("jnp.int32", "int32"), ("shape", "float32")]
)
def test_a_user_channel_returning_the_wrong_energies_is_one_line_naming_its_file(tmp_path, capsys, result, shown):
    """A channel whose energies are complex, integer or of the wrong shape: one error line naming the
    function and its file, before any trial runs (was: a 56-line JAX traceback, or NaN in every trial)."""
    name = f"bad-{shown}-{result.replace('.', '')}"
    cast = "[:3].astype(jnp.float32)" if result == "shape" else f".astype({result})"
    channel_file = tmp_path / "bad.py"
    channel_file.write_text(
        "import jax.numpy as jnp\nfrom jaxfed import oac\n\n\n"
        "def bad(key, numerals, beta, noise_var, symbol_energy, active):\n"
        f"    return oac.channel.resource_counts(numerals, beta, active){cast}\n\n\n"
        f"oac.channel.register({name!r}, bad, variance=None)\n"
    )
    try:
        args = ["run", "kmeans-convergence", "--import", str(channel_file), "--out", str(tmp_path / "o"), "--quiet"]
        args += ["--trials", "2", "--set", f"channel={name}", "--set", "snrs_db=20", *SMALL[:8]]
        assert cli.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        assert f"channel energy bad ({channel_file}:5) returned {shown}" in err and "expected real floating" in err
    finally:
        oac.channel._CHANNELS.unregister(name)


def test_a_user_channel_not_finite_at_zero_noise_is_one_line_naming_it(tmp_path, capsys):
    """A channel whose energies are NaN even without noise: one line naming the channel and its file
    when the configuration is made (was: NaN in every over-the-air trial, and warnings elsewhere)."""
    channel_file = tmp_path / "nan_channel.py"
    channel_file.write_text(
        "import jax.numpy as jnp\nfrom jaxfed import oac\n\n\n"
        "def nan_energy(key, numerals, beta, noise_var, symbol_energy, active):\n"
        "    counts = oac.channel.resource_counts(numerals, beta, active).astype(jnp.float32)\n"
        "    return counts / (noise_var * 0.0)  # 0/0 and 1/0\n\n\n"
        "oac.channel.register('nan-at-zero', nan_energy, variance=None)\n"
    )
    try:
        args = ["run", "kmeans-convergence", "--import", str(channel_file), "--out", str(tmp_path / "o"), "--quiet"]
        args += ["--trials", "2", "--set", "channel=nan-at-zero", "--set", "snrs_db=20", *SMALL[:8]]
        assert cli.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        assert f"channel 'nan-at-zero': its energy function ({channel_file}:5) returned non-finite values" in err
        assert not (tmp_path / "o").exists()
    finally:
        oac.channel._CHANNELS.unregister("nan-at-zero")
