"""``report.html``: the report as one self-contained web page, written beside ``report.md`` from the
same sections and claims.

Nothing on the page is fetched: each figure is inline (a base64 PNG ``data:`` URI), the style and the
script (sorting and filtering the table of claims, plain JavaScript) are in the page. Nothing else
runs: a Content-Security-Policy allows only that script and style (:data:`CONTENT_SECURITY_POLICY`),
and a link is kept only to ``http(s):``, an anchor or a relative path (:func:`safe_href`). From the top:
the answer: the claims counted by verdict, then by source (the papers' claims, studies, checks:
their kind) and verdict, the experiments a partial report is missing, and a link to each figure;
then the table of every claim (sortable by any column, filterable by kind and verdict; each claim
links to its section, figure and parameters; left out when no section states a claim), the verdict
policy, one section per experiment (its figure with a caption, the parameters, the experiment's
reading), then the settings and environment of every run.

The markdown of the sections is rendered by :func:`markdown`, a small converter for what the
experiments write (headings, paragraphs, lists, pipe tables, images, code, bold, italics, links).

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import platform
import re
from collections import Counter
from collections.abc import Mapping

from jaxfed import stats, store
from jaxfed.store import rundir

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 1.2em 3em;color:#111}
h1{margin-top:.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}#claims th{cursor:pointer;user-select:none}
#claims th[aria-sort=ascending]::after{content:" \\25B2"}#claims th[aria-sort=descending]::after{content:" \\25BC"}
.counts{display:flex;flex-wrap:wrap;gap:.6em;margin:.6em 0}
.count{border:1px solid #ccc;border-radius:4px;padding:.3em .7em}.count b{font-size:1.3em}
.v-reproduced{background:#e3f2e1}.v-not-reproduced{background:#f8dede}.v-inconclusive{background:#fdf3d7}
.v-not-testable-here{background:#eee}.v-direction-only{background:#e6eef9}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:13px;color:#333;margin-top:.3em}
code{background:#f3f3f3;padding:0 .2em}.filters{margin:.5em 0}.filters label{margin-right:1em}
.missing{color:#a00}#figures-list{columns:3 16em}
"""

_SCRIPT = """
(function () {
  var table = document.getElementById("claims");
  if (!table) return;
  var body = table.tBodies[0];
  var kind = document.getElementById("filter-kind");
  var verdict = document.getElementById("filter-verdict");
  var shown = document.getElementById("shown");
  function filter() {
    var n = 0;
    Array.prototype.forEach.call(body.rows, function (row) {
      var show = (!kind || kind.value === "" || row.dataset.kind === kind.value) &&
                 (verdict.value === "" || row.dataset.verdict === verdict.value);
      row.hidden = !show;
      if (show) n += 1;
    });
    shown.textContent = n + " of " + body.rows.length + " claims shown";
  }
  function value(row, column) {
    var cell = row.cells[column];
    var key = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    var number = parseFloat(key);
    return key !== "" && isFinite(key) ? number : key.toLowerCase();
  }
  function sort(th) {
    var column = th.cellIndex;
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, column), y = value(b, column);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    th.addEventListener("click", function () { sort(th); });
  });
  if (kind) kind.addEventListener("change", filter);
  verdict.addEventListener("change", filter);
  filter();
})();
"""

_SETTINGS = (
    "experiment",
    "n_trials",
    "seed",
    "dtype",
    "device",
    "keep",
    "created",
    "wall_s",
    "options",
    "engine",
    "shards",
)
"""The entries of a run's config.json shown under its settings (then ``versions``, its environment)."""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode("ascii") + "'"


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)
"""The page's Content-Security-Policy (a ``<meta>`` first in its head): only the page's own script
and style run (by their SHA-256), images only from ``data:`` URIs, nothing fetched, no form sent.
Whatever text reached the page, an injected script or handler does not run."""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def anchor(prefix: str, name: str) -> str:
    """An element id for ``name``: ``PREFIX-NAME`` with every character outside ``[A-Za-z0-9_.-]``
    replaced by ``-`` (ids and ``#`` links stay plain)."""
    return f"{prefix}-{re.sub(r'[^A-Za-z0-9_.-]', '-', name)}"


