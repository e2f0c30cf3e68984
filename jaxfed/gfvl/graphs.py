"""Communication graphs for gossip protocols, and the Metropolis–Hastings transition matrix.

Every constructor returns a validated ``(K, K)`` int32 NumPy adjacency matrix ``A`` with
``A[k, j] = 1`` iff agents ``k`` and ``j`` are neighbours: square, symmetric, 0/1, no self-loops,
connected, ``K >= 2``. Graphs are host-side configuration (validation needs concrete values);
:func:`mh_transition_matrix` is written in ``jax.numpy`` and also works on traced adjacencies.

Graphs by name are an extension point (a :class:`jaxfed.registry.Registry`, as channels and
families are): :func:`register` adds ``builder(n_agents) -> adjacency`` under a name, :func:`get`
returns it, :func:`names` lists them (complete, ring, star and line are built in) and
:func:`build` makes the validated graph; a registered name works wherever the experiments take
a graph's name (``--set topologies=NAME``, gfvl-graphs' ``--set graphs=NAME``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxfed import validation
from jaxfed.registry import Registry

__all__ = [
    "complete",
    "ring",
    "star",
    "line",
    "grid",
    "erdos_renyi",
    "random_geometric",
    "barbell",
    "lollipop",
    "from_adjacency",
    "as_adjacency",
    "load",
    "degrees",
    "mh_transition_matrix",
    "spectral_gap",
    "register",
    "get",
    "names",
    "build",
    "spec_forms",
    "from_spec",
]


def _reached(adjacency: np.ndarray) -> np.ndarray:
    """The agents reachable from agent 0 (boolean (K,))."""
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
    return seen


def _connected(adjacency: np.ndarray) -> bool:
    return bool(_reached(adjacency).all())


def validate_adjacency(adjacency, name: str = "adjacency") -> np.ndarray:
    """Checks that ``adjacency`` is a valid gossip graph and returns it as int32 NumPy.

    ``name`` is the parameter the messages name (e.g. ``"graph"`` for a user's file).

    Raises:
        ValueError: naming what is wrong (shape, K < 2, entries not 0/1, asymmetry,
            self-loops, or a disconnected graph with the unreachable agents).
    """
    a = np.asarray(adjacency)
    validation.check(name, a.shape, a.ndim == 2 and a.shape[0] == a.shape[1], "a square (K, K) matrix")
    validation.check(name, a.shape, a.shape[0] >= 2, "a (K, K) matrix with K >= 2 agents")
    if not np.issubdtype(a.dtype, np.number) and a.dtype != bool:
        raise ValueError(f"{name} entries must be 0 or 1, got an array of {a.dtype}")
    if not np.all((a == 0) | (a == 1)):
        bad = np.unique(a[(a != 0) & (a != 1)])[:5]
        raise ValueError(f"{name} entries must be 0 or 1, got values {bad.tolist()}")
    a = a.astype(np.int32)
    if not np.array_equal(a, a.T):
        k, j = np.argwhere(a != a.T)[0]
        raise ValueError(f"{name} must be symmetric (undirected graph): A[{k},{j}] != A[{j},{k}]")
    loops = np.flatnonzero(np.diag(a))
    if loops.size:
        raise ValueError(f"{name} must have no self-loops, got A[k,k] = 1 for k in {loops.tolist()}")
    if not _connected(a):
        unreached = np.flatnonzero(~_reached(a))
        raise ValueError(
            f"{name} must describe a connected graph; it has more than one component (agents "
            f"{unreached[:10].tolist()}{' …' if unreached.size > 10 else ''} cannot be reached from agent 0)"
        )
    return a


def from_adjacency(adjacency) -> np.ndarray:
    """Validated int32 copy of a user-supplied adjacency matrix (see :func:`validate_adjacency`).

    Args:
        adjacency: a (K, K) 0/1 array or nested list, symmetric, without self-loops, connected.

    Returns:
        (K, K) int32 NumPy adjacency matrix.

    Raises:
        ValueError: the graph is not a valid gossip graph (:func:`validate_adjacency`).
    """
    return validate_adjacency(np.array(adjacency))


def complete(n_agents: int) -> np.ndarray:
    """Fully connected graph: every pair of distinct agents are neighbours.

    Args:
        n_agents: K >= 2.

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` is not an integer >= 2.
    """
    k = validation.integer("n_agents", n_agents, 2)
    return validate_adjacency(np.ones((k, k), np.int32) - np.eye(k, dtype=np.int32))


def ring(n_agents: int) -> np.ndarray:
    """Cycle 0 – 1 – … – K−1 – 0 (for K = 2 a single edge).

    Args:
        n_agents: K >= 2.

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` is not an integer >= 2.
    """
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    idx = np.arange(k)
    a[idx, (idx + 1) % k] = 1
    a[(idx + 1) % k, idx] = 1
    np.fill_diagonal(a, 0)
    return validate_adjacency(a)


def star(n_agents: int) -> np.ndarray:
    """Hub agent 0 connected to every other agent; leaves are not connected to each other.

    Args:
        n_agents: K >= 2.

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` is not an integer >= 2.
    """
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    a[0, 1:] = 1
    a[1:, 0] = 1
    return validate_adjacency(a)


def line(n_agents: int) -> np.ndarray:
    """Path 0 – 1 – … – K−1.

    Args:
        n_agents: K >= 2.

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` is not an integer >= 2.

    Examples:
        >>> line(3).tolist()
        [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
    """
    k = validation.integer("n_agents", n_agents, 2)
    a = np.zeros((k, k), np.int32)
    idx = np.arange(k - 1)
    a[idx, idx + 1] = 1
    a[idx + 1, idx] = 1
    return validate_adjacency(a)


def grid(rows: int, cols: int) -> np.ndarray:
    """4-neighbour lattice of ``rows × cols`` agents, numbered row-major (agent = r * cols + c).

    Args:
        rows: number of rows >= 1.
        cols: number of columns >= 1 (``rows * cols >= 2``).

    Returns:
        (rows·cols, rows·cols) int32 adjacency matrix.

    Raises:
        ValueError: ``rows`` or ``cols`` is not a positive integer, or the grid has fewer than 2 agents.
    """
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

    Returns:
        (K, K) int32 adjacency matrix of a connected graph.

    Raises:
        ValueError: for bad arguments, or when no draw is connected within ``max_tries``.
    """
    k = validation.integer("n_agents", n_agents, 2)
    validation.probability("p", p, low_open=True)
    key = _key(key_or_seed)
    iu = np.triu_indices(k, 1)
    for attempt in range(max_tries):
        u = np.asarray(jax.random.uniform(jax.random.fold_in(key, attempt), (iu[0].size,)))
        a = np.zeros((k, k), np.int32)
        a[iu] = u < p
        a = a + a.T
        if _connected(a):
            return validate_adjacency(a)
    raise ValueError(f"erdos_renyi: no connected G(K={k}, p={p}) graph in {max_tries} draws; increase p or max_tries")


def _key(key_or_seed):
    return jax.random.key(key_or_seed) if isinstance(key_or_seed, (int, np.integer)) else key_or_seed


def random_geometric(key_or_seed, n_agents: int, radius: float, max_tries: int = 1000) -> np.ndarray:
    """Random geometric graph conditioned on being connected: K agents placed uniformly in the unit
    square, neighbours when their Euclidean distance is at most ``radius`` (a wireless ad-hoc network
    whose radios reach ``radius``).

    Draws that are not connected are rejected and redrawn (from ``fold_in(key, attempt)``), at most
    ``max_tries`` times; the connectivity threshold is near sqrt(log K / (π K)).

    Args:
        key_or_seed: a ``jax.random.key`` or an integer seed.
        n_agents: K >= 2.
        radius: radio range in (0, sqrt(2)] (sqrt(2) gives the complete graph).
        max_tries: rejection budget before giving up with a ValueError.

    Returns:
        (K, K) int32 adjacency matrix of a connected graph.

    Raises:
        ValueError: for bad arguments, or when no draw is connected within ``max_tries``.
    """
    k = validation.integer("n_agents", n_agents, 2)
    validation.number("radius", radius, 0.0, float(np.sqrt(2.0)), low_open=True)
    key = _key(key_or_seed)
    for attempt in range(max_tries):
        xy = np.asarray(jax.random.uniform(jax.random.fold_in(key, attempt), (k, 2)), np.float64)
        dist = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1))
        a = (dist <= radius).astype(np.int32)
        np.fill_diagonal(a, 0)
        if _connected(a):
            return validate_adjacency(a)
    raise ValueError(
        f"random_geometric: no connected graph of K={k} agents with radius={radius} in {max_tries} draws; "
        "increase radius or max_tries"
    )


