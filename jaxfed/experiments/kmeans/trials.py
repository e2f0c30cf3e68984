"""The k-means trial layer: what the k-means experiments share, and what a user's k-means study
builds on (docs/extending.md). No experiment module imports another.

- :class:`MallConfig`: the mall scenario and the algorithm's parameters;
- :func:`mall_sweep`: a :class:`~jaxfed.experiment.Sweep` of sweep labels
  (``{"method": ..., "digits": D, "snr_db": ...}``), each run on the same customers, initial
  centroids and channel draws; its trial (:func:`make_trial`) runs centralized Lloyd's or a
  federated method, one of :func:`methods` (``"centralized"`` and the registered aggregation
  methods, :func:`jaxfed.oac.aggregators.register`), and takes a ``channel_for`` hook;
- :func:`resources_table` and the paired-verdict helpers (:func:`final_values`,
  :func:`ratio_verdict`, :func:`difference_verdict`, :func:`verdict_block`).

The experiments built on it are :mod:`jaxfed.experiments.kmeans.mall` (convergence, SNR),
:mod:`~jaxfed.experiments.kmeans.ablation`, :mod:`~jaxfed.experiments.kmeans.studies` (devices,
D = 1), :mod:`~jaxfed.experiments.kmeans.counts` and :mod:`~jaxfed.experiments.kmeans.channels`."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import oac, scenarios, validation
from jaxfed.experiment import Sweep
from jaxfed.experiments.kmeans.verdicts import (
    difference_verdict,
    final_values,
    index_of,
    ratio_verdict,
    verdict_block,
)
from jaxfed.oac import kmeans

__all__ = [
    "MallConfig",
    "SWEPT",
    "parse_channel_sweep",
    "make_trial",
    "mall_sweep",
    "methods",
    "label_point",
    "method_label",
    "point_channel",
    "resources_table",
    "final_values",
    "index_of",
    "ratio_verdict",
    "difference_verdict",
    "verdict_block",
    "trace_choices",
]

SYMBOL_ENERGIES = ("beta", "sqrt-beta")
SPLITS = ("tiles", "iid")
"""The splits of the customers over the EDs a label's ``split`` names (default "tiles")."""
LOSS_LABEL = "loss per customer, eq. (1) / |D|  (m²)"
RAW_NEEDED = "Verdicts need every trial's values: rerun with `--keep raw`.\n"
# A k-means trial is short on a CPU: 64 trials per micro-batch run as fast per trial as 512
# (docs/performance.md, "Micro-batch width"), and pad small runs 8 times less.
MICRO_BATCH = {"cpu": 64}


