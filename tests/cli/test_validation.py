"""jaxfed.validation: one-line ValueErrors naming the parameter, the value and what is allowed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfed import validation as v


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: v.integer("n_agents", 1, 2), "n_agents must be an integer >= 2, got 1"),
        (lambda: v.integer("n_features", 31, 1, 30), "n_features must be an integer in [1, 30], got 31"),
        (lambda: v.integer("k", 7, high=5), "k must be an integer <= 5, got 7"),
        (lambda: v.integer("n", True), "n must be an integer, got True"),
        (lambda: v.integer("n", 2.0, 1), "n must be an integer >= 1, got 2.0"),
        (lambda: v.integer("n", "3", 1), "n must be an integer >= 1, got '3'"),
        (lambda: v.integer("n", 0, 1, note=" (K EDs)"), "n must be an integer >= 1 (K EDs), got 0"),
        (lambda: v.number("epsilon", 0.5, 0, 0.5, high_open=True), "epsilon must be in [0, 0.5), got 0.5"),
        (lambda: v.number("x", float("nan")), "x must be a finite number, got nan"),
        (lambda: v.number("x", "abc"), "x must be a finite number, got 'abc'"),
        (lambda: v.number("x", True), "x must be a finite number, got True"),
        (lambda: v.positive("mu", -1.0), "mu must be finite and > 0, got -1.0"),
        (lambda: v.positive("mu", float("inf")), "mu must be finite and > 0, got inf"),
        (lambda: v.positive("vmax", np.array([1.0, 0.0])), "vmax must be finite and > 0, got [1.0, 0.0]"),
        (lambda: v.positive("vmax", jnp.array([1.0, -1.0])), "vmax must be finite and > 0, got [1.0, -1.0]"),
        (lambda: v.non_negative("s_min", -0.5), "s_min must be finite and >= 0, got -0.5"),
        (lambda: v.probability("theta", 1.5), "theta must be in [0, 1], got 1.5"),
        (lambda: v.probability("p", 0.0, low_open=True), "p must be in (0, 1], got 0.0"),
        (lambda: v.probability("level", 1.0, low_open=True, high_open=True), "level must be in (0, 1), got 1.0"),
        (
            lambda: v.one_of("family", "poisson", ("beta", "normal")),
            "family must be one of ('beta', 'normal'), got 'poisson'",
        ),
        (lambda: v.one_of("family", ["beta"], ("beta",)), "family must be one of ('beta',), got ['beta']"),
        (
            lambda: v.index("forget_agent", 10, 10, "an agent index"),
            "forget_agent must be an agent index in [0, 10), got 10",
        ),
        (lambda: v.index("i", -1, 3), "i must be an index in [0, 3), got -1"),
        (lambda: v.seed(-1), "seed must be an integer in [0, 2**32), got -1"),
        (lambda: v.seed(2**32), "seed must be an integer in [0, 2**32), got 4294967296"),
        (lambda: v.seed(True), "seed must be an integer in [0, 2**32), got True"),
        (
            lambda: v.trial_count(0),
            "n_trials must be an integer in [1, 2**53] (trial counts and indices are exact up to 2**53 in a float64), got 0",
        ),
        (
            lambda: v.trial_count(2**53 + 1, "trials"),
            "trials must be an integer in [1, 2**53] (trial counts and indices are exact up to 2**53 in a float64)",
        ),
        (lambda: v.shape("points", np.zeros((3, 3)), (None, 2), "(N, 2)"), "points must have shape (N, 2), got (3, 3)"),
        (lambda: v.shape("active", np.zeros(3), (4,)), "active must have shape (4,), got (3,)"),
        (lambda: v.shape("grid", np.zeros((3, 3)), (2, None)), "grid must have shape (2, *), got (3, 3)"),
        (
            lambda: v.finite_array("points", [[0.0, 1.0], [np.nan, 2.0]]),
            "points must be finite, got [nan, 2.0] at index 1",
        ),
        (lambda: v.finite_array("x", np.inf), "x must be finite, got inf"),
        (lambda: v.check("sizes", (1, 2), False, "a list of 3 counts"), "sizes must be a list of 3 counts, got (1, 2)"),
    ],
)
def test_messages_name_the_parameter_the_allowed_values_and_the_value(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    text = str(exc.value)
    assert message in text, text
    assert "\n" not in text


def test_valid_values_are_returned():
    assert v.integer("n", np.int64(3), 1) == 3 and type(v.integer("n", np.int64(3), 1)) is int
    assert v.integer("n", jnp.asarray(4), 1) == 4  # a concrete integer array scalar is a static size
    assert v.seed(np.uint32(7)) == 7 and v.trial_count(2**32) == 2**32
    assert v.positive("x", 2.5) == 2.5 and v.positive("x", float("inf"), finite=False) == float("inf")
    assert v.number("x", 0.0, 0, 0.5, high_open=True) == 0.0
    assert v.one_of("f", "beta", ("beta", "normal")) == "beta"
    assert v.index("i", np.int32(2), 3) == 2
    assert v.shape("x", np.zeros((2, 3)), (None, 3)) == (2, 3)
    v.finite_array("points", [[0.0, 1.0], [np.nan, 2.0]], mask=[True, False])  # the masked-out row is padding
    v.check("x", 1, True, "anything")


def test_traced_values_pass_the_numeric_checks_but_not_the_static_ones():
    @jax.jit
    def f(x):
        v.positive("x", x)
        v.number("x", x, 0, 1)
        v.probability("x", x)
        v.finite_array("x", x)
        v.index("x", x, 3)
        v.shape("x", x, ())
        return x + 1

    assert float(f(-5.0)) == -4.0  # not checked: a traced value has no concrete value

    @jax.jit
    def g(n):
        return v.integer("n", n, 1)

    with pytest.raises(ValueError, match="n must be an integer >= 1, got"):
        g(3)  # a size must be static

    @jax.jit
    def h(x):
        v.shape("x", x, (2,))
        return x

    with pytest.raises(ValueError, match=r"x must have shape \(2,\), got \(3,\)"):
        h(jnp.zeros(3))  # shapes are static, so they are checked under jit too


def test_fail_is_the_single_format():
    with pytest.raises(ValueError, match=r"^rho must be > 0, got -1$"):
        v.fail("rho", -1, "> 0")
