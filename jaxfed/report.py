"""``report.md`` for ``jaxfed reproduce``: the verdict policy and a summary table of every claim, then
one section per figure with its plot, parameters, the numbers behind the plot and a reading computed
from them."""

from __future__ import annotations

import datetime
import json
import os
from typing import NamedTuple

from jaxfed import report_html, rundir, stats, store
from jaxfed._version import __version__
from jaxfed.experiments.spec import Reading

__all__ = ["Section", "section", "write"]


class Section(NamedTuple):
    """One finished experiment's part of the report, as report.md (:attr:`text`) and report.html
    (:mod:`jaxfed.report_html`) show it; like a :class:`jaxfed.experiments.Reading` it has ``text``
    and ``verdicts``."""

    description: str
    figure: str
    """The figure's path relative to the report."""
    caption: str
    settings: str
    """One line: trials, seed, dtype, devices, chunk sizes, kept, time."""
    nonfinite: tuple
    """Lines naming the points whose trials had a NaN or infinite value."""
    parameters: dict
    reading: Reading
    """What the experiment's report read from the results (its markdown and verdicts)."""
    record: dict
    """The run's config.json (its settings and versions)."""
    name: str

    @property
    def verdicts(self) -> tuple:
        return tuple(self.reading.verdicts)

    @property
    def text(self) -> str:
        """The section's markdown (report.md)."""
        params = "\n".join(f"| `{k}` | {json.dumps(v)} |" for k, v in self.parameters.items())
        nonfinite = [f"- {line}" for line in self.nonfinite]
        lines = [
            f"## {self.name}",
            "",
            self.description,
            "",
            f"![{self.name}]({self.figure})",
            "",
            self.settings,
            "",
            *nonfinite,
            *([""] if nonfinite else []),
            "| parameter | value |",
            "|---|---|",
            params,
            "",
            self.reading.text,
        ]
        return "\n".join(lines)


def section(exp, config, config_json: dict, results: dict, seconds: float) -> Section:
    """The :class:`Section` of one finished experiment: its markdown (plot path relative to the
    report), the verdicts it states and what report.html shows besides."""
    reading = exp.report(config, config_json["points"], results)
    if isinstance(reading, str):
        reading = Reading(reading)
    if not isinstance(reading, Reading):  # a user's report: named, not an AttributeError inside jaxfed
        where = f" ({exp.source.rpartition(':')[0]})" if exp.source else ""
        raise ValueError(
            f"the report of experiment {exp.name!r}{where} returned a {type(reading).__name__}; "
            "it must return markdown text (str) or a jaxfed.experiments.Reading"
        )
    engine = config_json["engine"]
    # Said where the numbers below are NaN: a point whose every trial failed has no band or verdict.
    counts = config_json.get("nonfinite_trials", {})
    nonfinite = rundir.nonfinite_lines(counts, config_json["points"], config_json["n_trials"])
    settings = (
        f"{config_json['n_trials']} trials per point, seed {config_json['seed']}, {config_json['dtype']}, "
        f"{engine['devices']} device(s) ({config_json['device']}), chunk size(s) {engine['chunk_sizes']}, "
        f"kept {engine['keep']}; the results took {config_json.get('wall_s', seconds):.1f} s to compute "
        f"(as recorded), this run spent {seconds:.1f} s on them."
    )
    return Section(
        description=exp.description,
        figure=f"{exp.name}/{exp.name}.png",
        caption=getattr(exp, "caption", "") or _first_sentence(exp.description),
        settings=settings,
        nonfinite=tuple(nonfinite),
        parameters=dict(config_json["parameters"]),
        reading=reading,
        record=config_json,
        name=exp.name,
    )


def _first_sentence(text: str) -> str:
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def summary(named_sections: list) -> str:
    """The table of every claim of the report: (section name, Reading) pairs in report order."""
    names = [name for name, reading in named_sections for _ in reading.verdicts]
    verdicts = [v for _, reading in named_sections for v in reading.verdicts]
    return stats.verdict_table(verdicts, "paired statistic", sections=[f"[{n}](#{n})" for n in names])


def write(out_dir: str, sections: list, seconds: float) -> str:
    """Writes ``<out_dir>/report.md`` from (experiment name, :func:`section`) pairs, its claims
    as ``<out_dir>/verdicts.json`` (:func:`jaxfed.results.verdicts`) and the same as one web page,
    ``<out_dir>/report.html`` (:func:`jaxfed.report_html.write`), and returns report.md's path."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    head = [
        "# jaxfed reproduction report",
        "",
        f"jaxfed {__version__}, {stamp}, {seconds:.0f} s in all. Each figure shows the median over trials "
        "and the central 75% band (12.5% and 87.5% quantiles); the data are in each directory's "
        "`metrics.npz` with axes documented in its `config.json`.",
        "",
        "**How verdicts are decided** (every section, `jaxfed.stats.paired_verdict`). A claim compares two "
        "metrics on the same trials (common random numbers): the statistic of the paired differences or "
        "ratios with its 95% interval (for a median exact, from order statistics; for a mean the percentile "
        "bootstrap), and the exact sign test. *Reproduced*: the "
        "interval lies on the claimed side of the margin and, for a claim of direction, at least "
        f"{stats.MIN_UNTIED_PAIRS} pairs differ and the sign test agrees (p < {stats.SIGN_TEST_ALPHA:g}, "
        "most differing pairs in the claimed direction). *Not reproduced*: the interval lies on the other "
        "side (the effect is absent or reversed). *Inconclusive*: neither, or the interval and the sign test "
        "disagree (the reason is given). *Not testable here*: the settings cannot show the effect (the reason "
        "is given). Margins: a claim of direction takes none (any effect the interval and the sign test "
        'agree on counts); "≈" and "margin ±x" make an equality claim, which holds when the whole interval lies '
        f"within ±x (for ratios within [1/{1 + stats.EQUAL_RATIO_MARGIN:g}, {1 + stats.EQUAL_RATIO_MARGIN:g}], for "
        'slots the claim states x). "(n dropped)": pairs left out because a value is '
        "NaN or infinite. A *check of an explanation* (e.g. a measured cover time against theory) is stated "
        "as such and decided the same way; it is not one of the paper's claims.",
        "",
        "## Every claim",
        "",
        "Each section's verdicts in one table (the statistic is on each claim's own scale: a slot difference, a "
        "ratio or a difference in the metric's unit, as the claim says).",
        "",
        summary(sections) or "No section states a claim.",
        "",
    ]
    path = os.path.join(out_dir, "report.md")
    store.atomic_write_bytes(path, ("\n".join(head + [reading.text for _, reading in sections]) + "\n").encode())
    # The claims as data too (jaxfed.results.verdicts reads them into a table without running anything).
    rundir.write_verdicts(out_dir, sections, "report.md")
    # The same sections and claims as one web page (figures inline), beside it.
    intro = next(line for line in head if line.startswith(f"jaxfed {__version__}"))
    policy = next(line for line in head if line.startswith("**How verdicts are decided**"))
    report_html.write(out_dir, head[0].lstrip("# "), intro, policy, sections)
    return path