@dataclasses.dataclass(frozen=True)
class MallConfig:
    """Scenario and algorithm parameters shared by the k-means experiments.

    Static: rows, cols, n_points, n_components, n_clusters, n_rounds, beta, digits, channel,
    vmax_rule. Traced per point: the method, the split and init (as indices, see :func:`label_point`),
    SNR, E_s and the enhancement switches. Closure constants: the rest."""

    rows: int = 10  # mall tiles per column; K = rows · cols edge devices (EDs), one per tile
    cols: int = 10  # mall tiles per row
    side: float = 100.0  # mall side (m)
    n_points: int = 2000  # customers per trial
    n_components: int = 10  # Gaussian mixture components
    spread: float = 5.0  # component standard deviation (m)
    n_clusters: int = 10  # C
    n_rounds: int = 50  # federated k-means rounds per trial (each: EDs' local sums, aggregation, new centroids)
    mu: float = 1.0  # learning rate μ
    beta: int = 3  # balanced-number base β
    s_min: float = 1.0  # re-initialise clusters with fewer points
    sigma_c: float = 1.0  # re-initialisation jitter (m)
    vmax_fixed: float = 1000.0  # [choice] v_max when adaptive v_max is off (m); first value of the lagged readings
    # a registered channel, one of oac.channel.names() ("aggregate" is the fast one), or "NAME:key=value,…"
    # for a channel with parameters
    channel: str = "aggregate"
    # "key=v1,v2,…": every OAC point once per value of the channel's parameter `key` (traced: one
    # compiled program for all values, swept like the SNR); "" sweeps nothing
    channel_sweep: str = ""
    init: str = "uniform"  # initial centroids, one of kmeans.INITS ("uniform": in the mall, server-side)
    vmax_rule: str = "abs"  # adaptive v_max reading, one of kmeans.VMAX_RULES: the EDs' maximum |v| ("abs") or
    # signed v of this round, or of the previous round ("-previous"); see jaxfed/oac/kmeans.py
    symbol_energy: str = "beta"  # E_s: "beta" (amplitude √β, unit mean energy per resource) or "sqrt-beta" (E_s = √β)
    n_starts: int = 10  # k-means++ starts of the "centralized-best" reference (the best final loss is kept)

    def __post_init__(self):
        for name in ("rows", "cols", "n_points", "n_components", "n_clusters", "n_rounds", "n_starts"):
            value = getattr(self, name)
            validation.integer(name, value, 1)
        validation.check(
            "n_clusters", self.n_clusters, self.n_clusters <= self.n_points, f"<= n_points = {self.n_points}"
        )
        for name in ("side", "spread", "mu", "sigma_c", "vmax_fixed"):
            value = getattr(self, name)
            validation.positive(name, value)
        validation.non_negative("s_min", self.s_min)
        validation.integer("beta", self.beta, 3)
        validation.check("beta", self.beta, self.beta % 2 == 1, "an odd integer >= 3")
        model = oac.resolve_channel(self.channel)  # ValueError listing the channels, or naming a bad parameter
        if self.channel.partition(":")[0] not in oac.channel.MODES:  # a user's channel: its output checked once
            model.check_output(self.channel)
        if self.channel_sweep:
            key, values = parse_channel_sweep(self.channel_sweep)
            for value in values:  # ValueError unless `key` is one of the channel's parameters and allows the value
                model.with_params(**{key: value})
        validation.one_of("init", self.init, kmeans.INITS)
        validation.one_of("vmax_rule", self.vmax_rule, kmeans.VMAX_RULES)
        validation.one_of("symbol_energy", self.symbol_energy, SYMBOL_ENERGIES)

    @property
    def n_devices(self) -> int:
        return self.rows * self.cols


def symbol_energy_value(reading: str, beta: int) -> float:
    """E_s of a named reading: ``"beta"`` → β (amplitude √β), ``"sqrt-beta"`` → √β (the paper's
    E_s ≜ √β taken as an energy); 10·log10(β/√β) = 2.39 dB apart at β = 3."""
    return float(beta) if reading == "beta" else math.sqrt(beta)


def parse_channel_sweep(text: str) -> tuple[str, tuple[float, ...]]:
    """("key", (v1, v2, …)) of ``channel_sweep = "key=v1,v2,…"``; ValueError naming the parameter.

    Args:
        text: the ``channel_sweep`` parameter, ``"key=v1,v2,…"``.

    Returns:
        ``(key, values)``: the channel parameter's name and a tuple of floats.

    Raises:
        ValueError: ``text`` is not ``key=`` followed by numbers.

    Examples:
        >>> parse_channel_sweep("k_factor=0,3")
        ('k_factor', (0.0, 3.0))
    """
    key, sep, values = text.partition("=")
    try:
        parsed = tuple(float(v) for v in values.split(","))
    except ValueError:
        parsed = ()
    validation.check("channel_sweep", text, bool(sep and key.strip() and parsed), "key=v1,v2,… (numbers)")
    return key.strip(), parsed


def check_snrs(name: str, snrs) -> None:
    for snr in snrs:
        validation.check(name, snr, -50 <= snr <= 100, "SNRs in dB within [-50, 100]")


