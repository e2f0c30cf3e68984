"""User code cannot end a run silently or move it (issue 37 part 4): paths are resolved before it
runs; an exit (sys.exit, os._exit) or a KeyboardInterrupt it raises is an error naming the file; a
kill inside it is reported at the next run; jax_enable_x64 switched in build() and jax_disable_jit set at import are refused; a
report of the wrong type or a sweep whose axes do not fit names the file; long imports and
builds say so."""

import os
import signal
import subprocess
import sys
import time

import jax
import pytest

from jaxfed import cli
from jaxfed.engine import RunOptions
from jaxfed.runs import catalog, run_experiment, runner

USER_FILE = """
import dataclasses, os, posix, signal, subprocess, sys, time
import jax
from jaxfed.experiment import Experiment, Sweep

MODE = {mode!r}
if MODE == "chdir":
    os.chdir({elsewhere!r})
if MODE == "nojit":
    jax.config.update("jax_disable_jit", True)
if MODE == "sleep_import":
    time.sleep(0.6)
if MODE == "posix_exit":
    posix._exit(0)


@dataclasses.dataclass(frozen=True)
class Config:
    n: int = 2  # values


def trial(key, point):
    if MODE == "exit_trace":
        sys.exit(0)
    if MODE == "os_exit_trace":
        os._exit(0)
    return {{"x": jax.random.normal(key, () if MODE == "scalar" else (2,))}}


def build(cfg):
    if MODE == "exit_build":
        sys.exit(0)
    if MODE == "os_exit":
        os._exit(0)
    if MODE == "kill":  # (a kill from outside: another process sends it)
        subprocess.run(["kill", "-9", str(os.getpid())])
        time.sleep(60)
    if MODE == "abort":
        os.abort()
    if MODE == "kill_self":
        os.kill(os.getpid(), signal.SIGTERM)
    if MODE == "raise_signal":
        signal.raise_signal(signal.SIGKILL)
    if MODE == "thread":
        import threading
        threading.Thread(target=time.sleep, args=(600,), name="user-sleeper").start()
    if MODE == "x64":
        jax.config.update("jax_enable_x64", True)
    if MODE == "interrupt":
        raise KeyboardInterrupt
    if MODE == "sleep_build":
        time.sleep(0.6)
    if MODE == "chdir_build":
        os.chdir({elsewhere!r})
    if MODE == "wait_build":
        open({elsewhere!r} + "/started", "w").close()
        time.sleep(60)
    return Sweep(trial, [{{}}], [{{"p": 0}}], {{"x": ("i",)}})


def report(cfg, labels, results):
    return 3 if MODE == "report_int" else ""


EXPERIMENT = Experiment("mine", "mine", Config, build, plot=lambda *a: None, report=report)
"""


def _line(fragment: str, nth: int = 0) -> int:
    """The line of the user file holding ``fragment`` (its ``nth`` occurrence)."""
    lines = USER_FILE.splitlines()
    return [i + 1 for i, text in enumerate(lines) if fragment in text][nth]


def _user_file(tmp_path, mode):
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    path = tmp_path / f"exp_{mode}.py"
    path.write_text(USER_FILE.format(mode=mode, elsewhere=str(tmp_path / "elsewhere")))
    return path


def _run(tmp_path, capsys, mode, *extra):
    path = _user_file(tmp_path, mode)
    code = cli.main(["run", f"{path.name}:EXPERIMENT", "--trials", "3", "--out", "out", "--quiet", *extra])
    captured = capsys.readouterr()
    return code, captured.err.strip(), path


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_chdir_at_import_does_not_move_the_run(tmp_path, capsys):
    code, err, _ = _run(tmp_path, capsys, "chdir")
    assert code == 0, err
    assert (tmp_path / "out" / "config.json").is_file()
    assert not (tmp_path / "elsewhere" / "out").exists()


