"""report.html in a real browser: headless Chromium (the distribution's package, which .ci/run
installs) loads the page that `jaxfed report DIR` writes for a small real run, with a test script
injected before the page's own: no console error or uncaught exception, every image decodes, the
kind/verdict filter hides and shows rows, sorting reorders them, every ``#anchor`` link resolves to
an element. A screenshot of the top of the page is written to the test's directory (path printed)."""

from __future__ import annotations

import base64
import hashlib
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
  // The first screen: where the counts end against the window's height, before any scrolling.
  window.scrollTo(0, 0);
  function box(id) { var e = document.getElementById(id);
    return e ? {bottom: e.getBoundingClientRect().bottom, text: e.textContent} : null; }
  out.first_screen = {height: window.innerHeight, counts: box("counts"), by_source: box("by-source"),
    figures: box("figures-list"), title: document.title,
    figures_before_claims: !!(document.getElementById("figures-list") && (document.getElementById("figures-list")
      .compareDocumentPosition(document.getElementById("claims")) & Node.DOCUMENT_POSITION_FOLLOWING))};
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


def _script_hash(script: str) -> str:
    """The CSP source of an inline ``<script>…</script>``: its content's SHA-256."""
    content = script.split(">", 1)[1].rsplit("</script>", 1)[0]
    return "'sha256-" + base64.b64encode(hashlib.sha256(content.encode()).digest()).decode() + "'"


def _with_probe(text: str, probe_end: str = "") -> str:
    """The page with the probe's scripts, each allowed by its hash in the page's own CSP (which
    allows nothing else)."""
    policy = report_html.CONTENT_SECURITY_POLICY
    assert text.count(policy) == 1, "the page carries its Content-Security-Policy"
    hashes = " ".join(_script_hash(script) for script in (_PROBE_HEAD, probe_end or _PROBE_END))
    text = text.replace(policy, policy.replace("script-src ", f"script-src {hashes} "), 1)
    return text.replace("<head>", "<head>" + _PROBE_HEAD, 1).replace(
        "</body>", (probe_end or _PROBE_END) + "</body>", 1
    )


def _probe(text: str, tmp_path, probe_end: str = "") -> dict:
    """What the injected probe found on the page ``text``, loaded in headless Chromium."""
    probed = str(tmp_path / "probed.html")
    with open(probed, "w", encoding="utf-8") as f:
        f.write(_with_probe(text, probe_end))
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
    # The first screen answers: the claims counted by verdict and by source, then the figures' links,
    # all above the fold and before the table of claims; the page is titled by its one experiment.
    first = result["first_screen"]
    assert first["title"] == "gfvl-topologies: jaxfed report"
    for verdict in ("reproduced", "direction only", "not reproduced", "inconclusive"):
        assert verdict in first["counts"]["text"], first["counts"]
    assert "the papers' claims" in first["by_source"]["text"] and "gfvl-topologies" in first["figures"]["text"]
    assert 0 < first["counts"]["bottom"] <= first["by_source"]["bottom"] <= first["height"], first
    assert first["figures_before_claims"]
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
    from jaxfed.experiment import Reading
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
    assert '<span class="count v-reproduced"><b>2</b> reproduced</span>' in text  # by verdict, then by source:
    assert "<tr><td>paper</td><td>2</td><td>1</td><td>0</td><td>0</td><td>1</td></tr>" in text
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
    from jaxfed.experiment import Reading

    page = report_html.page(str(tmp_path), "t", "stamp", "policy", [("exp-a", Reading("## exp-a"))])
    assert 'id="sec-exp-a"' in page and "No section states a claim." in page
    assert 'id="claims' not in page and "Every claim" not in page  # no empty claims section
    assert base64.b64encode(b"\x89PNG").decode() not in page


_HOSTILE = (
    "[a](javascript:window.__pwned='link') [b](JaVaScRiPt:window.__pwned='case') "
    "[c](data:text/html,<script>window.__pwned='data'</script>) [d](vbscript:x) [e](\\\\evil/x) "
    "<script>window.__pwned='script'</script> <img src=x onerror=\"window.__pwned='img'\"> "
    "<svg onload=\"window.__pwned='svg'\"></svg> [ok](#sec-hostile) [web](https://example.org/x) [rel](other/page.html)"
)

# After load: clicks every link that does not leave the page (an anchor, or any scheme but http(s):
# a javascript: link would run here) and reports whether any injected code ran.
_PROBE_CLICKS = """<script>
window.addEventListener("load", function () {
  Array.from(document.querySelectorAll("a")).forEach(function (a) {
    var h = (a.getAttribute("href") || "").trim();
    if (h[0] === "#" || (/^[a-z][a-z0-9+.-]*:/i.test(h) && !/^https?:/i.test(h))) a.click(); });
  setTimeout(function () {
    var pre = document.createElement("pre"); pre.id = "test-result";
    pre.textContent = JSON.stringify({errors: window.__errors, pwned: window.__pwned || null,
      links: Array.from(document.querySelectorAll("a")).map(function (a) { return a.getAttribute("href"); })});
    document.body.appendChild(pre); }, 200);
});
</script>"""


def test_a_hostile_report_text_runs_nothing_in_a_browser(tmp_path, monkeypatch):
    """Report text from someone else's result directory (javascript:, data: and vbscript: links, a
    script, event handlers) becomes text; in Chromium no injected code runs, links clicked."""
    from jaxfed.experiment import Reading

    _chromium()
    monkeypatch.setattr(report_html.rundir, "verdict_records", lambda sections: [])
    page = report_html.page(str(tmp_path), "t <script>", _HOSTILE, _HOSTILE, [("hostile", Reading(_HOSTILE))])
    assert "javascript:" not in page.lower().replace("[a](javascript:", "").replace("[b](javascript:", "")
    assert not any(tag in page for tag in ("<script>window", "<img src=x", "<svg"))
    result = _probe(page, tmp_path, _PROBE_CLICKS)
    assert result["pwned"] is None, result
    assert sorted(set(result["links"])) == ["#sec-hostile", "https://example.org/x", "other/page.html"], result["links"]


@pytest.mark.parametrize(
    "url, kept",
    [
        ("https://example.org/a?b#c", True),
        ("HTTP://example.org", True),
        ("#sec-a", True),
        ("other/page.html", True),
        ("page.html?x=1:2", True),
        ("javascript:alert(1)", False),
        (" javascript:alert(1)", False),
        ("java\tscript:alert(1)", False),
        ("data:text/html,x", False),
        ("file:///etc/passwd", False),
        ("\\\\host\\share", False),
        ("mailto:a@b", False),
    ],
)
def test_only_web_anchor_and_relative_links_are_kept(url, kept):
    assert report_html.safe_href(url) is kept
    out = report_html.markdown(f"[x]({url})")
    assert ("<a href=" in out) is (kept and " " not in url and "\t" not in url)