def _inline(text: str) -> str:
    """Inline markdown as HTML: `code`, **bold**, *italic*, [text](link); everything else escaped."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{_e(part[1:-1])}</code>")
            continue
        s = _e(part)
        s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
        s = re.sub(r"(?<![\w*])\*(?![\s*])(.+?)(?<![\s*])\*(?![\w*])", r"<i>\1</i>", s)
        s = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", _link, s)
        out.append(s)
    return "".join(out)


_RELATIVE = re.compile(r"[^:/?#]*(?:[/?#]|$)")
"""A URL without a scheme: no ``:`` before its first ``/``, ``?`` or ``#``."""


def safe_href(url: str) -> bool:
    """Whether a link to ``url`` (as written, unescaped) may be followed from the page: ``http:`` and
    ``https:`` links, ``#`` anchors and relative paths. Any other scheme (``javascript:``, ``data:``,
    ``file:``, …) and any control character or backslash, which browsers strip or read as ``/``
    before they read the scheme, is refused."""
    if any(ord(c) < 0x21 or c in "\x7f\\" for c in url):
        return False
    return bool(re.match(r"https?://", url, re.IGNORECASE) or _RELATIVE.match(url))


def _link(match: re.Match) -> str:
    """``[text](url)`` (both already escaped) as a link, or as the text it was where the URL is not
    :func:`safe_href`: a report received from someone else runs nothing when clicked."""
    text, url = match.group(1), match.group(2)
    return f'<a href="{url}">{text}</a>' if safe_href(html.unescape(url)) else match.group(0)


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _table(lines: list[str], table_id: str | None = None) -> str:
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    ident = f' id="{_e(table_id)}"' if table_id else ""
    th = "".join(f"<th>{_inline(c)}</th>" for c in head)
    trs = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{ident}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def markdown(text: str) -> str:
    """HTML of the markdown the report's sections are written in: ``#`` headings, paragraphs,
    ``-`` lists, pipe tables (a header row, a rule, rows), images on a line of their own, and
    the inline forms of :func:`_inline`. Everything else is text, escaped."""
    out: list[str] = []
    blocks = re.split(r"\n\s*\n", text.strip("\n"))
    for block in blocks:
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        first = lines[0].strip()
        heading = re.match(r"(#{1,6})\s+(.*)", first)
        if heading and len(lines) == 1:
            level = min(len(heading.group(1)) + 1, 6)  # the page's own h1/h2 sit above the sections'
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif first.startswith("|") and len(lines) >= 2 and re.fullmatch(r"\|?[\s:|-]+\|?", lines[1].strip()):
            out.append(_table(lines))
        elif all(line.lstrip().startswith(("- ", "* ")) for line in lines):
            items = "".join(f"<li>{_inline(line.lstrip()[2:])}</li>" for line in lines)
            out.append(f"<ul>{items}</ul>")
        elif (image := re.fullmatch(r"!\[([^\]]*)\]\(([^)]*)\)", first)) and len(lines) == 1:
            out.append(f"<p>{_e(image.group(1))} (figure: {_e(image.group(2))})</p>")
        else:
            out.append(f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>")
    return "\n".join(out)


def _figure(out_dir: str, relative: str, name: str, caption: str) -> str:
    """The figure inline (a PNG data URI) with its caption, or a line saying it is missing. The
    figure is looked for where report.md links it and, in a run's own directory, beside the report."""
    candidates = [os.path.join(out_dir, relative), os.path.join(out_dir, os.path.basename(relative))]
    data = None
    for path in candidates:
        try:  # (a FIFO, device or link in place of the figure is no figure: never waited on or followed)
            data = store.read_regular(path)
            break
        except (OSError, store.StoreError):
            continue
    ident = anchor("fig", name)
    if data is None or not data.startswith(_PNG_SIGNATURE):
        return f'<figure id="{ident}"><p class="missing">No figure at {_e(relative)} (not drawn or not a PNG).</p></figure>'
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return (
        f'<figure id="{ident}"><img src="{uri}" alt="{_e(name)}">'
        f"<figcaption><b>{_e(name)}.</b> {_inline(caption)}</figcaption></figure>"
    )


def _rows_html(rows: list[dict], with_kind: bool) -> str:
    out = []
    for i, row in enumerate(rows):
        name = row["section"]
        kind = row.get("kind") or ""
        verdict = row["verdict"]
        p = row.get("p_value")
        links = (
            f'<a href="#{anchor("sec", name)}">section</a> · <a href="#{anchor("fig", name)}">figure</a> · '
            f'<a href="#{anchor("params", name)}">parameters</a>'
        )
        cells = [
            f'<td data-sort="{i}">{i + 1}</td>',
            f'<td><a href="#{anchor("sec", name)}">{_e(name)}</a></td>',
            f"<td>{_inline(row['claim'])}</td>",
            *([f"<td>{_e(kind)}</td>"] if with_kind else []),
            f'<td data-sort="{_e(row.get("estimate") if row.get("estimate") is not None else "")}">'
            f"{_e(row.get('interval') or '–')}</td>",
            f'<td data-sort="{_e(p if p is not None else "")}">{_e(f"{p:.2g}" if p is not None else "–")}</td>',
            f"<td>{_e(row.get('n', ''))}</td>",
            f'<td class="v-{_e(verdict.replace(" ", "-"))}"><b>{_e(verdict)}</b>'
            + (f" ({_inline(row['reason'])})" if row.get("reason") else "")
            + "</td>",
            f"<td>{links}</td>",
        ]
        out.append(
            f'<tr id="claim-{i + 1}" data-verdict="{_e(verdict)}" data-kind="{_e(kind)}">' + "".join(cells) + "</tr>"
        )
    return "".join(out)


VERDICT_ORDER = (stats.REPRODUCED, stats.DIRECTION_ONLY, stats.NOT_REPRODUCED, stats.INCONCLUSIVE, stats.NOT_TESTABLE)
"""The verdicts in the order the page counts them (any other after them)."""


def _counts(rows: list[dict]) -> str:
    """The claims counted by verdict (boxes, the four main verdicts always), then by kind (their
    source: the papers, studies, checks) and verdict, a table, when the claims carry a kind."""
    by_verdict = Counter(row["verdict"] for row in rows)
    verdicts = [v for v in VERDICT_ORDER if v in by_verdict or v != stats.NOT_TESTABLE]
    verdicts += [v for v in by_verdict if v not in verdicts]
    boxes = "".join(
        f'<span class="count v-{_e(v.replace(" ", "-"))}"><b>{by_verdict.get(v, 0)}</b> {_e(v)}</span>'
        for v in verdicts
    )
    out = f'<div class="counts" id="counts"><span class="count"><b>{len(rows)}</b> claims</span>{boxes}</div>'
    kinds = list(dict.fromkeys(row.get("kind") or "" for row in rows))
    if any(kinds):
        ths = "".join(f"<th>{_e(v)}</th>" for v in verdicts)
        trs = ""
        for kind in kinds:
            of_kind = Counter(row["verdict"] for row in rows if (row.get("kind") or "") == kind)
            tds = "".join(f"<td>{of_kind.get(v, 0)}</td>" for v in verdicts)
            trs += f"<tr><td>{_e(kind or '(none)')}</td><td>{sum(of_kind.values())}</td>{tds}</tr>"
        out += (
            f'<table id="by-source"><thead><tr><th>source</th><th>claims</th>{ths}</tr></thead>'
            f"<tbody>{trs}</tbody></table>"
        )
    return out


def _summary(rows: list[dict], sections: list, missing: tuple) -> str:
    """The top of the page: the counts (:func:`_counts`), the experiments missing from a partial
    report, and a link to each section's figure."""
    out = ['<section id="summary">']
    out.append(_counts(rows) if rows else '<p id="counts">No section states a claim.</p>')
    if missing:
        out.append(
            f'<p class="missing" id="missing"><b>Partial report:</b> {len(sections)} experiment(s) finished; '
            f"missing: {_e(', '.join(missing))}.</p>"
        )
    figures = [name for name, part in sections if hasattr(part, "figure")]
    if figures:
        links = "".join(f'<li><a href="#{anchor("fig", name)}">{_e(name)}</a></li>' for name in figures)
        out.append(f'<h2 id="figures">Figures</h2><ul id="figures-list">{links}</ul>')
    out.append("</section>")
    return "\n".join(out)


def _options(values, label: str, ident: str) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<label>{label} <select id="{ident}"><option value="">all</option>{opts}</select></label>'


def _claims(rows: list[dict]) -> str:
    """The table of every claim with its filters ("" when there is none)."""
    with_kind = any(row.get("kind") for row in rows)
    if not rows:
        return ""
    kinds = sorted({row.get("kind") or "" for row in rows}) if with_kind else []
    verdicts = list(dict.fromkeys(row["verdict"] for row in rows))
    filters = (
        '<div class="filters">'
        + (_options(kinds, "kind", "filter-kind") if with_kind else "")
        + _options(verdicts, "verdict", "filter-verdict")
        + '<span id="shown"></span></div>'
    )
    head = ["#", "section", "claim", *(["kind"] if with_kind else []), "statistic [interval]", "sign-test p", "pairs"]
    ths = "".join(f"<th>{h}</th>" for h in [*head, "verdict", "evidence"])
    return (
        '<h2 id="claims-heading">Every claim</h2>'
        + filters
        + f'<table id="claims"><thead><tr>{ths}</tr></thead><tbody>{_rows_html(rows, with_kind)}</tbody></table>'
    )


def _section(out_dir: str, name: str, part) -> str:
    """One experiment's section: structured (:class:`jaxfed.results.report.Section`) or a plain reading's markdown."""
    ident = anchor("sec", name)
    if not hasattr(part, "parameters"):
        return f'<section id="{ident}">{markdown(part.text)}</section>'
    params = "".join(
        f"<tr><td><code>{_e(k)}</code></td><td>{_e(json.dumps(v))}</td></tr>" for k, v in part.parameters.items()
    )
    nonfinite = "".join(f"<li>{_inline(line)}</li>" for line in part.nonfinite)
    return "\n".join(
        [
            f'<section id="{ident}"><h2>{_e(name)}</h2>',
            "" if part.description == part.caption else markdown(part.description),  # (else the caption)
            _figure(out_dir, part.figure, name, part.caption),
            f'<p>{_inline(part.settings)} <a href="#{anchor("settings", name)}">All settings</a>.</p>',
            f"<ul>{nonfinite}</ul>" if nonfinite else "",
            f'<table id="{anchor("params", name)}"><thead><tr><th>parameter</th><th>value</th></tr></thead>'
            f"<tbody>{params}</tbody></table>",
            markdown(part.reading.text),
            "</section>",
        ]
    )


def _settings(name: str, record: Mapping) -> str:
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td><code>{_e(v if isinstance(v, str) else json.dumps(v))}</code></td></tr>"
        for k in (*_SETTINGS, "versions")
        if (v := record.get(k)) is not None
    )
    return f'<h3 id="{anchor("settings", name)}">{_e(name)}</h3><table><tbody>{rows}</tbody></table>'


