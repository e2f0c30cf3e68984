"""``jaxfed report DIR`` of a finished run: every link of report.md resolves, the time it prints is
the run's recorded one, and the same results give the same bytes (issue 38 part 6)."""

import json
import os
import re

from jaxfed import cli


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _anchors(text: str) -> set[str]:
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_report_of_a_run_directory_links_its_figure_prints_the_recorded_time_and_is_byte_identical(tmp_path):
    out = str(tmp_path / "topo")
    run = ["run", "gfvl-topologies", "--trials", "8", "--set", "n_slots=20", "--out", out, "--quiet"]
    assert cli.main(run) == 0
    path = os.path.join(out, "report.md")
    os.remove(path)  # the report below is the one `jaxfed report DIR` writes
    assert cli.main(["report", out]) == 0
    first = open(path, "rb").read()
    text = first.decode()

    links = _links(text)
    assert "gfvl-topologies.png" in links  # the run's own figure, not a reproduction's NAME/NAME.png
    for link in links:
        if link.startswith("#"):
            assert link[1:] in _anchors(text), link
        else:
            assert os.path.isfile(os.path.join(out, link)), link

    wall_s = json.load(open(os.path.join(out, "config.json")))["wall_s"]
    assert wall_s > 0
    assert f"the results took {wall_s:.1f} s to compute (as recorded)" in text  # not this command's time
    assert f"the results took {wall_s:.0f} s to compute" in text.splitlines()[2]

    assert cli.main(["report", out]) == 0  # the same results: the same bytes
    assert open(path, "rb").read() == first