# --------------------------------------------------------------------------- points and the trial
def label_point(cfg: MallConfig, lab: dict) -> dict:
    """Engine point of a label: D, the tiling (rows, cols), the v_max reading and the optional
    channel and count digits are static (they change shapes or the rounds' code); SNR, E_s and
    the switches are traced. The method, the split and init are names here (static: the trial
    runs the named code only, the reference), and indices after :func:`trace_choices`, so that
    the points of a D, tiling and reading share one compiled program, in which ``lax.switch``
    runs the chosen method's, split's and init's code only. The switches sit around whole
    computations (the rounds of a method, the initial centroids, the owners): a branch boundary
    inside a round changes what XLA fuses and the results by an ulp (measured for a traced v_max
    reading and for a switch over the back-ends alone), which is why the reading stays static.
    Optional label keys (absent from the built-in figures' labels, whose points they leave as they
    were): ``channel``, a channel of the point's own (static) whose parameters the label may set by
    name (traced, e.g. ``{"channel": "rician-fading", "k_factor": 3.0}``), and ``count_digits``, the
    counts |S_{k,c}| sent over the point's channel with that many digits (static) instead of
    exactly.

    Args:
        cfg: the experiment's :class:`MallConfig`.
        lab: the sweep label (a JSON dict).

    Returns:
        The engine point, a dict of static values and traced scalars.

    Raises:
        ValueError: an unknown method, split or init.
    """
    return {
        "method": validation.one_of("method", lab["method"], methods()),
        "digits": lab.get("digits", 4),
        "snr_db": jnp.float32(lab.get("snr_db", 0.0)),  # unused by non-OAC methods
        "adaptive": jnp.bool_(lab.get("adaptive", True)),
        "reinit": jnp.bool_(lab.get("reinit", True)),
        "split": validation.one_of("split", lab.get("split", "tiles"), SPLITS),
        "init": validation.one_of("init", lab.get("init", cfg.init), kmeans.INITS),
        "vmax_rule": lab.get("vmax_rule", cfg.vmax_rule),
        "es": jnp.float32(symbol_energy_value(lab.get("symbol_energy", cfg.symbol_energy), cfg.beta)),
        "rows": lab.get("rows", cfg.rows),
        "cols": lab.get("cols", cfg.cols),
        **({SWEPT: jnp.float32(lab[_swept_key(cfg)])} if cfg.channel_sweep and over_channel(lab["method"]) else {}),
        **(_own_channel(lab) if "channel" in lab else {}),
        **({"count_digits": lab["count_digits"]} if "count_digits" in lab else {}),
    }


def _select(choice, names: tuple, branches: dict, *operands):
    """``branches[name](*operands)`` for the chosen name: ``choice`` is the name itself (static: only
    that branch is traced) or its index into ``names`` (traced: ``lax.switch``, which runs the chosen
    branch only; every branch must return the same shapes). A function several names share is one
    branch, traced and compiled once."""
    if isinstance(choice, str):
        return branches[choice](*operands)
    distinct = list(dict.fromkeys(branches[n] for n in names))
    branch_of = jnp.asarray([distinct.index(branches[n]) for n in names], jnp.int32)
    return lax.switch(branch_of[choice], distinct, *operands)


CENTRALIZED = ("centralized", "centralized-best")
"""The centralized references: Lloyd's on all customers from the trial's start with the federated
methods' re-initialisation (``"centralized"``: ideal federated k-means is this algorithm), and the
best final loss of ``n_starts`` such runs from k-means++ seedings (``"centralized-best"``: what
scikit-learn's ``KMeans`` returns; the strongest reference, not a start a server without the data
could use)."""

CENTRALIZED_TEXT = {
    "centralized": "centralized = Lloyd's from the same start, re-initialised like the federated methods",
    "centralized-best": "centralized-best = the best of n_starts k-means++ starts of Lloyd's (scikit-learn's KMeans)",
}
"""What each reference is, for the reports' notes on the ratios that use it."""


def methods() -> tuple[str, ...]:
    """The methods a label's ``method`` may name: the :data:`CENTRALIZED` references and the
    registered aggregation methods (:func:`jaxfed.oac.aggregators.names`); a point holds the index
    (traced: one program for all, see :func:`trace_choices`).

    Returns:
        A tuple of method names.
    """
    return (*CENTRALIZED, *oac.aggregators.names())


def over_channel(method: str) -> bool:
    """True for a method that sends through the point's channel (``"oac"``, or a registered method
    with ``over_channel``): a ``channel_sweep`` repeats its labels."""
    return method not in CENTRALIZED and oac.aggregators.get(method).over_channel


