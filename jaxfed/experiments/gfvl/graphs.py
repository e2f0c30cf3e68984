"""Beyond the G-FVL paper: conjugate G-FVL on graphs people deploy, and which graph property predicts
convergence.

Graphs (``graphs``, :func:`jaxfed.gfvl.graphs.from_spec`): random geometric graphs (wireless ad-hoc networks, a
radius sweep), Erdős–Rényi, barbell and lollipop (slow mixing), the paper's complete, ring and star for
reference, and any user graph: one registered by name (:func:`jaxfed.gfvl.graphs.register`, e.g. in a file loaded
with ``--import``; ``--set graphs=NAME``), files given with ``--set graph=PATH`` (``.npy`` adjacency or an edge
list, :func:`jaxfed.gfvl.graphs.load`), or from Python an adjacency matrix or a networkx graph (:func:`with_graphs`).
Random graphs are drawn once from ``graph_seed`` (the graph is part of the configuration; trials repeat the
data and the walk on it).

The model is Fig. 3's (Beta–Bernoulli, exact conjugate updates), so the KL is exactly 0 from the walk's cover
time on and the slot at which it falls below ``level`` is a property of the walk and the data. Per graph the
report gives the cover time measured against the exact expected cover time of the MH chain
(:func:`jaxfed.gfvl.gossip.expected_cover_time`, K <= ``exact_max_agents``; Matthews' bounds above) and against
the spectral gap of P (:func:`jaxfed.gfvl.graphs.spectral_gap`), the mean hitting time, and the slots to
KL <= ``level``; the verdicts say which property predicts those slots (rank correlation across the graphs).

Metrics (point, trial): ``kl`` (…, record) KL(q^(i) ‖ p(θ|D)) at ``records`` log-spaced slots (:func:`record_slots`);
``slots_to_level`` the first slot with KL <= level and ``cover`` the first slot with every agent visited (both
n_slots + 1 when never). The points of a trial share its key (the same data and walk uniforms on every graph).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import gfvl, plotting, scenarios, stats, validation
from jaxfed.experiment import Experiment, Reading, Sweep
from jaxfed.experiments.gfvl.checks import check_bernoulli_setting, check_loss_normalisation
from jaxfed.experiments.gfvl.trials import summary_reading, target_text
from jaxfed.gfvl import expfam, gossip, graphs, likelihoods

NAME = "gfvl-graphs"
COVER_MARGIN = 0.05
"""Relative margin of the check "measured mean cover time = exact expected cover time"."""
PREDICTORS = ("exact cover time", "relaxation time 1/(1 − λ₂)", "mean hitting time")
"""The graph properties whose rank correlation with the slots to KL <= level is tested."""
MIN_GRAPHS = 3
"""Fewest graphs with which a rank correlation across them is tested."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Parameters. Static (shape-changing): n_agents (and each user graph's own K), n_per_agent, n_slots,
    records, the graphs. Traced per point: the adjacency matrix. Closure constants: the rest.
    """

    n_agents: int = 10  # K of the graphs named in graphs (a user graph file has its own)
    n_per_agent: int = 100  # N_k
    prior_a: float = 2.0  # Beta prior a
    prior_b: float = 2.0  # Beta prior b
    alpha: float = 1.0  # temperature α
    theta_true: float = 0.7  # [choice] data z ~ Bernoulli(θ_true)
    loss_normalisation: str = "sum"  # "sum" (target p(θ|D) at α = 1) or "mean" (tempered by 1/N_k)
    graphs: tuple[str, ...] = (
        "complete",
        "ring",
        "star",
        "rgg:radius=0.4",
        "rgg:radius=0.55",
        "rgg:radius=0.7",
        "er:p=0.3",
        "er:p=0.6",
        "barbell",
        "lollipop",
    )  # the graphs by name or family, each one of graphs.spec_forms()
    graph: tuple[str, ...] = ()  # user graph files, one point each: .npy (K, K) 0/1 adjacency, or an edge list "i j"
    graph_seed: int = 0  # [choice] seed of the random graphs (rgg, er), drawn once: the graph is configuration
    n_slots: int = 2000  # slots simulated; cover and level times beyond it are censored at n_slots + 1
    records: int = 40  # KL recorded at this many log-spaced slots from 1 to n_slots (fewer where they coincide)
    level: float = 0.01  # KL level (nats) of the slots-to-level metric
    exact_max_agents: int = 12  # exact expected cover time for K up to this (at most 16: its cost grows as K·2^K)

    def __post_init__(self):
        check_bernoulli_setting(self)
        check_loss_normalisation(self.loss_normalisation)
        validation.check("graphs", self.graphs, len(self.graphs) + len(self.graph) >= 1, "at least one graph in all")
        validation.check("graphs", self.graphs, len(set(self.graphs)) == len(self.graphs), "distinct specifications")
        validation.integer("graph_seed", self.graph_seed, 0, 2**32 - 1)
        for spec in self.graphs:
            graphs.from_spec(spec, self.n_agents, self.graph_seed, "graphs")
        for path in self.graph:
            graphs.load(path, "graph")
        validation.integer("n_slots", self.n_slots, 1)
        validation.integer("records", self.records, 1)
        validation.positive("level", self.level)
        validation.integer("exact_max_agents", self.exact_max_agents, 2, gossip.EXACT_COVER_MAX_AGENTS)


def adjacency_digest(adjacency) -> str:
    """A short SHA-256 of an adjacency matrix (int32 bytes and shape): a user graph's identity in the labels."""
    a = np.ascontiguousarray(np.asarray(adjacency, np.int32))
    return hashlib.sha256(str(a.shape).encode() + a.tobytes()).hexdigest()[:16]


