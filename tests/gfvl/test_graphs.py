import numpy as np
import pytest

from jaxfed import graphs


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
    with pytest.raises(ValueError, match="topology must be one of"):
        graphs.by_name("torus", 5)