@pytest.mark.parametrize(
    "mode, line", [("exit_build", _line("sys.exit(0)", 1)), ("exit_trace", _line("sys.exit(0)", 0))]
)
def test_sys_exit_in_user_code_is_an_error_naming_the_file(tmp_path, capsys, mode, line):
    code, err, path = _run(tmp_path, capsys, mode)
    assert code == 2 and err.count("\n") == 0
    assert f"{path}:{line}: the experiment's code called sys.exit(0)" in err


def test_chdir_in_build_does_not_move_a_library_run(tmp_path):
    exp = catalog.from_file(str(_user_file(tmp_path, "chdir_build")), "EXPERIMENT")
    run_experiment(exp, exp.config_cls(), 3, RunOptions.for_experiments(out_dir="out"), quiet=True)
    assert (tmp_path / "out" / "config.json").is_file()
    assert not (tmp_path / "elsewhere" / "out").exists()


@pytest.mark.parametrize("disposition", ["default", "ignored"])
def test_a_keyboard_interrupt_raised_by_build_is_an_error_in_user_code(tmp_path, capsys, monkeypatch, disposition):
    """With Python's handler (a terminal) and with SIGINT ignored (a background job, nohup, a test worker
    that ignores it: CI's failed here with 'interrupted', exit 130, since no handler could be installed)."""
    handler = signal.default_int_handler if disposition == "default" else signal.SIG_IGN
    previous = signal.signal(signal.SIGINT, handler)
    try:
        code, err, path = _run(tmp_path, capsys, "interrupt")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (
        code == 2
        and f"{path}:{_line('raise KeyboardInterrupt')}: KeyboardInterrupt raised by the experiment's code" in err
    )


def test_x64_switched_in_build_is_refused_and_put_back(tmp_path, capsys):
    before = jax.config.read("jax_enable_x64")
    code, err, path = _run(tmp_path, capsys, "x64")
    assert jax.config.read("jax_enable_x64") == before
    assert code == 2 and f"{path}: jax_enable_x64 was switched (float32 to float64) during build()" in err
    assert not (tmp_path / "out" / "metrics.npz").exists()


def test_disable_jit_at_import_names_the_file(tmp_path, capsys):
    try:
        code, err, path = _run(tmp_path, capsys, "nojit")
    finally:
        jax.config.update("jax_disable_jit", False)
    assert code == 2 and f"{path}: jax_disable_jit is on" in err


def test_axes_that_do_not_fit_the_metric_name_the_file(tmp_path, capsys):
    code, err, path = _run(tmp_path, capsys, "scalar")
    assert code == 2 and err.startswith(f"jaxfed: error: {path}: metric_axes['x']")


def test_a_report_of_the_wrong_type_names_the_file(tmp_path, capsys):
    code, err, path = _run(tmp_path, capsys, "report_int")
    assert code == 2 and err.count("\n") == 0
    assert f"the report of experiment 'mine' ({path}) returned a int" in err


@pytest.mark.parametrize("mode, what", [("sleep_import", "importing"), ("sleep_build", "mine: build() of")])
def test_a_long_import_or_build_says_so(tmp_path, capsys, monkeypatch, mode, what):
    monkeypatch.setattr(runner, "NOTICE_AFTER", 0.2)
    code, err, path = _run(tmp_path, capsys, mode)
    assert code == 0 and f"jaxfed: {what} {path} … still running after 0.2 s" in err