def graph_list(cfg: Config, extra: Mapping | None = None) -> list[tuple[dict, np.ndarray]]:
    """(label, adjacency) per point: the built-in specifications, the user files, then ``extra`` (name ->
    adjacency or networkx graph, from :func:`with_graphs`)."""
    out = [({"graph": spec}, graphs.from_spec(spec, cfg.n_agents, cfg.graph_seed, "graphs")) for spec in cfg.graphs]
    for path in cfg.graph:
        a = graphs.load(path, "graph")
        out.append(({"graph": os.path.basename(path), "sha256": adjacency_digest(a)}, a))
    for name, g in (extra or {}).items():
        a = graphs.as_adjacency(g, f"graph {name!r}")
        out.append(({"graph": str(name), "sha256": adjacency_digest(a)}, a))
    names = [lab["graph"] for lab, _ in out]
    validation.check("graph", names, len(set(names)) == len(names), "graphs of distinct names")
    return out


def record_slots(cfg: Config) -> np.ndarray:
    """The slots (from 1) at which ``kl`` is recorded: ``records`` log-spaced from 1 to n_slots, rounded, distinct."""
    return np.unique(np.round(np.logspace(0, np.log10(cfg.n_slots), cfg.records)).astype(np.int64))


def make_trial(cfg: Config):
    prior = expfam.beta_natural(cfg.prior_a, cfg.prior_b)
    recorded = record_slots(cfg) - 1

    def trial(key, point):
        adjacency = point["adjacency"]
        n_agents = adjacency.shape[0]
        key_data, key_schedule = jax.random.split(key)
        ones = scenarios.bernoulli_counts(key_data, n_agents, cfg.n_per_agent, cfg.theta_true)
        weight = likelihoods.loss_weight(cfg.loss_normalisation, cfg.n_per_agent)
        agent_stats = likelihoods.bernoulli_beta_stats(ones, cfg.n_per_agent) * weight
        walk = gossip.mh_walk(key_schedule, adjacency, cfg.n_slots)
        kl = gfvl.conjugate_kl_trajectory(expfam.BETA, prior, agent_stats, cfg.alpha, walk.schedule, walk.n_visited)
        censored = cfg.n_slots + 1

        def first(hit):
            return jnp.where(hit.any(), jnp.argmax(hit) + 1, censored).astype(jnp.int32)

        return {
            "kl": kl[recorded],
            "slots_to_level": first(kl <= cfg.level),
            "cover": first(walk.n_visited == n_agents),
        }

    return trial


def build(cfg: Config, extra: Mapping | None = None):
    pairs = graph_list(cfg, extra)
    labels = [label for label, _ in pairs]
    points = [{"adjacency": jnp.asarray(a)} for _, a in pairs]
    axes = {"kl": ("record",), "slots_to_level": (), "cover": ()}
    coords = {"record": record_slots(cfg).tolist()}  # the slot of each record
    return Sweep(trial=make_trial(cfg), points=points, labels=labels, metric_axes=axes, coords=coords)


