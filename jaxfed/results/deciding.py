"""Growing runs until their claims are decided, keeping the stated error rate (``--decide``).

A claim left inconclusive is usually a matter of trials. The procedure, fixed before the first
look (:func:`jaxfed.stats.verdicts.look_level`):

- look k judges an experiment's claims on n_k = n_0·2^k trials per point (n_0: the run's own
  count) with intervals at level 1 − α·2^−(k+1) (α = 5%: 97.5%, 98.75%, …);
- a claim decided at a look keeps that verdict; an undecided one is judged again at a later look;
- which looks are taken (and which are skipped) is decided from the data: the smallest look whose
  trials reach every undecided claim's estimate (``trials_needed``, scaled to that look's level),
  within the budget, from each run's measured seconds per trial.

A step that the budget cannot finish is stopped where the budget ends (``grow`` raises
:class:`StepStopped`): its look is not taken, the chunks it finished stay stored, and the same
command run again resumes them.

A wrong decision at any look needs that look's interval (on its fixed n_k) to miss the true
effect; so the chance of any wrong decision over the whole procedure is at most
Σ_k α·2^−(k+1) = α (the union bound), whatever stopped it. Growth is the store's: the first n
trials of a grown run are those of the shorter run, bit for bit.

Internal: ``jaxfed reproduce --decide`` and ``jaxfed run NAME --decide`` (:mod:`jaxfed.cli`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import NamedTuple

from jaxfed import stats
from jaxfed.results import report
from jaxfed.stats.verdicts import judged_at, look_level

MAX_LOOK_STEP = 4
"""A run grows by at most 2^4 = 16× its trials in one step (an estimate from few trials is rough)."""


class StepStopped(BaseException):
    """Raised by ``grow`` where the budget ran out during a step (a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on the way swallows it): the step's
    finished chunks are stored, its look is not taken."""


class Stopped(NamedTuple):
    """The step the budget stopped: its experiment, the trials per point it was growing to, its look."""

    name: str
    n: int
    look: int


class Claim(NamedTuple):
    """One claim's course: its verdict at the first look, and the verdict that stands with its look."""

    section: str
    first: stats.Verdict
    last: stats.Verdict
    look: int  # the look ``last`` was judged at


class Run(NamedTuple):
    """An experiment's run as the procedure holds it."""

    exp: object
    cfg: object
    config_json: dict
    results: dict
    look: int
    n0: int  # trials per point at look 0
    seconds_per_trial: float  # per trial per point, measured on its last growth


def _decided(v: stats.Verdict) -> bool:
    return v.verdict != stats.INCONCLUSIVE


def judge(run: Run, seconds: float) -> report.Section:
    """The run's report section with its claims judged at its look's level."""
    with judged_at(look_level(run.look)):
        return report.section(run.exp, run.cfg, run.config_json, run.results, seconds)


def seconds_per_trial(config_json: dict, n_new: int) -> float:
    """Seconds per trial per point of a run that computed ``n_new`` trials: its recorded wall time less
    its wait for the compiler (at least a millisecond in all)."""
    waited = sum(s for s in config_json["engine"].get("compile_wait_s", []) if s is not None)
    return max(float(config_json.get("wall_s", 0.0)) - waited, 1e-3) / max(n_new, 1)


def next_look(run: Run, undecided: list[stats.Verdict], seconds_left: float) -> tuple[int, float] | None:
    """(look, its estimated seconds) to grow ``run`` to: the smallest later look whose trials reach
    every finite estimate of ``undecided`` (judged at ``run.look``; an interval's half-width scales
    with the normal quantile of its level, so an estimate grows by (z_k / z_look)²), at most
    :data:`MAX_LOOK_STEP` looks on and within ``seconds_left``; None: none is within reach."""
    needs = [v.trials_needed for v in undecided if v.trials_needed is not None and math.isfinite(v.trials_needed)]
    if not needs:
        return None
    z_now = _z(look_level(run.look))
    best = None
    for look in range(run.look + 1, run.look + MAX_LOOK_STEP + 1):
        n = run.n0 * 2**look
        seconds = (n - run.n0 * 2**run.look) * run.seconds_per_trial
        if seconds > seconds_left:
            break
        best = (look, seconds)
        if all(n >= need * (_z(look_level(look)) / z_now) ** 2 for need in needs):
            break
    return best


def _z(level: float) -> float:
    """The two-sided normal quantile of ``level``."""
    lo, hi = 0.0, 10.0
    for _ in range(80):  # bisection on erf: z with erf(z/√2) = level
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid / math.sqrt(2)) < level else (lo, mid)
    return (lo + hi) / 2


