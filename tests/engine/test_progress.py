"""Progress a log file shows (plain lines off a terminal), bars that stop when their group is done
and start at the stored fraction, and ``jaxfed reproduce``'s overall ETA
(:mod:`jaxfed.runs.reproduce`)."""

import io
import sys
import types

import pytest
import tqdm

from jaxfed import cli
from jaxfed.engine import progress
from jaxfed.engine.progress import Progress
from jaxfed.experiments import REGISTRY
from jaxfed.runs import reproduce as reproduce_progress
from jaxfed.runs.reproduce import ReproduceProgress


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
    overall = ReproduceProgress(False, {"a": 1}, stream=stream)
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


def _run(overall, clock, name, seconds, measured=True):
    overall.start(name)
    clock.now += seconds
    if measured:
        overall.finish()
    else:
        overall.finish(measured=False)


def test_the_overall_eta_starts_from_the_priors_and_each_group_corrects_its_own():
    """Two groups, b's experiments five times a's (the k-means half against the G-FVL one). a runs
    twice as slow as its priors: until one of b's has finished, b's priors are scaled by that; b's
    own finished experiment then replaces it. (Weighting by elapsed time per prior second done, as
    before, says 01:04 after b-1: a's slowdown applied to b.)"""
    stream, clock = io.StringIO(), Clock()
    overall = ReproduceProgress(
        True, {"a-1": 10, "a-2": 10, "b-1": 50, "b-2": 50}, stream=stream, clock=clock, prior_weight=0
    )
    _run(overall, clock, "a-1", 20)
    _run(overall, clock, "a-2", 20)
    _run(overall, clock, "b-1", 50)
    _run(overall, clock, "b-2", 50)
    assert stream.getvalue().splitlines() == [
        "[00:00] reproduce: 0/4 experiments done, ETA 02:00",  # the priors
        "[00:20] reproduce: 1/4 experiments done, ETA 03:40",  # 10 × 2 + 100 × 2
        "[00:40] reproduce: 2/4 experiments done, ETA 03:20",
        "[01:30] reproduce: 3/4 experiments done, ETA 00:50",  # b at its own speed
        "[02:20] reproduce: 4/4 experiments done, ETA 00:00",
    ]


def test_the_overall_eta_is_never_negative_and_stored_experiments_do_not_measure_speed():
    clock = Clock()
    overall = ReproduceProgress(
        True, {"a-1": 10, "a-2": 10, "b-1": 50}, stream=io.StringIO(), clock=clock, prior_weight=0
    )
    _run(overall, clock, "a-1", 0, measured=False)  # served from the store in no time
    assert overall.eta() == 60  # the priors, not 0 (no speed measured yet)
    overall.start("a-2")
    clock.now += 35  # 25 s past its prior: nothing left of it, b's prior is left
    assert overall.eta() == 50
    overall.finish()  # a ran 3.5 times slower than its prior: b is expected to as well
    assert overall.eta() == 175
    overall.start("b-1")
    clock.now += 1000
    assert overall.eta() == 0


@pytest.mark.parametrize(
    "took, running, running_s, left",
    [
        ({}, None, 0, 120),  # nothing measured: the priors
        ({"a-1": 5}, None, 0, 5 + 50),  # a at half its prior, and b too until b runs
        ({"a-1": 5, "b-1": 100}, None, 0, 5 + 100),  # each group at its own speed
        ({"a-1": 5, "b-1": None}, None, 0, 5 + 25),  # a stored one is done but measures nothing
        ({"a-1": 5, "a-2": 5}, "b-1", 20, 5 + 25),  # the running one's elapsed time counts
        # past its estimate (by 175 s): none of it left, and its overrun slows every group's estimate
        ({"a-1": 5, "a-2": 5}, "b-1", 200, 50 * (10 + 175) / 20),
    ],
)
def test_overall_eta_formula(took, running, running_s, left):
    prior = {"a-1": 10, "a-2": 10, "b-1": 50, "b-2": 50}
    assert reproduce_progress.overall_eta(prior, took, running, running_s) == pytest.approx(left)


