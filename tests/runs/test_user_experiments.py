"""User experiments (a file's Experiment) go through the same CLI, store, resume and plot; `jaxfed show`."""

import json
import pathlib
import sys

import numpy as np
import pytest

from jaxfed import cli
from jaxfed.experiment import make_config
from jaxfed.experiments.gfvl import local_iters as gfvl_local_iters
from jaxfed.runs import catalog, describe, find, identity

EXAMPLE = str(pathlib.Path(__file__).parents[2] / "docs" / "examples" / "grid_gossip.py")
SPEC = f"{EXAMPLE}:EXPERIMENT"


def test_the_documented_example_runs_resumes_grows_and_replots(tmp_path, capsys):
    out = str(tmp_path / "grid")
    args = ["run", SPEC, "--trials", "6", "--out", out, "--set", "sides=2,3", "--set", "n_slots=40", "--quiet"]
    assert cli.main(args) == 0
    config = json.loads((tmp_path / "grid" / "config.json").read_text())
    assert config["experiment"] == "grid-gossip" and config["source"] == SPEC
    first = np.load(tmp_path / "grid" / "metrics.npz")["kl"]
    assert first.shape == (2, 6, 40) and np.all(first[:, :, -1] >= 0)
    # The store serves the same run again and grows it, as for a built-in experiment.
    assert cli.main(args[:3] + ["9"] + args[4:]) == 0
    grown = np.load(tmp_path / "grid" / "metrics.npz")["kl"]
    np.testing.assert_array_equal(grown[:, :6], first)
    (tmp_path / "grid" / "grid-gossip.png").unlink()
    # a result directory never runs the code it names: the user names the file, whose code must match
    assert cli.main(["plot", out]) == 2
    assert "never runs the code it names" in capsys.readouterr().err
    assert cli.main(["plot", out, "--experiment", SPEC]) == 0
    assert (tmp_path / "grid" / "grid-gossip.png").exists()


