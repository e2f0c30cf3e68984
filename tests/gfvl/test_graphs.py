import numpy as np
import pytest

from jaxfed.gfvl import graphs


def reference_mh(a: np.ndarray) -> np.ndarray:
    """docs/gfvl.md §A2 written out independently: P_kj = min(1/deg k, 1/deg j) on edges, P_kk = 1 − Σ."""
    a = np.asarray(a)
    k = a.shape[0]
    deg = a.sum(1)
    p = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            if a[i, j]:
                p[i, j] = min(1.0 / deg[i], 1.0 / deg[j])
        p[i, i] = 1.0 - p[i].sum()
    return p


GRAPHS = {
    "star": graphs.star(7),
    "ring": graphs.ring(9),
    "line": graphs.line(6),
    "grid": graphs.grid(3, 4),
    "complete": graphs.complete(5),
    "random": graphs.erdos_renyi(3, 12, 0.3),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_mh_matrix_matches_spec_formula(name):
    a = GRAPHS[name]
    p = np.asarray(graphs.mh_transition_matrix(a), dtype=np.float64)
    np.testing.assert_allclose(p, reference_mh(a), atol=1e-6)
    np.testing.assert_allclose(p, p.T, atol=1e-7)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-6)
    assert (p >= -1e-7).all()


def test_constructors_shapes_and_degrees():
    assert graphs.star(5)[0].sum() == 4 and graphs.star(5)[1:, 1:].sum() == 0
    assert (graphs.ring(6).sum(1) == 2).all()
    assert (graphs.complete(4).sum(1) == 3).all()
    assert sorted(graphs.line(4).sum(1).tolist()) == [1, 1, 2, 2]
    g = graphs.grid(2, 3)
    assert g.shape == (6, 6) and g.sum() == 2 * 7  # 7 edges in a 2x3 lattice
    for a in GRAPHS.values():
        assert a.dtype == np.int32
    assert np.array_equal(graphs.erdos_renyi(3, 12, 0.3), GRAPHS["random"])  # seeded: reproducible


def test_from_adjacency_accepts_valid_and_copies():
    a = [[0, 1], [1, 0]]
    out = graphs.from_adjacency(a)
    assert out.dtype == np.int32 and out.tolist() == a


@pytest.mark.parametrize(
    "adjacency, message",
    [
        (np.zeros((2, 3)), "square"),
        (np.zeros((1, 1)), "K >= 2"),
        ([[0, 2], [2, 0]], "0 or 1"),
        ([[0, 1, 0], [0, 0, 1], [0, 1, 0]], "symmetric"),
        ([[1, 1], [1, 0]], "self-loops"),
        ([[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], "connected"),
    ],
)
def test_from_adjacency_rejects(adjacency, message):
    with pytest.raises(ValueError, match=message):
        graphs.from_adjacency(adjacency)


@pytest.mark.parametrize("ctor", [graphs.complete, graphs.ring, graphs.star, graphs.line])
@pytest.mark.parametrize("bad", [1, 0, -3, 2.5, "4", True])
def test_bad_sizes_name_the_parameter(ctor, bad):
    with pytest.raises(ValueError, match="n_agents"):
        ctor(bad)


def test_bad_grid_and_er_arguments():
    with pytest.raises(ValueError, match="rows"):
        graphs.grid(0, 3)
    with pytest.raises(ValueError, match="rows \\* cols"):
        graphs.grid(1, 1)
    with pytest.raises(ValueError, match="p must be"):
        graphs.erdos_renyi(0, 5, 0.0)
    with pytest.raises(ValueError, match="p must be"):
        graphs.erdos_renyi(0, 5, 1.5)
    with pytest.raises(ValueError, match="no connected"):
        graphs.erdos_renyi(0, 30, 0.01, max_tries=5)
    with pytest.raises(ValueError, match="^unknown graph 'torus'; choose one of: complete, ring, star, line$"):
        graphs.build("torus", 5)


# --------------------------------------------------------------------------- graphs by name: the registry
def _wheel(n_agents):
    """A hub (agent 0) joined to every agent of a ring of the others, as a nested list."""
    a = np.zeros((n_agents, n_agents), np.int32)
    a[1:, 1:] = graphs.ring(n_agents - 1)
    a[0, 1:] = a[1:, 0] = 1
    return a.tolist()


@pytest.fixture
def wheel():
    graphs.register("test-wheel", _wheel)
    yield "test-wheel"
    graphs._GRAPHS.unregister("test-wheel")


def test_the_built_in_graphs_are_registered_and_build_as_their_constructors():
    assert graphs.names() == ("complete", "ring", "star", "line")
    for name in graphs.names():
        assert graphs.get(name) is getattr(graphs, name)
        built = graphs.build(name, 6)
        assert built.dtype == np.int32 and np.array_equal(built, getattr(graphs, name)(6))
        assert np.array_equal(graphs.from_spec(name, 6), built)


def test_a_registered_graph_builds_validated_by_name_and_in_a_specification(wheel):
    assert graphs.names()[-1] == wheel and wheel in graphs.spec_forms()
    a = graphs.build(wheel, 6)
    assert a.dtype == np.int32 and a.sum(axis=1).tolist() == [5, 3, 3, 3, 3, 3]
    assert np.array_equal(graphs.from_spec(wheel, 6), a)
    with pytest.raises(
        ValueError, match="unknown graph 'nope'; choose one of: complete, ring, star, line, test-wheel, rgg"
    ):
        graphs.from_spec("nope", 6)


def test_a_registered_graph_that_is_not_a_gossip_graph_or_has_another_size_is_named():
    graphs.register("test-broken", lambda n: np.zeros((n, n), np.int32))
    graphs.register("test-small", lambda n: graphs.ring(n - 1))
    try:
        with pytest.raises(ValueError, match="graph 'test-broken' must describe a connected graph"):
            graphs.build("test-broken", 4)
        with pytest.raises(
            ValueError, match=r"graph 'test-small' must be a \(K, K\) adjacency with K = n_agents = 5, got \(4, 4\)"
        ):
            graphs.build("test-small", 5)
    finally:
        graphs._GRAPHS.unregister("test-broken")
        graphs._GRAPHS.unregister("test-small")


@pytest.mark.parametrize("name", ["", "rgg", "er", "barbell", "lollipop", "a:b", 3])
def test_a_graph_name_that_a_specification_could_not_name_is_refused(name):
    with pytest.raises(ValueError, match="name must be a non-empty string without ':'"):
        graphs.register(name, _wheel)
    with pytest.raises(ValueError, match="builder must be a function"):
        graphs.register("test-not-a-function", 3)


@pytest.mark.parametrize("experiment", ["gfvl-topologies", "gfvl-heterogeneity", "gfvl-logistic"])
def test_every_experiment_that_takes_topologies_builds_a_registered_graph_and_refuses_an_unknown_one(experiment, wheel):
    from jaxfed.experiment import make_config
    from jaxfed.runs import find

    exp = find(experiment)
    cfg = make_config(exp.config_cls, {"topologies": f"{wheel},ring"})
    sweep = exp.build(cfg)
    built = [
        (lab["topology"], np.asarray(p["adjacency"])) for lab, p in zip(sweep.labels, sweep.points) if "adjacency" in p
    ]
    assert {name for name, _ in built} == {wheel, "ring"}
    for name, adjacency in built:
        assert np.array_equal(adjacency, graphs.build(name, cfg.n_agents))
    with pytest.raises(
        ValueError, match="^unknown graph 'nope'; choose one of: complete, ring, star, line, test-wheel$"
    ):
        make_config(exp.config_cls, {"topologies": "ring,nope"})