def test_the_overall_bar_on_a_terminal_names_the_experiment_and_shows_the_eta():
    stream, clock = Terminal(), Clock()
    overall = ReproduceProgress(True, {"a": 100, "b": 300}, stream=stream, clock=clock, prior_weight=0)
    overall.start("b")
    assert "experiment 1/2: b" in stream.getvalue() and "ETA 06:40" in stream.getvalue()
    clock.now = 100
    overall.finish()
    overall.start("a")
    assert overall.bar is not None and overall.bar.n == 1
    assert "experiment 2/2: a" in stream.getvalue() and "ETA 00:33" in stream.getvalue()  # b took 1/3 its prior
    overall.close()


def test_reproduce_priors_scale_the_reference_times_and_guess_for_an_experiment_without_one(monkeypatch):
    monkeypatch.setattr(
        reproduce_progress, "REFERENCE_SECONDS", {"a-1": (10.0, 100.0), "a-2": (20.0, 0.0), "b-1": (5.0, 50.0)}
    )
    experiments = [
        types.SimpleNamespace(name=name, default_trials=1000) for name in ("a-1", "a-2", "b-1", "a-new", "c-new")
    ]
    trials = {"a-1": 10, "a-2": 1000, "b-1": 2000, "a-new": 1, "c-new": 1}
    assert reproduce_progress.reproduce_priors(experiments, trials) == {
        "a-1": 11.0,  # the fixed part whole, the trials' at 10 of 1,000
        "a-2": 20.0,
        "b-1": 105.0,
        "a-new": 15.5,  # its group's mean
        "c-new": 136.0 / 3,  # every group's mean
    }


def test_every_built_in_experiment_has_a_reference_time():
    assert set(reproduce_progress.REFERENCE_SECONDS) <= set(REGISTRY.names())  # none left of a removed experiment
    assert {name for name in REGISTRY.names() if name.startswith(("gfvl-", "kmeans-"))} <= set(
        reproduce_progress.REFERENCE_SECONDS
    )
    assert all(fixed > 0 and trials_s > 0 for fixed, trials_s in reproduce_progress.REFERENCE_SECONDS.values())


def test_a_rerun_that_kept_the_stored_record_or_served_the_trials_measures_nothing(tmp_path):
    out = str(tmp_path)
    assert reproduce_progress.record_digest(out) is None
    (tmp_path / "config.json").write_text('{"record_sha256": "old"}')
    before = reproduce_progress.record_digest(out)
    assert before == "old"
    assert not reproduce_progress.computed_here({"record_sha256": "old"}, before)  # nothing computed: the record kept
    assert reproduce_progress.computed_here({"record_sha256": "new"}, before)
    assert not reproduce_progress.computed_here({"record_sha256": "old", "served_from": out}, before)
    assert reproduce_progress.computed_here({"record_sha256": "new"}, None)  # a first run


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
    prior = reproduce_progress.reproduce_priors([REGISTRY["gfvl-topologies"]], {"gfvl-topologies": 10})[
        "gfvl-topologies"
    ]
    assert any(line.endswith(f"reproduce: 0/1 experiments done, ETA {progress.clock_text(prior)}") for line in lines)
    assert any(line.endswith("reproduce: 1/1 experiments done, ETA 00:00") for line in lines), err
    assert cli.main([*args, "--scale", "0.02"]) == 0  # grown: 20 trials, 10 of them stored
    err = capsys.readouterr().err
    assert "gfvl-topologies: group 1/1: done, 60 point-trials (30 stored) in " in err, err


def test_the_overall_progress_of_jaxfed_reproduce_lives_above_the_engine():
    for name in ("ReproduceProgress", "overall_eta", "experiment_group"):
        assert not hasattr(progress, name) and hasattr(reproduce_progress, name)
    assert reproduce_progress.experiment_group("kmeans-snr") == "kmeans"
    assert progress.is_terminal(Terminal()) and not progress.is_terminal(io.StringIO())