def _by_method(centralized: Callable, federated: Callable, best: Callable | None = None) -> dict:
    """The branches of :func:`_select` over :func:`methods`: ``centralized()``, ``best()`` (default
    ``centralized``: the same code for both references) and, for each federated method m,
    ``federated(m)``."""
    return {
        "centralized": centralized,
        "centralized-best": centralized if best is None else best,
        **{m: functools.partial(federated, m) for m in methods()[len(CENTRALIZED) :]},
    }


def _own_channel(lab: dict) -> dict:
    """Point entries of a label with a channel of its own: the spec (static) and the parameters the
    label sets (traced)."""
    model = oac.resolve_channel(lab["channel"])
    return {"channel": lab["channel"], "channel_params": {k: jnp.float32(lab[k]) for k in model.params if k in lab}}


SWEPT = "channel_value"
"""Point key of the swept channel parameter's value (the label holds it under the parameter's name)."""


def _swept_key(cfg: MallConfig) -> str:
    return parse_channel_sweep(cfg.channel_sweep)[0]


def point_channel(cfg: MallConfig, point: dict) -> oac.ChannelModel:
    """The point's channel: its own (a label's ``channel``, with the parameters the label sets) or
    ``cfg.channel``, with the swept parameter's (traced) value if any.

    Args:
        cfg: the experiment's :class:`MallConfig`.
        point: the engine point (:func:`label_point`).

    Returns:
        The channel, a :class:`jaxfed.oac.ChannelModel`.
    """
    model = oac.resolve_channel(point.get("channel", cfg.channel))
    if point.get("channel_params"):
        model = model.with_params(**point["channel_params"])
    if SWEPT in point:
        model = model.with_params(**{_swept_key(cfg): point[SWEPT]})
    return model


def _aggregator(cfg: MallConfig, point: dict, channel: oac.ChannelModel, method: str) -> oac.aggregators.Aggregator:
    """The back-end of a federated method (registered in :mod:`jaxfed.oac.aggregators`): built inside
    the trial, so SNR and E_s stay traced."""
    return oac.aggregators.get(method).build(cfg.beta, point["digits"], point["snr_db"], point["es"], channel)


def _count_aggregator(cfg: MallConfig, point: dict, channel: oac.ChannelModel):
    """None (exact counts), or OAC of the counts over the point's channel, SNR and E_s with the
    label's ``count_digits``."""
    if "count_digits" not in point:
        return None
    return oac.aggregators.oac(channel, cfg.beta, point["count_digits"], point["snr_db"], point["es"])


def _settings(cfg: MallConfig, point: dict, channel: oac.ChannelModel, method: str) -> kmeans.Settings:
    """The settings of a point run with the federated ``method`` (a name)."""
    return kmeans.Settings(
        aggregator=_aggregator(cfg, point, channel, method),
        mu=cfg.mu,
        adaptive_vmax=point["adaptive"],
        vmax=cfg.vmax_fixed,
        vmax_rule=point["vmax_rule"],
        reinit=point["reinit"],
        s_min=cfg.s_min,
        sigma_c=cfg.sigma_c,
        count_aggregator=_count_aggregator(cfg, point, channel),
    )


ROUND_DIAGNOSTICS = ("movement", "dead_zone")
LAST_ROUND_DIAGNOSTICS = ("centroid_noise", "centroid_noise_pred", "centroid_noise_floor", "quant_error")
COUNT_DIAGNOSTICS = ("count_error", "small_clusters", "spurious_reinits", "missed_reinits")


CHANNEL_STREAM = 0x63686E
"""``fold_in`` constant of the key a ``channel_for`` hook gets (a stream of its own, so the
built-in trial's draws are the same with or without the hook)."""


