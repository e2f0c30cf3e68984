"""Points and their grouping: array leaves are traced, every other leaf is static; points with
equal static parts and array shapes share one compiled function. Metric specs come from
``jax.eval_shape`` of one trial per group, before anything runs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

Trial = Callable[[jax.Array, Any], dict]


def program_digest(jaxpr) -> str:
    """SHA-256 of a traced program's canonical text: what is computed, never where or how it is shown.

    Every formatting choice is explicit (no colour, no source locations or name stacks, width 80),
    so the digest does not depend on the terminal: JAX colours ``str(jaxpr)`` when stdout is a
    terminal or a notebook (``jax_pprint_use_color``), which made a run's identity depend on where
    it was started (a batch job's run could not be grown from a shell). The text equals the
    uncoloured ``str(jaxpr)`` that stores before this change hold, so their runs still grow.
    """
    return _sha256(_program_text(jaxpr, use_color=False))


def coloured_program_digest(jaxpr) -> str:
    """The digest that a run started in a terminal stored before :func:`program_digest` was
    canonical (colour codes included): accepted when growing such a run, never written anew."""
    return _sha256(_program_text(jaxpr, use_color=True))


def _program_text(jaxpr, use_color: bool) -> str:
    return jaxpr.pretty_print(
        source_info=False, print_shapes=True, name_stack=False, custom_pp_eqn_rules=True,
        print_effects=False, width=80, use_color=use_color,
    )  # fmt: skip


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def is_traced_leaf(leaf) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray))


@dataclass(frozen=True)
class Group:
    treedef: Any
    static: tuple  # (index, value) of each static leaf
    traced_slots: tuple  # leaf indices that are arrays
    point_ids: tuple  # global point indices in this group


def group_points(points: list) -> list[tuple[Group, list]]:
    """Groups points by static part and array shapes; returns (group, stacked array leaves)."""
    groups: dict = {}
    for p, point in enumerate(points):
        leaves, treedef = jax.tree.flatten(point)
        traced = tuple(i for i, leaf in enumerate(leaves) if is_traced_leaf(leaf))
        static = tuple((i, leaf) for i, leaf in enumerate(leaves) if i not in traced)
        shapes = tuple((np.shape(leaves[i]), np.asarray(leaves[i]).dtype.str) for i in traced)
        key = (treedef, static, traced, shapes)
        groups.setdefault(key, []).append((p, [leaves[i] for i in traced]))
    out = []
    for (treedef, static, traced, _), members in groups.items():
        ids = tuple(p for p, _ in members)
        stacked = [np.stack([np.asarray(m[1][j]) for m in members]) for j in range(len(traced))]
        out.append((Group(treedef, static, traced, ids), stacked))
    return out


def rebuild(group: Group, traced_leaves: list):
    leaves: list = [None] * (len(group.static) + len(group.traced_slots))
    for i, value in group.static:
        leaves[i] = value
    for i, value in zip(group.traced_slots, traced_leaves):
        leaves[i] = value
    return jax.tree.unflatten(group.treedef, leaves)


def metric_specs(probes: list, groups: list) -> dict:
    """metric -> (shape, dtype string) of one trial, from each group's ``eval_shape`` probe.

    Raises:
        ValueError: naming the metric and the problem, when a trial does not return a dict of
            arrays with valid names, or when a metric's names, shape or dtype depend on the point.
    """
    specs, first = None, None
    for (group, _), probe in zip(groups, probes):
        p = group.point_ids[0]
        if not isinstance(probe, dict):
            raise ValueError(
                f"trial must return a dict of metric name -> array, got {type(probe).__name__} (point {p})"
            )
        here = {}
        for name, value in probe.items():
            if not isinstance(name, str) or not name or "/" in name or name.startswith("__"):
                raise ValueError(
                    f"metric name {name!r} (point {p}) must be a non-empty string without '/', not starting with '__'"
                )
            if not isinstance(value, jax.ShapeDtypeStruct):
                raise ValueError(f"metric {name!r} must be an array, got {type(value).__name__} (point {p})")
            here[name] = (tuple(value.shape), np.dtype(value.dtype).str)
        if specs is None:
            specs, first = here, p
            continue
        if set(here) != set(specs):
            raise ValueError(
                f"trial returns metrics {sorted(specs)} for point {first} but {sorted(here)} for point {p}; "
                "every point must return the same metrics"
            )
        for name, (shape, dtype) in here.items():
            if (shape, dtype) != specs[name]:
                raise ValueError(
                    f"metric {name!r} is {specs[name][1]}{list(specs[name][0])} for point {first} but {dtype}{list(shape)} "
                    f"for point {p}: a metric's shape and dtype must not depend on the point"
                )
    if specs is None:
        raise ValueError("points must be a non-empty list")
    return specs


def check_metric_axes(metric_axes, specs: dict) -> None:
    """Refuses axis names that do not describe the trial's metrics (``specs``, from
    :func:`metric_specs`): ``metric_axes`` must name every metric the trial returns, and no other,
    with one axis name per axis of its cells (after point and trial).

    Raises:
        ValueError: one line naming the metric, its shape and the names given.
    """
    known = ", ".join(sorted(specs))
    if not isinstance(metric_axes, dict):
        raise ValueError(f"metric_axes must be a dict metric -> axis names (metrics: {known}), got {metric_axes!r}")
    missing, unknown = sorted(set(specs) - set(metric_axes)), sorted(set(metric_axes) - set(specs), key=str)
    if missing or unknown:
        raise ValueError(
            f"metric_axes must name the axes of exactly the metrics the trial returns ({known}), got "
            f"{sorted(map(str, metric_axes))}: "
            + "; ".join([f"{m!r} missing" for m in missing] + [f"{m!r} not returned" for m in unknown])
        )
    for name, (shape, _) in specs.items():
        axes = metric_axes[name]
        names = isinstance(axes, (tuple, list)) and all(isinstance(a, str) for a in axes)
        if not names or len(axes) != len(shape):
            raise ValueError(
                f"metric_axes[{name!r}] must be {len(shape)} axis name(s), one per axis of the metric's cells "
                f"(shape {list(shape)} after point and trial), got {axes!r}"
            )


def check_summarisable(specs: dict) -> None:
    """Refuses complex metrics in summary mode: a summary's statistics and histogram are of real
    values (summarising a complex metric would keep its real part only).

    Raises:
        ValueError: one line naming the metric and the ways out.
    """
    for name, (_, dtype) in specs.items():
        if np.dtype(dtype).kind == "c":
            raise ValueError(
                f"metric {name!r} is {np.dtype(dtype).name}: summaries (keep='summary', --keep summary, a "
                "precision target or keep='auto' on results over the raw limit) take real values only; return "
                "its real and imaginary parts (or its magnitude) as real metrics, or keep every trial with keep='raw'"
            )
