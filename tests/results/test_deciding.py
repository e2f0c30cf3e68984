"""``--decide`` (issue "Decided readings"): undecided claims grown look by look (n_0·2^k trials,
intervals at 1 − α·2^−(k+1)) keep the stated error rate over the whole procedure, under a null
effect and at the equivalence margin; a real effect is decided."""

import types

import numpy as np
import pytest

from jaxfed import stats
from jaxfed.experiment import Reading
from jaxfed.results import deciding

N0 = 40
BUDGET_S = 60.0
SECONDS_PER_TRIAL = 1e-3  # (of the fake runs: the budget reaches 60,000 trials per point)


def _experiment(name: str, claim: str, shift: float, margin: float = 0.0):
    """A fake experiment whose one claim compares a = b + d with b = 10 and d ~ N(shift, 1) on the
    run's trials (its results: the first n draws of one stream, as a grown run's are)."""

    def report(config, labels, results):
        a, b = results["d"] + 10.0, np.full(results["d"].size, 10.0)
        expect = "equal" if margin else "greater"
        return Reading("text", (stats.paired_verdict(a, b, claim, expect=expect, margin=margin),))

    return types.SimpleNamespace(name=name, description=name, caption=name, report=report, source="", plugin="")


def _run(exp, stream: np.ndarray, n: int, look: int = 0) -> deciding.Run:
    config_json = {
        "n_trials": n, "seed": 0, "dtype": "float32", "device": "cpu", "parameters": {}, "points": [],
        "engine": {"devices": 1, "chunk_sizes": [n], "keep": "raw", "compile_wait_s": [0.0]},
        "wall_s": n * SECONDS_PER_TRIAL,
    }  # fmt: skip
    return deciding.Run(exp, None, config_json, {"d": stream[:n]}, look, N0, SECONDS_PER_TRIAL)


def _procedure(shift: float, margin: float, seed: int) -> stats.Verdict:
    stream = np.random.default_rng(seed).normal(shift, 1.0, 70_000)
    exp = _experiment("e", "a > b" if not margin else "a ≈ b", shift, margin)
    clock = iter(range(10**9))  # seconds: one per reading of the clock (the budget is in fake seconds)

    def grow(run, n, seconds_left):
        return _run(run.exp, stream, n, run.look)

    sections, claims, _, _, stopped = deciding.decide(
        {"e": _run(exp, stream, N0)}, grow, BUDGET_S, clock=lambda: next(clock) * 0
    )
    assert stopped is None
    return claims[0].last


def _wrong_share(shift: float, margin: float, wrong, n: int) -> float:
    return float(np.mean([wrong(_procedure(shift, margin, seed)) for seed in range(n)]))


def _says_greater(v: stats.Verdict) -> bool:
    """A decision that a > b: reproduced, or direction only with the direction shown (lower > 0)."""
    return v.verdict == stats.REPRODUCED or (v.verdict == stats.DIRECTION_ONLY and v.lower > 0)


def _allowed(share: float, n: int, alpha: float = 0.05) -> bool:
    """Within the stated level, give or take two Monte Carlo standard errors."""
    return share <= alpha + 2 * np.sqrt(alpha * (1 - alpha) / n)


def test_a_look_level_spends_half_of_what_is_left():
    levels = [deciding.look_level(k) for k in range(5)]
    assert levels == pytest.approx([0.975, 0.9875, 0.99375, 0.996875, 0.9984375])
    assert sum(1 - level for level in levels) < 0.05


def test_a_real_effect_is_decided_and_the_trials_judged_on_are_recorded():
    v = _procedure(shift=0.6, margin=0.0, seed=1)  # visible: 0.6 > 5% of 10
    assert v.verdict == stats.REPRODUCED and v.n >= N0


def test_the_error_rate_holds_over_the_procedure_small():
    n = 100
    assert _allowed(_wrong_share(0.0, 0.0, _says_greater, n), n)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["null effect", "at the equivalence margin"])
def test_the_error_rate_holds_over_the_whole_procedure(case):
    """≥ 400 simulated procedures: the share of wrong decisions stays within 5% (± 2 MC errors)."""
    n = 400
    if case == "null effect":
        share = _wrong_share(0.0, 0.0, _says_greater, n)
    else:  # true median difference exactly the margin: declaring equivalence is wrong
        share = _wrong_share(0.5, 0.5, lambda v: v.verdict == stats.REPRODUCED, n)
    assert _allowed(share, n), share