def make_trial(
    cfg: MallConfig,
    round_diagnostics: bool = False,
    last_round_diagnostics: bool = False,
    channel_for: Callable | None = None,
    count_diagnostics: bool = False,
):
    """trial(key, point) -> {"loss", "ari", "reinits": (n_rounds,)}, and with

    - ``round_diagnostics``: ``movement`` (mean distance the centroids move in each round, m) and
      ``dead_zone`` (fraction of clusters with points whose changes all quantise to zero);
    - ``last_round_diagnostics``: in the last round, the RMS error the channel adds to a centroid
      (``centroid_noise``, m), the RMS predicted by the detector's variance formula given that
      round's counts (``centroid_noise_pred``) and its noise-free limit (``centroid_noise_floor``),
      and the RMS error quantisation adds (``quant_error``); 0 where a method has no such error;
    - ``count_diagnostics``: per round (n_rounds,), the RMS error of the ES's partition sizes over the
      clusters, (Σ_c (|Ŝ_c| − |S_c|)²/C)^(1/2) (``count_error``; 0 for exact counts), the clusters
      truly below S_min (``small_clusters``), the clusters re-initialisation moved although they
      held at least S_min points (``spurious_reinits``) and those below S_min it left in place
      (``missed_reinits``).

    The hook for a study: ``channel_for(key, point) -> oac.ChannelModel`` builds the trial's channel
    (the default: :func:`point_channel`), e.g. with per-ED residual power-control gains drawn once
    per trial from ``key`` and kept for every round (a (K,) parameter of the channel). Without the
    hook, a channel registered with ``per_trial`` (:func:`jaxfed.oac.channel.register`) draws that
    state itself from the same key: a built-in experiment then takes it by name (``--set channel=NAME``).

    Args:
        cfg: the experiment's :class:`MallConfig`.
        round_diagnostics: add the per-round diagnostics.
        last_round_diagnostics: add the last round's noise diagnostics.
        channel_for: ``channel_for(key, point) -> oac.ChannelModel``, or None for :func:`point_channel`.
        count_diagnostics: add the partition-size diagnostics.

    Returns:
        The trial function ``trial(key, point) -> {metric: array}``.
    """

    def trial(key, point):
        k_scene, k_split, k_init, k_run = jax.random.split(key, 4)
        scene, owner, init = _customers(cfg, point, k_scene, k_split, k_init)
        data = kmeans.flat_data(scene.points, owner)
        if channel_for is None:
            channel = _with_trial_state(point_channel(cfg, point), jax.random.fold_in(key, CHANNEL_STREAM), point)
        else:
            channel = channel_for(jax.random.fold_in(key, CHANNEL_STREAM), point)

        def rand_index(part):  # inside each round: stacking the rounds' assignments costs as much
            return kmeans.adjusted_rand_index(part.index, scene.labels, cfg.n_clusters, cfg.n_components)

        history, info = _rounds(cfg, point, scene.points, data, init, channel, k_run, rand_index)
        # The rounds report on the centroids they start from; the metric after round n is about
        # the centroids it ends with, i.e. the next round's, and one more evaluation for the last.
        weight = data.mask.astype(data.coords.dtype)
        last = kmeans.partition(data.coords, weight, history[-1])
        out = {
            "loss": jnp.concatenate([info.loss[1:], kmeans.partition_loss(last, weight)[None]]),
            "ari": jnp.concatenate([info.observed[1:], rand_index(last)[None]]),
            "reinits": jnp.sum(info.reinitialised, axis=-1).astype(jnp.float32),
        }
        started = jnp.concatenate([init[None], history[:-1]])  # broadcast centroids of each round
        if round_diagnostics:
            out["movement"] = jnp.mean(jnp.linalg.norm(history - started, axis=-1), axis=-1)
            out["dead_zone"] = jnp.sum(info.dead_zone, -1) / jnp.maximum(jnp.sum(info.cluster_sizes > 0, -1), 1)
        if last_round_diagnostics:
            n_devices = point["rows"] * point["cols"]
            out.update(_last_round_noise(cfg, point, channel, data, n_devices, started[-1], info))
        if count_diagnostics:
            out.update(_count_diagnostics(cfg, info))
        return out

    return trial


def _with_trial_state(channel: oac.ChannelModel, key, point: dict) -> oac.ChannelModel:
    """The channel with the state its ``per_trial`` draws once per trial (none: the channel as it is)."""
    if channel.per_trial is None:
        return channel
    return channel.with_params(**channel.per_trial(key, point["rows"] * point["cols"], **channel.params))


