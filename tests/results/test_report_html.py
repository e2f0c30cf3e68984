"""report.html in a real browser: headless Chromium (the distribution's package, which .ci/run
installs) loads the page that `jaxfed report DIR` writes for a small real run, with a test script
injected before the page's own: no console error or uncaught exception, every image decodes, the
kind/verdict filter hides and shows rows, sorting reorders them, every ``#anchor`` link resolves to
an element. A screenshot of the top of the page is written to the test's directory (path printed)."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from jaxfed.cli import main
from jaxfed.experiments import REGISTRY
from jaxfed.results import report_html

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


def _chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":  # CI installs it (.ci/run): its absence is a failure there
            pytest.fail("chromium is not installed (.ci/run installs the distribution's package)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI runs this test")
    return CHROMIUM


# Installed first in <head>: records uncaught errors and console.error; after load, checks the page
# and writes the findings as JSON into <pre id="test-result"> for --dump-dom to read.
_PROBE_HEAD = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push("error: " + e.message); });
var __consoleError = console.error;
console.error = function () { window.__errors.push("console.error: " + Array.from(arguments).join(" "));
  return __consoleError.apply(console, arguments); };
</script>"""

_PROBE_END = """<script>
window.addEventListener("load", function () {
  var out = {errors: window.__errors};
  // Decoded to the last row: drawn on a canvas, the top and bottom rows are opaque (a PNG cut short
  // still has its size from the header, but its lower rows stay transparent).
  out.images = Array.from(document.images).map(function (img) {
    var c = document.createElement("canvas"), w = img.naturalWidth, h = img.naturalHeight;
    c.width = w; c.height = h;
    var g = c.getContext("2d"), alpha = [];
    if (w > 0 && h > 0) { g.drawImage(img, 0, 0);
      alpha = [g.getImageData(w >> 1, 0, 1, 1).data[3], g.getImageData(w >> 1, h - 1, 1, 1).data[3]]; }
    return {alt: img.alt, complete: img.complete, width: w, alpha: alpha}; });
  out.links = Array.from(document.querySelectorAll('a[href^="#"]')).map(function (a) {
    var id = decodeURIComponent(a.getAttribute("href").slice(1));
    return {href: a.getAttribute("href"), resolves: document.getElementById(id) !== null}; });
  var rows = Array.from(document.querySelectorAll("#claims tbody tr"));
  function visible() { return rows.filter(function (r) { return !r.hidden; }).length; }
  var verdict = document.getElementById("filter-verdict");
  out.rows = rows.length;
  out.verdicts = rows.map(function (r) { return r.dataset.verdict; });
  out.filtered = {};
  Array.from(verdict.options).forEach(function (o) {
    verdict.value = o.value; verdict.dispatchEvent(new Event("change"));
    out.filtered[o.value] = visible();
  });
  out.shown_text = document.getElementById("shown").textContent;
  verdict.value = ""; verdict.dispatchEvent(new Event("change"));
  var kind = document.getElementById("filter-kind");  // present once claims carry a kind
  out.kinds = rows.map(function (r) { return r.dataset.kind; });
  out.kind_filtered = {};
  if (kind) Array.from(kind.options).forEach(function (o) {
    kind.value = o.value; kind.dispatchEvent(new Event("change"));
    out.kind_filtered[o.value] = visible();
  });
  var th = document.querySelector("#claims thead th");
  th.click(); th.click();  // the "#" column, descending
  out.order_descending = Array.from(document.querySelectorAll("#claims tbody tr td:first-child"))
    .map(function (td) { return td.textContent; });
  var pre = document.createElement("pre"); pre.id = "test-result";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


def _browser(args: list, page: str, cwd: str) -> subprocess.CompletedProcess:
    # A profile of its own: two tests (xdist workers) never share Chromium's profile lock.
    profile = f"--user-data-dir={os.path.join(cwd, 'chromium-profile')}"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=5000", profile]
    return subprocess.run(
        [_chromium(), *flags, *args, "file://" + page], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def _probe(text: str, tmp_path) -> dict:
    """What the injected probe found on the page ``text``, loaded in headless Chromium."""
    probed = str(tmp_path / "probed.html")
    with open(probed, "w", encoding="utf-8") as f:
        f.write(text.replace("<head>", "<head>" + _PROBE_HEAD, 1).replace("</body>", _PROBE_END + "</body>", 1))
    done = _browser(["--dump-dom"], probed, str(tmp_path))
    found = re.search(r'<pre id="test-result">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the probe did not run: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """A small real run (gfvl-topologies, 20 trials, 40 slots) and its `jaxfed report`."""
    _chromium()
    out = str(tmp_path_factory.mktemp("html") / "gfvl-topologies")
    assert main(["run", "gfvl-topologies", "--trials", "20", "--set", "n_slots=40", "--out", out, "--quiet"]) == 0
    os.remove(os.path.join(out, "report.html"))  # the page below is the one `jaxfed report DIR` writes
    assert main(["report", out]) == 0
    return out


def test_report_html_in_a_browser(report_dir, tmp_path):
    path = os.path.join(report_dir, "report.html")
    text = open(path, encoding="utf-8").read()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page fetches nothing"
    result = _probe(text, tmp_path)

    assert result["errors"] == []
    assert len(result["images"]) == 1  # the run's figure
    assert all(img["complete"] and img["width"] > 0 and img["alpha"] == [255, 255] for img in result["images"]), result[
        "images"
    ]
    unresolved = [link["href"] for link in result["links"] if not link["resolves"]]
    assert result["links"] and unresolved == []
    # Every claim of verdicts.json is a row; each verdict filter shows exactly its rows, "all" every row.
    claims = json.load(open(os.path.join(report_dir, "verdicts.json")))["verdicts"]
    assert result["rows"] == len(claims) > 0
    expected = {v: result["verdicts"].count(v) for v in set(result["verdicts"])}
    assert result["filtered"] == {"": len(claims), **expected}
    assert len(expected) >= 2, "the run should state claims of more than one verdict (the filter hides rows)"
    if any(result["kinds"]):  # the kind filter, once claims carry one
        kinds = {k: result["kinds"].count(k) for k in set(result["kinds"])}
        assert result["kind_filtered"] == {"": len(claims), **kinds}
    assert result["order_descending"] == [str(i) for i in range(len(claims), 0, -1)]
    caption = re.search(r"<figcaption>(.*?)</figcaption>", text, re.S)
    assert caption and REGISTRY["gfvl-topologies"].caption in html.unescape(caption.group(1))
    for name in ("sec-gfvl-topologies", "fig-gfvl-topologies", "params-gfvl-topologies", "settings-gfvl-topologies"):
        assert f'id="{name}"' in text

    shot = str(tmp_path / "report-top.png")
    _browser([f"--screenshot={shot}", "--window-size=1200,900"], path, str(tmp_path))
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot of the top of report.html: {shot}")


def test_claims_with_kinds_are_counted_and_filtered_by_kind(tmp_path, monkeypatch):
    """Claims that carry a kind (paper claim, check, …): counted by kind, and the kind filter shows
    exactly a kind's rows, alone and with the verdict filter."""
    from jaxfed.experiments.spec import Reading
    from jaxfed.store import rundir

    _chromium()
    kinds = ["paper", "paper", "check", "beyond"]
    verdicts = ["reproduced", "inconclusive", "reproduced", "not reproduced"]
    rows = [
        {"section": "exp-a", "claim": f"claim {i}", "verdict": v, "estimate": float(i), "interval": "1 [0, 2]"}
        for i, v in enumerate(verdicts)
    ]
    monkeypatch.setattr(rundir, "verdict_records", lambda sections: rows)  # (no Verdict objects to build)
    text = report_html.page(str(tmp_path), "t", "stamp", "policy", [("exp-a", Reading("## exp-a"))], kinds)
    assert '<span class="count"><b>2</b> paper</span>' in text
    text = text.replace("</section>", '<p id="fig-exp-a"></p><p id="params-exp-a"></p></section>')
    result = _probe(text, tmp_path)
    assert result["errors"] == []
    assert result["kind_filtered"] == {"": 4, "beyond": 1, "check": 1, "paper": 2}
    assert result["filtered"] == {"": 4, "reproduced": 2, "inconclusive": 1, "not reproduced": 1}


def test_markdown_of_the_sections():
    """The converter report.html renders the sections with: escapes text, keeps tables and inline forms."""
    out = report_html.markdown("## a <b>\n\n| x | y |\n|---|---|\n| `k<` | **v** *w* [s](#sec-a) |\n\n- one\n- two")
    assert "<h3>a &lt;b&gt;</h3>" in out
    assert '<td><code>k&lt;</code></td><td><b>v</b> <i>w</i> <a href="#sec-a">s</a></td>' in out
    assert "<ul><li>one</li><li>two</li></ul>" in out


def test_page_without_figure_or_claims(tmp_path):
    """A plain reading (no structured section) and no claims: a page that says so, no table script error."""
    from jaxfed.experiments.spec import Reading

    page = report_html.page(str(tmp_path), "t", "stamp", "policy", [("exp-a", Reading("## exp-a"))])
    assert 'id="sec-exp-a"' in page and "No section states a claim." in page
    assert base64.b64encode(b"\x89PNG").decode() not in page
