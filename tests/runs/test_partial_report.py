"""``jaxfed report DIR`` of a reproduction's folder: an interrupted ``jaxfed reproduce`` is reported
from the experiments that finished, naming those that did not (report.md and report.html)."""

from __future__ import annotations

import json
import os

from jaxfed import cli
from jaxfed.runs import reproduce, writer


def test_an_interrupted_reproduction_reports_what_finished_and_names_what_is_missing(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "repro")
    real = reproduce.run_and_say

    def interrupted(exp, config, n_trials, options, **kw):
        if exp.name == "kmeans-digits1":  # Ctrl-C while its group computes: its directory, no record
            os.makedirs(str(options.out_dir), exist_ok=True)
            raise KeyboardInterrupt
        return real(exp, config, n_trials, options, **kw)

    monkeypatch.setattr(reproduce, "run_and_say", interrupted)
    only = "gfvl-topologies,kmeans-digits1,gfvl-graphs"
    assert cli.main(["reproduce", "--only", only, "--scale", "0.01", "--out", out, "--quiet"]) in (2, 130)
    assert not os.path.exists(os.path.join(out, "report.md"))
    plan = json.load(open(os.path.join(out, writer.PLAN)))
    assert list(plan["experiments"]) == only.split(",")
    capsys.readouterr()

    assert cli.main(["report", out]) == 0
    assert capsys.readouterr().out.strip() == os.path.join(out, "report.md")
    md = open(os.path.join(out, "report.md"), encoding="utf-8").read()
    missing = "kmeans-digits1 (interrupted), gfvl-graphs (not run)"
    assert md.startswith("# gfvl-topologies: jaxfed report\n")  # one finished: titled by it
    assert f"**Partial report:** 1 experiment(s) finished; missing: {missing}." in md
    assert "## gfvl-topologies" in md and "## kmeans-digits1" not in md
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert f'id="missing"><b>Partial report:</b> 1 experiment(s) finished; missing: {missing}.' in page
    verdicts = json.load(open(os.path.join(out, "verdicts.json")))["verdicts"]
    assert verdicts and {v["section"] for v in verdicts} == {"gfvl-topologies"}


def test_a_reproduction_folder_where_nothing_finished_is_one_line(tmp_path, capsys):
    out = str(tmp_path / "repro")
    writer.write_plan(out, {"gfvl-topologies": 10})
    assert cli.main(["report", out]) == 2
    err = capsys.readouterr().err
    assert "no experiment of the reproduction finished (gfvl-topologies (not run)); nothing to report" in err, err
    assert len(err.strip().splitlines()) == 1