@pytest.mark.parametrize(
    "mode, line", [("os_exit", _line("os._exit(0)", 1)), ("os_exit_trace", _line("os._exit(0)", 0))]
)
def test_os_exit_in_user_code_is_an_error_naming_the_file_not_a_silent_success(tmp_path, mode, line):
    """os._exit(0) in build or in the trial used to end `jaxfed run` with status 0 and nothing
    written: now it is an error with the file and line, exit status 2."""
    path = _user_file(tmp_path, mode)
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(command + ["--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert f"{path}:{line}: the experiment's code called os._exit(0)" in done.stderr
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.parametrize(
    "mode, line, call",
    [
        ("posix_exit", _line("posix._exit(0)"), "os._exit(0)"),
        ("abort", _line("os.abort()"), "os.abort()"),
        ("kill_self", _line("os.kill(os.getpid(), signal.SIGTERM)"), "os.kill("),
        ("raise_signal", _line("signal.raise_signal(signal.SIGKILL)"), "signal.raise_signal(SIGKILL)"),
    ],
)
def test_every_way_user_code_ends_its_process_is_an_error_naming_the_file(tmp_path, mode, line, call):
    """posix._exit (os._exit under its module's name) at import, os.abort, a terminating signal the code
    sends its own process: each used to end `jaxfed run` without a word (status 0, or killed); now each is an
    error naming the file and line, exit status 2, nothing written."""
    path = _user_file(tmp_path, mode)
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(command + ["--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr)
    said = "failed to import: it called" if mode == "posix_exit" else "the experiment's code called"
    assert f"{path}:{line}" in done.stderr and f"{said} {call}" in done.stderr, done.stderr
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_run_killed_inside_user_code_is_reported_at_the_next_run(tmp_path):
    path = _user_file(tmp_path, "kill")
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    first = subprocess.run(command + ["--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL  # (a kill cannot be caught in the process …)
    assert (tmp_path / "out" / runner.MARKER).exists()
    path.write_text(path.read_text().replace("MODE = 'kill'", "MODE = ''"))
    second = subprocess.run(command + ["--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    said = [line for line in second.stderr.splitlines() if "the previous run on" in line]
    assert len(said) == 1 and "ended inside the experiment's code" in said[0] and "running since" in said[0]
    assert str(path) in said[0]  # (… the next run says what was running, and since when)
    assert not (tmp_path / "out" / runner.MARKER).exists() and (tmp_path / "out" / "config.json").exists()


def test_a_failing_build_leaves_no_directory(tmp_path, capsys):
    code, _, _ = _run(tmp_path, capsys, "x64")
    assert code == 2 and not (tmp_path / "out").exists()


def test_the_users_ctrl_c_is_still_an_interrupt(tmp_path):
    path = _user_file(tmp_path, "wait_build")
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out"]
    # SIGINT as a terminal delivers it: a test worker may ignore it, and its children inherit that.
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    started = tmp_path / "elsewhere" / "started"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "jaxfed: interrupted" in err


def test_a_thread_left_running_by_user_code_does_not_keep_the_finished_run_alive(tmp_path):
    """A non-daemon thread started in build() kept `jaxfed run` from exiting after the run was
    written: the command says so and exits with the run's status."""
    path = _user_file(tmp_path, "thread")
    command = [sys.executable, "-m", "jaxfed.cli", "run", f"{path}:EXPERIMENT", "--trials", "3", "--out", "out"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(command + ["--quiet"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "left 1 thread(s) running (user-sleeper); exiting without them" in done.stderr
    assert (tmp_path / "out" / "config.json").exists()


def test_a_run_killed_inside_an_imported_file_of_a_built_in_experiment_is_reported_next_time(tmp_path):
    """The marker also covers a built-in experiment running user code from --import (here a graph
    builder): a kill inside it is reported by the next run, naming the file."""
    graph_file = tmp_path / "killer_graph.py"
    body = (
        "import os\nimport numpy as np\nfrom jaxfed.gfvl import graphs\n\n\n"
        "def killer(n):\n    {action}\n    return graphs.ring(n)\n\n\n"
        "graphs.register('killer', killer)\n"
    )
    graph_file.write_text(body.format(action="__import__('subprocess').run(['kill', '-9', str(os.getpid())])"))
    command = [sys.executable, "-m", "jaxfed.cli", "run", "gfvl-topologies", "--import", str(graph_file), "--quiet"]
    command += ["--trials", "3", "--set", "n_slots=8", "--set", "topologies=killer,ring", "--out", "out"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert (tmp_path / "out" / runner.MARKER).exists()
    graph_file.write_text(body.format(action="pass"))
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    said = [line for line in second.stderr.splitlines() if "the previous run on" in line]
    assert len(said) == 1 and "killer_graph.py" in said[0] and "running since" in said[0], second.stderr
    assert not (tmp_path / "out" / runner.MARKER).exists() and (tmp_path / "out" / "config.json").exists()
