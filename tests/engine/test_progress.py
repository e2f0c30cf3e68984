"""Progress a log file shows (plain lines off a terminal), bars that stop when their group is done
and start at the stored fraction, and ``jaxfed reproduce``'s overall ETA."""

import io

import pytest

from jaxfed import cli
from jaxfed.engine import progress
from jaxfed.engine.progress import Overall, Progress


class Clock:
    """A clock the test sets (seconds)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_off_a_terminal_a_line_at_most_every_interval_and_one_per_finished_group():
    stream, clock = io.StringIO(), Clock()
    bar = Progress(True, "exp: ", stream=stream, interval=30, clock=clock)
    bar.note("group 1/1: compiling …")
    clock.now = 10
    bar.group("group 1/1", 1000, stored=400)
    clock.now = 20
    bar.update(100)  # 10 s after the group opened: no line yet
    clock.now = 45
    bar.update(100)  # 35 s: a line (the stored 400 count in "done", not in the rate)
    clock.now = 50
    bar.update(100)  # 5 s after the last line: none
    clock.now = 70
    bar.finish_group()
    assert stream.getvalue().splitlines() == [
        "exp: group 1/1: compiling …",
        "[00:45] exp: group 1/1: 600/1,000 point-trials (60%), 5.71 point-trials/s, ETA 01:10",
        "[01:10] exp: group 1/1: done, 700 point-trials (400 stored) in 01:00, 5 point-trials/s",
    ]
    bar.update(5)  # no group open: nothing
    assert len(stream.getvalue().splitlines()) == 3


def test_a_group_with_everything_stored_says_so_and_no_eta_before_any_trial():
    stream, clock = io.StringIO(), Clock()
    bar = Progress(True, stream=stream, interval=0, clock=clock)
    bar.group("group 1/2", 30, stored=30)
    bar.finish_group()
    bar.group("group 2/2", 30)
    clock.now = 1
    bar.update(0)
    assert stream.getvalue().splitlines() == [
        "[00:00] group 1/2: done, 30 point-trials, all stored",
        "[00:01] group 2/2: 0/30 point-trials (0%), 0 point-trials/s, ETA ?",
    ]


def test_on_a_terminal_the_bar_starts_at_the_stored_fraction_and_closes_when_done():
    stream, clock = Terminal(), Clock()
    bar = Progress(True, stream=stream, clock=clock)
    bar.group("group 1/1", 1000, stored=400)
    assert bar.bar is not None and bar.bar.n == 400 and "40%" in stream.getvalue()
    bar.update(600)
    clock.now = 2
    bar.finish_group()  # before the next group compiles: its clock stops
    assert bar.bar is None and stream.getvalue().rstrip().endswith(
        "done, 1,000 point-trials (400 stored) in 00:02, 300 point-trials/s"
    )


def test_disabled_progress_writes_nothing():
    stream = Terminal()
    bar = Progress(False, stream=stream, interval=0)
    bar.note("x")
    bar.group("group 1/1", 10, stored=5)
    bar.update(5)
    bar.finish_group()
    overall = Overall(False, {"a": 1}, stream=stream)
    overall.start("a")
    overall.finish()
    overall.close()
    assert stream.getvalue() == ""


@pytest.mark.parametrize("text, value", [("", progress.LOG_INTERVAL_S), ("5", 5.0), (" 0 ", 0.0)])
def test_the_line_interval_comes_from_the_environment(text, value):
    assert progress.log_interval({progress.INTERVAL_VARIABLE: text}) == value


@pytest.mark.parametrize("text", ["soon", "-1", "nan", "inf"])
def test_a_bad_line_interval_is_one_line_naming_the_variable(text):
    with pytest.raises(ValueError, match=f"JAXFED_PROGRESS_INTERVAL must be a number of seconds >= 0, got '{text}'"):
        progress.log_interval({progress.INTERVAL_VARIABLE: text})


def test_the_overall_eta_weighs_experiments_by_their_trials():
    stream, clock = io.StringIO(), Clock()
    overall = Overall(True, {"a": 100, "b": 300, "c": 100}, stream=stream, clock=clock)
    overall.start("a")
    clock.now = 10
    overall.finish()  # 100 trials in 10 s: 400 left take 40 s
    overall.start("b")
    clock.now = 20
    overall.finish()  # 400 in 20 s: 100 left take 5 s
    overall.start("c")
    clock.now = 30
    overall.finish()
    assert stream.getvalue().splitlines() == [
        "[00:10] reproduce: 1/3 experiments done, ETA 00:40",
        "[00:20] reproduce: 2/3 experiments done, ETA 00:05",
        "[00:30] reproduce: 3/3 experiments done, ETA 00:00",
    ]


def test_the_overall_bar_on_a_terminal_names_the_experiment_and_advances_by_its_trials():
    stream = Terminal()
    overall = Overall(True, {"a": 100, "b": 300}, stream=stream)
    overall.start("b")
    assert "experiment 1/2: b" in stream.getvalue()
    overall.finish()
    assert overall.bar is not None and overall.bar.n == 300
    overall.close()


@pytest.mark.slow  # ~8 s of jaxfed reproduce; the lines' rules are checked above without running
def test_reproduce_in_a_log_shows_compiling_progress_done_and_overall_lines(tmp_path, capsys, monkeypatch):
    """A background run (stderr not a terminal) logs each chunk here (interval 0), each group's end
    and the overall ETA; a grown run's group counts its stored trials; the report path is printed
    once, on stdout."""
    monkeypatch.setenv(progress.INTERVAL_VARIABLE, "0")
    args = ["reproduce", "--only", "gfvl-topologies", "--out", str(tmp_path), "--chunk-size", "5"]
    assert cli.main([*args, "--scale", "0.01"]) == 0  # 10 trials per point, 3 points
    out, err = capsys.readouterr()
    report = str(tmp_path / "report.md")
    assert out == report + "\n" and report not in err
    lines = err.splitlines()
    assert "gfvl-topologies: group 1/1: compiling …" in lines
    assert any("] gfvl-topologies: group 1/1: 15/30 point-trials (50%), " in line for line in lines), err
    assert any("gfvl-topologies: group 1/1: done, 30 point-trials in " in line for line in lines), err
    assert any(line.endswith("reproduce: 1/1 experiments done, ETA 00:00") for line in lines), err
    assert cli.main([*args, "--scale", "0.02"]) == 0  # grown: 20 trials, 10 of them stored
    err = capsys.readouterr().err
    assert "gfvl-topologies: group 1/1: done, 60 point-trials (30 stored) in " in err, err
