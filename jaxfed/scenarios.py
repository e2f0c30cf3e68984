"""Data generators for the experiments: per-agent data of the conjugate G-FVL families (Bernoulli,
Normal, Poisson, categorical; heterogeneous sizes and distributions) and the mall (k-means)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxfed import validation
from jaxfed.gfvl import models

__all__ = [
    "bernoulli_counts",
    "agent_thetas",
    "conjugate_stats",
    "MallScenario",
    "mall",
    "tile_of",
]


def bernoulli_counts(key: jax.Array, n_agents: int, n_per_agent: int, theta) -> jax.Array:
    """Number of ones n1_k among N_k = ``n_per_agent`` i.i.d. Bernoulli(θ) points of each agent.

    Draws the sufficient statistic directly, n1_k ~ Binomial(N_k, θ), by inverting the CDF with
    one uniform per agent (N_k + 1 comparisons; ~3x faster here than ``jax.random.binomial``'s
    rejection sampler under vmap). The CDF is accumulated in the default float dtype, so
    probabilities carry a relative error of ~1e-7 in float32. Every model in
    :mod:`jaxfed.gfvl.likelihoods` sees the data only through these counts.

    Args:
        key: PRNG key.
        n_agents: K (static).
        n_per_agent: N_k (static), >= 0.
        theta: success probability in [0, 1] (may be traced).

    Returns:
        (n_agents,) float counts in {0, …, N_k}.
    """
    theta = jnp.asarray(theta, dtype=float)
    k = jnp.arange(n_per_agent + 1, dtype=theta.dtype)
    log_pmf = (
        gammaln(n_per_agent + 1.0)
        - gammaln(k + 1.0)
        - gammaln(n_per_agent - k + 1.0)
        + jnp.where(k > 0, k * jnp.log(theta), 0.0)
        + jnp.where(k < n_per_agent, (n_per_agent - k) * jnp.log1p(-theta), 0.0)
    )
    cdf = jnp.cumsum(jnp.exp(log_pmf))
    u = jax.random.uniform(key, (n_agents,), dtype=theta.dtype)
    count = jnp.searchsorted(cdf, u * cdf[-1], side="right")
    return jnp.minimum(count, n_per_agent).astype(theta.dtype)


def _model(family):
    return family if isinstance(family, models.ConjugateModel) else models.get(family)


def agent_thetas(key: jax.Array, family, theta, n_agents: int, spread) -> jax.Array:
    """Per-agent data distributions θ_k around a global θ, as the conjugate model ``family`` (a
    registered name or a :class:`jaxfed.gfvl.models.ConjugateModel`) spreads them: θ_k =
    g⁻¹(g(θ) + τ ε_k), ε_k ~ N(0, 1) i.i.d., with the link g natural to the parameter's range (logit
    for a Bernoulli probability, identity for a Normal mean, log for a Poisson rate, the log of each
    category probability followed by a softmax for categorical data, where it is a label skew).
    τ = ``spread`` >= 0 (may be traced); τ = 0 gives θ_k = θ for every agent.

    Args:
        key: a JAX PRNG key (traced).
        family: a registered conjugate model name ("beta", "normal", "gamma", "dirichlet") or a
            :class:`jaxfed.gfvl.models.ConjugateModel`.
        theta: the global θ, a scalar, or a (C,) probability vector for categorical data.
        n_agents: K, the number of agents (static).
        spread: τ >= 0, the spread on the link scale (may be traced).

    Returns:
        (K,) θ_k, or (K, C) for categorical data.
    """
    return _model(family).agent_thetas(key, theta, n_agents, spread)


def conjugate_stats(key: jax.Array, family, thetas: jax.Array, sizes, variance=1.0) -> jax.Array:
    """Per-agent sufficient statistics of N_k i.i.d. points from agent k's θ_k, in the family's natural
    coordinates (the ``agent_stats`` of :func:`jaxfed.gfvl.conjugate_solver`), drawn directly by the
    conjugate model ``family`` (a name or a :class:`jaxfed.gfvl.models.ConjugateModel`); the built-ins:

    - "beta" (Bernoulli): n1_k ~ Binomial(N_k, θ_k) → (n1, N_k − n1);
    - "normal" (N(θ_k, σ_k²), σ_k² = ``variance``, scalar or per agent): Σz ~ N(N_k θ_k, N_k σ_k²)
      → (Σz/σ_k², −N_k/(2σ_k²));
    - "gamma" (Poisson(θ_k)): Σz ~ Poisson(N_k θ_k) → (Σz, −N_k);
    - "dirichlet" (categorical θ_k): counts ~ Multinomial(N_k, θ_k).

    An agent with N_k = 0 gets statistics 0 (it contributes nothing).

    Args:
        key: a JAX PRNG key (traced).
        family: a registered conjugate model name or a :class:`jaxfed.gfvl.models.ConjugateModel`.
        thetas: (K,) θ_k, or (K, C) for categorical data (e.g. from :func:`agent_thetas`).
        sizes: (K,) N_k >= 0 (may be traced).
        variance: noise variance σ² (scalar or (K,)) of models that have one, unused otherwise.

    Returns:
        (K, P) per-agent statistics in the family's natural coordinates (P = 2 for the scalar built-ins,
            C for "dirichlet").

    Raises:
        ValueError: ``sizes`` does not have shape (K,), one entry per agent.
    """
    model = _model(family)
    n = jnp.asarray(sizes, dtype=thetas.dtype)
    k = thetas.shape[0]
    validation.shape("sizes", n, (k,), f"({k},) (one entry per agent)")
    return model.sample_stats(key, thetas, n, variance)


# --------------------------------------------------------------------------- the mall (docs/kmeans.md)
class MallScenario(NamedTuple):
    """Customers in a tiled mall (docs/kmeans.md §B1), as one list of points."""

    points: jax.Array  # (N, 2) positions in metres, inside [0, side]²
    owner: jax.Array  # (N,) int32 ED (tile) of each point: col + cols·row, row 0 at y = 0
    labels: jax.Array  # (N,) int32 mixture component of each point (ground truth)
    centres: jax.Array  # (n_components, 2) component centres


def mall(
    key: jax.Array,
    n_points: int = 2000,
    n_components: int = 10,
    spread=5.0,
    side=100.0,
    rows: int = 10,
    cols: int = 10,
) -> MallScenario:
    """Customers of a ``side`` × ``side`` mall tiled ``rows`` × ``cols``, one ED per tile (docs/kmeans.md §B1).

    Customers come from an equal-weight Gaussian mixture: ``n_components`` centres uniform in the
    mall, isotropic standard deviation ``spread``; **[choice]** each coordinate is truncated to the
    mall (a customer is inside it), drawn exactly by ``jax.random.truncated_normal``. A point
    belongs to the ED of the tile containing it, so local data sets are highly heterogeneous.

    Static: n_points, n_components, rows, cols. Traced: spread, side.

    Args:
        key: a JAX PRNG key (traced).
        n_points: number of customers N (static).
        n_components: number of mixture components (static).
        spread: the components' standard deviation (traced).
        side: the mall's side length (traced).
        rows: tiles along y (static).
        cols: tiles along x (static); ``rows * cols`` EDs.

    Returns:
        The scenario, a :class:`MallScenario`: (N, 2) points, (N,) int32 owner tile, (N,) component labels and the
            (n_components, 2) centres.

    Examples:
        >>> import jax
        >>> from jaxfed.scenarios import mall
        >>> scenario = mall(jax.random.key(0), n_points=50, rows=2, cols=2)
        >>> scenario.points.shape, int(scenario.owner.max()) <= 3
        ((50, 2), True)
    """
    k_centres, k_component, k_offset = jax.random.split(key, 3)
    side = jnp.asarray(side, dtype=float)
    centres = jax.random.uniform(k_centres, (n_components, 2), minval=0.0, maxval=side)
    labels = jax.random.randint(k_component, (n_points,), 0, n_components, dtype=jnp.int32)
    centre = centres[labels]
    z = jax.random.truncated_normal(k_offset, (0.0 - centre) / spread, (side - centre) / spread, (n_points, 2))
    points = jnp.clip(centre + spread * z, 0.0, side)
    return MallScenario(points=points, owner=tile_of(points, side, rows, cols), labels=labels, centres=centres)


def tile_of(points: jax.Array, side, rows: int, cols: int, clip: bool = False) -> jax.Array:
    """ED index col + cols·row of the tile holding each point of a ``side`` × ``side`` mall.

    The mall is the closed square [0, side]²; a point on its far edge belongs to the last tile.
    A point outside it is an error (ValueError for concrete points) unless ``clip`` assigns it to
    the nearest edge tile; a NaN point is always an error. Under jit, where nothing can raise,
    such a point gets the owner −1, which :func:`jaxfed.oac.kmeans.flat_data` turns into NaN
    coordinates (so the metrics show it instead of dropping it).

    Args:
        points: (N, 2) coordinates (traced or concrete).
        side: the mall's side length.
        rows: tiles along y (static).
        cols: tiles along x (static).
        clip: assign a point outside the mall to the nearest edge tile instead of failing.

    Returns:
        (N,) int32 tile indices in [0, rows·cols), −1 for an invalid point under jit.

    Raises:
        ValueError: ``points`` is not (N, 2), or (concrete points) one is non-finite or outside the mall
            without ``clip``.

    Examples:
        >>> from jaxfed.scenarios import tile_of
        >>> tile_of([[10.0, 10.0], [90.0, 10.0], [10.0, 90.0]], 100.0, 2, 2).tolist()
        [0, 1, 2]
    """
    points = jnp.asarray(points)
    validation.shape("points", points, (None, 2), "(N, 2)")
    x, y = points[:, 0], points[:, 1]
    inside = (x >= 0) & (x <= side) & (y >= 0) & (y <= side)  # False for NaN
    if not validation.is_traced(points) and not validation.is_traced(side):
        values = np.asarray(points)
        bad = ~np.isfinite(values).all(axis=1) | (~np.asarray(inside) & (not clip))
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            hint = (
                ""
                if clip or not np.isfinite(values[first]).all()
                else "; pass clip=True to assign it to the nearest edge tile"
            )
            raise ValueError(
                f"points must be finite and lie in the mall [0, {side}]^2, got {values[first].tolist()} at index {first}{hint}"
            )
    col = jnp.clip(jnp.floor(x / (side / cols)), 0, cols - 1)
    row = jnp.clip(jnp.floor(y / (side / rows)), 0, rows - 1)
    valid = jnp.isfinite(x) & jnp.isfinite(y) & (inside | clip)
    return jnp.where(valid, col + cols * row, -1).astype(jnp.int32)


def iid_owner(key: jax.Array, n_points: int, n_devices: int) -> jax.Array:
    """An i.i.d. split for contrast: every point goes to an ED drawn uniformly at random."""
    return jax.random.randint(key, (n_points,), 0, n_devices, dtype=jnp.int32)


def random_subset(key: jax.Array, n: int, size: int) -> jax.Array:
    """``size`` distinct indices of range(n), uniformly at random: the top-``size`` of n uniforms
    (O(n) partial selection instead of the full sort of ``jax.random.choice(replace=False)``)."""
    return jax.lax.top_k(jax.random.uniform(key, (n,)), size)[1]


def pad_by_owner(points, owner, n_devices: int):
    """Host helper: flat points and owners → padded (K, N_max, L) array and (K, N_max) mask."""
    points, owner = np.asarray(points), np.asarray(owner)
    counts = np.bincount(owner, minlength=n_devices)
    n_max = max(1, int(counts.max()))
    out = np.zeros((n_devices, n_max, points.shape[1]), points.dtype)
    mask = np.zeros((n_devices, n_max), bool)
    for k in range(n_devices):
        rows = points[owner == k]
        out[k, : len(rows)] = rows
        mask[k, : len(rows)] = True
    return out, mask