def barbell(n_agents: int, path: int = 0) -> np.ndarray:
    """Two cliques joined through a path of ``path`` agents (``path = 0``: one bridge edge between them),
    the classic slowly mixing graph: the walk stays in one clique for long before it crosses.

    The cliques have ⌈(K − path)/2⌉ and ⌊(K − path)/2⌋ agents (0 … m₁−1 and the last m₂), each at
    least 2; the path agents lie between them in order.

    Args:
        n_agents: K >= 4.
        path: number of agents on the path between the cliques, in [0, K − 4].

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` or ``path`` out of range.

    Examples:
        >>> barbell(6).sum(axis=1).tolist()   # cliques {0, 1, 2} and {3, 4, 5}, bridge 2 – 3
        [2, 2, 3, 3, 2, 2]
    """
    k = validation.integer("n_agents", n_agents, 4)
    n_path = validation.integer("path", path, 0, k - 4)
    m1 = (k - n_path + 1) // 2
    a = np.zeros((k, k), np.int32)
    a[:m1, :m1] = 1
    a[m1 + n_path :, m1 + n_path :] = 1
    chain = [m1 - 1, *range(m1, m1 + n_path), m1 + n_path]  # last agent of clique 1 … first of clique 2
    for u, v in zip(chain, chain[1:]):
        a[u, v] = a[v, u] = 1
    np.fill_diagonal(a, 0)
    return validate_adjacency(a)