def with_graphs(named: Mapping, base: Experiment | None = None) -> Experiment:
    """gfvl-graphs with more graphs from Python: ``named`` maps a name to a (K, K) 0/1 adjacency (array or nested
    list) or a networkx graph (networkx is optional; :func:`jaxfed.gfvl.graphs.as_adjacency`). Each is one more point,
    labelled by its name and the SHA-256 of its adjacency (so a run with another graph is another configuration).
    The graphs are validated here (a disconnected or asymmetric one is a ValueError naming it)::

        import networkx as nx
        from jaxfed import engine
        from jaxfed.experiment import make_config
        from jaxfed.runs import run_experiment
        from jaxfed.experiments.gfvl import graphs as gfvl_graphs
        exp = gfvl_graphs.with_graphs({"karate": nx.karate_club_graph()})
        cfg = make_config(exp.config_cls, {"graphs": "complete,ring"})
        run_experiment(exp, cfg, options=engine.RunOptions.for_experiments(out_dir="results/karate"))

    A file defining ``EXPERIMENT = gfvl_graphs.with_graphs({...})`` runs through the plain CLI
    (``jaxfed run mine.py:EXPERIMENT``)."""
    base = EXPERIMENT if base is None else base
    validation.check("named", type(named).__name__, isinstance(named, Mapping) and len(named) >= 1, "a non-empty dict")
    checked = {str(name): graphs.as_adjacency(g, f"graph {name!r}") for name, g in named.items()}

    def build_with(cfg: Config):
        return build(cfg, checked)

    def plot_with(cfg: Config, labels, results, path):
        return plot(cfg, labels, results, path, checked)

    def report_with(cfg: Config, labels, results):
        return report(cfg, labels, results, checked)

    return dataclasses.replace(base, build=build_with, plot=plot_with, report=report_with)


# --------------------------------------------------------------------------- graph properties (host, float64)
def properties(adjacency, exact_max_agents: int) -> dict:
    """K, edges, spectral gap 1 − λ₂ and relaxation time, hitting times, the exact expected cover time (slots,
    counting the first; NaN above ``exact_max_agents``) and Matthews' bounds, of the MH chain on ``adjacency``."""
    a = np.asarray(adjacency)
    p, k = _mh64(a), a.shape[0]
    gap = graphs.spectral_gap(a)
    off = gossip.hitting_time_matrix(p)[~np.eye(k, dtype=bool)]
    lower, upper = gossip.cover_time_bounds(p)
    exact = gossip.expected_cover_time(p) if k <= exact_max_agents else float("nan")
    return {
        "agents": k,
        "edges": int(a.sum()) // 2,
        "gap": gap,
        "relaxation": 1.0 / gap,
        "mean_hitting": float(off.mean()),
        "max_hitting": float(off.max()),
        "cover_exact": exact,
        "cover_bounds": (lower, upper),
    }


def _mh64(adjacency) -> np.ndarray:
    """The MH transition matrix in float64 on the host (docs/gfvl.md §A2)."""
    a = np.asarray(adjacency, np.float64)
    deg = a.sum(-1)
    off = a * np.minimum(1.0 / deg[:, None], 1.0 / deg[None, :])
    return off + np.diag(1.0 - off.sum(-1))