def test_a_log_hears_a_heartbeat_while_a_group_compiles_and_while_a_chunk_computes():
    """Off a terminal, a line at least every interval while nothing else is written: the compile's
    elapsed time, then the running line with the chunk being computed; all on the clock that
    started at ``started`` (the command's start), each with the context (the overall ETA)."""
    stream, clock = io.StringIO(), Clock()
    clock.now = 100  # the command started at 0, this run 100 s later
    bar = Progress(
        True, "exp: ", stream=stream, interval=30, clock=clock, started=0.0, heartbeat=False, context=lambda: "ctx"
    )
    bar.waiting("group 1/2: compiling")
    clock.now = 129
    bar.beat()  # 29 s: not yet
    clock.now = 130
    bar.beat()
    clock.now = 145
    bar.beat()  # 15 s after the last line: none
    clock.now = 160
    bar.beat()
    clock.now = 170
    bar.group("group 1/2", 300)
    bar.chunks(3)
    clock.now = 200
    bar.beat()  # the first chunk, 30 s in
    clock.now = 205
    bar.update(100)  # (5 s after the last line: no progress line)
    clock.now = 235
    bar.beat()
    bar.finish_group()
    clock.now = 300
    bar.beat()  # nothing open: silent
    bar.close()
    assert stream.getvalue().splitlines() == [
        "exp: group 1/2: compiling …",
        "[02:10] exp: group 1/2: compiling (30 s) …; ctx",
        "[02:40] exp: group 1/2: compiling (60 s) …; ctx",
        "[03:20] exp: group 1/2: 0/300 point-trials (0%), 0 point-trials/s, ETA ?; computing chunk 1/3 (30 s) …; ctx",
        "[03:55] exp: group 1/2: 100/300 point-trials (33%), 1.54 point-trials/s, ETA 02:10; computing chunk 2/3 (30 s) …; ctx",  # noqa: E501
        "[03:55] exp: group 1/2: done, 100 point-trials in 01:05, 1.54 point-trials/s",
    ]


def test_the_heartbeat_thread_writes_while_waiting_and_stops_with_the_run():
    import time

    stream = io.StringIO()
    bar = Progress(True, "exp: ", stream=stream, interval=0.05)
    bar.waiting("group 1/1: compiling")
    deadline = time.monotonic() + 10
    while stream.getvalue().count("compiling (") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "exp: group 1/1: compiling …" and sum("compiling (" in line for line in lines) >= 2, lines
    time.sleep(0.3)
    assert stream.getvalue().splitlines() == lines  # closed: silent


def test_every_line_of_reproduce_is_on_the_command_clock():
    """The runs' lines count from the command's start, as the overall lines do (not from each run's)."""
    stream, clock = io.StringIO(), Clock()
    overall = ReproduceProgress(True, {"a": 60, "b": 60}, stream=stream, clock=clock, prior_weight=0)
    overall.start("a")
    clock.now = 60
    overall.finish()
    overall.start("b")
    run = overall.run_progress("b", None)
    assert isinstance(run, Progress) and run.label == "b: " and run.started == overall.started
    clock.now = 70
    run.group("group 1/1", 10)
    clock.now = 90
    run.finish_group()
    overall.finish()
    run.close()
    assert [line.split("]")[0] + "]" for line in stream.getvalue().splitlines()] == [
        "[00:00]",
        "[01:00]",
        "[01:30]",  # the run's done line, 20 s after its group opened, 90 s after the command started
        "[01:30]",
    ]
    said: list = []
    overall.timed(said.append)("b: 10 trials -> out/b")  # the status lines too
    assert said == ["[01:30] b: 10 trials -> out/b"] and overall.timed(None) is None
    assert overall.run_progress("b", False) is False  # --quiet stays quiet
    given = Progress(False)
    assert overall.run_progress("b", given) is given


def test_sizing_details_only_when_verbose_and_notebooks_get_a_bar_on_stdout(monkeypatch, capsys):
    stream = io.StringIO()
    bar = Progress(True, stream=stream, verbose=False)
    bar.detail("group 1/1: chunk size 64, memory budget 1 GiB per device")
    bar.note("out of device memory")
    assert stream.getvalue() == "out of device memory\n"
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    nb = Progress(True, "kmeans-snr: ", heartbeat=False)
    assert nb.stream is sys.stdout and nb.on_terminal and not nb.verbose  # a bar, not red stderr lines
    nb.group("group 1/1", 10)
    nb.update(10)
    nb.finish_group()
    out, err = capsys.readouterr()
    assert "kmeans-snr: group 1/1" in out and err == ""
    assert progress.bar_class(False) is tqdm.tqdm


