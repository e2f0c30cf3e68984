"""Results across versions and machines (issue 56, part 3): a run records the build that computed it
(JAX, jaxlib, backend, processor) in build.json; growing or resuming it under another build is
refused in one line naming both builds and what to do, or mixed with ``--mix-builds``; a directory
written before builds were recorded grows as before; ``jaxfed verify`` tells the last bits of
another build from values that differ. Another build is simulated by replacing
:func:`jaxfed.builds.this_build`: the values computed are this machine's."""

import contextlib
import io
import json
import os
import shutil
import time

import numpy as np
import pytest
from support import POINTS, one_line_error, trial

from jaxfed import builds, cli, engine, store
from jaxfed.runs import verifying
from jaxfed.store import rundir

RUN = ["run", "gfvl-topologies", "--set", "n_slots=12", "--quiet"]


def _elsewhere(build: dict) -> dict:
    """``build`` as an Intel machine with AVX-512 computes it."""
    features = sorted({*build["features"], "avx512f", "avx512bw"})
    return dict(build, processor="Intel Xeon Platinum 8480+", cpu="GenuineIntel family 6 model 143", features=features)  # fmt: skip


@pytest.fixture
def another_build(monkeypatch):
    """This process computes as another processor would (by its build record: the values are ours)."""
    real = builds.this_build
    monkeypatch.setattr(builds, "this_build", lambda backend=None: _elsewhere(real(backend)))
    return _elsewhere(real())


def _record(out) -> dict:
    return json.load(open(os.path.join(out, store.BUILD_FILE)))


# --------------------------------------------------------------------------- the build
X86 = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 smep avx512f avx512bw amx_tile hypervisor