def _customers(cfg: MallConfig, point: dict, k_scene, k_split, k_init):
    """(scene, owner, init): the trial's mall customers (:func:`jaxfed.scenarios.mall` on the point's
    tiling), the ED owning each customer by the point's ``split`` (its tile, or i.i.d.) and the
    initial centroids by the point's ``init``."""
    rows, cols = point["rows"], point["cols"]
    scene = scenarios.mall(k_scene, cfg.n_points, cfg.n_components, cfg.spread, cfg.side, rows, cols)
    owners = {"tiles": lambda: scene.owner, "iid": lambda: scenarios.iid_owner(k_split, cfg.n_points, rows * cols)}
    owner = _select(point["split"], point.get("splits", SPLITS), owners)

    def initial(method):
        return kmeans.initial_centroids(k_init, scene.points, cfg.n_clusters, method, 0.0, cfg.side)

    inits = {name: functools.partial(initial, name) for name in kmeans.INITS}
    return scene, owner, _select(point["init"], point.get("inits", kmeans.INITS), inits)


def _rounds(cfg: MallConfig, point: dict, points, data, init, channel, key, observe):
    """(centroid history, :class:`jaxfed.oac.kmeans.RoundInfo`) of the point's method over ``cfg.n_rounds``
    rounds from ``init``, with ``observe`` (the adjusted Rand index) evaluated in each round.

    Each method's rounds are a branch of their own: a branch boundary inside a round (e.g. a switch
    over the back-ends alone) changes what XLA fuses, and the results by an ulp."""

    def lloyd_fields(history, info):
        """Lloyd's has no back-end: v_max and aggregate 0, no dead zone, and where the federated
        methods estimate the sizes, the exact ones (estimates without error)."""
        return history, _same_fields(
            info,
            dead_zone=jnp.zeros_like(info.reinitialised),
            aggregate=jnp.zeros((cfg.n_rounds, history[0].size), history.dtype),
            estimated_sizes=info.cluster_sizes if "count_digits" in point else None,
        )

    def centralized():  # the federated methods' start, round keys and re-initialisation
        args = (key, cfg.s_min, cfg.sigma_c, point["reinit"])
        return lloyd_fields(*kmeans.lloyd_rounds(points, init, cfg.n_rounds, None, observe, *args))

    def best():
        args = (cfg.n_clusters, cfg.n_starts, cfg.n_rounds, observe, cfg.s_min, cfg.sigma_c)
        return lloyd_fields(*kmeans.best_of_starts(key, points, *args))

    def federated(method: str):
        settings = _settings(cfg, point, channel, method)
        n_devices = point["rows"] * point["cols"]
        history, info = kmeans.federated_rounds(key, data, n_devices, init, cfg.n_rounds, settings, observe=observe)
        return history, _same_fields(info)

    return _select(point["method"], point.get("methods", methods()), _by_method(centralized, federated, best))


def _same_fields(info: kmeans.RoundInfo, **fields) -> kmeans.RoundInfo:
    """The fields of a :class:`jaxfed.oac.kmeans.RoundInfo` the trial reads, ``fields`` replaced: the
    branches of a ``lax.switch`` over the methods return the same shapes. The unread fields are
    dropped, so that no branch computes them."""
    return info._replace(assignment=None, next_vmax=None, **fields)  # type: ignore[arg-type]


def _count_diagnostics(cfg: MallConfig, info) -> dict:
    """Per-round count diagnostics of :func:`make_trial` (``count_diagnostics``)."""
    sizes = info.cluster_sizes  # (n_rounds, C), true
    estimated = sizes if info.estimated_sizes is None else info.estimated_sizes
    small = sizes < cfg.s_min
    moved = info.reinitialised
    count = lambda mask: jnp.sum(mask, axis=-1).astype(jnp.float32)  # noqa: E731
    return {
        "count_error": jnp.sqrt(jnp.mean(jnp.square(estimated - sizes), axis=-1)),
        "small_clusters": count(small),
        "spurious_reinits": count(moved & ~small),
        "missed_reinits": count(~moved & small),
    }