def test_overall_eta_with_a_prior_weight_and_an_overrun():
    prior = {"a-1": 10, "a-2": 10, "b-1": 50}
    # a-1 took 20 s (twice its prior), weighed against 10 prior seconds: this machine's k = (20 + 10) / (10 + 10),
    # a's own (20 + 10 k) / (10 + 10)
    assert reproduce_progress.overall_eta(prior, {"a-1": 20}, prior_weight=10) == pytest.approx(1.75 * 10 + 1.5 * 50)
    # b-1 runs 10 s past its 50 s: its group (and every group) counts 10 more measured seconds
    left = reproduce_progress.overall_eta(prior, {}, "b-1", 60, prior_weight=10)
    assert left == pytest.approx(20 * (10 + 10) / 10)
    # continuous where the overrun starts: just before and just after 50 s differ by the 2 ms elapsed
    before = reproduce_progress.overall_eta(prior, {}, "b-1", 49.999, prior_weight=10)
    after = reproduce_progress.overall_eta(prior, {}, "b-1", 50.001, prior_weight=10)
    assert before == pytest.approx(20.001) and after == pytest.approx(20.002)


# Seconds per experiment of a cold `jaxfed reproduce` on the 2-core machine (issue 60, 2026-12-06): the four
# it names as measured, the 13 others their 351.8 s left of the 805.8 s in all, shared in proportion to
# their priors; "cold start" is the same run with the first experiment ten times as long (JAX starting up
# and compiling cold: the run whose ETA went 29 min -> 1 h 52 min -> 8 min).
_MEASURED = {"kmeans-snr": 219.0, "kmeans-convergence": 90.0, "kmeans-ablation": 73.0, "gfvl-local-iters-paper": 69.0}


def _recorded_run(cold_start: bool) -> tuple[dict, dict]:
    experiments = [e for e in REGISTRY.values() if e.name in reproduce_progress.REFERENCE_SECONDS]
    prior = reproduce_progress.reproduce_priors(experiments, {e.name: e.default_trials for e in experiments})
    rest = sum(p for n, p in prior.items() if n not in _MEASURED)
    took = {n: _MEASURED.get(n, p * (805.8 - sum(_MEASURED.values())) / rest) for n, p in prior.items()}
    if cold_start:
        took[next(iter(took))] *= 10
    return prior, took


@pytest.mark.parametrize("cold_start", [False, True])
def test_the_overall_eta_moves_smoothly_over_a_recorded_run(cold_start):
    """Replayed every 5 s and at each experiment's end: the ETA is never negative, ends at 0, and the
    predicted total (elapsed + ETA) never jumps by more than 60% from one reading to the next, nor
    by more than 10% within an experiment. (Refreshed at experiments' ends and without the prior's
    weight or the overrun, the same run's prediction jumped 2.2x and 9.4x.)"""
    prior, took = _recorded_run(cold_start)
    clock = Clock()
    overall = ReproduceProgress(True, prior, stream=io.StringIO(), clock=clock)
    readings = []  # (predicted total, whether within the same experiment as the reading before)
    for name, seconds in took.items():
        overall.start(name)
        start = clock.now
        within = False
        while clock.now < start + seconds:
            readings.append((clock.now + overall.eta(), within))
            clock.now = min(clock.now + 5, start + seconds)
            within = True
        overall.finish()
        readings.append((clock.now + overall.eta(), False))
    totals = [total for total, _ in readings]
    assert min(total - t for total, t in zip(totals, [0.0] * len(totals))) >= 0
    assert overall.eta() == 0 and totals[-1] == pytest.approx(sum(took.values()))
    for (a, _), (b, within) in zip(readings, readings[1:]):
        assert max(a / b, b / a) <= (1.1 if within else 1.6), (a, b, within)


def test_a_run_named_by_its_progress_labels_its_lines(capsys):
    import jax.numpy as jnp

    from jaxfed import engine

    engine.run(lambda key, point: {"x": jnp.zeros(())}, [{}], 4, progress="my-sweep", use_jit=False)
    err = capsys.readouterr().err
    assert "] my-sweep: group 1/1: done, 4 point-trials in " in err, err
    with pytest.raises(ValueError, match="progress"):
        engine.RunOptions(progress=3)


def test_a_slow_user_build_is_said_again_every_interval(monkeypatch, capsys):
    import time

    from jaxfed.runs import runner

    monkeypatch.setattr(runner, "NOTICE_EVERY", 0.1)
    with runner.notice_if_slow("mine: build() of f.py", after=0.05):
        time.sleep(0.45)
    time.sleep(0.2)  # ended: nothing more
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "jaxfed: mine: build() of f.py … still running after 0.05 s"
    assert len(lines) >= 3 and all(
        line.startswith("jaxfed: mine: build() of f.py … still running after ") for line in lines
    )