def page(
    out_dir: str, title: str, stamp: str, policy: str, sections: list, kinds: list | None = None, missing: tuple = ()
) -> str:
    """The page's HTML: (experiment name, section) pairs in report order, a section being a
    :class:`jaxfed.results.report.Section` or any object with ``text`` and ``verdicts`` (its markdown alone);
    ``kinds`` the kind of each claim in the same order (the paper's claim, a check, …; the claims
    are counted and filtered by it), ``missing`` the experiments a partial report lacks (named at
    the top), figures read from ``out_dir``."""
    rows = rundir.verdict_records(sections)
    if kinds is not None:
        if len(kinds) != len(rows):
            raise ValueError(f"report.html: {len(kinds)} kinds for {len(rows)} claims")
        rows = [dict(row, kind=kind) for row, kind in zip(rows, kinds)]
    settings = [_settings(name, part.record) for name, part in sections if hasattr(part, "record")]
    environment = (
        f"<p>This page was written by Python {_e(platform.python_version())} on {_e(platform.platform())}; "
        "each run's versions are its own (above).</p>"
    )
    toc = "".join(f'<li><a href="#{anchor("sec", name)}">{_e(name)}</a></li>' for name, _ in sections)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
            f'<h1 id="top">{_e(title)}</h1>',
            f"<p>{_inline(stamp)}</p>",
            _summary(rows, sections, tuple(missing)),
            _claims(rows),
            '<h2 id="policy">How verdicts are decided</h2>',
            markdown(policy),
            '<h2 id="contents">Sections</h2>',
            f"<ul>{toc}</ul>",
            *(_section(out_dir, name, part) for name, part in sections),
            '<h2 id="settings">Settings and environment</h2>',
            *settings,
            environment,
            f"<script>{_SCRIPT}</script>",
            "</body></html>",
        ]
    )


def write(
    out_dir: str, title: str, stamp: str, policy: str, sections: list, kinds: list | None = None, missing: tuple = ()
) -> str:
    """Writes ``<out_dir>/report.html`` (:func:`page`) atomically and returns its path."""
    path = os.path.join(out_dir, "report.html")
    store.atomic_write_bytes(path, page(out_dir, title, stamp, policy, sections, kinds, missing).encode())
    return path