def _last_round_noise(cfg: MallConfig, point, channel, data, n_devices: int, centroids, info) -> dict:
    """RMS centroid errors of the last round (see :func:`make_trial`), one branch per method.

    The error the aggregate Σ_k v_{k,q} carries moves centroid c by μ·e_c/|S_c| (e_c its L
    coordinates); the RMS is over the clusters with points. The channel's part is the ES's sum
    minus the sum of the quantised values, with variance (v_max/ξ)² Σ_d β^{2d} Σ_j s_j²
    (K_{q,d,j} + σ²/E_s)² given the round's counts K (:func:`jaxfed.oac.channel.estimate_variance`).
    ``point["method"]`` is a name (the named code alone) or a traced index (``lax.switch`` over
    the methods' branches, like the rounds).
    """
    zero = jnp.zeros((), jnp.float32)

    def centralized():
        return dict.fromkeys(LAST_ROUND_DIAGNOSTICS, zero)

    def federated(method: str):
        counts, deltas = kmeans.local_statistics(data, centroids, n_devices)
        values = deltas.reshape(n_devices, -1)
        active = jnp.sum(counts, axis=1) > 0
        sizes = jnp.repeat(jnp.sum(counts, axis=0), data.coords.shape[0])  # |S_c| of each value q = c·L + l
        vmax = info.vmax[-1]
        exact = jnp.sum(values, axis=0)
        quantize = _aggregator(cfg, point, channel, method).quantize
        if quantize is None:  # a back-end that sends the values exactly
            quantised = exact
        else:
            quantised = jnp.sum(jnp.where(active[:, None], quantize(values, vmax), 0), 0)
        n_clusters = jnp.maximum(jnp.sum(jnp.sum(counts, axis=0) > 0), 1)

        def rms(squared):  # per value → RMS centroid displacement over the clusters with points
            scaled = jnp.where(sizes > 0, cfg.mu**2 * squared / jnp.maximum(sizes, 1) ** 2, 0)
            return jnp.sqrt(jnp.sum(scaled) / n_clusters)

        out = {
            "centroid_noise": rms(jnp.square(info.aggregate[-1] - quantised)),
            "quant_error": rms(jnp.square(quantised - exact)),
            "centroid_noise_pred": zero,
            "centroid_noise_floor": zero,
        }
        sent_over_channel = oac.aggregators.get(method).over_channel
        if sent_over_channel and channel.variance is None:  # a registered channel without a formula
            out["centroid_noise_pred"] = out["centroid_noise_floor"] = jnp.full((), jnp.nan, jnp.float32)
        elif sent_over_channel:
            numerals = oac.encode(values, cfg.beta, point["digits"], vmax)
            resources = oac.channel.resource_counts(numerals, cfg.beta, active)
            noise_var = oac.channel.noise_variance(point["snr_db"]) if channel.noisy else 0.0
            args = (resources, cfg.beta, point["digits"], vmax)
            variance = oac.channel.estimate_variance(*args, noise_var, point["es"], channel)
            floor = oac.channel.estimate_variance(*args, 0.0, point["es"], channel)
            out["centroid_noise_pred"], out["centroid_noise_floor"] = rms(variance), rms(floor)
        return out

    return _select(point["method"], point.get("methods", methods()), _by_method(centralized, federated))


def method_label(lab: dict) -> str:
    """A sweep label's legend text (the aggregation method's ``label``).

    Args:
        lab: the sweep label.

    Returns:
        The legend text.
    """
    method = lab["method"]
    return method if method in CENTRALIZED else oac.aggregators.get(method).label(lab)


