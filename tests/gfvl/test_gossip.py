import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed.gfvl import gossip, graphs


def _schedules(adjacency, n_chains, n_slots, seed=0):
    keys = jax.random.split(jax.random.key(seed), n_chains)
    run = jax.jit(jax.vmap(lambda k: gossip.mh_schedule(k, adjacency, n_slots)))
    return np.asarray(run(keys))


@pytest.mark.parametrize(
    "adjacency",
    [graphs.star(6), graphs.ring(7), graphs.line(5), graphs.grid(2, 3), graphs.erdos_renyi(1, 8, 0.4)],
    ids=["star", "ring", "line", "grid", "random"],
)
def test_transition_frequencies_match_P(adjacency):
    """Each observed transition frequency from k lies within 5 standard errors of P_kj.

    With n_k transitions out of k, the frequency has standard error sqrt(P(1−P)/n_k); 5 s.e. over
    the <= 64 cells of a graph keeps the false-alarm probability below 1e-4 (Bonferroni).
    """
    k = adjacency.shape[0]
    p = np.asarray(graphs.mh_transition_matrix(adjacency), np.float64)
    s = _schedules(adjacency, 200, 1000)
    counts = np.zeros((k, k))
    np.add.at(counts, (s[:, :-1].ravel(), s[:, 1:].ravel()), 1)
    n_from = counts.sum(1, keepdims=True)
    freq = counts / n_from
    se = np.sqrt(p * (1 - p) / n_from)
    assert np.all(np.abs(freq - p) <= 5 * se + 1e-12), np.max(np.abs(freq - p) / (se + 1e-12))
    assert np.all(counts[(adjacency == 0) & ~np.eye(k, dtype=bool)] == 0)  # never jumps along a non-edge


def test_first_agent_is_uniform():
    s = _schedules(graphs.star(5), 20000, 2)
    freq = np.bincount(s[:, 0], minlength=5) / s.shape[0]
    se = np.sqrt(0.2 * 0.8 / s.shape[0])
    assert np.all(np.abs(freq - 0.2) < 5 * se)


def test_cover_time_complete_graph_matches_coupon_collector():
    """E[cover time] on complete(10) = 1 + 9·H_9 = 26.46; checked within 4 s.e."""
    k = 10
    expected = 1 + (k - 1) * sum(1.0 / i for i in range(1, k))
    s = jnp.asarray(_schedules(graphs.complete(k), 4000, 200, seed=1))
    cover = np.asarray(jax.vmap(lambda x: gossip.cover_time(x, k))(s))
    assert (cover > 0).all()
    se = cover.std(ddof=1) / np.sqrt(cover.size)
    assert abs(cover.mean() - expected) < 4 * se, (cover.mean(), expected, se)


def test_expected_hitting_times_complete_graph():
    h = np.asarray(gossip.expected_hitting_times(graphs.mh_transition_matrix(graphs.complete(10)), 3))
    np.testing.assert_allclose(np.delete(h, 3), 9.0, rtol=1e-5)
    assert abs(h[3] - 10.0) < 1e-4  # mean return time = 1/π_u = K


def test_schedule_helpers_on_a_hand_made_schedule():
    s = jnp.asarray([2, 0, 2, 1, 0, 3], jnp.int32)
    np.testing.assert_array_equal(gossip.first_visit_slots(s, 5), [1, 3, 0, 5, 6])
    assert int(gossip.cover_time(s, 4)) == 6
    assert int(gossip.cover_time(s, 5)) == -1
    assert int(gossip.hitting_time(s, 0, after=1)) == 3
    assert int(gossip.hitting_time(s, 2, after=0)) == 2
    assert int(gossip.hitting_time(s, 4, after=0)) == -1


def test_schedule_vmaps_over_traced_adjacency_and_matches_unbatched():
    a = jnp.stack([jnp.asarray(graphs.ring(6)), jnp.asarray(graphs.star(6))])
    key = jax.random.key(5)
    batched = jax.jit(jax.vmap(gossip.mh_schedule, in_axes=(None, 0, None)), static_argnums=2)(key, a, 50)
    for i in range(2):
        np.testing.assert_array_equal(batched[i], gossip.mh_schedule(key, a[i], 50))
    assert batched.dtype == jnp.int32
    # every move follows an edge or stays
    for i in range(2):
        s = np.asarray(batched[i])
        moved = s[1:] != s[:-1]
        assert np.all(np.asarray(a[i])[s[:-1][moved], s[1:][moved]] == 1)


def test_bad_n_slots():
    with pytest.raises(ValueError, match="n_slots"):
        gossip.mh_schedule(jax.random.key(0), graphs.ring(4), 0)


def test_walk_visit_counts_match_first_visits():
    for adjacency in (graphs.star(7), graphs.grid(2, 3)):
        walk = gossip.mh_walk(jax.random.key(2), adjacency, 80)
        k = adjacency.shape[0]
        first = np.asarray(gossip.first_visit_slots(walk.schedule, k))
        expected = (first[None, :] <= np.arange(80)[:, None]).sum(1)
        np.testing.assert_array_equal(walk.n_visited, expected)
        np.testing.assert_array_equal(walk.schedule, gossip.mh_schedule(jax.random.key(2), adjacency, 80))


