"""The geometry federated and centralized k-means share (docs/kmeans.md §B2): the flat layout of
the points with their owner ED, the nearest-centroid partition, the k-means loss and the adjusted
Rand index. :mod:`jaxfed.oac.kmeans` builds its rounds on these and re-exports the public ones.

Coordinates are stored as (L, N): XLA's CPU backend vectorises along the minor axis, and a minor
axis of length L = 2 made the distance computations several times slower. Nearest centroids are
found by a loop over the C centroids unrolled at trace time (running minimum), not ``argmin``
over a short axis.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching, lax

from jaxfed import validation


@functools.cache
def flat_segment_sum(num_segments: int):
    """``segment_sum(data, ids, num_segments)`` for 1-D data whose batching rule flattens the batch.

    Under ``vmap`` XLA's CPU backend runs a batched scatter-add about 2.7x slower than one 1-D
    scatter-add of the same elements (when the updates are cheap to materialise: for the per-ED
    sums, whose updates XLA fuses into the batched scatter, flattening was slower); offsetting each batch row's ids by row·num_segments turns the
    former into the latter (recursively for nested vmaps). Same sums, same order per segment.
    """

    @custom_batching.custom_vmap
    def segment_sum(data, ids):
        return jax.ops.segment_sum(data, ids, num_segments)

    @segment_sum.def_vmap
    def _batched(axis_size, in_batched, data, ids):
        data_batched, ids_batched = in_batched
        if not data_batched:
            data = jnp.broadcast_to(data, (axis_size,) + data.shape)
        if not ids_batched:
            ids = jnp.broadcast_to(ids, (axis_size,) + ids.shape)
        offset = jnp.arange(axis_size, dtype=ids.dtype)[:, None] * num_segments
        flat = flat_segment_sum(axis_size * num_segments)(data.reshape(-1), (ids + offset).reshape(-1))
        return flat.reshape(axis_size, num_segments), True

    return segment_sum


class FlatData(NamedTuple):
    """Data of all EDs as one list of points (see :func:`flat_data`)."""

    coords: jax.Array  # (L, N) float: column n holds the coordinates of point n
    owner: jax.Array  # (N,) int32, the ED holding each point, in [0, K)
    mask: jax.Array  # (N,) bool, real points (False: padding)


def flat_data(points, owner, mask=None) -> FlatData:
    """:class:`FlatData` from points (N, L), their owner EDs (N,) and an optional mask (N,).

    Concrete points must be finite and owners >= 0 (ValueError). A traced owner < 0 (e.g.
    :func:`jaxfed.scenarios.tile_of`'s mark for a point outside the mall) makes that point's
    coordinates NaN, so that the metrics turn NaN instead of silently leaving it out."""
    points = jnp.asarray(points)
    owner = jnp.asarray(owner, jnp.int32)
    mask = jnp.ones(points.shape[0], bool) if mask is None else jnp.asarray(mask, bool)
    validation.finite_array("points", points, mask)
    if not validation.is_traced(owner):
        lowest = int(np.min(np.asarray(owner), initial=0))
        validation.check("owner", lowest, lowest >= 0, ">= 0 (an ED index)")
    points = jnp.where((owner >= 0)[:, None], points, jnp.nan)
    return FlatData(as_coordinates(points), owner, mask)


def as_coordinates(points: jax.Array) -> jax.Array:
    """Points (N, L) → coordinates (L, N), materialised: left to fuse into the distance
    computations, the transpose makes their memory access strided and them ~5x slower."""
    return lax.optimization_barrier(points.T)


class Partition(NamedTuple):
    """The partition of the points induced by a set of centroids."""

    index: jax.Array  # type: ignore[assignment]  # a field named like tuple.index (public); (N,) int32 nearest centroid (ties: the lowest index)
    distance: jax.Array  # (N,) squared distance to it
    sizes: jax.Array  # (C,) |S_c| (sum of the mask over the cluster)
    deltas: jax.Array  # (C, L) Σ_{d∈S_c} (d − c_c)


def nearest(coords: jax.Array, centroids: jax.Array):
    """Index (N,) of the nearest centroid and the squared distance (N,) to it: a running minimum
    over the C centroids, unrolled at trace time (vector operations along N only)."""
    best = jnp.sum((coords - centroids[0][:, None]) ** 2, axis=0)
    index = jnp.zeros(coords.shape[1], jnp.int32)
    for c in range(1, centroids.shape[0]):
        d = jnp.sum((coords - centroids[c][:, None]) ** 2, axis=0)
        closer = d < best
        best = jnp.where(closer, d, best)
        index = jnp.where(closer, c, index)
    return index, best


def segment_sums(coords: jax.Array, weight: jax.Array, segment: jax.Array, n_segments: int):
    """Σ weight and Σ weight·d over the points of each segment: (S,) and (S, L).

    One scatter-add per quantity: on CPU much cheaper than masked reductions over N.
    """
    sizes = jax.ops.segment_sum(weight, segment, n_segments)
    sums = jnp.stack([jax.ops.segment_sum(weight * row, segment, n_segments) for row in coords], axis=-1)
    return sizes, sums


def partition(coords: jax.Array, weight: jax.Array, centroids: jax.Array) -> Partition:
    """Nearest centroids of the columns of ``coords`` (L, N) and per-cluster sums, weighted by
    ``weight`` (N,) (the mask).

    Δ_c = Σ_{d∈S_c} (d − c_c) is formed as Σ_{d∈S_c} d − |S_c| c_c: no per-point gather of the
    centroid (a batched gather costs a quarter of a round on CPU). In float32 its error is of
    the order of the coordinates' own rounding, |d|·ε per point.

    Args:
        coords: (L, N) coordinates, one column per point.
        weight: (N,) weights (the mask, 0 for padding).
        centroids: (C, L) centroids.

    Returns:
        :class:`Partition`: nearest index (N,), squared distance (N,), sizes (C,) and deltas (C, L).
    """
    index, best = nearest(coords, centroids)
    sizes, sums = segment_sums(coords, weight, index, centroids.shape[0])
    return Partition(index, best, sizes, sums - sizes[:, None] * centroids)


def assign(points: jax.Array, centroids: jax.Array) -> jax.Array:
    """Index of the nearest centroid, argmin_c ‖d − c_c‖² (ties: the lowest index), shape (N,)."""
    points = jnp.asarray(points)
    return partition(as_coordinates(points), jnp.ones(points.shape[0], points.dtype), jnp.asarray(centroids)).index


def partition_loss(part: Partition, weight: jax.Array) -> jax.Array:
    """Loss (1)/|D| of a :class:`Partition` computed with mask ``weight``:

    (Σ_d ‖d − c_{a(d)}‖² − Σ_c ‖Σ_{d∈S_c}(d − c_c)‖²/|S_c|) / |D| = loss (1)/|D|."""
    between = jnp.sum(part.deltas**2, axis=1) / jnp.maximum(part.sizes, 1.0)
    return (jnp.sum(weight * part.distance) - jnp.sum(between)) / jnp.sum(weight)


def loss(points, centroids, mask=None) -> jax.Array:
    """Loss (1) normalised by |D|: (1/|D|) Σ_c Σ_{d∈S_c} ‖d − μ_c‖², S_c the points nearest to
    centroid c and μ_c their mean (the within-cluster scatter of the partition the centroids
    induce; docs/kmeans.md §B1). Computed as Σ_d ‖d − c_{a(d)}‖² − Σ_c ‖Σ_{d∈S_c}(d − c_c)‖²/|S_c|, which
    involves only distances to the centroids (no large squared coordinates to cancel).

    ValueError for concrete points that are empty (or all masked out) or not finite; traced ones
    give NaN in those cases.

    Args:
        points: (N, L) points.
        centroids: (C, L) centroids.
        mask: optional (N,) bool, True for real points.

    Returns:
        The scalar loss.

    Raises:
        ValueError: concrete points that are empty, all masked out, or not finite.
    """
    points = jnp.asarray(points)
    validation.shape("points", points, (None, None), "(N, L)")
    weight = jnp.ones(points.shape[0], points.dtype) if mask is None else jnp.asarray(mask, points.dtype)
    empty = points.shape[0] == 0 or (not validation.is_traced(weight) and not np.any(np.asarray(weight)))
    validation.check("points", points.shape, not empty, "an (N, L) array with at least one (unmasked) point")
    validation.finite_array("points", points, mask)
    return partition_loss(partition(as_coordinates(points), weight, jnp.asarray(centroids)), weight)


def adjusted_rand_index(labels_a, labels_b, n_a: int, n_b: int, mask=None) -> jax.Array:
    """Adjusted Rand index (Hubert & Arabie) of two labelings with n_a and n_b classes.

    ARI = (Σ_ij C(n_ij,2) − E) / (½(Σ_i C(a_i,2) + Σ_j C(b_j,2)) − E),
    E = Σ_i C(a_i,2) Σ_j C(b_j,2) / C(n,2), from the contingency table n_ij. 1 for identical
    partitions, about 0 for independent ones; 1 when both are single clusters.

    Args:
        labels_a: (N,) int labels in [0, n_a).
        labels_b: (N,) int labels in [0, n_b).
        n_a: number of classes of ``labels_a`` (static).
        n_b: number of classes of ``labels_b`` (static).
        mask: optional (N,) weights (1 for points that count).

    Returns:
        The scalar ARI (float32).

    Examples:
        >>> import jax.numpy as jnp
        >>> float(adjusted_rand_index(jnp.array([0, 0, 1, 1]), jnp.array([1, 1, 0, 0]), 2, 2))
        1.0
    """
    weight = jnp.ones(labels_a.shape[0], jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    table = flat_segment_sum(n_a * n_b)(weight, labels_a * n_b + labels_b).reshape(n_a, n_b)
    pairs = lambda x: x * (x - 1.0) / 2.0  # noqa: E731
    index = jnp.sum(pairs(table))
    rows, cols = jnp.sum(pairs(table.sum(1))), jnp.sum(pairs(table.sum(0)))
    expected = rows * cols / jnp.maximum(pairs(jnp.sum(weight)), 1.0)
    maximum = 0.5 * (rows + cols)
    denom = maximum - expected
    return jnp.where(denom != 0, (index - expected) / jnp.where(denom != 0, denom, 1.0), 1.0)