def test_a_step_the_budget_stops_is_no_look_and_the_report_says_so():
    """``grow`` raising StepStopped (the budget ran out mid-step) ends the procedure: the claims keep
    the verdicts of the looks taken, the stopped step's look is not one, and the account says which
    step stopped and that its chunks are stored."""
    stream = np.random.default_rng(1).normal(0.2, 1.0, 70_000)  # (within the margin; not shown on N0 trials)
    exp = _experiment("e", "a ≈ b", 0.2, margin=0.5)
    steps = []

    def grow(run, n, seconds_left):
        steps.append((n, run.look))
        raise deciding.StepStopped

    sections, claims, _, before, stopped = deciding.decide({"e": _run(exp, stream, N0)}, grow, BUDGET_S)
    assert len(steps) == 1 and stopped == deciding.Stopped("e", *steps[0])
    assert claims[0].look == 0 and claims[0].last is claims[0].first
    assert claims[0].last.verdict == stats.INCONCLUSIVE
    text = deciding.summary(claims, before, 1.0, BUDGET_S, stopped)
    assert f"The budget ran out while e grew to {steps[0][0]:,} trials per point (look {steps[0][1]})" in text
    assert "the chunks it finished are stored, and the same command run again resumes them" in text


def test_the_command_stops_a_step_at_the_budget(tmp_path, monkeypatch, capsys):
    """`jaxfed run NAME --decide --budget 0.5s` whose step is estimated to fit (forced here) but
    takes longer is stopped at the budget by an alarm: the command ends well, its report says so,
    the run directory is the finished run of the first look, and the alarm's handler is put back."""
    import signal

    from jaxfed import cli
    from jaxfed.store import rundir

    monkeypatch.setattr(deciding, "next_look", lambda run, undecided, left: (run.look + 8, 0.0) if left > 0 else None)
    handler = signal.getsignal(signal.SIGALRM)
    out = tmp_path / "run"
    argv = ["run", "gfvl-topologies", "--trials", "64", "--decide", "--budget", "0.5s", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 0
    text = (out / "report.md").read_text()
    assert "The budget ran out while gfvl-topologies grew to 16,384 trials per point (look 8)" in text
    assert rundir.load_results(str(out))[0]["n_trials"] == 64
    assert signal.getsignal(signal.SIGALRM) is handler


@pytest.mark.parametrize("budget", ["0.3s", "2s", "4s"])
def test_a_budget_stop_leaves_four_files_of_the_same_trials(tmp_path, monkeypatch, unjitted, budget):
    """Issue 59, part 3: `--decide --budget B` stopped wherever the budget ends (in a step's trials,
    in the writing of its record: each growth's record here takes a while to write) leaves
    config.json, metrics.npz, report.md and verdicts.json describing the same trials."""
    import json
    import re
    import time

    from jaxfed import cli
    from jaxfed.runs import writer
    from jaxfed.store import rundir

    write_results = rundir.write_results

    def slow_write(out_dir, config_json, results, started):
        written = write_results(out_dir, config_json, results, started)
        if config_json["n_trials"] > 16:  # a growth's record: the budget may end while it is written
            time.sleep(0.5)
        return written

    monkeypatch.setattr(writer.rundir, "write_results", slow_write)
    monkeypatch.setattr(deciding, "next_look", lambda run, undecided, left: (run.look + 1, 0.0) if left > 0 else None)
    out = tmp_path / "run"
    argv = ["run", "gfvl-topologies", "--trials", "16", "--decide", "--budget", budget]
    assert cli.main([*argv, "--out", str(out), "--quiet"]) == 0
    record, _ = rundir.load_results(str(out))  # config.json and metrics.npz agree (digests, shapes)
    n = record["n_trials"]
    section = (out / "report.md").read_text().split("## gfvl-topologies", 1)[1]
    assert set(re.findall(r"([\d,]+) trials per point", section)) == {f"{n:,}"}
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert verdicts["results_sha256"] == rundir.results_digest(record)  # (the record of these very trials)
    judged = [v["n"] + v["n_dropped"] for v in verdicts["verdicts"]]
    assert max(judged) <= n and (n == 16 or n in judged)  # a grown run's last look judged its undecided claims


def test_a_record_written_without_its_report_leaves_no_older_report(tmp_path, monkeypatch, unjitted):
    """Issue 59, part 3: a run grown from 16 to 32 trials that stops after its new record (here its
    report fails; a kill or --decide's budget stop there alike) leaves no report.md, verdicts.json
    or report.html of the 16 trials beside config.json and metrics.npz of 32."""
    from jaxfed import cli
    from jaxfed.runs import writer
    from jaxfed.store import rundir

    out = tmp_path / "run"
    argv = ["run", "gfvl-topologies", "--out", str(out), "--quiet", "--trials"]
    assert cli.main([*argv, "16"]) == 0 and (out / "verdicts.json").exists()

    def failing_report(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "write_report", failing_report)
    assert cli.main([*argv, "32"]) != 0
    assert rundir.load_results(str(out))[0]["n_trials"] == 32
    assert not any((out / name).exists() for name in ("report.md", "verdicts.json", "report.html"))
