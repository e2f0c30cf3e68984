"""``report.md`` for ``jaxfed reproduce``: the verdict policy and a summary table of every claim, then
one section per figure with its plot, parameters, the numbers behind the plot and a reading computed
from them.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from jaxfed import stats, store
from jaxfed._version import __version__
from jaxfed.experiment import Reading
from jaxfed.results import report_html
from jaxfed.store import rundir


class Section(NamedTuple):
    """One finished experiment's part of the report, as report.md (:attr:`text`) and report.html
    (:mod:`jaxfed.results.report_html`) show it; like a :class:`jaxfed.experiment.Reading` it has ``text``
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
        params = "\n".join(f"| `{k}` | {json.dumps(v, sort_keys=True)} |" for k, v in sorted(self.parameters.items()))
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
            "it must return markdown text (str) or a jaxfed.experiment.Reading"
        )
    engine = config_json["engine"]
    # Said where the numbers below are NaN: a point whose every trial failed has no band or verdict.
    counts = config_json.get("nonfinite_trials", {})
    nonfinite = rundir.nonfinite_lines(counts, config_json["points"], config_json["n_trials"])
    head = f"{config_json['n_trials']} trials per point, seed {config_json['seed']}, {config_json['dtype']}, "
    if config_json.get("shards"):  # a merge: the shards computed the results, this process joined them
        settings = head + merged_settings(config_json, seconds)
    else:
        settings = head + (
            f"{engine['devices']} device(s) ({config_json['device']}), chunk size(s) {engine['chunk_sizes']}, "
            f"kept {engine['keep']}; the results took {config_json.get('wall_s', seconds):.1f} s to compute "
            "(as recorded)."
        )
    return Section(
        description=exp.description,
        figure=f"{exp.name}/{exp.name}.png",
        caption=exp.caption or exp.description,
        settings=settings,
        nonfinite=tuple(nonfinite),
        parameters=dict(config_json["parameters"]),
        reading=reading,
        record=config_json,
        name=exp.name,
    )


def merged_settings(config_json: dict, seconds: float) -> str:
    """The settings line's account of a merged run (config.json's ``"shards"``, from each shard's
    own record): the shards' summed compute and compile seconds, their devices and chunk sizes,
    then the merge's own time apart."""
    shards = config_json["shards"]
    timed = [s["wall_s"] for s in shards if s.get("wall_s") is not None]
    devices = sorted({f"{s.get('devices')} device(s) ({s.get('device')})" for s in shards})
    sizes = sorted({size for s in shards for size in s.get("chunk_sizes") or [] if size is not None})
    untimed = (
        f", not counting {len(shards) - len(timed)} shard(s) that recorded no time" if len(timed) < len(shards) else ""
    )
    return (
        f"merged from {len(shards)} shard(s) computed on {', '.join(devices)}, "
        f"chunk size(s) {sizes or [None]}, kept {config_json['engine']['keep']}; the shards took "
        f"{sum(timed):.1f} s in all to compute (as recorded){untimed}, "
        f"{sum(s.get('compile_s') or 0.0 for s in shards):.1f} s of it compiling; merging and writing took "
        f"{config_json.get('wall_s', seconds):.1f} s."
    )


def compute_seconds(record: dict) -> float:
    """The seconds a run's results took to compute, as recorded: its shards' summed ``wall_s``
    for a merge (``"shards"``), else its own."""
    if record.get("shards"):
        return sum(float(s.get("wall_s") or 0.0) for s in record["shards"])
    return float(record.get("wall_s", 0.0))


KINDS = ("the papers' claims", "beyond-the-paper studies", "checks of an explanation", "checks of the implementation")


def claim_kind(section, verdict) -> str:
    """One of :data:`KINDS`: a claim stated as "check of an explanation: …" or "check of the
    implementation: …", a claim of an experiment whose description says "beyond the paper", else
    one of the papers' claims."""
    if verdict.claim.startswith("check of an explanation"):
        return KINDS[2]
    if verdict.claim.startswith("check of the implementation"):  # true by construction (the same algorithm)
        return KINDS[3]
    return KINDS[1] if "beyond the paper" in getattr(section, "description", "").lower() else KINDS[0]