processor\t: 1
model name\t: ignored
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes sha1 asimdhp sve sve2 i8mm bf16
CPU implementer\t: 0x41
CPU part\t: 0xd4f
"""


def test_the_build_names_the_processor_and_the_features_that_change_its_code():
    model, cpu, features = builds.cpuinfo_fields(X86)
    assert model == "Intel(R) Xeon(R) Platinum 8480+" and cpu == "GenuineIntel family 6 model 143"
    # (smep, a security flag, and hypervisor change no value)
    assert features == ("amx_tile", "avx", "avx2", "avx512bw", "avx512f", "f16c", "fma", "sse4_1", "sse4_2")
    model, cpu, features = builds.cpuinfo_fields(ARM)
    assert (model, cpu) == ("", "arm implementer 0x41 part 0xd4f")
    assert features == ("asimd", "asimdhp", "bf16", "i8mm", "sve", "sve2")
    here = builds.this_build()
    assert set(here) == set(builds.FIELDS) and here["jax"] == __import__("jax").__version__
    assert builds.same_bits(here, json.loads(json.dumps(here)))  # (as build.json gives it back)
    other = _elsewhere(here)
    assert not builds.same_bits(here, other)
    assert builds.differences(here, other)[-1].startswith("features only here: ")
    older = dict(here, jax="0.6.2", jaxlib="0.6.2")
    assert builds.remedy(older, here) == "pip install jax==0.6.2 jaxlib==0.6.2"
    assert builds.remedy(other, here).startswith("on a cpu Intel Xeon Platinum 8480+")


def test_every_run_records_its_build(tmp_path):
    out = str(tmp_path / "run")
    engine.run(trial, POINTS, 64, out_dir=out, identity={}, progress=False)
    assert _record(out) == {"builds": [builds.this_build()], "mixed": False}


# --------------------------------------------------------------------------- growth and resume
def test_growth_under_another_build_is_refused_in_one_line_or_mixed(capsys, tmp_path, monkeypatch):
    out = str(tmp_path / "run")
    assert cli.main([*RUN, "--trials", "128", "--out", out]) == 0
    here = builds.this_build()
    real = builds.this_build
    monkeypatch.setattr(builds, "this_build", lambda backend=None: _elsewhere(real(backend)))
    err = one_line_error(capsys, [*RUN, "--trials", "192", "--out", out])
    assert (
        f"{out} holds trials computed by jax {here['jax']} (jaxlib {here['jaxlib']}), cpu {here['processor']} "
        f"({here['cpu']}), this is jax {here['jax']} (jaxlib {here['jaxlib']}), cpu Intel Xeon Platinum 8480+ "
        "(GenuineIntel family 6 model 143) (features only here: avx512bw avx512f): the same seed gives other last "
        f"bits there; run it with the run's build (on a cpu {here['processor']} ({here['cpu']}; "
    ) in err
    assert "use another --out directory, or pass --mix-builds (mix_builds=True)" in err
    assert sorted(os.listdir(os.path.join(out, "chunks"))) == ["g000_t0000000000_0000000128.npz"]  # nothing computed
    capsys.readouterr()
    assert cli.main([*RUN, "--trials", "128", "--out", out]) == 0  # computing nothing is not refused
    assert cli.main([*RUN, "--trials", "192", "--out", out, "--mix-builds"]) == 0
    assert _record(out) == {"builds": [here, _elsewhere(here)], "mixed": True}
    monkeypatch.undo()
    assert cli.main([*RUN, "--trials", "256", "--out", out]) == 0  # a build already in a mixed run goes on
    assert len(_record(out)["builds"]) == 2


def test_mix_builds_and_overwrite_in_python(tmp_path, another_build):
    out = str(tmp_path / "run")
    kw = dict(out_dir=out, identity={}, progress=False)
    with pytest.MonkeyPatch.context() as undo:
        undo.setattr(builds, "this_build", lambda backend=None: dict(another_build, processor="Simulated"))
        first = engine.run(trial, POINTS, 64, **kw)["walk"]
    with pytest.raises(store.BuildMismatch, match="pass --mix-builds"):
        engine.run(trial, POINTS, 128, **kw)
    mixed = engine.run(trial, POINTS, 128, mix_builds=True, **kw)["walk"]
    assert np.array_equal(mixed[:, :64], first) and _record(out)["mixed"] is True
    with pytest.MonkeyPatch.context() as undo:
        undo.setattr(builds, "this_build", lambda backend=None: dict(another_build, processor="A third"))
        engine.run(trial, POINTS, 128, overwrite=True, **kw)  # discards the others' trials
        assert _record(out) == {"builds": [dict(another_build, processor="A third")], "mixed": False}


def test_a_directory_written_before_builds_were_recorded_grows_as_before(tmp_path, another_build):
    """No build.json (as every directory before it): the identity, and so every chunk header's
    digest, is what it was; growth keeps the stored chunks and is refused by nothing."""
    out = str(tmp_path / "run")
    kw = dict(out_dir=out, identity={"experiment": "toy"}, progress=False)
    engine.run(trial, POINTS, 64, **kw)
    os.remove(os.path.join(out, store.BUILD_FILE))
    identity = open(os.path.join(out, "identity.json")).read()
    chunk = os.path.join(out, "chunks", "g000_t0000000000_0000000064.npz")
    before = open(chunk, "rb").read()
    grown = engine.run(trial, POINTS, 128, **kw)["walk"]
    assert open(chunk, "rb").read() == before and open(os.path.join(out, "identity.json")).read() == identity
    fresh = engine.run(trial, POINTS, 128, out_dir=str(tmp_path / "fresh"), identity={"experiment": "toy"}, progress=False)  # fmt: skip
    assert np.array_equal(grown, fresh["walk"])
    assert _record(out) == {"builds": [another_build], "mixed": False, "unrecorded": True}


def test_another_jax_that_traces_other_programs_is_named_as_the_cause(capsys, tmp_path):
    """Another JAX traced the stored trials to other programs: nothing can be mixed, and the line
    says the JAX version is why (from build.json, or config.json's versions where it is absent)."""
    out = str(tmp_path / "run")
    assert cli.main([*RUN, "--trials", "64", "--out", out]) == 0
    path = os.path.join(out, "identity.json")
    identity = json.load(open(path))
    identity["programs"] = ["0" * 64]
    store.atomic_write_json(path, identity)
    record = _record(out)
    record["builds"][0].update(jax="0.6.2", jaxlib="0.6.2")
    store.atomic_write_json(os.path.join(out, store.BUILD_FILE), record)
    err = one_line_error(capsys, [*RUN, "--trials", "128", "--out", out])
    here = builds.this_build()
    assert (
        f"{out} holds a run computed by jax 0.6.2 (jaxlib 0.6.2), whose trial programs this jax {here['jax']} "
        f"(jaxlib {here['jaxlib']}) traces differently (differs in programs[0]: stored sha256 000000000000..., "
    ) in err
    assert (
        "the JAX version is the cause, and trials of two JAX versions cannot be mixed; run with the run's versions "
        "(pip install jax==0.6.2 jaxlib==0.6.2), or use another --out directory (--overwrite discards the run)"
    ) in err
    assert "--mix-builds" not in err
    os.remove(os.path.join(out, store.BUILD_FILE))  # (written before builds were recorded: config.json's versions)
    config_json = json.load(open(os.path.join(out, "config.json")))
    config_json["versions"]["jax"] = "0.6.1"
    store.atomic_write_json(os.path.join(out, "config.json"), config_json)
    assert "computed by jax 0.6.1 (jaxlib 0.6.1)" in one_line_error(capsys, [*RUN, "--trials", "128", "--out", out])
    store.atomic_write_json(path, dict(identity, seed=5))  # another configuration: as before
    err = one_line_error(capsys, [*RUN, "--trials", "128", "--out", out])
    assert "holds a run with a different configuration (differs in programs[0]" in err and "seed" in err


# --------------------------------------------------------------------------- verify
def _verify(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["verify", *map(str, args)])
    return code, out.getvalue().strip(), err.getvalue().strip()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-builds") / "run"
    assert cli.main([*RUN, "--trials", "600", "--out", str(out)]) == 0
    return out


def _with_values(finished, tmp_path, change) -> str:
    """``finished`` with ``change(kl)`` applied to its stored values, every digest rewritten (chunks
    removed), as another build's run or an edit would leave it."""
    edited = tmp_path / "edited"
    shutil.copytree(finished, edited)
    shutil.rmtree(edited / "chunks")
    config_json, values = rundir.load_results(str(edited))
    kl = np.array(values["kl"])
    change(kl)
    rundir.write_results(str(edited), dict(config_json), {"kl": kl}, time.perf_counter())
    return str(edited)


def _ulps_up(kl, n: int) -> None:
    """Moves the last trial's values of point 1 up by ``n`` ulp (those above zero)."""
    for _ in range(n):
        kl[1, 599] = np.where(kl[1, 599] > 0, np.nextafter(kl[1, 599], np.float32(np.inf)), kl[1, 599])


def test_verify_tells_another_build_from_values_that_differ(tmp_path, finished, another_build):
    recorded = _record(finished)["builds"][0]  # (this machine's; the verifying one is another_build)
    moved = _with_values(finished, tmp_path / "ulps", lambda kl: _ulps_up(kl, 3))
    changed = int((np.asarray(rundir.load_results(moved)[1]["kl"]) != rundir.load_results(str(finished))[1]["kl"]).sum())  # fmt: skip
    assert changed > 0
    code, _, err = _verify(moved, "--sample", "600")
    assert code == 1 and err.count("\n") == 0, err
    assert err.startswith(
        f"jaxfed: verify: {moved}: computed by another JAX or processor: {changed:,} of 21,600 recomputed values "
        "differ from the stored ones, by at most 3 ulp ("
    ), err
    assert "relative, in kl), none by more; the run records jax" in err and "this is jax" in err
    assert f"verify it with the run's build for a bit-for-bit check (on a cpu {recorded['processor']}" in err
    with pytest.raises(verifying.OtherBuild, match="by at most 3 ulp"):
        verifying.verify(moved, sample="all")

    def edited(kl):
        kl[2, 17, 3] *= 1.001  # (thousands of ulp: a value changed)
        _ulps_up(kl, 1)

    code, _, err = _verify(_with_values(finished, tmp_path / "edit", edited), "--sample", "600")
    assert code == 2 and err.count("\n") == 0, err
    assert "metric 'kl' of point 2, trial 17, value at flat index 3 of the trial's" in err, err
    assert "not what the run's seed and code compute" in err
    assert "more than 64 ulp apart: values differ, not the last bits of another build" in err


def test_verify_under_the_runs_own_build_owes_every_bit(tmp_path, finished):
    """The run's own build recomputes it bit for bit: there one ulp is a value that differs (the
    forgery tests/runs/test_verifying.py also catches)."""
    moved = _with_values(finished, tmp_path, lambda kl: _ulps_up(kl, 1))
    code, _, err = _verify(moved, "--sample", "600")
    assert code == 2 and "metric 'kl' of point 1, trial 599" in err and "not the last bits" not in err


def test_ulp_distance_and_gap():
    a = np.array([1.0, -1.0, 0.0, -0.0, 3.5, -2e-45], np.float32)
    up = np.nextafter(a, np.float32(np.inf))
    assert verifying.ulps(a, up).tolist() == [1, 1, 1, 1, 1, 1]
    assert verifying.ulps(np.float32([-1e-45]), np.float32([1e-45])).tolist() == [2]
    assert verifying.ulps(np.float64([1.0]), np.nextafter(np.float64([1.0]), 2.0) + 2e-16).tolist() == [2]
    stored = np.linspace(1, 2, 24, dtype=np.float32).reshape(2, 4, 3)
    mine = stored.copy()
    mine[1, 2, 0] = np.nextafter(mine[1, 2, 0], np.float32(3))
    found = verifying.gap(stored, mine)
    assert (found.compared, found.differing, found.max_ulps, found.far) == (24, 1, 1, None)
    assert 5e-8 < found.max_relative < 1.2e-7
    mine[0, 3, 2] = np.nan
    assert verifying.gap(stored, mine).far == (0, 3)
    nan = np.full((1, 1, 1), np.nan, np.float32)
    assert verifying.gap(nan, nan.view(np.uint32).__add__(1).view(np.float32)).far is None  # (NaN payloads)
    ints = np.zeros((1, 2), np.int32)
    assert verifying.gap(ints, ints + 1).far == (0, 0)
