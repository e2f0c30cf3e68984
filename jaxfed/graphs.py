"""Communication graphs for gossip protocols, and the Metropolis–Hastings transition matrix.

Every constructor returns a validated ``(K, K)`` int32 NumPy adjacency matrix ``A`` with
``A[k, j] = 1`` iff agents ``k`` and ``j`` are neighbours: square, symmetric, 0/1, no self-loops,
connected, ``K >= 2``. Graphs are host-side configuration (validation needs concrete values);
:func:`mh_transition_matrix` is written in ``jax.numpy`` and also works on traced adjacencies.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import validation

__all__ = [
    "complete",
    "ring",
    "star",
    "line",
    "grid",
    "erdos_renyi",
    "from_adjacency",
    "validate_adjacency",
    "degrees",
    "mh_transition_matrix",
    "TOPOLOGIES",
    "by_name",
]


def _connected(adjacency: np.ndarray) -> bool:
    n = adjacency.shape[0]
    seen = np.zeros(n, dtype=bool)
    seen[0] = True
    frontier = [0]
    while frontier:
        k = frontier.pop()
        for j in np.flatnonzero(adjacency[k]):
            if not seen[j]:
                seen[j] = True
                frontier.append(int(j))
    return bool(seen.all())


def validate_adjacency(adjacency) -> np.ndarray:
    """Checks that ``adjacency`` is a valid gossip graph and returns it as int32 NumPy.

    Raises:
        ValueError: naming what is wrong (shape, K < 2, entries not 0/1, asymmetry,
            self-loops, or a disconnected graph with the unreachable agents).
    """
    a = np.asarray(adjacency)
    validation.check("adjacency", a.shape, a.ndim == 2 and a.shape[0] == a.shape[1], "a square (K, K) matrix")
    validation.check("adjacency", a.shape, a.shape[0] >= 2, "a (K, K) matrix with K >= 2 agents")
    if not np.all((a == 0) | (a == 1)):
        bad = np.unique(a[(a != 0) & (a != 1)])[:5]
        raise ValueError(f"adjacency entries must be 0 or 1, got values {bad.tolist()}")
    a = a.astype(np.int32)
    if not np.array_equal(a, a.T):
        k, j = np.argwhere(a != a.T)[0]
        raise ValueError(f"adjacency must be symmetric (undirected graph): A[{k},{j}] != A[{j},{k}]")
    loops = np.flatnonzero(np.diag(a))
    if loops.size:
        raise ValueError(f"adjacency must have no self-loops, got A[k,k] = 1 for k in {loops.tolist()}")
    if not _connected(a):
        raise ValueError("adjacency must describe a connected graph; it has more than one component")
    return a


def from_adjacency(adjacency) -> np.ndarray:
    """Validated int32 copy of a user-supplied adjacency matrix (see :func:`validate_adjacency`)."""
    return validate_adjacency(np.array(adjacency))


def complete(n_agents: int) -> np.ndarray:
    """Fully connected graph: every pair of distinct agents are neighbours."""
    k = validation.integer("n_agents", n_agents, 2)
    return validate_adjacency(np.ones((k, k), np.int32) - np.eye(k, dtype=np.int32))


def ring(n_agents: int) -> np.ndarray:
    """Cycle 0 – 1 – … – K−1 – 0 (for K = 2 a single edge)."""
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    idx = np.arange(k)
    a[idx, (idx + 1) % k] = 1
    a[(idx + 1) % k, idx] = 1
    np.fill_diagonal(a, 0)
    return validate_adjacency(a)


def star(n_agents: int) -> np.ndarray:
    """Hub agent 0 connected to every other agent; leaves are not connected to each other."""
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    a[0, 1:] = 1
    a[1:, 0] = 1
    return validate_adjacency(a)


def line(n_agents: int) -> np.ndarray:
    """Path 0 – 1 – … – K−1."""
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    idx = np.arange(k - 1)
    a[idx, idx + 1] = 1
    a[idx + 1, idx] = 1
    return validate_adjacency(a)


def grid(rows: int, cols: int) -> np.ndarray:
    """4-neighbour lattice of ``rows × cols`` agents, numbered row-major (agent = r * cols + c)."""
    r = validation.integer("rows", rows, 1)
    c = validation.integer("cols", cols, 1)
    validation.check("grid", f"{r} x {c}", r * c >= 2, "rows * cols >= 2 agents")
    a = np.zeros((r * c, r * c), np.int32)
    for i in range(r):
        for j in range(c):
            k = i * c + j
            if j + 1 < c:
                a[k, k + 1] = a[k + 1, k] = 1
            if i + 1 < r:
                a[k, k + c] = a[k + c, k] = 1
    return validate_adjacency(a)


def erdos_renyi(key_or_seed, n_agents: int, p: float, max_tries: int = 1000) -> np.ndarray:
    """Erdős–Rényi G(K, p) graph conditioned on being connected.

    Each edge is present independently with probability ``p``; draws that are not connected are
    rejected and redrawn (from ``fold_in(key, attempt)``), at most ``max_tries`` times.

    Args:
        key_or_seed: a ``jax.random.key`` or an integer seed.
        n_agents: K >= 2.
        p: edge probability in (0, 1].
        max_tries: rejection budget before giving up with a ValueError.
    """
    k = validation.integer("n_agents", n_agents, 2)
    validation.probability("p", p, low_open=True)
    key = jax.random.key(key_or_seed) if isinstance(key_or_seed, (int, np.integer)) else key_or_seed
    iu = np.triu_indices(k, 1)
    for attempt in range(max_tries):
        u = np.asarray(jax.random.uniform(jax.random.fold_in(key, attempt), (iu[0].size,)))
        a = np.zeros((k, k), np.int32)
        a[iu] = u < p
        a = a + a.T
        if _connected(a):
            return validate_adjacency(a)
    raise ValueError(f"erdos_renyi: no connected G(K={k}, p={p}) graph in {max_tries} draws; increase p or max_tries")


TOPOLOGIES = {"complete": complete, "ring": ring, "star": star, "line": line}


def by_name(name: str, n_agents: int) -> np.ndarray:
    """The topology called ``name`` (one of :data:`TOPOLOGIES`) on ``n_agents`` agents.

    >>> by_name("star", 4)
    array([[0, 1, 1, 1],
           [1, 0, 0, 0],
           [1, 0, 0, 0],
           [1, 0, 0, 0]], dtype=int32)
    """
    validation.one_of("topology", name, sorted(TOPOLOGIES))
    return TOPOLOGIES[name](n_agents)


def degrees(adjacency) -> jax.Array:
    """deg(k) = Σ_j A[k, j]."""
    return jnp.sum(jnp.asarray(adjacency), axis=-1)


def mh_transition_matrix(adjacency) -> jax.Array:
    """Metropolis–Hastings random-walk transition matrix (docs/gfvl.md §A2).

    ``P[k, j] = min(1/deg(k), 1/deg(j))`` for neighbours j of k, ``P[k, k] = 1 − Σ_{j≠k} P[k, j]``.
    P is symmetric and doubly stochastic, so the uniform distribution is stationary.
    Works on traced adjacencies (jit/vmap).

    On the star, the hub moves to each leaf with probability 1/3 and a leaf back with 1/3:

    >>> print(np.asarray(mh_transition_matrix(by_name("star", 4))).round(3))
    [[0.    0.333 0.333 0.333]
     [0.333 0.667 0.    0.   ]
     [0.333 0.    0.667 0.   ]
     [0.333 0.    0.    0.667]]
    """
    a = jnp.asarray(adjacency)
    deg = jnp.sum(a, axis=-1).astype(float)  # default float dtype (float64 under x64)
    off = a * jnp.minimum(1.0 / deg[:, None], 1.0 / deg[None, :])
    return off + jnp.diag(1.0 - jnp.sum(off, axis=-1))