def lollipop(n_agents: int, clique: int | None = None) -> np.ndarray:
    """A clique of ``clique`` agents (default ⌈K/2⌉; agents 0 … m−1) with a path of the other K − m
    attached to agent m − 1: the graph on which a simple random walk's cover time is largest
    (order K³); the MH walk, uniform in its stationary law, is slowed by the path instead.

    Args:
        n_agents: K >= 3.
        clique: m, the clique's size in [2, K − 1]; None for ⌈K/2⌉.

    Returns:
        (K, K) int32 adjacency matrix.

    Raises:
        ValueError: ``n_agents`` or ``clique`` out of range.

    Examples:
        >>> lollipop(6).sum(axis=1).tolist()   # clique {0, 1, 2}, path 2 – 3 – 4 – 5
        [2, 2, 3, 2, 2, 1]
    """
    k = validation.integer("n_agents", n_agents, 3)
    m = validation.integer("clique", (k + 1) // 2 if clique is None else clique, 2, k - 1)
    a = np.zeros((k, k), np.int32)
    a[:m, :m] = 1
    for u in range(m - 1, k - 1):
        a[u, u + 1] = a[u + 1, u] = 1
    np.fill_diagonal(a, 0)
    return validate_adjacency(a)


def as_adjacency(graph, name: str = "graph") -> np.ndarray:
    """A user's graph as a validated int32 adjacency matrix: a (K, K) array or nested list of 0/1, or a
    networkx graph (its nodes in ``graph.nodes`` order become agents 0 … K−1; networkx is an optional
    dependency, imported only here).

    Args:
        graph: a (K, K) 0/1 array or nested list, or a networkx graph.
        name: the parameter the messages name.

    Returns:
        (K, K) int32 NumPy adjacency matrix.

    Raises:
        ValueError: naming ``name`` when the graph is not a valid gossip graph (not square, not 0/1,
            asymmetric, with self-loops, disconnected), or when a networkx graph is given and
            networkx cannot be imported.
    """
    if hasattr(graph, "nodes") and hasattr(graph, "edges") and hasattr(graph, "is_directed"):
        try:
            import networkx  # an optional dependency, needed only when given a networkx graph
        except ImportError:
            raise ValueError(
                f"{name}: a networkx graph needs networkx, which is not installed (python -m pip install "
                "networkx, or pass the adjacency matrix)"
            ) from None
        validation.check(name, "a directed graph", not graph.is_directed(), "an undirected graph")
        nodes = list(graph.nodes)
        graph = networkx.to_numpy_array(graph, nodelist=nodes, weight=None, dtype=np.int64)
    return validate_adjacency(np.array(graph), name)


def load(path: str, name: str = "graph") -> np.ndarray:
    """A user's graph from a file: ``.npy``, a (K, K) 0/1 adjacency matrix; any other file, an edge list
    of text lines ``i j`` (agents numbered from 0, K = the largest number + 1; blank lines and text after
    ``#`` ignored; a pair may be listed in either order or both).

    Args:
        path: the file's path (``.npy`` or an edge list).
        name: the parameter the messages name.

    Returns:
        (K, K) int32 NumPy adjacency matrix.

    Raises:
        ValueError: naming ``name`` and the file when it cannot be read or parsed, or when the graph
            is not a valid gossip graph (asymmetric, disconnected, …: :func:`validate_adjacency`).
    """
    try:
        if str(path).endswith(".npy"):
            a = np.load(path, allow_pickle=False)
        else:
            with open(path, encoding="utf-8") as f:
                lines = [(n, line.split("#", 1)[0].split()) for n, line in enumerate(f, 1)]
            edges = []
            for n, parts in lines:
                if not parts:
                    continue
                if len(parts) != 2 or not all(p.isdigit() for p in parts):
                    raise ValueError(f"line {n} is not an edge 'i j' of two agent numbers >= 0: {' '.join(parts)!r}")
                edges.append((int(parts[0]), int(parts[1])))
            if not edges:
                raise ValueError("no edge in the file")
            e = np.asarray(edges)
            if (e[:, 0] == e[:, 1]).any():
                i = int(e[e[:, 0] == e[:, 1]][0, 0])
                raise ValueError(f"edge {i} {i} is a self-loop")
            a = np.zeros((int(e.max()) + 1,) * 2, np.int32)
            a[e[:, 0], e[:, 1]] = 1
            a[e[:, 1], e[:, 0]] = 1
    except (OSError, ValueError, UnicodeDecodeError) as err:
        detail = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ValueError(f"{name} = {path!r}: cannot be read as a graph ({detail})") from None
    try:
        return validate_adjacency(a, name)
    except ValueError as err:
        raise ValueError(f"{err} (in {path})") from None


def spectrum(adjacency) -> np.ndarray:
    """Eigenvalues of the MH transition matrix P (:func:`mh_transition_matrix`, symmetric), in float64,
    largest first: 1 = λ_1 > λ_2 ≥ … ≥ λ_K ≥ −1 on a connected graph."""
    a = validate_adjacency(adjacency)
    deg = a.sum(-1).astype(np.float64)
    off = a * np.minimum(1.0 / deg[:, None], 1.0 / deg[None, :])
    p = off + np.diag(1.0 - off.sum(-1))
    return np.linalg.eigvalsh(p)[::-1]


def spectral_gap(adjacency) -> float:
    """1 − λ_2 of the MH transition matrix: its inverse, the relaxation time, bounds how fast the walk
    forgets where it started (and, up to log factors, its hitting and cover times).

    Args:
        adjacency: (K, K) 0/1 adjacency matrix of a connected graph.

    Returns:
        The gap 1 − λ_2 as a Python float in (0, 2].

    Raises:
        ValueError: the adjacency is not a valid gossip graph.

    Examples:
        >>> round(spectral_gap(complete(10)), 4)   # λ_2 = −1/(K − 1) on the complete graph
        1.1111
    """
    return float(1.0 - spectrum(adjacency)[1])


# --------------------------------------------------------------------------- graphs by name
_GRAPHS: Registry[Callable[[int], Any]] = Registry("graph")


def register(name: str, builder: Callable[[int], Any]) -> Callable[[int], Any]:
    """Registers ``builder(n_agents) -> adjacency`` under ``name`` (replacing a graph of that name) and
    returns it. The adjacency may be anything :func:`as_adjacency` takes (a (K, K) 0/1 array or nested
    list, a networkx graph); :func:`build` validates it and checks that it has ``n_agents`` agents. The
    name then works wherever an experiment takes a graph's name (``--set topologies=NAME``, gfvl-graphs'
    ``--set graphs=NAME``) and in :func:`from_spec`; it may not contain ":" or be a family of
    :data:`FAMILIES` (those take a parameter).

    Args:
        name: the graph's name: a non-empty string without ":", not a family of :data:`FAMILIES`.
        builder: a function ``n_agents -> adjacency``.

    Returns:
        ``builder``, so that ``register`` works as a decorator's call.

    Raises:
        ValueError: ``name`` or ``builder`` is not allowed.

    Examples:
        >>> def wheel(n_agents):   # a hub joined to every agent of a ring of the others
        ...     a = np.zeros((n_agents, n_agents), np.int32)
        ...     a[1:, 1:] = ring(n_agents - 1)
        ...     a[0, 1:] = a[1:, 0] = 1
        ...     return a
        >>> _ = register("wheel", wheel)
        >>> build("wheel", 5).sum(axis=1).tolist()
        [4, 3, 3, 3, 3]
        >>> _GRAPHS.unregister("wheel")
    """
    validation.check(
        "name",
        name,
        isinstance(name, str) and bool(name) and ":" not in name and name not in FAMILIES,
        f"a non-empty string without ':' other than {', '.join(FAMILIES)} (the graph's name)",
    )
    validation.check("builder", builder, callable(builder), "a function n_agents -> adjacency")
    return _GRAPHS.register(name, builder)


def get(name: str) -> Callable[[int], Any]:
    """The builder registered as ``name``; ValueError listing the registered graphs otherwise
    (``unknown graph 'name'; choose one of: …``).

    Args:
        name: a registered graph's name.

    Returns:
        The builder, a function ``n_agents -> adjacency``.

    Raises:
        ValueError: no graph is registered as ``name`` (the message lists the registered ones).
    """
    return _GRAPHS.get(name)


def names() -> tuple[str, ...]:
    """The registered graphs' names, built-ins first (complete, ring, star, line).

    Returns:
        A tuple of the registered names.
    """
    return _GRAPHS.names()


def build(name: str, n_agents: int) -> np.ndarray:
    """The graph registered as ``name`` on ``n_agents`` agents, validated (:func:`as_adjacency`).

    Args:
        name: a registered graph's name.
        n_agents: K, the number of agents.

    Returns:
        (K, K) int32 NumPy adjacency matrix.

    Raises:
        ValueError: for an unknown name (listing the registered ones), or a builder's graph that is not
            a valid gossip graph or does not have ``n_agents`` agents (naming the graph).

    Examples:
        >>> build("star", 4)
        array([[0, 1, 1, 1],
               [1, 0, 0, 0],
               [1, 0, 0, 0],
               [1, 0, 0, 0]], dtype=int32)
    """
    what = f"graph {name!r}"
    adjacency = as_adjacency(get(name)(n_agents), what)
    ok = adjacency.shape[0] == n_agents
    validation.check(what, adjacency.shape, ok, f"a (K, K) adjacency with K = n_agents = {n_agents}")
    return adjacency


for _name, _builder in (("complete", complete), ("ring", ring), ("star", star), ("line", line)):
    _GRAPHS.register(_name, _builder)


FAMILIES = {
    "rgg": ("radius", float),
    "er": ("p", float),
    "barbell": ("path", int),
    "lollipop": ("clique", int),
}
"""Graph families of :func:`from_spec` beyond the registered graphs (:func:`names`), with their one parameter:
``rgg:radius=R`` (:func:`random_geometric`), ``er:p=P`` (:func:`erdos_renyi`), ``barbell[:path=N]``
(:func:`barbell`), ``lollipop[:clique=M]`` (:func:`lollipop`)."""

_FAMILY_FORMS = ("rgg:radius=R", "er:p=P", "barbell[:path=N]", "lollipop[:clique=M]")
SPEC_FORMS = ("complete", "ring", "star", "line", *_FAMILY_FORMS)
"""The forms a graph specification takes with the built-in graphs only (:func:`spec_forms`: with every
registered one)."""


def spec_forms() -> tuple[str, ...]:
    """The forms a graph specification takes: the registered graphs' names, then the families' forms
    (for messages and ``jaxfed show``).

    Returns:
        A tuple of strings (``"complete"``, …, ``"rgg:radius=R"``, …).
    """
    return (*names(), *_FAMILY_FORMS)


def from_spec(spec: str, n_agents: int, seed: int = 0, name: str = "graphs") -> np.ndarray:
    """The graph a short specification names, on ``n_agents`` agents: a registered graph's name (:func:`build`)
    or ``FAMILY[:KEY=VALUE]`` of :data:`FAMILIES`. Random families are drawn from ``jax.random.key(seed)``
    (the same key for every specification, so ``rgg:radius=0.4`` and ``rgg:radius=0.6`` place the agents
    at the same points whenever their first draw is connected).

    Args:
        spec: a graph's name or ``FAMILY[:KEY=VALUE]``.
        n_agents: K, the number of agents.
        seed: the integer seed of the random families.
        name: the parameter the messages name.

    Returns:
        (K, K) int32 NumPy adjacency matrix.

    Raises:
        ValueError: for an unknown graph, the registry's error listing the forms allowed
            (``unknown graph 'x'; choose one of: …``); naming ``name`` for a family's bad parameter.

    Examples:
        >>> int(from_spec("barbell", 6).sum()) // 2   # two triangles and their bridge
        7
    """
    allowed = "one of " + ", ".join(spec_forms())
    text = str(spec).strip()
    family, _, arg = text.partition(":")
    if family in _GRAPHS and not arg:
        return build(family, n_agents)
    if family not in FAMILIES:
        raise _GRAPHS.unknown(spec, spec_forms())
    key_name, kind = FAMILIES[family]
    raw = None
    if arg:
        key, eq, raw = arg.partition("=")
        validation.check(name, spec, eq == "=" and key.strip() == key_name, f"{family}:{key_name}=VALUE ({allowed})")
        try:
            kind(raw.strip())
        except ValueError:
            raise ValueError(f"{name}: {spec!r}: {key_name} must be a{'n int' if kind is int else ' number'}") from None
    if family in ("rgg", "er"):
        what = "a radius R" if family == "rgg" else "an edge probability P"
        validation.check(
            name, spec, raw is not None, f"{family}:{key_name}={key_name[0].upper()} with {what} ({allowed})"
        )
        value = float(str(raw).strip())
        return random_geometric(seed, n_agents, value) if family == "rgg" else erdos_renyi(seed, n_agents, value)
    count = None if raw is None else int(raw.strip())
    if family == "barbell":
        return barbell(n_agents, 0 if count is None else count)
    return lollipop(n_agents, count)


def degrees(adjacency) -> jax.Array:
    """deg(k) = Σ_j A[k, j].

    Args:
        adjacency: (..., K, K) 0/1 adjacency matrix (NumPy or JAX; may be traced).

    Returns:
        (..., K) degrees, a JAX array of the adjacency's dtype.
    """
    return jnp.sum(jnp.asarray(adjacency), axis=-1)


def mh_transition_matrix(adjacency) -> jax.Array:
    """Metropolis–Hastings random-walk transition matrix (docs/gfvl.md §A2).

    ``P[k, j] = min(1/deg(k), 1/deg(j))`` for neighbours j of k, ``P[k, k] = 1 − Σ_{j≠k} P[k, j]``.
    P is symmetric and doubly stochastic, so the uniform distribution is stationary.
    Works on traced adjacencies (jit/vmap).

    Args:
        adjacency: (K, K) 0/1 adjacency matrix of a connected graph (may be traced).

    Returns:
        (K, K) JAX array P in the default float dtype, symmetric, rows summing to 1.

    Examples:
        On the star, the hub moves to each leaf with probability 1/3 and a leaf back with 1/3:

        >>> print(np.asarray(mh_transition_matrix(star(4))).round(3))
        [[0.    0.333 0.333 0.333]
         [0.333 0.667 0.    0.   ]
         [0.333 0.    0.667 0.   ]
         [0.333 0.    0.    0.667]]
    """
    a = jnp.asarray(adjacency)
    deg = jnp.sum(a, axis=-1).astype(float)  # default float dtype (float64 under x64)
    off = a * jnp.minimum(1.0 / deg[:, None], 1.0 / deg[None, :])
    return off + jnp.diag(1.0 - jnp.sum(off, axis=-1))
