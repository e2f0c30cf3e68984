"""A run's identity is that of what it computes, not of where it was started: the program digest
has no colour codes (JAX colours a printed program when stdout is a terminal), so a run made by a
batch job grows from a terminal and the reverse. pytest captures stdout, so the CLI is run here
under a real pseudo-terminal."""

import hashlib
import json
import os
import pty
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import engine
from jaxfed.engine import points as engine_points

SMALL = ["--set", "n_slots=40", "--set", "n_agents=6"]


def _toy_trial(key, point):
    return {"x": jax.random.normal(key, (3,)) * point["scale"] + jnp.arange(3.0)}


def test_the_program_digest_ignores_colour_settings(monkeypatch):
    """On a terminal JAX colours ``str(jaxpr)``; the digest is the same on a terminal, off one and
    with colour switched off, and equals the uncoloured text's digest that older stores hold."""
    from jax._src import pretty_printer

    jaxpr = jax.make_jaxpr(lambda k: _toy_trial(k, {"scale": 2.0}))(jax.random.key(0))
    monkeypatch.setattr(pretty_printer, "CAN_USE_COLOR", False)
    plain = str(jaxpr)
    canonical = engine_points.program_digest(jaxpr)
    assert hashlib.sha256(plain.encode()).hexdigest() == canonical
    monkeypatch.setattr(pretty_printer, "CAN_USE_COLOR", True)  # as on a terminal
    assert str(jaxpr) != plain  # colour codes: what used to enter the identity
    assert engine_points.program_digest(jaxpr) == canonical
    assert engine_points.coloured_program_digest(jaxpr) == hashlib.sha256(str(jaxpr).encode()).hexdigest()


def test_a_run_stored_with_coloured_digests_grows_under_the_canonical_ones(tmp_path, monkeypatch):
    """A run a terminal started before the digest was canonical holds coloured program digests:
    it grows (only the new trials computed) and ends equal to a fresh run."""
    points = [{"scale": jnp.float32(1.5)}]
    out = str(tmp_path / "run")
    with monkeypatch.context() as mp:  # the old spelling: str(jaxpr) on a terminal
        mp.setattr(engine_points, "program_digest", engine_points.coloured_program_digest)
        mp.setattr("jaxfed.engine.core.program_digest", engine_points.coloured_program_digest)
        engine.run(_toy_trial, points, n_trials=8, seed=1, out_dir=out, identity={"what": "toy"}, progress=False)
    stored = json.load(open(os.path.join(out, "identity.json")))
    grown = engine.run(_toy_trial, points, n_trials=16, seed=1, out_dir=out, identity={"what": "toy"}, progress=False)
    fresh = engine.run(_toy_trial, points, n_trials=16, seed=1, progress=False)
    np.testing.assert_array_equal(np.asarray(grown["x"]), np.asarray(fresh["x"]))
    assert json.load(open(os.path.join(out, "identity.json"))) == stored  # kept under the identity it holds


def test_the_coloured_program_is_printed_only_for_a_store_holding_another_identity(tmp_path, monkeypatch):
    """Printing a program costs ~60 ms a group (a third of a warm 64-trial run's fixed cost): a run
    without a store, a new store and a store of the same identity never print the old spelling."""
    printed = []

    def coloured(jaxpr):
        printed.append(jaxpr)
        return "not-a-stored-digest"

    monkeypatch.setattr(engine_points, "coloured_program_digest", coloured)
    monkeypatch.setattr("jaxfed.engine.core.coloured_program_digest", coloured)
    points, out = [{"scale": jnp.float32(1.5)}], str(tmp_path / "run")
    engine.run(_toy_trial, points, n_trials=8, seed=1, progress=False)
    for n in (8, 16):  # a new store, then the same identity grown
        engine.run(_toy_trial, points, n_trials=n, seed=1, out_dir=out, identity={"what": "toy"}, progress=False)
    assert printed == []
    with pytest.raises(engine.ConfigMismatch):  # another identity stored: the old spelling is tried
        engine.run(_toy_trial, points, n_trials=8, seed=2, out_dir=out, identity={"what": "toy"}, progress=False)
    assert len(printed) == 1


def _run_cli(args: list, env: dict, terminal: bool) -> tuple[int, str]:
    """``jaxfed`` with stdout and stderr a pseudo-terminal (``terminal``) or a pipe; (exit code, output)."""
    argv = [sys.executable, "-m", "jaxfed.cli", *args]
    if not terminal:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        return done.returncode, done.stdout + done.stderr
    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def read():  # drain the terminal so the child never blocks on a full buffer
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed its side
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
        os.close(follower)
        code = proc.wait(timeout=600)
        reader.join(timeout=10)
    finally:
        os.close(leader)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize(
    "first, second",
    [
        ({"terminal": False, "env": {}}, {"terminal": True, "env": {"TERM": "xterm-256color", "COLUMNS": "41"}}),
        ({"terminal": True, "env": {"TERM": "dumb", "LC_ALL": "C"}}, {"terminal": False, "env": {"COLUMNS": "200"}}),
    ],
    ids=["batch-then-terminal", "terminal-then-batch"],
)
def test_a_run_grows_across_terminals_and_batch_jobs(tmp_path, first, second):
    """A run made with stdout a file grows from a pseudo-terminal, and the reverse, under other
    TERM, COLUMNS and locale settings; the grown run's metrics equal a fresh run's of the same size."""
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_PPRINT", "COLUMNS", "TERM", "LC_"))}
    out, fresh = str(tmp_path / "grown"), str(tmp_path / "fresh")
    code, text = _run_cli(
        ["run", "gfvl-topologies", "--trials", "6", "--out", out, *SMALL],
        {**base_env, **first["env"]},
        first["terminal"],
    )
    assert code == 0, text[-2000:]
    code, text = _run_cli(
        ["run", "gfvl-topologies", "--trials", "12", "--out", out, *SMALL],
        {**base_env, **second["env"]},
        second["terminal"],
    )
    assert code == 0, text[-2000:]
    assert "different configuration" not in text
    code, text = _run_cli(
        ["run", "gfvl-topologies", "--trials", "12", "--out", fresh, "--quiet", *SMALL], base_env, False
    )
    assert code == 0, text[-2000:]
    with np.load(os.path.join(out, "metrics.npz")) as a, np.load(os.path.join(fresh, "metrics.npz")) as b:
        assert sorted(a.files) == sorted(b.files)
        for name in a.files:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