def rank(values: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, ties given their average rank (as Spearman's correlation needs)."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, axis=-1, kind="stable")
    ranks = np.empty_like(values)
    np.put_along_axis(ranks, order, np.arange(values.shape[-1], dtype=np.float64) * np.ones_like(values), axis=-1)
    out = np.empty_like(ranks)
    for idx in np.ndindex(values.shape[:-1]):
        row, r = values[idx], ranks[idx]
        _, inverse, counts = np.unique(row, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=r)
        out[idx] = (sums / counts)[inverse]
    return out


def spearman(x, y) -> np.ndarray:
    """Spearman's rank correlation of ``x`` (graphs,) with each row of ``y`` (…, graphs); NaN where a row has
    no spread."""
    rx = rank(np.asarray(x, np.float64)[None, :])[0]
    ry = rank(np.atleast_2d(y))
    rx, ry = rx - rx.mean(), ry - ry.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ry @ rx) / np.sqrt((ry**2).sum(-1) * (rx**2).sum())


def predictor_values(props: list[dict]) -> dict:
    """Per predictor (PREDICTORS), its value on each graph; None for the exact cover time when a graph is too
    large for it."""
    cover = np.array([p["cover_exact"] for p in props])
    return {
        PREDICTORS[0]: None if np.isnan(cover).any() else cover,
        PREDICTORS[1]: np.array([p["relaxation"] for p in props]),
        PREDICTORS[2]: np.array([p["mean_hitting"] for p in props]),
    }


def claims(cfg: Config, labels, results, props: list[dict]) -> tuple[list, list, dict]:
    """The verdicts: per graph with an exact cover time, measured mean cover = exact (within COVER_MARGIN);
    per predictor, a positive per-trial rank correlation across the graphs with the slots to KL <= level; and
    the best predictor against each other one (paired per-trial correlations). Returns (cover verdicts,
    predictor verdicts, per-predictor per-trial correlations)."""
    cover = np.asarray(results["cover"], np.float64)
    slots = np.asarray(results["slots_to_level"], np.float64)  # (graph, trial)
    cover_checks = []
    for p, lab in enumerate(labels):
        exact = props[p]["cover_exact"]
        value = f"{exact:.2f} slots" if np.isfinite(exact) else "expected cover time"
        claim = (
            f"{lab['graph']}: measured mean cover time = exact {value} (±{COVER_MARGIN:.0%}; the estimator and "
            "margin of gfvl-topologies' complete-graph check)"
        )
        if np.isnan(exact):
            cover_checks.append(
                stats.not_testable(claim, f"K = {props[p]['agents']} > exact_max_agents = {cfg.exact_max_agents}")
            )
            continue
        cover_checks.append(
            stats.paired_verdict(
                cover[p],
                np.full(cover.shape[1], exact),
                claim,
                expect="equal",
                statistic="mean",
                margin=COVER_MARGIN * exact,
                censored_a=cover[p] > cfg.n_slots,
                censoring=f"within {cfg.n_slots} slots",
            )
        )
    rho = {}
    predictor_checks = []
    what = f"slots to KL <= {cfg.level:g}"
    for name, x in predictor_values(props).items():
        claim = f"{name} predicts the {what} (per-trial rank correlation across the graphs > 0)"
        if len(props) < MIN_GRAPHS:
            predictor_checks.append(
                stats.not_testable(claim, f"{len(props)} graphs; a rank correlation needs {MIN_GRAPHS}")
            )
            continue
        if x is None:
            predictor_checks.append(
                stats.not_testable(
                    claim,
                    ", ".join(lab["graph"] for lab, p in zip(labels, props) if p["agents"] > cfg.exact_max_agents)
                    + f": K > exact_max_agents = {cfg.exact_max_agents}",
                )
            )
            continue
        rho[name] = spearman(x, slots.T)  # (trial,)
        predictor_checks.append(stats.paired_verdict(rho[name], np.zeros_like(rho[name]), claim, statistic="mean"))
    if len(rho) >= 2:
        best = max(rho, key=lambda n: np.nanmean(rho[n]))
        for name in rho:
            if name != best:
                claim = f"{best} predicts the {what} better than {name} (paired per-trial rank correlations)"
                predictor_checks.append(stats.paired_verdict(rho[best], rho[name], claim, statistic="mean"))
    return cover_checks, predictor_checks, rho


def median_correlations(predictors: Mapping, slots: np.ndarray, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per predictor (name -> values on the graphs, or None): Spearman's correlation with the per-graph median
    slots (graph, trial) and a 95% percentile bootstrap interval over the trials (resampled jointly across the
    graphs: common random numbers), as (estimate, lower, upper); None stays None."""
    rng = np.random.default_rng(seed)
    n = slots.shape[1]
    medians = np.median(slots, axis=1)
    boots = np.stack([np.median(slots[:, rng.integers(0, n, n)], axis=1) for _ in range(n_boot)])  # (boot, graph)
    out: dict = {}
    for name, x in predictors.items():
        if x is None:
            out[name] = None
            continue
        lo, hi = np.nanquantile(spearman(x, boots), [0.025, 0.975])
        out[name] = (float(spearman(x, medians)[0]), float(lo), float(hi))
    return out


# --------------------------------------------------------------------------- figure and report
def plot(cfg: Config, labels, results, path, extra: Mapping | None = None):
    """Small multiples of the KL against the slot, one panel per graph (the others' medians in grey behind
    it); below them, with the raw trials, the measured cover time against the exact one and the slots to the
    level against the two predictors (one point per graph, 95% intervals), in the graphs' styles."""
    names = [lab["graph"] for lab in labels]
    raw = not isinstance(results["cover"], stats.Summary)
    ncols = min(len(names), 5)
    nrows = -(-len(names) // ncols)
    fig, axes = plotting.figure(
        nrows + raw,
        ncols,
        figsize=(13, 2.3 * nrows + 4.4 * raw),
        squeeze=False,
        gridspec_kw={"height_ratios": [1.0] * nrows + [1.7] * raw},
    )
    grid = axes[0, 0].get_gridspec()
    _kl_small_multiples(cfg, axes[:nrows].ravel(), names, results["kl"], ncols)
    fig.suptitle(
        f"Conjugate G-FVL (Beta–Bernoulli, K = {cfg.n_agents}, N_k = {cfg.n_per_agent}): KL to the posterior per graph "
        f"(dotted: level {cfg.level:g})",
        fontsize=10,
    )
    if not raw:
        plotting.save(fig, path)
        return
    for ax in axes[-1]:
        ax.remove()
    row = grid[-1, :].subgridspec(1, 3)
    bottom = [fig.add_subplot(row[0, i]) for i in range(3)]
    props = [properties(a, cfg.exact_max_agents) for a in adjacencies(cfg, labels, extra)]
    for ax, panel in zip(bottom, _property_panels(cfg, props, results)):
        _property_panel(ax, names, *panel)
    lo, hi = bottom[0].get_xlim()
    bottom[0].plot([lo, hi], [lo, hi], color="k", lw=0.7, label="measured = exact cover time")
    bottom[0].set_xlim(lo, hi)
    plotting.legend(fig, bottom, ncol=6)
    plotting.save(fig, path)


def _kl_small_multiples(cfg: Config, kl_axes, names: list[str], kl, ncols: int) -> None:
    """The KL against the slot, one panel per graph on ``kl_axes`` (shared log axes, ``ncols`` per row;
    the level dotted), labelled on the outer panels only."""
    for ax in kl_axes[1:]:
        ax.sharex(kl_axes[0])
        ax.sharey(kl_axes[0])
    plotting.small_multiples(kl_axes, record_slots(cfg), kl, names, log_y=True)
    kl_axes[0].set_xscale("log")
    for i, ax in enumerate(kl_axes[: len(names)]):
        ax.axhline(cfg.level, color="k", lw=0.6, ls=":")
        ax.tick_params(labelsize=7)
        if i % ncols == 0:
            ax.set_ylabel(plotting.kl_label(r"p(\theta|\mathcal{D})"), fontsize=8)
        else:
            ax.tick_params(labelleft=False)
        if i >= len(names) - ncols:
            ax.set_xlabel("slot i", fontsize=8)
        else:
            ax.tick_params(labelbottom=False)


def _property_panels(cfg: Config, props: list[dict], results) -> tuple:
    """The three panels below the KL's, each (x per graph, graph index -> (estimate, lower, upper) of its
    95% interval, x label, y label, title): the measured mean cover time against the exact one, and the
    median slots to the level against the relaxation time and against the exact cover time."""
    cover = np.asarray(results["cover"], np.float64)
    level = np.asarray(results["slots_to_level"], np.float64)
    exact = np.array([p["cover_exact"] for p in props])
    # Where a graph is too large for the exact cover time, Matthews' bounds' geometric mean stands in (panel 1).
    reference = [e if np.isfinite(e) else np.sqrt(np.prod(p["cover_bounds"])) for e, p in zip(exact, props)]
    return (
        (
            reference,
            lambda p: stats.bootstrap_interval(cover[p], "mean", n_boot=400),
            "exact expected cover time (slots)",
            "measured mean cover time (slots)",
            "cover time: Monte Carlo vs exact chain",
        ),
        (
            np.array([p["relaxation"] for p in props]),
            lambda p: stats.interval(level[p], "median"),
            "relaxation time 1/(1 − λ₂) of P",
            f"median slots to KL ≤ {cfg.level:g}",
            f"slots to KL ≤ {cfg.level:g} vs relaxation time",
        ),
        (
            exact,
            lambda p: stats.interval(level[p], "median"),
            "exact expected cover time (slots)",
            f"median slots to KL ≤ {cfg.level:g}",
            f"slots to KL ≤ {cfg.level:g} vs exact cover time",
        ),
    )


def _property_panel(ax, names: list[str], x, interval, xlabel: str, ylabel: str, title: str) -> None:
    """One point per graph with a finite ``x`` (hollow, in the graph's style) and its 95% interval, on log axes."""
    for p, name in enumerate(names):
        if not np.isfinite(x[p]):
            continue
        est, lo, hi = interval(p)
        style = plotting.series_style(p)
        ax.errorbar(
            [x[p]],
            [est],
            yerr=[[est - lo], [hi - est]],
            color=style["color"],
            marker=style["marker"],
            mfc="none",  # hollow: the interval shows through the marker
            ms=6,
            capsize=3,
            elinewidth=1.3,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.margins(0.12)  # no marker on the panel's edge or corner
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel(ylabel + ", 95% interval", fontsize=9)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.25)


def adjacencies(cfg: Config, labels, extra: Mapping | None = None) -> list[np.ndarray]:
    """The adjacency of each point of a run, rebuilt from its configuration (and ``extra``, the graphs given from
    Python: :func:`with_graphs`' experiment passes them); a user file whose contents changed since the run, or a
    graph the configuration does not describe, is a ValueError naming it."""
    by_name = {lab["graph"]: (lab, a) for lab, a in graph_list(cfg, extra)}
    out = []
    for lab in labels:
        stored = by_name.get(lab["graph"])
        if stored is None:
            validation.fail(
                "graph", lab["graph"], "a graph of the configuration (with_graphs' graphs: give them again)"
            )
        validation.check(
            "graph",
            lab["graph"],
            stored[0].get("sha256") == lab.get("sha256"),
            f"the graph of the run (sha256 {lab.get('sha256')}); its file changed",
        )
        out.append(stored[1])
    return out


def reading_text(cover_checks: list, predictor_checks: list) -> str:
    """The reading: on how many graphs the Monte Carlo cover time agrees with the exact chain, and which property
    predicts the slots to the level (each claim's verdict with its interval)."""
    tested = [v for v in cover_checks if v.verdict != stats.NOT_TESTABLE]
    ok = [v for v in tested if v.verdict == stats.REPRODUCED]
    others = "; ".join(f"{v.claim.split(':')[0]} **{v.verdict}**" for v in tested if v.verdict != stats.REPRODUCED)
    cover = (
        f"The Monte Carlo cover time agrees with the exact chain's (±{COVER_MARGIN:.0%}) on {len(ok)} of {len(tested)} "
        f"graphs{' (' + others + ')' if others else ''}."
        if tested
        else "No graph is small enough for the exact cover time."
    )

    def said(v) -> str:
        value = "" if v.verdict == stats.NOT_TESTABLE else f" {v.interval_text()}"
        return f"{v.claim.split(' (')[0]}:{value} **{v.verdict}**"

    return f"{cover} Mean per-trial rank correlation across the graphs: " + "; ".join(map(said, predictor_checks)) + "."


def _graph_rows(cfg: Config, names: list[str], props: list[dict], cover: np.ndarray, level: np.ndarray) -> list[str]:
    """A row per graph of the report's table: its properties, the measured mean cover time and the
    median slots to the level (``cover``, ``level``: (point, trial) slots) with their intervals."""
    rows = []
    for p, name in enumerate(names):
        pr = props[p]
        est, lo, hi = stats.bootstrap_interval(cover[p], "mean")
        med, mlo, mhi = stats.interval(level[p], "median")
        exact = f"{pr['cover_exact']:.2f}" if np.isfinite(pr["cover_exact"]) else "–"
        rows.append(
            f"| {name} | {pr['agents']} | {pr['edges']} | {pr['gap']:.4f} | {pr['relaxation']:.3g} | "
            f"{pr['mean_hitting']:.3g} | {exact} | {pr['cover_bounds'][0]:.1f} – {pr['cover_bounds'][1]:.1f} | "
            f"{est:.2f} [{lo:.2f}, {hi:.2f}] | {np.mean(cover[p] > cfg.n_slots):.1%} | "
            f"{med:.0f} [{mlo:.0f}, {mhi:.0f}] | {np.mean(level[p] > cfg.n_slots):.1%} |"
        )
    return rows


def report(cfg: Config, labels, results, extra: Mapping | None = None) -> Reading:
    names = [lab["graph"] for lab in labels]
    text = [
        f"Conjugate G-FVL (Beta–Bernoulli, N_k = {cfg.n_per_agent}, α = {cfg.alpha:g}; KL to "
        f"{target_text(cfg.loss_normalisation, cfg.alpha)}) on each graph; random graphs drawn once from "
        f"graph_seed = {cfg.graph_seed}. The KL is 0 exactly from the cover time on; the slots to KL <= {cfg.level:g} "
        "come earlier (a few unvisited agents move the posterior by less than the level).",
        "",
    ]
    reading = "**Reading.** The comparisons need the raw trials (`--keep raw`)."
    if (partial := summary_reading(results, text, "cover", reading)) is not None:
        return partial
    props = [properties(a, cfg.exact_max_agents) for a in adjacencies(cfg, labels, extra)]
    cover = np.asarray(results["cover"], np.float64)
    level = np.asarray(results["slots_to_level"], np.float64)
    rows = _graph_rows(cfg, names, props, cover, level)
    text += [
        "Per graph: the MH chain's spectral gap 1 − λ₂ and relaxation time, the mean hitting time over pairs, the "
        "exact expected cover time (slots, counting the first, from a uniform start: the chain on (visited set, "
        "position)) and Matthews' bounds, the measured mean cover time [95% bootstrap interval], and the median "
        f"slots to KL <= {cfg.level:g} [95% interval]; censored trials count as n_slots + 1:",
        "",
        "| graph | K | edges | 1 − λ₂ | relaxation time | mean hitting time | exact cover time | Matthews bounds "
        "| measured mean cover | not covered | median slots to KL <= level | not below |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    cover_checks, predictor_checks, _ = claims(cfg, labels, results, props)
    corr_rows = []
    values = predictor_values(props) if len(props) >= MIN_GRAPHS else dict.fromkeys(PREDICTORS)
    too_big = [lab["graph"] for lab, prop in zip(labels, props) if prop["agents"] > cfg.exact_max_agents]
    why = (
        f"{len(props)} graphs; a rank correlation needs {MIN_GRAPHS}"
        if len(props) < MIN_GRAPHS
        else f"{', '.join(too_big)}: K > exact_max_agents = {cfg.exact_max_agents}"
    )
    for name, value in median_correlations(values, level).items():
        if value is None:
            corr_rows.append(f"| {name} | – ({why}) |")
        else:
            corr_rows.append(f"| {name} | {value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}] |")
    text += [
        "",
        f"Rank correlation (Spearman) across the graphs of each property with the median slots to KL <= {cfg.level:g} "
        "[95% bootstrap interval over the trials]:",
        "",
        "| property | Spearman correlation with the median slots |",
        "|---|---|",
        *corr_rows,
        "",
        "Verdicts: the measured mean cover time against the exact one (mean paired difference, slots), and each "
        "property's per-trial rank correlation with the slots to the level across the graphs (mean over trials):",
        "",
        stats.verdict_table(cover_checks + predictor_checks, what="paired statistic"),
    ]
    text += ["", "**Reading.** " + reading_text(cover_checks, predictor_checks)]
    return Reading("\n".join(text) + "\n", tuple(cover_checks + predictor_checks))


EXPERIMENT = Experiment(
    name=NAME,
    description="Beyond the paper: conjugate G-FVL on deployed graphs (RGG, ER, barbell, lollipop, yours): cover time "
    "vs exact and spectral gap",
    config_cls=Config,
    build=build,
    plot=plot,
    report=report,
    default_trials=4000,
    common_random_numbers=True,
    caption="Top: one panel per graph, the median KL to the posterior over trials against the slot (log-log) with "
    "its 75% band, the other graphs' medians in grey behind it; ▼ marks the slot from which the median is exactly 0, "
    "and a band reaching the panel's floor has a lower edge of 0. Bottom (raw trials only), one point per graph in "
    "its style of the top panels, with 95% intervals: the measured mean cover time against the exact expected one "
    "(on the line they agree), and the median slots to the level against the MH chain's relaxation time and exact "
    "cover time (a property that predicts convergence orders the points upwards).",
)