def decide(
    runs: dict[str, Run],
    grow: Callable[[Run, int, float], Run],
    budget_s: float,
    say: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, report.Section], list[Claim], float, str, Stopped | None]:
    """Grows the runs holding undecided claims, look by look, until every claim is decided, none is
    within reach or ``budget_s`` seconds are spent; ``grow(run, n, seconds_left)`` grows a run to n
    trials per point and returns it (with ``seconds_per_trial`` measured), or raises
    :class:`StepStopped` once ``seconds_left`` have passed. Returns each experiment's section (its
    claims: each one's standing verdict), every claim's course, the seconds spent, the table of
    counts at the first look (:func:`jaxfed.results.report.counts`) and the step the budget stopped
    (None: none)."""
    start = clock()
    sections = {name: judge(run, 0.0) for name, run in runs.items()}
    before = report.counts(list(sections.items()))
    claims = {name: [Claim(name, v, v, 0) for v in sec.verdicts] for name, sec in sections.items()}
    stopped = None
    while True:
        left = budget_s - (clock() - start)
        plans = []
        for name, run in runs.items():
            undecided = [c.last for c in claims[name] if not _decided(c.last)]
            step = next_look(run, undecided, left) if undecided else None
            if step is not None:
                plans.append((step[1] / len(undecided), name, step))
        if not plans:
            break
        _, name, (look, seconds) = min(plans)
        run = runs[name]
        n = run.n0 * 2**look
        n_undecided = sum(not _decided(c.last) for c in claims[name])
        say(
            f"deciding: {name}: {n_undecided} undecided claim(s); growing to {n:,} trials per point (look {look}, "
            f"{look_level(look):.4%} intervals), about {seconds:,.0f} s; {max(left, 0):,.0f} s of the budget left"
        )
        t0 = clock()
        try:
            run = runs[name] = grow(run._replace(look=look), n, left)
        except StepStopped:
            stopped = Stopped(name, n, look)
            say(f"deciding: {name}: stopped at the budget on the way to {n:,} trials (its finished chunks are stored)")
            break
        section = judge(run, clock() - t0)
        claims[name] = [
            c if _decided(c.last) else Claim(name, c.first, v, look) for c, v in zip(claims[name], section.verdicts)
        ]
        sections[name] = section
        now_decided = sum(_decided(c.last) for c in claims[name])
        say(f"deciding: {name}: {now_decided} of {len(claims[name])} claim(s) decided at {n:,} trials")
    for name, sec in sections.items():
        standing = tuple(c.last for c in claims[name])
        sections[name] = sec._replace(reading=sec.reading._replace(verdicts=standing))
    return sections, [c for name in runs for c in claims[name]], clock() - start, before, stopped


def summary(claims: list[Claim], before: str, seconds: float, budget_s: float, stopped: Stopped | None = None) -> str:
    """report.md's account of the procedure: the plan, the counts before (``before``: the table of
    the first look), the step the budget stopped and the claims whose verdicts changed or stayed
    undecided."""
    rows = [
        "| section | claim | first look | standing verdict | judged on | still needed |",
        "|---|---|---|---|---|---|",
    ]
    for c in claims:
        if c.look == 0 and _decided(c.last):
            continue
        needed = c.last.trials_needed
        still = "" if _decided(c.last) else ("no number" if needed in (None, math.inf) else f"≈ {int(needed):,}")
        rows.append(
            f"| {c.section} | {c.last.claim} | {c.first.verdict} ({c.first.n:,}) | **{c.last.verdict}** | "
            f"{c.last.n:,} trials (look {c.look}, {look_level(c.look):.4%}) | {still} |"
        )
    undecided = sum(not _decided(c.last) for c in claims)
    return "\n".join(
        [
            "## Deciding (`--decide`)",
            "",
            f"The runs holding undecided claims were grown look by look for {seconds:,.0f} s of a {budget_s:,.0f} s "
            "budget. The plan was fixed before the first look: look k judges on n_0·2^k trials with intervals at "
            "1 − 0.05·2^−(k+1) (97.5%, 98.75%, …), so the chance of any wrong decision over the whole procedure "
            "is at most 5% (the union bound over looks, whatever stopped it); a claim keeps the verdict of the "
            "first look that decided it. A section's own text is its last look's. "
            f"{undecided} claim(s) stayed undecided."
            + (
                ""
                if stopped is None
                else f" The budget ran out while {stopped.name} grew to {stopped.n:,} trials per point (look "
                f"{stopped.look}): that look was not taken; the chunks it finished are stored, and the same command "
                "run again resumes them."
            ),
            "",
            "Counts at the first look:",
            "",
            before,
            "",
            "Claims grown (the others were decided at the first look):",
            "",
            *rows,
            "",
        ]
    )
