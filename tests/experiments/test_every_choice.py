"""Every documented choice runs (issue 59, "Trust VI", part 6): each built-in experiment, at a tiny
size (tests/support.py's SMALL), with each name its name or name-list parameters document (``one
of "a", "b"``, the registries ``jaxfed show`` writes out; quoted alternatives; a registry's
"built in" names; a pattern such as ``rgg:radius=R`` with a value), alone and, for a list, mixed
with the default, through the command line to its report. ``kmeans-snr`` with methods=oac,ideal
ended in a traceback from its report, and (found by this test) so did methods=oac,quantized:
documented choices no test had run.

The default suite runs kmeans-snr with methods=oac,quantized; the slow suite (CI) runs every
documented name of the G-FVL experiments and every k-means method once, alone, in the first
experiment that has it; the rest (the k-means channels, inits, v_max rules and energies, about 25 s
a case on 2 busy cores; the same names in the other experiments; mixed with the default) is marked
``long`` (``python -m pytest -m long``): every case compiles its own program, and 246 cases are
hours on a 2-core CPU, beyond CI's 90 minutes."""

from __future__ import annotations

import json
import re

import pytest
from support import SMALL

from jaxfed import cli
from jaxfed.experiments import REGISTRY
from jaxfed.runs import describe

QUOTED = re.compile(r'"([^"]*)"')
BUILT_IN = re.compile(r"built in: ([\w-]+(?:, [\w-]+)*)")
PATTERNS = {  # a documented name pattern -> a value of it
    "rgg:radius=R": "rgg:radius=0.5",
    "er:p=P": "er:p=0.5",
    "barbell[:path=N]": "barbell:path=1",
    "lollipop[:clique=M]": "lollipop:clique=3",
    "inverse:<t0>": "inverse:10",
}
NOT_NAMES = {"graph", "channel_sweep"}  # (user graph files; a "key=v1,v2" sweep, not a name)
FAST = {"kmeans-snr-methods=oac,quantized"}
"""The default suite's case (it ended in a traceback from its report until this test ran it)."""


def documented_names(meaning: str) -> list[str]:
    """The names a parameter's meaning (``jaxfed show``'s text) documents, in order, once each."""
    names = [PATTERNS.get(n, n) for n in QUOTED.findall(meaning)]
    names += [n for found in BUILT_IN.findall(meaning) for n in found.split(", ")]
    names = [n for n in names if re.fullmatch(r"\w[\w.:=+-]*", n)]
    return list(dict.fromkeys(names))


COSTLY = {"kmeans-convergence", "kmeans-ablation"}
"""Experiments whose tiny runs compile longest (about 50 s a case on 2 busy cores): a name's first
run is in another experiment that has it, where there is one."""
IN_CI = ("gfvl-", "methods")
"""The first runs in CI's slow suite: of a G-FVL experiment, or of a k-means ``methods`` name."""


def _cases() -> list:
    cases, named = [], set()
    for name, exp in sorted(REGISTRY.items(), key=lambda item: item[0] in COSTLY):
        for p in describe.parameters(exp.config_cls):
            if p.name in NOT_NAMES or p.type not in ("str", "comma-separated strs"):
                continue
            for choice in documented_names(p.meaning):
                values = [choice]
                if p.type != "str":  # a list: mixed with the default too
                    default = list(p.default or ())
                    mixed = [*default, choice] if choice not in default else [choice, *(d for d in default if d != choice)]  # fmt: skip
                    values += [",".join(mixed)] if len(mixed) > 1 else []
                for alone, value in zip((True, False), values):
                    case = f"{name}-{p.name}={value}"
                    first = alone and (p.name, value) not in named  # (this name's first run)
                    named.add((p.name, value))
                    in_ci = first and (name.startswith(IN_CI[0]) or p.name == IN_CI[1])
                    mark = () if case in FAST else (pytest.mark.slow,) if in_ci else (pytest.mark.long,)
                    cases.append(pytest.param(name, p.name, value, alone, marks=mark, id=case))
    return cases


CASES = _cases()


def test_the_cases_cover_every_experiment_and_the_registries():
    """The discovery above finds names where the docs give them: every built-in experiment has a
    case, and the registries of channels, methods, families, graphs and topologies are all in."""
    covered = {(c.values[0], c.values[1]) for c in CASES}
    assert {name for name, _ in covered} >= {n for n in REGISTRY if not getattr(REGISTRY[n], "source", "")} - {
        "gfvl-unlearning-conjugate"
    }  # (its parameters are numbers only)
    values = {c.values[2] for c in CASES}
    assert {"block-fading", "ideal", "quantized", "dirichlet", "normal", "line", "rgg:radius=0.5", "lollipop:clique=3"} <= values  # fmt: skip
    assert ("kmeans-snr", "methods") in covered and ("gfvl-heterogeneity", "family") in covered


@pytest.mark.parametrize("name, parameter, value, alone", CASES)
def test_every_documented_choice_runs_to_its_report(tmp_path, capsys, name, parameter, value, alone):
    """Each name runs to its report; alone, a name the parameter documents as needing another
    beside it (kmeans methods: "oac" among them) may instead be refused before any work, in the
    one line of jaxfed.validation naming the parameter."""
    sets = {**SMALL.get(name, {}), parameter: value}
    out = tmp_path / "run"
    argv = ["run", name, "--trials", "4", *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]
    code = cli.main([*argv, "--out", str(out), "--quiet"])
    if alone and code == 2:
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"jaxfed: error: {parameter} must be") and len(err.splitlines()) == 1, err
        assert not (out / "metrics.npz").exists()
        return
    assert code == 0, capsys.readouterr().err
    recorded = json.loads((out / "config.json").read_text())["parameters"][parameter]
    assert (",".join(map(str, recorded)) if isinstance(recorded, list) else str(recorded)) == value
    report = (out / "report.md").read_text()
    assert f"## {name}" in report and "Traceback" not in report
    assert json.loads((out / "verdicts.json").read_text())["report"] == "report.md"