def mall_sweep(
    cfg,
    labels: list[dict],
    round_diagnostics: bool = False,
    last_round_diagnostics: bool = False,
    channel_for: Callable | None = None,
    count_diagnostics: bool = False,
) -> Sweep:
    """The sweep of ``labels`` (each OAC label once per value of ``cfg.channel_sweep``); see
    :func:`make_trial` for the diagnostics and the ``channel_for`` hook, :func:`label_point` for the
    optional label keys ``channel`` and ``count_digits``.

    Args:
        cfg: the experiment's :class:`MallConfig`.
        labels: the sweep labels.
        round_diagnostics: as :func:`make_trial`.
        last_round_diagnostics: as :func:`make_trial`.
        channel_for: as :func:`make_trial`.
        count_diagnostics: as :func:`make_trial`.

    Returns:
        The sweep, a :class:`jaxfed.Sweep`.

    Raises:
        ValueError: a malformed ``cfg.channel_sweep`` or a label the points refuse.
    """
    if cfg.channel_sweep:
        key, values = parse_channel_sweep(cfg.channel_sweep)
        labels = [
            {**lab, key: v} if over_channel(lab["method"]) else lab
            for lab in labels
            for v in (values if over_channel(lab["method"]) else (None,))
        ]
    axes: dict[str, tuple[str, ...]] = {"loss": ("round",), "ari": ("round",), "reinits": ("round",)}
    if round_diagnostics:
        axes.update(dict.fromkeys(ROUND_DIAGNOSTICS, ("round",)))
    if last_round_diagnostics:
        axes.update(dict.fromkeys(LAST_ROUND_DIAGNOSTICS, ()))
    if count_diagnostics:
        axes.update(dict.fromkeys(COUNT_DIAGNOSTICS, ("round",)))
    trial = make_trial(cfg, round_diagnostics, last_round_diagnostics, channel_for, count_diagnostics)
    points = trace_choices([label_point(cfg, lab) for lab in labels])
    undefined = dict.fromkeys(("centroid_noise_pred", "centroid_noise_floor"), NO_FORMULA)
    return Sweep(trial, points, labels, axes, undefined=undefined if last_round_diagnostics else None)


NO_FORMULA = "a channel registered with variance=None has no formula to predict its error (docs/kmeans.md §B7)"


def _choices() -> dict[str, tuple[str, ...]]:
    """The point keys :func:`trace_choices` turns into indices, with the names each may take."""
    return {"method": methods(), "split": SPLITS, "init": kmeans.INITS}


def trace_choices(points: list[dict]) -> list[dict]:
    """The points with each choice of :func:`_choices` as a traced index into a static tuple of the
    names among the points that share the other static leaves (one compiled group), under the key
    ``<choice>s``: the group's program holds a branch for each of these only (a group whose points
    all take one method, split and init compiles as before).

    Args:
        points: the engine points (:func:`label_point`).

    Returns:
        A new list of points.
    """

    choices = _choices()

    def static_key(point):
        leaves, treedef = jax.tree.flatten({k: v for k, v in point.items() if k not in choices})
        return treedef, tuple(leaf for leaf in leaves if not isinstance(leaf, (jax.Array, np.ndarray)))

    present: dict = {}
    for point in points:
        for choice in choices:
            present.setdefault((static_key(point), choice), set()).add(point[choice])
    out = []
    for point in points:
        traced = dict(point)
        for choice, names in choices.items():
            among = tuple(n for n in names if n in present[static_key(point), choice])
            traced[choice], traced[choice + "s"] = jnp.int32(among.index(point[choice])), among
        out.append(traced)
    return out


def resources_table(cfg: MallConfig, digits_list) -> str:
    """Markdown table of complex resources per round: OAC (L·C·β·D) vs orthogonal digital
    (L·C·K·N_bits/r_bits with N_bits = ⌈D log2 β⌉ for the same resolution, QPSK r_bits = 2,
    uncompressed).

    Args:
        cfg: the experiment's :class:`MallConfig`.
        digits_list: the D values, one row each.

    Returns:
        The Markdown table.
    """
    rows = [f"| D | OAC resources/round | digital resources/round (K = {cfg.n_devices}) | ratio |", "|---|---|---|---|"]
    for d in digits_list:
        oac_res = kmeans.oac_resources(2, cfg.n_clusters, cfg.beta, d)
        bits = math.ceil(d * math.log2(cfg.beta))
        digital = kmeans.digital_resources(2, cfg.n_clusters, cfg.n_devices, bits)
        rows.append(f"| {d} | {oac_res} | {digital:g} ({bits} bits/value) | {digital / oac_res:.1f}x |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- verdict helpers