def test_show_lists_every_parameter_with_default_and_meaning(capsys):
    assert cli.main(["show", "gfvl-local-iters"]) == 0
    text = capsys.readouterr().out
    for p in describe.parameters(gfvl_local_iters.Config):
        assert f"  {p.name} " in text
    assert "learning rate ρ" in text and "presets" in text
    assert cli.main(["show", SPEC]) == 0
    assert "grid sides s" in capsys.readouterr().out


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope.py:EXPERIMENT", "does not exist"),
        (f"{EXAMPLE}:Config", "is a type, not an Experiment; Experiments defined there: EXPERIMENT"),
        (f"{EXAMPLE}:MISSING", "is not defined"),
        ("no-such-experiment", "unknown experiment 'no-such-experiment'"),
    ],
)
def test_bad_user_experiment_specs_are_one_line_errors(spec, message, capsys):
    assert cli.main(["show", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_file_that_fails_to_import_is_named(tmp_path, capsys):
    bad = tmp_path / "broken.py"
    bad.write_text("import not_a_module_anywhere\n")
    assert cli.main(["run", f"{bad}:EXPERIMENT"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "ModuleNotFoundError" in err


def test_get_returns_built_in_experiments_unchanged():
    assert find("gfvl-topologies").source == ""
    assert find(SPEC).source == SPEC


AGGREGATOR_EXAMPLE = pathlib.Path(__file__).parents[2] / "docs" / "examples" / "lossy_aggregator.py"


def test_a_user_aggregator_runs_end_to_end_through_the_cli(tmp_path):
    """docs/examples/lossy_aggregator.py defines an Aggregator outside the package and drives
    federated k-means with it through `jaxfed run`; its estimate is unbiased and exact at p = 0."""
    import importlib.util

    import jax
    import jax.numpy as jnp

    spec = importlib.util.spec_from_file_location("lossy_aggregator", AGGREGATOR_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = jnp.arange(12.0).reshape(6, 2)
    active = jnp.array([True, True, False, True, True, True])
    exact = values[active].sum(0)
    keys = jax.random.split(jax.random.key(3), 20_000)
    draws = jax.vmap(lambda k: module.lossy(0.3).aggregate(k, values, active, 0.0))(keys)
    np.testing.assert_allclose(draws.mean(0), exact, rtol=0.02)  # unbiased (s.e. ~0.6%)
    np.testing.assert_allclose(module.lossy(0.0).aggregate(keys[0], values, active, 0.0), exact)

    out = tmp_path / "lossy"
    sets = ["loss_probs=0,0.5", "n_devices=4", "points_per_device=5", "n_rounds=4"]
    args = ["run", f"{AGGREGATOR_EXAMPLE}:EXPERIMENT", "--trials", "8", "--out", str(out), "--quiet"]
    assert cli.main(args + [item for kv in sets for item in ("--set", kv)]) == 0
    loss = np.load(out / "metrics.npz")["loss"]
    assert loss.shape == (2, 8, 4) and np.isfinite(loss).all() and (loss > 0).all()
    assert not np.array_equal(loss[0], loss[1])  # the lost updates change the trajectories


# --------------------------------------------------------------------------- the code in the identity
TINY = """
import dataclasses

import jax
import jax.numpy as jnp

from jaxfed.experiment import Experiment, Sweep
{imports}
SHIFT = {shift}


@dataclasses.dataclass(frozen=True)
class Config:
    scale: float = 1.0  # spread of x
    channel: str = "aggregate"  # a registered channel


def build(cfg):
    def trial(key, point):
        x = cfg.scale * jax.random.normal(key) + SHIFT + point["offset"]
        return {{"x": {body}}}

    return Sweep(trial, [{{"offset": jnp.float32(0.0)}}], [{{"case": "only"}}], {{"x": ()}})


EXPERIMENT = Experiment("tiny", "a tiny user experiment", Config, build, lambda *a: None, lambda *a: "")
"""


def _tiny(path, shift=0.0, imports="", body="x"):
    path.write_text(TINY.format(shift=shift, imports=imports, body=body))
    return f"{path}:EXPERIMENT"


def _run(spec, out, trials, *extra):
    return cli.main(["run", spec, "--trials", str(trials), "--out", str(out), "--quiet", *extra])


def _x(out):
    return np.load(out / "metrics.npz")["x"]


def test_an_unchanged_user_file_resumes_and_grows_and_its_digest_is_in_the_identity(tmp_path):
    spec = _tiny(tmp_path / "tiny.py")
    assert _run(spec, tmp_path / "d", 4) == 0
    identity = json.loads((tmp_path / "d" / "identity.json").read_text())
    digest = catalog.hashlib.sha256((tmp_path / "tiny.py").read_bytes()).hexdigest()
    assert identity["code"] == {"tiny.py": digest}  # named relative to the experiment file's directory
    first = _x(tmp_path / "d")
    assert _run(spec, tmp_path / "d", 6) == 0
    np.testing.assert_array_equal(_x(tmp_path / "d")[:, :4], first)


def test_an_edited_user_file_is_refused_naming_it_and_overwrite_recomputes(tmp_path, capsys):
    path = tmp_path / "tiny.py"
    spec = _tiny(path, shift=0.0)
    old = catalog.hashlib.sha256(path.read_bytes()).hexdigest()
    assert _run(spec, tmp_path / "d", 4) == 0
    _tiny(path, shift=5.0)  # the trial changes; same name, parameters, points and seed
    new = catalog.hashlib.sha256(path.read_bytes()).hexdigest()
    capsys.readouterr()
    assert _run(spec, tmp_path / "d", 6) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "different configuration" in err, err
    assert f"code.tiny.py: stored sha256 {old[:12]}..., given sha256 {new[:12]}..." in err
    assert _run(spec, tmp_path / "d", 6, "--overwrite") == 0
    assert _run(spec, tmp_path / "fresh", 6) == 0
    np.testing.assert_array_equal(_x(tmp_path / "d"), _x(tmp_path / "fresh"))
    assert _x(tmp_path / "d").mean() > 3  # the edited trial ran


def test_an_edited_module_the_experiment_imports_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """An aggregator, family or any helper defined in a module the experiment file imports counts:
    that module's file is in the identity too."""
    helper = tmp_path / "tiny_helper_for_identity.py"
    helper.write_text("def transform(x):\n    return 2.0 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, helper.stem, raising=False)
    try:
        spec = _tiny(tmp_path / "tiny.py", imports=f"from {helper.stem} import transform\n", body="transform(x)")
        assert _run(spec, tmp_path / "d", 4) == 0
        code = json.loads((tmp_path / "d" / "identity.json").read_text())["code"]
        assert sorted(code) == ["tiny.py", helper.name]
        assert _run(spec, tmp_path / "d", 6) == 0  # unchanged: grows
        helper.write_text("def transform(x):\n    return 3.0 * x\n")
        capsys.readouterr()
        assert _run(spec, tmp_path / "d", 6) == 2
        err = capsys.readouterr().err
        assert f"code.{helper.name}: stored sha256" in err and "code.tiny.py" not in err, err
    finally:
        sys.modules.pop(helper.stem, None)


def test_an_edited_file_of_a_registered_channel_named_by_a_parameter_is_refused(tmp_path, capsys):
    """A channel registered from a user file (here by the caller, not by the experiment file) and
    chosen with --set channel=NAME: the file its functions come from is in the identity."""
    import importlib.util

    from jaxfed import oac

    name = "identity-test-channel"
    source = "import jax\n\n\ndef energy(key, numerals, beta, noise_var, symbol_energy, active):\n    return {}\n"
    chan = tmp_path / "tiny_channel.py"
    chan.write_text(source.format("jax.random.normal(key, (2,))"))
    spec_ = importlib.util.spec_from_file_location("tiny_channel_for_identity", chan)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    oac.channel.register(name, module.energy, variance=None)
    try:
        body = "oac.channel.get(cfg.channel).energy(key, None, 1, 0.0, 1.0, None)[0] + x"
        spec = _tiny(tmp_path / "tiny.py", imports="from jaxfed import oac\n", body=body)
        assert _run(spec, tmp_path / "d", 4, "--set", f"channel={name}") == 0
        code = json.loads((tmp_path / "d" / "identity.json").read_text())["code"]
        assert sorted(code) == ["tiny.py", "tiny_channel.py"]
        chan.write_text(source.format("2.0 * jax.random.normal(key, (2,))"))
        capsys.readouterr()
        assert _run(spec, tmp_path / "d", 6, "--set", f"channel={name}") == 2
        assert "code.tiny_channel.py: stored sha256" in capsys.readouterr().err
    finally:
        oac.channel._CHANNELS.unregister(name)


def test_a_plugin_experiment_identity_holds_its_distribution_version_and_module(tmp_path, monkeypatch, capsys):
    """A plugin found through an installed distribution's entry point (here a dist-info directory
    on sys.path): its name, version and entry-point module's digest are in the identity."""
    module_name = "tiny_plugin_for_identity"
    _tiny(tmp_path / f"{module_name}.py")
    info = tmp_path / "tiny_plugin_for_identity-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-plugin-for-identity\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[jaxfed.experiments]\ntiny-plugin = {module_name}:EXPERIMENT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module_name, raising=False)
    try:
        assert find("tiny-plugin").plugin == "tiny-plugin"
        assert _run("tiny-plugin", tmp_path / "d", 4) == 0
        identity = json.loads((tmp_path / "d" / "identity.json").read_text())
        assert identity["plugin"] == {
            "entry_point": "tiny-plugin",
            "value": f"{module_name}:EXPERIMENT",
            "distribution": "tiny-plugin-for-identity",
            "version": "1.0",
        }
        assert list(identity["code"]) == [f"{module_name}.py"]
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-plugin-for-identity\nVersion: 1.1\n")
        capsys.readouterr()
        assert _run("tiny-plugin", tmp_path / "d", 6) == 2
        assert 'plugin.version: stored "1.0", given "1.1"' in capsys.readouterr().err
    finally:
        sys.modules.pop(module_name, None)


def test_built_in_experiments_identity_holds_no_code_key():
    exp = find("gfvl-topologies")
    assert identity.code_identity(exp, make_config(exp.config_cls)) == {}


# --------------------------------------------------------------------------- every extension point from one file
EXTENSIONS = pathlib.Path(__file__).parents[1] / "data" / "user_extensions.py"


@pytest.fixture
def extensions():
    """tests/data/user_extensions.py's path; afterwards its registrations are removed and its module
    forgotten, so that no other test sees them and the next load registers them again."""
    from jaxfed import experiments, oac
    from jaxfed.gfvl import expfam, graphs

    yield str(EXTENSIONS)
    experiments.REGISTRY.unregister("user-kmeans")
    graphs._GRAPHS.unregister("user-wheel")
    oac.channel._CHANNELS.unregister("user-line-of-sight")
    oac.aggregators._METHODS.unregister("user-lossy")
    expfam._FAMILIES.unregister("user-exponential")
    for name, module in list(sys.modules.items()):
        if name.startswith("jaxfed_user_") and getattr(module, "__file__", None) == str(EXTENSIONS):
            del sys.modules[name]


def _metrics(out):
    return {k: v for k, v in np.load(out / "metrics.npz").items()}


def test_a_registered_user_experiment_runs_by_name_with_import(extensions, tmp_path, capsys):
    assert cli.main(["run", "user-kmeans", "--trials", "2", "--out", str(tmp_path / "k"), "--quiet"]) == 2
    assert "unknown experiment 'user-kmeans'; choose one of: gfvl-graphs, " in capsys.readouterr().err
    args = ["run", "user-kmeans", "--import", extensions, "--trials", "2", "--out", str(tmp_path / "k"), "--quiet"]
    assert cli.main(args) == 0
    assert np.isfinite(_metrics(tmp_path / "k")["loss"]).all()


def test_a_user_channel_and_aggregation_method_run_in_the_kmeans_trial_layer(extensions, tmp_path):
    from jaxfed.experiments.kmeans import trials as kmeans_trials

    spec = f"{extensions}:KMEANS"
    for name, setting in (("channel", "channel=user-line-of-sight"), ("method", "method=user-lossy")):
        out = tmp_path / name
        assert cli.main(["run", spec, "--trials", "4", "--out", str(out), "--set", setting, "--quiet"]) == 0
        loss = _metrics(out)["loss"]
        assert loss.shape == (1, 4, 3) and np.isfinite(loss).all()
    assert kmeans_trials.method_label({"method": "user-lossy"}) == "lossy p=0.25"
    assert "user-lossy" in kmeans_trials.methods()


def test_a_registered_user_graph_is_selected_by_name_where_a_built_in_graph_is(extensions, tmp_path, capsys):
    """A graph registered in an --import'ed file is a topology of the G-FVL experiments and a graph of
    gfvl-graphs by its name, its file is in the run's identity, and an unknown name is the registry's
    one-line error listing the registered graphs."""
    short = ["--trials", "4", "--set", "n_slots=40", "--quiet"]
    run = ["run", "gfvl-topologies", "--import", extensions, *short]
    assert cli.main([*run, "--set", "topologies=user-wheel,ring", "--out", str(tmp_path / "t")]) == 0
    identity = json.loads((tmp_path / "t" / "identity.json").read_text())
    assert identity["points"] == [{"topology": "user-wheel"}, {"topology": "ring"}]
    assert list(identity["code"]) == [extensions]  # the file the graph's builder comes from
    kl = _metrics(tmp_path / "t")["kl"]
    assert kl.shape == (2, 4, 40) and np.isfinite(kl).all()
    graphs_run = ["run", "gfvl-graphs", "--import", extensions, "--set", "graphs=user-wheel,complete", *short]
    assert cli.main([*graphs_run, "--set", "records=5", "--out", str(tmp_path / "g")]) == 0
    assert _metrics(tmp_path / "g")["kl"].shape == (2, 4, 5)
    capsys.readouterr()
    for args in (run + ["--set", "topologies=nope"], graphs_run[:4] + ["--set", "graphs=nope", *short]):
        assert cli.main([*args, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, err
        assert err.startswith(
            "jaxfed: error: unknown graph 'nope'; choose one of: complete, ring, star, line, user-wheel"
        ), err
    assert not (tmp_path / "bad").exists()


def test_a_user_family_runs_in_natural_gradient_steps(extensions, tmp_path):
    out = tmp_path / "family"
    assert cli.main(["run", f"{extensions}:FAMILY", "--trials", "8", "--out", str(out), "--quiet"]) == 0
    mean = _metrics(out)["mean"][0]  # (trial, iteration): E_q θ = 1/λ from the prior's 1 towards the optimum 3
    assert np.isfinite(mean).all() and np.median(mean[:, -1]) > 1.5
    assert cli.main(["run", f"{extensions}:FAMILY", "--set", "family=gamma-exp", "--out", str(out)]) == 2
