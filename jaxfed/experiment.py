"""What an experiment is: :class:`Experiment` (its name, parameters, sweep, plot and report), the
:class:`Sweep` it hands the engine, the :class:`Reading` its report returns, and its parameters parsed
and checked from text (``--set key=value``: :func:`make_config`).

:func:`jaxfed.runs.run_experiment` (:mod:`jaxfed.runs.runner`) runs one; the result
directory it writes is :mod:`jaxfed.store.rundir`'s.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from jaxfed import plotting, stats, validation
from jaxfed.store.rundir import check_json

__all__ = [
    "Experiment",
    "Reading",
    "Sweep",
    "PARAMETER_TYPES",
    "band_table",
    "check",
    "check_config_class",
    "check_finite",
    "check_representable",
    "check_sweep",
    "make_config",
    "preset_variant",
]


class Sweep(NamedTuple):
    """What the engine runs for one configuration."""

    trial: Callable  # trial(key, point) -> dict of arrays
    points: list  # point pytrees for the engine (array leaves traced, others static)
    labels: list  # JSON dict per point, e.g. {"topology": "ring"}
    metric_axes: dict  # metric -> axis names after (point, trial), e.g. {"kl": ("slot",)}
    # axis name -> its coordinate values, one JSON number or string per index (e.g. {"record": [1, 2, 5]});
    # "slot" and "round" default to 1, 2, …: see jaxfed.store.rundir.axis_coords. Recorded in config.json ("coords").
    coords: Mapping[str, list] | None = None
    # metric -> why it may be undefined (NaN) by design, e.g. {"centroid_noise_pred": "the channel has no
    # variance formula"}: its non-finite trials are said once, as a note (none under --quiet), not as a warning.
    undefined: Mapping[str, str] | None = None


class Reading(NamedTuple):
    """What an experiment's ``report`` returns: its markdown section and the verdicts on its claims
    (:class:`jaxfed.stats.Verdict`, in the order the section states them), which ``jaxfed reproduce``
    gathers into the summary table at the top of report.md. A report may return a plain string
    instead: a section without claims."""

    text: str
    verdicts: tuple = ()


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    description: str  # one line, shown by `jaxfed list`
    config_cls: type  # frozen dataclass of parameters; validates in __post_init__
    build: Callable[[Any], Sweep]
    # (config, labels, results, png path); None: :func:`band_figure` (set when made), each metric's band
    plot: Callable[[Any, list, dict, str], None] = None  # type: ignore[assignment]
    # (config, labels, results) -> markdown + verdicts; None: :func:`no_claims` (set when made)
    report: Callable[[Any, list, dict], Reading | str] = None  # type: ignore[assignment]
    default_trials: int = 1000  # used by `jaxfed run` without --trials and by `jaxfed reproduce`
    common_random_numbers: bool = False  # all points of a trial share its key (same data and draws)
    # Trials per micro-batch by platform ("cpu", "gpu", …) where the engine's default
    # (jaxfed.engine.testing.MICRO_BATCH) does not suit the trial: narrow for expensive trials, which a
    # wide micro-batch pads in small runs, wide for cheap ones. Part of a stored run's identity.
    micro_batch: Mapping[str, int] | None = None
    source: str = ""  # "path/to/file.py:ATTRIBUTE" of a user experiment (set when loaded from a file)
    plugin: str = ""  # entry-point name of an installed plugin experiment (set when loaded through it)
    # The figure's caption in the report: what each panel shows and how to read it (the description when empty).
    caption: str = ""

    def width_on(self, platform: str) -> int | None:
        """The experiment's own micro-batch width on ``platform`` ("cpu", "gpu", …); None where the
        engine's rule (:func:`jaxfed.engine.choose_width`) decides.

        Args:
            platform: a JAX platform name.

        Returns:
            The width (an int), or None.
        """
        return (self.micro_batch or {}).get(platform)

    def labels(self, config=None, **parameters) -> list[dict]:
        """The sweep labels of ``config`` (default: ``config_cls(**parameters)``), one JSON dict per
        point in the order the results hold them, e.g.
        ``jaxfed.runs.find("kmeans-snr").labels(snrs_db=(0.0, 20.0))``: what a study built on a
        built-in experiment selects its points from, without re-typing its label code.

        Args:
            config: a config instance, or None to build one from ``parameters``.
            **parameters: the config class's fields, when ``config`` is None.

        Returns:
            A list of label dicts, one per point.
        """
        return list(self.build(self.config_cls(**parameters) if config is None else config).labels)

    def __post_init__(self):
        # The name becomes a directory and a file name (``<out>/<name>/<name>.png``): nothing that
        # could climb out of the result directory.
        validation.check(
            "name", self.name, isinstance(self.name, str) and _NAME.fullmatch(self.name) is not None, _NAME_TEXT
        )
        # (an experiment without its own figure or claims gets the defaults: frozen, so set once here)
        if self.plot is None:
            object.__setattr__(self, "plot", band_figure)
        if self.report is None:
            object.__setattr__(self, "report", no_claims)


def band_figure(config, labels: list, results: dict, path: str) -> None:
    """The figure of an experiment without its own ``plot``: one panel per metric, the median and
    the central 75% band over trials of each point, over the metric's last axis (a metric of one
    value per trial: each point's median and band side by side).

    Args:
        config: the experiment's parameters (unused: the figure shows what was computed).
        labels: the points' labels, one per point.
        results: metric name -> raw values (point, trial, …) or a :class:`jaxfed.stats.Summary`.
        path: the PNG file to write.
    """
    names = sorted(results)
    fig, axes = plotting.figure(len(names), 1, figsize=(7.5, 2.8 * len(names) + 0.6), squeeze=False)
    shown = [", ".join(f"{k}={v}" for k, v in label.items()) or f"point {i}" for i, label in enumerate(labels)]
    for ax, name in zip(axes[:, 0], names):
        values = results[name]
        band = stats.band(values)
        if np.ndim(band.median) == 1:  # one value per trial: the points side by side
            x = np.arange(len(shown))
            ax.errorbar(x, band.median, yerr=[band.median - band.lower, band.upper - band.median], fmt="o", capsize=3)
            ax.set_xticks(x, shown, rotation=20, ha="right", fontsize=plotting.FONT_SIZE)
        elif np.ndim(band.median) == 2:
            plotting.band_plot(ax, np.arange(band.median.shape[1]), values, shown)
            ax.set_xlabel("index along the metric's last axis")
        else:
            ax.text(0.5, 0.5, f"{name}: {np.ndim(band.median) - 1} axes per trial (no default figure)", ha="center")
        ax.set_title(f"{name}: median and 75% band over trials", fontsize=plotting.FONT_SIZE)
    plotting.save(fig, path)


def no_claims(config, labels: list, results: dict) -> Reading:
    """The report of an experiment without its own ``report``: no text and no claims.

    Args:
        config: the experiment's parameters.
        labels: the points' labels.
        results: the metrics.

    Returns:
        An empty :class:`Reading`.
    """
    return Reading("", ())


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NAME_TEXT = "letters, digits, '.', '_' and '-', starting with a letter or digit (it names files)"


# --------------------------------------------------------------------------- configs
_SCALAR_TYPES = (bool, int, float, str)
PARAMETER_TYPES = "bool, int, float, str, or tuple[T, ...] of one of these"
"""The types a config field may have: ``--set`` and ``jaxfed plot`` parse every parameter from text."""


def check_config_class(config_cls) -> dict:
    """The type hints of ``config_cls``, after checking that it is a dataclass whose every field
    has one of the :data:`PARAMETER_TYPES`.

    Args:
        config_cls: the experiment's config class.

    Returns:
        The type hints, {field name: type}.

    Raises:
        ValueError: one line naming the class, or the field and its type.
    """
    name = getattr(config_cls, "__qualname__", None) or repr(config_cls)
    if not (isinstance(config_cls, type) and dataclasses.is_dataclass(config_cls)):
        raise ValueError(
            f"config_cls must be a dataclass of parameters (@dataclasses.dataclass(frozen=True)), got {name}"
        )
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception as err:  # an annotation naming something undefined, say
        raise ValueError(
            f"config class {name}: its annotations cannot be resolved ({type(err).__name__}: {err})"
        ) from err
    for f in dataclasses.fields(config_cls):
        hint = hints.get(f.name, f.type)
        if not _is_parameter_type(hint):
            shown = getattr(hint, "__name__", None) if isinstance(hint, type) else None
            raise ValueError(
                f"parameter {f.name} of {name} has type {shown or str(hint).replace('typing.', '')}; a parameter "
                f"must be {PARAMETER_TYPES} (--set and jaxfed plot parse it from text)"
            )
    return hints


def _is_parameter_type(annotation) -> bool:
    if annotation in _SCALAR_TYPES:
        return True
    args = typing.get_args(annotation)
    return (
        typing.get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _SCALAR_TYPES
    )


def _parse_value(name: str, text: str, annotation):
    """``text`` as a value of ``annotation``, one of the :data:`PARAMETER_TYPES`."""
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0]
        parts = [part.strip() for part in text.split(",")]
        if text.strip() and not all(parts):
            raise ValueError(f"parameter {name}: empty entry in {text!r}")
        return tuple(_parse_value(name, part, item) for part in parts if part)
    if annotation is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
    else:
        try:
            return annotation(text)
        except ValueError:
            pass
    raise ValueError(f"parameter {name}: cannot parse {text!r} as {annotation.__name__}")


def make_config(config_cls: type, overrides: dict[str, str] | None = None):
    """Builds ``config_cls`` from string overrides (``--set key=value``), validating names and values.

    A config class with a ``PRESETS`` mapping (preset name -> field values) and a ``preset`` field
    takes ``preset=NAME`` as a bundle: the named preset's values first, then the other overrides on
    top (so ``--set preset=paper --set rho=0.01`` is the paper's settings with ρ = 0.01).

    Args:
        config_cls: the experiment's config dataclass.
        overrides: {parameter: value as text}, or None for the defaults.

    Returns:
        An instance of ``config_cls``.

    Raises:
        ValueError: an unknown parameter or preset, or a value its type or the class's checks refuse.
    """
    hints = check_config_class(config_cls)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    values: dict[str, Any] = {}
    overrides = dict(overrides or {})
    presets = getattr(config_cls, "PRESETS", None)
    if presets is not None and "preset" in overrides:
        name = overrides.pop("preset")
        validation.one_of("preset", name, tuple(presets))
        values.update(presets[name], preset=name)
    for key, text in overrides.items():
        if key not in fields:
            raise ValueError(f"unknown parameter {key!r}; known parameters: {', '.join(sorted(fields))}")
        values[key] = _parse_value(key, text, hints[key])
    check_finite(config_cls, values)
    check_sizes(config_cls, values)
    return config_cls(**values)


def preset_variant(config_cls: type, name: str) -> type:
    """A subclass of ``config_cls`` whose defaults are the preset ``name`` (for an experiment that runs
    the preset by default, e.g. in ``jaxfed reproduce``).

    Args:
        config_cls: a config class with a ``PRESETS`` mapping.
        name: a preset's name.

    Returns:
        The frozen dataclass subclass.
    """
    presets: dict[str, dict] = getattr(config_cls, "PRESETS", {})
    values = dict(presets[name], preset=name)
    hints = typing.get_type_hints(config_cls)
    fields = [(key, hints[key], dataclasses.field(default=value)) for key, value in values.items()]
    return dataclasses.make_dataclass(f"{config_cls.__name__}_{name}", fields, bases=(config_cls,), frozen=True)


def check_finite(config_cls: type, values: dict) -> None:
    """Refuses NaN and ±inf in every float parameter (and every entry of a float tuple) of
    ``values``, unless the field says otherwise with ``metadata={"nonfinite": True}``.

    Runs before ``config_cls.__post_init__``, whose range checks (``> 0`` …) let inf through.

    Args:
        config_cls: the experiment's config dataclass.
        values: {field name: parsed value}.

    Raises:
        ValueError: a NaN or ±inf where the field does not allow it.
    """
    for f in dataclasses.fields(config_cls):
        if f.name not in values or f.metadata.get("nonfinite"):
            continue
        value = values[f.name]
        entries = value if isinstance(value, tuple) else (value,)
        for entry in entries:
            if isinstance(entry, float):
                validation.number(f.name, entry)


def check_sizes(config_cls: type, values: dict) -> None:
    """Refuses an integer parameter (or an entry of an integer tuple) of ``values`` outside the
    32-bit range (:data:`jaxfed.validation.INT32_RANGE`): sizes (slots, data points, agents,
    rounds, …) reach the device as 32-bit integers, where a larger one overflows inside JAX. Seeds
    (fields named ``…seed``) are 32-bit unsigned and checked by their configs.

    Runs before ``config_cls.__post_init__``, so a size is refused before any array is built.
    """
    low, high = validation.INT32_RANGE
    for f in dataclasses.fields(config_cls):
        if f.name not in values or f.name.endswith("seed"):
            continue
        value = values[f.name]
        for entry in value if isinstance(value, tuple) else (value,):
            if isinstance(entry, (int, np.integer)) and not isinstance(entry, (bool, np.bool_)):
                validation.integer(f.name, entry, low, high, note=validation.INT32_NOTE)


def check_representable(config, dtype: str) -> None:
    """Refuses a float parameter (or an entry of a float tuple) that is not 0 but has no normal
    value in the run's ``dtype`` ("float32" or "float64"): below the smallest normal number the
    device flushes it to 0 (``variance=1e-45`` passes "> 0" but is 0 in float32, and every trial
    is NaN), above the largest it is inf.

    Args:
        config: a config instance.
        dtype: "float32" or "float64".

    Raises:
        ValueError: a value outside the dtype's normal range, naming the field.
    """
    info = np.finfo(dtype)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        for entry in value if isinstance(value, tuple) else (value,):
            if not (isinstance(entry, float) and np.isfinite(entry) and entry != 0):
                continue
            if not float(info.tiny) <= abs(entry) <= float(info.max):
                wider = "; JAX_ENABLE_X64=1 runs in float64" if dtype == "float32" else ""
                raise ValueError(
                    f"{f.name} must be 0 or of magnitude in [{info.tiny:.4g}, {info.max:.4g}] (a normal {dtype}, the "
                    f"run's dtype: smaller values are flushed to 0, larger ones overflow), got {entry!r}{wider}"
                )


def check_sweep(sweep) -> None:
    """Refuses a sweep whose labels cannot describe its points: ``labels`` must hold one dict per
    point, of JSON values (they go into config.json and the store's identity).

    Args:
        sweep: what an experiment's ``build`` returned.

    Raises:
        ValueError: one line naming the label (or the count) and what is wrong.
    """
    if not isinstance(sweep, Sweep):
        raise ValueError(f"build must return a Sweep(trial, points, labels, metric_axes), got {type(sweep).__name__}")
    points, labels = sweep.points, sweep.labels
    validation.check("points", type(points).__name__, isinstance(points, list) and bool(points), "a non-empty list")
    if not isinstance(labels, list) or len(labels) != len(points):
        count = len(labels) if isinstance(labels, list) else f"a {type(labels).__name__} of"
        raise ValueError(f"labels must be a list of one label per point: {len(points)} points, got {count} labels")
    for p, label in enumerate(labels):
        validation.check(f"labels[{p}]", label, isinstance(label, dict), "a dict (e.g. {'topology': 'ring'})")
        check_json(f"labels[{p}]", label)
    axes = {axis for names in (sweep.metric_axes or {}).values() for axis in names}
    for axis, values in (sweep.coords or {}).items():
        validation.check("coords", axis, axis in axes, f"an axis of a metric ({', '.join(sorted(axes)) or 'none'})")
        scalars = isinstance(values, (list, tuple)) and all(
            isinstance(v, (int, float, str, np.integer, np.floating)) and not isinstance(v, bool) for v in values
        )
        validation.check(f"coords[{axis!r}]", values, scalars, "a list of numbers or strings, one per index")


check = validation.check  # kept for experiments written against it: see jaxfed.validation for the rest


# --------------------------------------------------------------------------- reports
def band_table(x_name: str, x_values, labels: list[str], band: stats.Band, index, fmt: str = "{:.3g}") -> str:
    """Markdown table: one row per point, one column per x, cells ``median [lower, upper]``.

    Args:
        x_name: the x axis' name, in each column's header.
        x_values: the x values of the columns.
        labels: one label per point (row).
        band: the :class:`jaxfed.stats.Band`, (n_points, n_x).
        index: the x indices to show, one column each.
        fmt: the format of each number.

    Returns:
        The Markdown table.
    """
    head = "| point | " + " | ".join(f"{x_name} {x}" for x in x_values) + " |"
    rule = "|---|" + "---|" * len(x_values)
    rows = [
        f"| {label} | "
        + " | ".join(
            f"{fmt.format(band.median[p, i])} [{fmt.format(band.lower[p, i])}, {fmt.format(band.upper[p, i])}]"
            for i in index
        )
        + " |"
        for p, label in enumerate(labels)
    ]
    return "\n".join([head, rule, *rows])