def test_walk_with_more_than_31_agents_uses_the_boolean_visited_set():
    walk = gossip.mh_walk(jax.random.key(0), graphs.complete(40), 400)
    first = np.asarray(gossip.first_visit_slots(walk.schedule, 40))
    np.testing.assert_array_equal(walk.n_visited, (first[None, :] <= np.arange(400)[:, None]).sum(1))


def _reference_walk(key, adjacency, n_slots):
    """The MH walk slot by slot as docs/gfvl.md §A2 states it, looking up deg(k), the proposal j and
    deg(j) apart (mh_walk's arithmetic without its flat tables and carried degree), in NumPy on
    the same uniforms."""
    adjacency = np.asarray(adjacency)
    n_agents = adjacency.shape[0]
    table = np.argsort(1 - adjacency, axis=-1, kind="stable")
    deg = adjacency.sum(-1).astype(np.int32)
    u = np.asarray(jax.random.uniform(key, (n_slots,)))
    k = min(int(np.float32(u[0] * np.float32(n_agents))), n_agents - 1)
    schedule, seen = [k], {k}
    counts = [1]
    for u_slot in u[1:]:
        d = deg[k]
        x = np.float32(u_slot * np.float32(d))
        i = min(int(x), d - 1)
        j = table[k, i]  # i = -1 (an isolated k) reads the row's last entry: refused below
        if np.float32(np.float32(x - np.float32(i)) * np.float32(deg[j])) < d:
            k = int(j)
        schedule.append(k)
        seen.add(k)
        counts.append(len(seen))
    return np.array(schedule), np.array(counts)


@pytest.mark.parametrize(
    "adjacency",
    [
        graphs.star(10),
        graphs.ring(10),
        graphs.complete(10),
        graphs.line(6),
        graphs.line(2),  # K = 2: every proposal is the other agent
        graphs.erdos_renyi(3, 9, 0.3),
        np.zeros((1, 1), int),  # a single agent: the walk stays
        np.pad(graphs.ring(4), ((1, 0), (1, 0))),  # agent 0 isolated (a disconnected graph): never left
        graphs.complete(40),  # the boolean visited set
    ],
    ids=["star", "ring", "complete", "line", "two", "random", "single", "isolated", "complete40"],
)
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "two-tables"])
def test_walk_equals_the_slot_by_slot_reference_bit_for_bit(adjacency, packed, monkeypatch):
    """mh_walk's flat (K·K,) table (packed j + 2^16·deg(j), or two tables beyond PACKED_MAX_AGENTS)
    and carried degree change the work per slot, not the walk: its schedule and visit counts equal
    the straightforward slot-by-slot walk on the same uniforms, from the first slot to the last, for
    many keys (walks that cover and walks that do not)."""
    if not packed:
        monkeypatch.setattr(gossip, "PACKED_MAX_AGENTS", 0)
    n_slots = 60
    walk = jax.jit(jax.vmap(lambda key: gossip.mh_walk(key, jnp.asarray(adjacency), n_slots)))
    keys = jax.random.split(jax.random.key(7), 64)
    got = walk(keys)
    for t in range(len(keys)):
        schedule, counts = _reference_walk(keys[t], adjacency, n_slots)
        np.testing.assert_array_equal(np.asarray(got.schedule[t]), schedule)
        np.testing.assert_array_equal(np.asarray(got.n_visited[t]), counts)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "two-tables"])
@pytest.mark.parametrize("n_slots", [1, 2])
def test_a_walk_of_one_or_two_slots_is_the_reference(n_slots, packed, monkeypatch):
    """The first slot alone (an empty scan, nothing to unpack) and one move, on both paths."""
    if not packed:
        monkeypatch.setattr(gossip, "PACKED_MAX_AGENTS", 0)
    keys = jax.random.split(jax.random.key(3), 16)
    got = jax.jit(jax.vmap(lambda key: gossip.mh_walk(key, jnp.asarray(graphs.star(5)), n_slots)))(keys)
    assert got.schedule.shape == got.n_visited.shape == (16, n_slots)
    for t in range(len(keys)):
        schedule, counts = _reference_walk(keys[t], graphs.star(5), n_slots)
        np.testing.assert_array_equal(np.asarray(got.schedule[t]), schedule)
        np.testing.assert_array_equal(np.asarray(got.n_visited[t]), counts)


def test_unrolled_walk_is_the_same_walk():
    """The scan's unroll (ACCELERATOR_UNROLL on a GPU, 1 on a CPU) changes the speed only: unrolls
    that do not divide the 59 moves give the same schedule and visit counts bit for bit, for both
    visited sets. (A CPU compiles a long unrolled body slowly: the test keeps them short.)"""
    keys = jax.random.split(jax.random.key(3), 32)
    for adjacency, unrolls in ((graphs.ring(10), (gossip.ACCELERATOR_UNROLL, 7)), (graphs.complete(40), (7,))):

        def walks(unroll, adjacency=adjacency):
            return jax.jit(jax.vmap(lambda key: gossip.mh_walk(key, jnp.asarray(adjacency), 60, unroll)))(keys)

        reference = walks(1)
        np.testing.assert_array_equal(walks(None).schedule, reference.schedule)  # the platform's choice
        for unroll in unrolls:
            got = walks(unroll)
            np.testing.assert_array_equal(got.schedule, reference.schedule)
            np.testing.assert_array_equal(got.n_visited, reference.n_visited)
    with pytest.raises(ValueError, match="unroll"):
        gossip.mh_walk(keys[0], graphs.ring(4), 10, unroll=0)
