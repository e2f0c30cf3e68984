"""Federated k-means over wireless channels (docs/kmeans.md §B2, B5), and centralized Lloyd's k-means.

Round n of federated k-means: the edge server (ES) broadcasts centroids c_1..c_C; edge device
(ED) k assigns its points to the nearest centroid, S_{k,c}, reports the counts |S_{k,c}| over an
error-free orthogonal channel (or through a back-end of their own, ``Settings.count_aggregator``:
docs/kmeans.md §B9) and the changes Δc_{k,c} = Σ_{d∈S_{k,c}} (d − c_c) through an
*aggregation back-end*; the ES updates, for |S_c| = Σ_k |S_{k,c}| > 0,

    c_c ← c_c + μ · (Σ_k Δc_{k,c}) / |S_c|          (μ = 1 is Lloyd's k-means).

The back-end for Σ_k Δc_{k,c} (the values v_{k,q}, q = cL + l, are vec([Δc_{k,1} … Δc_{k,C}])) is
a value, ``Settings.aggregator`` (:mod:`jaxfed.oac.aggregators`): ``ideal()`` (exact sums),
``quantized(β, D)`` (balanced-number codec, no channel: the exact sum of the quantised values),
``oac(channel, β, D, snr_db, E_s)`` (non-coherent over-the-air computation through a registered
channel model, :func:`jaxfed.oac.over_the_air_sum`) or one a user builds.
Enhancements (docs/kmeans.md §B5, Algorithm 1 of the paper), each switchable:

- adaptive v_max: v_max = max_k m_k with m_k a maximum of ED k's values sent over an orthogonal
  channel; otherwise a fixed v_max. The paper writes m_k = max_q v_{k,q} (signed) with v_max
  "updated throughout the rounds", and its update rule did not survive; ``vmax_rule`` names the
  readings (:data:`VMAX_RULES`): ``"abs"`` (default) m_k = max_q |v_{k,q}| of the current round,
  ``"signed"`` the signed maximum of the current round, and ``"abs-previous"`` /
  ``"signed-previous"`` the maxima reported in the previous round (so the ES can broadcast v_max
  with the centroids). A signed maximum clamps every change below −v_max; when no ED reports a
  maximum > 0 (all changes zero, or none positive) the ES keeps the last usable v_max, initially
  the fixed ``vmax``, which is also the first round's v_max of the ``-previous`` readings;
- re-initialisation: each centroid c″ with |S_{c″}| < S_min moves to c_{c′} + n, c′ uniform among
  the centroids with |S_c| >= S_min, n ~ N(0, σ_c² I), using the round's broadcast centroids
  c^(n) as the document's formula c_{c″}^(n+1) = c_{c′}^(n) + n_{c″}^(n) writes.

Data layouts: the public functions take points as (N, L) arrays, or padded device arrays
(K, N_max, L) with a mask (K, N_max); internally every round works on the flat list of points with
their owner ED (:class:`FlatData`), so the cost is O(N) per round, not O(K · N_max), and stores
coordinates as (L, N) (:mod:`jaxfed.oac.clustering`: the partition, loss and adjusted Rand index
both versions share).

Initial centroids (:func:`initial_centroids`, :data:`INITS`): ``"uniform"`` in the data's bounding
box (all a server that does not see the data knows, e.g. the mall's floor plan), ``"forgy"`` (C
distinct data points) or ``"kmeans++"`` (D² sampling over all the data: a centralized reference).

Static (shape- or code-changing): C, L, K, N, n_rounds, the back-ends (changes and counts) and
what their factories fix (β, D, the channel), the v_max reading. Traced: μ, fixed v_max, S_min, σ_c, the on/off switches of
the enhancements and the back-end's SNR (dB) and E_s, so a sweep over them (or an ablation) is a
``vmap``.

Bad inputs: concrete ones raise ``ValueError`` naming the parameter; data or settings that are
traced (under jit) and invalid make the results NaN rather than plausible numbers (a NaN point
poisons the loss and, through v_max or the sums, the centroids).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfed import validation
from jaxfed.oac import aggregators, channel
from jaxfed.oac.aggregators import Aggregator
from jaxfed.oac.clustering import (
    FlatData,
    Partition,
    adjusted_rand_index,
    as_coordinates,
    flat_data,
    loss,
    nearest,
    partition,
    partition_loss,
    segment_sums,
)

__all__ = [
    "Aggregator",
    "VMAX_RULES",
    "INITS",
    "initial_centroids",
    "Settings",
    "RoundInfo",
    "flatten_devices",
    "Partition",
    "partition",
    "federated_round",
    "federated_rounds",
    "federated",
    "lloyd",
    "loss",
    "adjusted_rand_index",
    "oac_resources",
    "digital_resources",
]

VMAX_RULES = ("abs", "signed", "abs-previous", "signed-previous")
INITS = ("uniform", "forgy", "kmeans++")


class Settings(NamedTuple):
    """Options of federated k-means. ``aggregator`` (what its factory fixed) and ``vmax_rule`` are
    static; every other field may be a traced scalar."""

    aggregator: Aggregator = aggregators.ideal()  # the back-end for Σ_k Δc_{k,c} (jaxfed.oac.aggregators)
    mu: float = 1.0  # learning rate μ
    adaptive_vmax: bool = True  # v_max from the EDs' reported maxima (see vmax_rule), else `vmax`
    vmax: float = 100.0  # fixed v_max (adaptive off); the adaptive rules' fallback and first value
    vmax_rule: str = "abs"  # reading of the adaptive v_max, one of VMAX_RULES (static)
    reinit: bool = True  # re-initialise centroids of clusters below S_min
    s_min: float = 1.0  # S_min
    sigma_c: float = 1.0  # σ_c, std of the re-initialisation jitter
    # the back-end for the partition sizes Σ_k |S_{k,c}| (static); None: exact counts over the
    # error-free orthogonal channel (the paper). With a quantising back-end the counts' v_max is the
    # round's largest per-ED count (docs/kmeans.md §B9)
    count_aggregator: Aggregator | None = None


class RoundInfo(NamedTuple):
    """Diagnostics of one round, about the centroids the ES broadcast at its start.

    Stacked over rounds by :func:`federated_rounds` and :func:`lloyd_rounds`; under ``jit`` the
    fields a caller does not use are not computed. Per-point quantities of every round, such as a
    score against ground-truth labels, are cheapest as ``observe`` (computed inside the round):
    stacking the (n_rounds, N) ``assignment`` costs as much as a round's scatter-adds on CPU.
    """

    cluster_sizes: jax.Array  # (C,) |S_c|
    loss: jax.Array  # () loss (1)/|D| of the broadcast centroids (a simulation metric, exact)
    assignment: jax.Array  # (N,) int32 nearest broadcast centroid of every point
    vmax: jax.Array  # () the v_max used (0 for a back-end that sends exact values, e.g. ideal(), and for Lloyd's)
    reinitialised: jax.Array  # (C,) bool, centroids moved by re-initialisation
    observed: object = None  # observe(partition) of the round, when an `observe` function is given
    next_vmax: jax.Array | None = None  # () the adaptive v_max carried to the next round (federated only)
    aggregate: jax.Array | None = None  # (C·L,) the ES's sum Σ_k Δc_{k,c} as the back-end delivered it
    dead_zone: jax.Array | None = None  # (C,) bool, clusters with points whose changes all quantise to 0
    estimated_sizes: jax.Array | None = None  # (C,) the ES's |Ŝ_c| from Settings.count_aggregator (None: exact)


def _check_settings(s: Settings) -> None:
    """ValueError for a bad static field or a bad concrete value of a traced one (a traced one
    that is bad makes the results NaN: see :func:`jaxfed.oac.over_the_air_sum`). The back-end's
    own arguments were checked when its factory built it."""
    allowed = "an Aggregator (jaxfed.oac.aggregators: ideal(), quantized(β, D), oac(...))"
    validation.check("aggregator", s.aggregator, isinstance(s.aggregator, Aggregator), allowed)
    ok = s.count_aggregator is None or isinstance(s.count_aggregator, Aggregator)
    validation.check("count_aggregator", s.count_aggregator, ok, "None (exact counts) or " + allowed)
    validation.one_of("vmax_rule", s.vmax_rule, VMAX_RULES)
    for name in ("mu", "vmax", "sigma_c", "s_min"):
        value = getattr(s, name)
        if np.ndim(value) == 0:  # scalars; traced ones pass through
            check = validation.positive if name in ("mu", "vmax") else validation.non_negative
            check(name, value)


def flatten_devices(device_points, device_mask) -> FlatData:
    """Padded device arrays (K, N_max, L) and (K, N_max) → :class:`FlatData` of K·N_max points.

    Args:
        device_points: (K, N_max, L) points of each ED, padded.
        device_mask: (K, N_max) bool, True for real points.

    Returns:
        :class:`FlatData` with (L, K·N_max) coordinates, owners and mask.

    Raises:
        ValueError: the arrays' shapes do not match, or K = 0.
    """
    device_points = jnp.asarray(device_points)
    device_mask = jnp.asarray(device_mask, bool)
    validation.shape("device_points", device_points, (None, None, None), "(K, N_max, L)")
    validation.shape("device_mask", device_mask, device_points.shape[:2], f"(K, N_max) = {device_points.shape[:2]}")
    k, n_max, dim = device_points.shape
    validation.check(
        "device_points", device_points.shape, k >= 1, "of shape (K, N_max, L) with at least one ED (K >= 1)"
    )
    owner = jnp.repeat(jnp.arange(k, dtype=jnp.int32), n_max)
    return flat_data(device_points.reshape(k * n_max, dim), owner, device_mask.reshape(-1))


def local_statistics(data: FlatData, centroids: jax.Array, n_devices: int, with_partition: bool = False):
    """Per-ED counts |S_{k,c}| (K, C) and changes Δc_{k,c} = Σ_{d∈S_{k,c}} (d − c_c) (K, C, L)
    (formed as in :func:`partition`); with ``with_partition`` also the :class:`Partition` of all
    points (totals over the EDs)."""
    n_clusters, dim = centroids.shape
    weight = data.mask.astype(data.coords.dtype)
    index, best = nearest(data.coords, centroids)
    counts, sums = segment_sums(data.coords, weight, data.owner * n_clusters + index, n_devices * n_clusters)
    counts = counts.reshape(n_devices, n_clusters)
    deltas = sums.reshape(n_devices, n_clusters, dim) - counts[..., None] * centroids
    if not with_partition:
        return counts, deltas
    return counts, deltas, Partition(index, best, jnp.sum(counts, 0), jnp.sum(deltas, 0))


def reported_maximum(values, active, rule: str) -> jax.Array:
    """max_k m_k, the largest of the maxima the active EDs report: m_k = max_q |v_{k,q}| for the
    ``abs`` readings, max_q v_{k,q} for the ``signed`` ones (see :data:`VMAX_RULES`). NaN if a
    value is NaN."""
    if rule.startswith("abs"):
        return jnp.max(jnp.abs(values))  # inactive EDs hold no points: their values are zero
    # jnp.max propagates NaN; where() keeps an inactive ED's zeros out of the signed maximum.
    return jnp.max(jnp.where(active[:, None], values, -jnp.inf))


def adaptive_vmax(reported, carried, rule: str):
    """(v_max of this round, v_max carried to the next) for the reading ``rule``.

    A report that is not > 0 (every change zero, or with a signed reading none positive) gives no
    usable v_max, so the last usable one, ``carried``, stays; a NaN report propagates.
    The current-round readings use the report at once, the ``-previous`` ones in the next round.
    """
    usable = jnp.where((reported > 0) | jnp.isnan(reported), reported, carried)
    return (carried, usable) if rule.endswith("-previous") else (usable, usable)


def _aggregate(key, values, active, s: Settings, carried_vmax):
    """Σ_k values[k] through the back-end; returns (sum (Q,), v_max used, v_max carried on).

    A back-end that sends exact values (no ``quantize``) gets no v_max: none is reported or
    carried (0), as the EDs need not send their maxima."""
    if s.aggregator.quantize is None:
        zero = jnp.zeros((), values.dtype)
        return s.aggregator.aggregate(key, values, active, zero), zero, zero
    reported = reported_maximum(values, active, s.vmax_rule)
    adaptive, carried = adaptive_vmax(reported, jnp.asarray(carried_vmax, values.dtype), s.vmax_rule)
    vmax = jnp.where(s.adaptive_vmax, adaptive, s.vmax).astype(values.dtype)
    return s.aggregator.aggregate(key, values, active, vmax), vmax, carried


COUNT_STREAM = 0x636E74
"""``fold_in`` constant of the round key whose draws aggregate the counts (a stream of its own: the
changes' draws are the same with or without a count back-end)."""


def _aggregate_counts(key, counts, active, aggregator: Aggregator):
    """|Ŝ_c| = the back-end's estimate of Σ_k |S_{k,c}| from the per-ED counts (K, C). A quantising
    back-end gets v_max = max_{k,c} |S_{k,c}| (at least 1), which each ED reports with its maximum
    change over the orthogonal channel (docs/kmeans.md §B9)."""
    vmax = jnp.zeros((), counts.dtype) if aggregator.quantize is None else jnp.maximum(jnp.max(counts), 1.0)
    return aggregator.aggregate(key, counts, active, vmax)


def _reinitialise(key, centroids, new_centroids, sizes, s: Settings):
    """c″ ← c_{c′} + n for clusters below S_min (docs/kmeans.md §B5); returns (centroids, moved mask).

    The donor c′ of each centroid is the ⌊u·n_donors⌋-th donor, u ~ U[0, 1): one uniform per
    centroid where ``jax.random.categorical`` would draw C Gumbel variates (a seventh of the
    cost of a round on CPU), and the donor's centroid selected by a one-hot sum, not a gather.
    """
    k_pick, k_noise = jax.random.split(key)
    n_clusters = centroids.shape[0]
    small = sizes < s.s_min
    donors = ~small
    n_donors = jnp.sum(donors)
    rank = jnp.cumsum(donors) - 1  # rank of each donor among the donors
    target = jnp.minimum(jnp.floor(jax.random.uniform(k_pick, (n_clusters,)) * n_donors), n_donors - 1)
    chosen = donors[None, :] & (rank[None, :] == target[:, None].astype(rank.dtype))  # (C, C) one-hot rows
    donor_centroids = jnp.sum(jnp.where(chosen[:, :, None], centroids[None], 0.0), axis=1)
    noise = s.sigma_c * jax.random.normal(k_noise, centroids.shape, centroids.dtype)
    moved = small & (n_donors > 0) & jnp.asarray(s.reinit)
    return jnp.where(moved[:, None], donor_centroids + noise, new_centroids), moved


def _dead_zone(values, active, sizes, vmax, s: Settings):
    """Clusters with points whose every change quantises to zero (|v| < v_max/(2ξ) for all L
    coordinates of every active ED): their quantised sum is 0, so only channel noise or
    re-initialisation can move them. All False for exact sums."""
    n_clusters = sizes.shape[0]
    if s.aggregator.quantize is None:
        return jnp.zeros(n_clusters, bool)
    zero = (s.aggregator.quantize(values, vmax) == 0) | ~active[:, None]
    return jnp.all(zero.reshape(values.shape[0], n_clusters, -1), axis=(0, 2)) & (sizes > 0)


def federated_round(key, centroids, data: FlatData, n_devices: int, s: Settings, observe=None, carried_vmax=None):
    """One round of federated k-means (docs/kmeans.md §B2 + B5). Returns (new centroids, :class:`RoundInfo`).

    With ``s.count_aggregator`` the ES knows |Ŝ_c|, that back-end's estimate of the sizes, and uses
    it wherever it used |S_c| (the step's divisor, the test |S_c| > 0 and re-initialisation's
    |S_c| < S_min); its draws come from ``fold_in(key, COUNT_STREAM)``. ``RoundInfo.cluster_sizes``
    stays the true |S_c| and ``estimated_sizes`` holds |Ŝ_c|.

    ``observe``: optional function of the round's :class:`Partition` (of the broadcast
    centroids), its result stored in ``RoundInfo.observed``. ``carried_vmax``: the adaptive v_max
    carried from the previous round (``RoundInfo.next_vmax``; default the fixed ``s.vmax``).

    Args:
        key: a PRNG key (traced).
        centroids: (C, L) centroids broadcast at the round's start.
        data: the points as :class:`FlatData`.
        n_devices: K (static).
        s: the round's :class:`Settings`.
        observe: optional ``observe(partition) -> pytree``.
        carried_vmax: the adaptive v_max carried from the previous round, or None.

    Returns:
        ``(centroids, info)``: the (C, L) new centroids and the round's :class:`RoundInfo`.
    """
    k_channel, k_reinit = jax.random.split(key)
    counts, deltas, part = local_statistics(data, centroids, n_devices, with_partition=True)
    n_clusters, dim = centroids.shape
    values = deltas.reshape(n_devices, n_clusters * dim)  # q = c·L + l
    active = jnp.sum(counts, axis=1) > 0  # EDs without points transmit nothing
    carried_vmax = s.vmax if carried_vmax is None else carried_vmax
    total, vmax, next_vmax = _aggregate(k_channel, values, active, s, carried_vmax)
    sizes = jnp.sum(counts, axis=0)
    estimated = None  # exact counts: the ES uses |S_c| itself
    if s.count_aggregator is not None:
        k_counts = jax.random.fold_in(key, COUNT_STREAM)
        estimated = _aggregate_counts(k_counts, counts, active, s.count_aggregator).astype(sizes.dtype)
    used = sizes if estimated is None else estimated  # what the ES knows of |S_c|
    step = s.mu * total.reshape(n_clusters, dim) / jnp.maximum(used, 1.0)[:, None]
    updated = jnp.where(used[:, None] > 0, centroids + step, centroids)
    updated, moved = _reinitialise(k_reinit, centroids, updated, used, s)
    info = RoundInfo(
        cluster_sizes=sizes,
        loss=partition_loss(part, data.mask.astype(part.distance.dtype)),
        assignment=part.index,
        vmax=vmax,
        reinitialised=moved,
        observed=None if observe is None else observe(part),
        next_vmax=next_vmax,
        aggregate=total,
        dead_zone=_dead_zone(values, active, sizes, vmax, s),
        estimated_sizes=estimated,
    )
    return updated, info


def federated_rounds(key, data: FlatData, n_devices: int, init_centroids, n_rounds: int, s: Settings, observe=None):
    """Runs ``n_rounds`` rounds with ``lax.scan``; returns (centroids after each round (n_rounds, C, L),
    :class:`RoundInfo` stacked over rounds). ``observe`` as in :func:`federated_round`.

    Args:
        key: a PRNG key (traced).
        data: the points as :class:`FlatData`.
        n_devices: K >= 1 (static).
        init_centroids: (C, L) finite initial centroids.
        n_rounds: number of rounds (static).
        s: the :class:`Settings`.
        observe: optional ``observe(partition) -> pytree``.

    Returns:
        ``(history, info)``: (n_rounds, C, L) centroids and the stacked :class:`RoundInfo`.

    Raises:
        ValueError: bad settings, ``n_devices`` < 1, or non-finite initial centroids.
    """
    _check_settings(s)
    validation.integer("n_devices", n_devices, 1, note=" (K EDs)")
    init_centroids = jnp.asarray(init_centroids)
    validation.finite_array("init_centroids", init_centroids)

    def body(carry, k):
        c, vmax = carry
        c, info = federated_round(k, c, data, n_devices, s, observe, carried_vmax=vmax)
        return (c, info.next_vmax), (c, info)

    carry = (init_centroids, jnp.asarray(s.vmax, init_centroids.dtype))
    _, (history, info) = lax.scan(body, carry, jax.random.split(key, n_rounds))
    return history, info


def initial_centroids(key, points, n_clusters: int, method: str = "uniform", low=None, high=None) -> jax.Array:
    """C initial centroids (C, L) for the points (N, L).

    - ``"uniform"``: independent uniform draws in the box [low, high] (scalars or (L,)), which a
      server knows without seeing any data (the mall's floor plan); a centroid may start where
      no point is, which is what re-initialisation is for;
    - ``"forgy"``: C distinct points drawn uniformly (needs the data);
    - ``"kmeans++"``: the first centroid a uniform point, each next one a point drawn with
      probability ∝ its squared distance to the nearest centroid so far (Arthur & Vassilvitskii;
      needs all the data at one place: a centralized reference).

    ``method`` and C are static; ``low`` and ``high`` may be traced.

    Args:
        key: a PRNG key (traced).
        points: (N, L) points.
        n_clusters: C, in [1, N] (static).
        method: one of :data:`INITS` (static).
        low: the box's lower corner for "uniform" (scalar or (L,); may be traced).
        high: the box's upper corner for "uniform".

    Returns:
        (C, L) centroids, in the points' dtype.

    Raises:
        ValueError: an unknown ``method``, a bad C or shape, or "uniform" without ``low`` and ``high``.
    """
    validation.one_of("init", method, INITS)
    points = jnp.asarray(points)
    n_points, dim = validation.shape("points", points, (None, None), "(N, L)")
    validation.integer("n_clusters", n_clusters, 1, n_points, note=" (at most N, the number of points)")
    if method == "uniform":
        if low is None or high is None:
            raise ValueError("init='uniform' needs the bounding box: low and high")
        return jax.random.uniform(key, (n_clusters, dim), points.dtype, jnp.asarray(low), jnp.asarray(high))
    if method == "forgy":
        return points[lax.top_k(jax.random.uniform(key, (n_points,)), n_clusters)[1]]
    return _kmeans_plus_plus(key, points, n_clusters)


def _kmeans_plus_plus(key, points, n_clusters: int) -> jax.Array:
    """D² sampling by inverting the cumulative squared distances with one uniform per centroid."""
    coords = as_coordinates(points)
    keys = jax.random.split(key, n_clusters)
    first = jax.random.randint(keys[0], (), 0, points.shape[0])
    centroids = [points[first]]
    nearest = jnp.sum((coords - centroids[0][:, None]) ** 2, axis=0)
    for c in range(1, n_clusters):  # C is small and static: unrolled
        cumulative = jnp.cumsum(nearest)
        u = jax.random.uniform(keys[c], (), cumulative.dtype) * cumulative[-1]
        chosen = jnp.minimum(jnp.searchsorted(cumulative, u, side="right"), points.shape[0] - 1)
        centroids.append(points[chosen])
        nearest = jnp.minimum(nearest, jnp.sum((coords - centroids[-1][:, None]) ** 2, axis=0))
    return jnp.stack(centroids)


def _greedy_kmeans_plus_plus(key, points, n_clusters: int) -> jax.Array:
    """Greedy D² seeding (scikit-learn's ``kmeans_plusplus``): each next centroid is the best of
    2 + ⌊ln C⌋ D²-sampled candidates, the one leaving the smallest Σ_d min_c ‖d − c‖²."""
    coords = as_coordinates(points)
    n_local = 2 + int(np.log(n_clusters))
    keys = jax.random.split(key, n_clusters)
    centroids = [points[jax.random.randint(keys[0], (), 0, points.shape[0])]]
    nearest = jnp.sum((coords - centroids[0][:, None]) ** 2, axis=0)
    for c in range(1, n_clusters):  # C is small and static: unrolled
        cumulative = jnp.cumsum(nearest)
        u = jax.random.uniform(keys[c], (n_local,), cumulative.dtype) * cumulative[-1]
        chosen = jnp.minimum(jnp.searchsorted(cumulative, u, side="right"), points.shape[0] - 1)
        candidates = points[chosen]  # (n_local, L)
        distance = jnp.sum((coords[None] - candidates[:, :, None]) ** 2, axis=1)  # (n_local, N)
        after = jnp.minimum(nearest[None], distance)
        best = jnp.argmin(jnp.sum(after, axis=1))
        centroids.append(candidates[best])
        nearest = after[best]
    return jnp.stack(centroids)


def _check_shapes(points_dim: int, init_centroids, n_rounds: int) -> None:
    init = validation.shape("init_centroids", init_centroids, (None, points_dim), f"(C, L) with L = {points_dim}")
    validation.check("init_centroids", init, init[0] >= 1, "of shape (C, L) with C >= 1 centroids")
    validation.integer("n_rounds", n_rounds, 1)


def federated(
    key,
    device_points,
    device_mask,
    init_centroids,
    n_rounds: int,
    aggregator: Aggregator | None = None,
    **options,
) -> jax.Array:
    """Federated k-means on any data: centroids after each round, (n_rounds, C, L).

    Args:
        key: PRNG key (channel draws and re-initialisation).
        device_points: (K, N_max, L) points of each ED, padded.
        device_mask: (K, N_max) bool, True for real points.
        init_centroids: (C, L) initial centroids.
        n_rounds: number of rounds (static).
        aggregator: the back-end (:mod:`jaxfed.oac.aggregators`); default ``ideal()``.
        **options: the other fields of :class:`Settings` (μ, v_max, adaptive_vmax, vmax_rule,
            reinit, s_min, σ_c). Note the default ``reinit=True``; pass ``reinit=False`` for plain
            federated Lloyd's k-means.

    >>> import jax, numpy as np
    >>> from jaxfed.oac import aggregators
    >>> points = np.array([[[0.0, 0.0], [0.2, 0.0]], [[5.0, 5.0], [5.0, 5.4]]], np.float32)  # K = 2 EDs
    >>> init = np.array([[1.0, 1.0], [4.0, 4.0]], np.float32)
    >>> backend = aggregators.oac("aggregate", beta=3, digits=4, snr_db=30.0)
    >>> c = federated(jax.random.key(0), points, np.ones((2, 2), bool), init, 3, backend, reinit=False)
    >>> c.shape
    (3, 2, 2)

    Returns:
        (n_rounds, C, L) centroids after each round.

    Raises:
        ValueError: an unknown option, bad shapes, or more centroids than real points.
    """
    unknown = set(options) - set(Settings._fields)
    if unknown:
        raise ValueError(f"unknown options {sorted(unknown)}; known: {sorted(Settings._fields)}")
    data = flatten_devices(device_points, device_mask)
    _check_shapes(data.coords.shape[0], init_centroids, n_rounds)
    n_real = int(np.sum(np.asarray(device_mask)))
    if np.shape(init_centroids)[0] > n_real:
        raise ValueError(
            f"init_centroids holds more centroids (C = {np.shape(init_centroids)[0]}) than there are points "
            f"(N = {n_real}); use C <= N"
        )
    settings = Settings(aggregators.ideal() if aggregator is None else aggregator, **options)
    history, _ = federated_rounds(key, data, device_mask.shape[0], init_centroids, n_rounds, settings)
    return history


def lloyd_rounds(
    points, init_centroids, n_rounds: int, mask=None, observe=None, key=None, s_min=1.0, sigma_c=1.0, reinit=True
):
    """Centralized Lloyd's k-means on pooled data, with per-round diagnostics.

    Each round assigns every point to its nearest centroid and moves each centroid to the mean of
    its points, c_c + Σ_{d∈S_c}(d − c_c)/|S_c|. Without ``key`` a centroid with no points stays where
    it is (plain Lloyd's); with ``key`` (and ``reinit``, which may be traced) each centroid with
    |S_c| < ``s_min`` is re-initialised as the federated methods' are (c_{c′} + n,
    n ~ N(0, ``sigma_c``² I); docs/kmeans.md §B5), with the round keys :func:`federated_rounds` draws from the same ``key``: from the same start and key,
    Lloyd's and ideal federated k-means (μ = 1) are one algorithm and differ by summation order only.

    Returns:
        (centroids after each round (n_rounds, C, L), :class:`RoundInfo` stacked over rounds, about
            the centroids each round started from; ``vmax`` is 0). ``observe`` as in
            :func:`federated_round`.
    """
    points = jnp.asarray(points)
    validation.shape("points", points, (None, None), "(N, L)")
    _check_shapes(points.shape[1], init_centroids, n_rounds)
    validation.finite_array("points", points, mask)
    coords = as_coordinates(points)
    weight = jnp.ones(points.shape[0], points.dtype) if mask is None else jnp.asarray(mask, points.dtype)
    again = Settings(reinit=reinit, s_min=s_min, sigma_c=sigma_c)
    round_keys = jax.random.split(jax.random.PRNGKey(0) if key is None else key, n_rounds)

    def body(c, k):
        part = partition(coords, weight, c)
        updated = c + part.deltas / jnp.maximum(part.sizes, 1.0)[:, None]
        if key is None:
            moved = jnp.zeros(c.shape[0], bool)
        else:  # the federated round's key split: (channel, re-initialisation)
            updated, moved = _reinitialise(jax.random.split(k)[1], c, updated, part.sizes, again)
        info = RoundInfo(
            cluster_sizes=part.sizes,
            loss=partition_loss(part, weight),
            assignment=part.index,
            vmax=jnp.zeros((), c.dtype),
            reinitialised=moved,
            observed=None if observe is None else observe(part),
        )
        return updated, (updated, info)

    _, out = lax.scan(body, jnp.asarray(init_centroids, points.dtype), round_keys)
    return out


def best_of_starts(key, points, n_clusters: int, n_starts: int, n_rounds: int, observe=None, s_min=1.0, sigma_c=1.0):
    """The strongest centralized reference: ``n_starts`` runs of :func:`lloyd_rounds` with
    re-initialisation, each from its own greedy k-means++ seeding (:func:`_greedy_kmeans_plus_plus`),
    and the run with the lowest final loss (what scikit-learn's ``KMeans(init="k-means++",
    n_init=n_starts)`` returns).

    Start i uses ``fold_in(key, i)`` (split into its seeding and its rounds' keys). Returns that
    run's (centroids after each round (n_rounds, C, L), :class:`RoundInfo` stacked over rounds)."""
    validation.integer("n_starts", n_starts, 1)
    points = jnp.asarray(points)
    coords = as_coordinates(points)
    weight = jnp.ones(points.shape[0], points.dtype)

    def run(i):
        k_seed, k_rounds = jax.random.split(jax.random.fold_in(key, i))
        init = _greedy_kmeans_plus_plus(k_seed, points, n_clusters)
        history, info = lloyd_rounds(points, init, n_rounds, None, observe, k_rounds, s_min, sigma_c)
        final = partition_loss(partition(coords, weight, history[-1]), weight)
        return final, (history, info)

    finals, runs = jax.vmap(run)(jnp.arange(n_starts))
    best = jnp.argmin(finals)
    return jax.tree.map(lambda x: x[best], runs)


def lloyd(points, init_centroids, n_rounds: int, mask=None) -> jax.Array:
    """Centralized Lloyd's k-means: centroids after each round, (n_rounds, C, L) (see
    :func:`lloyd_rounds`).

    Args:
        points: (N, L) points.
        init_centroids: (C, L) initial centroids.
        n_rounds: number of rounds (static).
        mask: optional (N,) bool, True for real points.

    Returns:
        (n_rounds, C, L) centroids after each round.

    Examples:
        >>> import numpy as np
        >>> points = np.array([[0.0, 0.0], [0.2, 0.0], [5.0, 5.0], [5.0, 5.4]], np.float32)
        >>> np.asarray(lloyd(points, points[[0, 2]], 2)[-1], float).round(2).tolist()
        [[0.1, 0.0], [5.0, 5.2]]
    """
    return lloyd_rounds(points, init_centroids, n_rounds, mask)[0]


def oac_resources(dim: int, n_clusters: int, beta: int, digits: int) -> int:
    """Complex resources per round of OAC aggregation: L·C·β·D, whatever the number of EDs.

    Args:
        dim: L, the points' dimension.
        n_clusters: C.
        beta: base β, odd int >= 3.
        digits: D >= 1.

    Returns:
        L·C·β·D, a Python int.

    Examples:
        >>> oac_resources(2, 10, 3, 4)
        240
    """
    return channel.n_resources(dim * n_clusters, beta, digits)


def digital_resources(
    dim: int, n_clusters: int, n_devices: int, bits: int, bits_per_resource: float = 2.0, compression: float = 1.0
) -> float:
    """Resources per round of orthogonal digital aggregation: L·C·K·N_bits·r_compression / r_bits.

    Every ED sends its L·C values separately, N_bits bits each, compressed to a fraction
    r_compression of their size (1: uncompressed), at r_bits bits per complex resource (QPSK:
    2); e.g. N_bits = ⌈D log2 β⌉ for the resolution of D balanced base-β digits. The paper
    prints the product L C K r_bits r_compression N_bits; a spectral efficiency converts bits to
    resources by division, which is the reading here. Grows linearly with K, where OAC's L·C·β·D
    does not depend on K.

    Args:
        dim: L >= 1.
        n_clusters: C >= 1.
        n_devices: K >= 1.
        bits: N_bits >= 1 per value.
        bits_per_resource: r_bits > 0.
        compression: r_compression in (0, 1].

    Returns:
        The number of resources, a Python float.

    Raises:
        ValueError: an argument out of range.
    """
    for name, value in (("dim", dim), ("n_clusters", n_clusters), ("n_devices", n_devices), ("bits", bits)):
        validation.integer(name, value, 1)
    validation.positive("bits_per_resource", bits_per_resource)
    validation.probability("compression", compression, low_open=True)  # compressed size / raw size
    return dim * n_clusters * n_devices * bits * compression / bits_per_resource