def unique_claims(verdicts: list, sections: list) -> list:
    """The verdicts with a claim name repeated within a section (``sections``: one name per verdict)
    numbered ("… (2nd)"), so that every row names one claim."""
    seen: dict = {}
    out = []
    for v, where in zip(verdicts, sections):
        k = seen[where, v.claim] = seen.get((where, v.claim), 0) + 1
        out.append(v if k == 1 else v._replace(claim=f"{v.claim} ({_ordinal(k)})"))
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def counts(named_sections: list) -> str:
    """The table of claims counted by kind (rows, :data:`KINDS`) and verdict (columns)."""
    verdict_names = [
        stats.REPRODUCED,
        stats.DIRECTION_ONLY,
        stats.NOT_REPRODUCED,
        stats.INCONCLUSIVE,
        stats.NOT_TESTABLE,
    ]
    table = {k: dict.fromkeys(verdict_names, 0) for k in KINDS}
    for _, sec in named_sections:
        for v in sec.verdicts:
            table[claim_kind(sec, v)][v.verdict] = table[claim_kind(sec, v)].get(v.verdict, 0) + 1
    rows = ["| kind | claims | " + " | ".join(verdict_names) + " |", "|---|---|" + "---|" * len(verdict_names)]
    for kind, row in table.items():
        rows.append(f"| {kind} | {sum(row.values())} | " + " | ".join(str(row[v]) for v in verdict_names) + " |")
    return "\n".join(rows)


def summary(named_sections: list) -> str:
    """The table of every claim of the report: (section name, Reading) pairs in report order."""
    names = [name for name, reading in named_sections for _ in reading.verdicts]
    verdicts = unique_claims([v for _, reading in named_sections for v in reading.verdicts], names)
    return stats.verdict_table(verdicts, "paired statistic", sections=[f"[{n}](#{n})" for n in names])


def _figure_here(out_dir: str, sec: Section) -> Section:
    """The section with its figure's path as it lies from ``out_dir``: ``NAME/NAME.png`` in a reproduction,
    ``NAME.png`` in a run's own directory (``jaxfed run``, ``jaxfed report DIR``)."""
    own = os.path.basename(sec.figure)
    if not os.path.exists(os.path.join(out_dir, sec.figure)) and os.path.exists(os.path.join(out_dir, own)):
        return sec._replace(figure=own)
    return sec


def title(sections: list) -> str:
    """The report's title: a single run's names its experiment, several runs' are a reproduction."""
    return f"{sections[0][0]}: jaxfed report" if len(sections) == 1 else "jaxfed reproduction report"


def partial_line(sections: list, missing) -> str:
    """report.md's line naming the experiments a partial report lacks ("" when none)."""
    if not missing:
        return ""
    return f"**Partial report:** {len(sections)} experiment(s) finished; missing: " + ", ".join(missing) + "."


def write(out_dir: str, sections: list, seconds: float, deciding: str = "", missing: tuple = ()) -> str:
    """Writes ``<out_dir>/report.md`` from (experiment name, :func:`section`) pairs (with
    ``deciding``, the account of ``--decide``, after the counts; ``missing``, the experiments a
    partial report lacks, named under the title), its claims
    as ``<out_dir>/verdicts.json`` (:func:`jaxfed.results.verdicts`) and the same as one web page,
    ``<out_dir>/report.html`` (:func:`jaxfed.results.report_html.write`), and returns report.md's path."""
    sections = [(name, _figure_here(out_dir, sec) if isinstance(sec, Section) else sec) for name, sec in sections]
    computed = sum(compute_seconds(sec.record) for _, sec in sections if isinstance(sec, Section))
    partial = partial_line(sections, missing)
    head = [
        f"# {title(sections)}",
        "",
        *([partial, ""] if partial else []),
        f"jaxfed {__version__}; the results took {computed:.0f} s to compute (as recorded). Each figure shows the median over trials "
        "and the central 75% band (12.5% and 87.5% quantiles); the data are in each directory's "
        "`metrics.npz` with axes documented in its `config.json`.",
        "",
        "**How verdicts are decided** (every section, `jaxfed.stats.paired_verdict`). A claim compares two "
        "metrics on the same trials (common random numbers): the statistic of the paired differences or "
        "ratios with its 95% interval (for a median exact, from order statistics; for a mean the percentile "
        "bootstrap), and the exact sign test. "
        + stats.verdicts.VERDICT_POLICY
        + " *Not reproduced*: the interval lies on the other side (the reason is given). *Not testable here*: "
        'the settings cannot show the effect (the reason is given). "(n dropped)": pairs left out because a '
        "value is NaN or infinite. Claims are counted by kind: the papers' claims, beyond-the-paper studies "
        "(experiments that say so), checks of an explanation (stated as such, decided the same way, not "
        "claims of the papers) and checks of the implementation (claims true by construction, such as two "
        "algorithms that are the same algorithm: they test the code, not the papers).",
        "",
        counts(sections),
        "",
        *([deciding] if deciding else []),
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
    kinds = [claim_kind(sec, v) for _, sec in sections for v in sec.verdicts]
    report_html.write(out_dir, title(sections), intro, policy, sections, kinds, tuple(missing))
    return path
