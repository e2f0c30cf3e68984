"""Experiment machinery: config parsing/validation, sweeps, running and the result directory.

An :class:`Experiment` is run by :func:`run_experiment`, which hands the sweep to
:func:`jaxfed.engine.run` and writes the result directory:

- ``config.json``: every parameter, the points (``"points"``, in point-axis order), seed, trials,
  each metric's axes and their coordinate values (``"coords"``: :func:`axis_coords`), per point the trials with non-finite metrics, versions, device and the
  SHA-256 of ``metrics.npz`` (written after it; the figure comes last);
- ``metrics.npz``: one array per metric with axes (point, trial, …) as listed in config.json;
- ``<name>.png``: the figure;
- ``chunks/``, ``identity.json``: the store (see :mod:`jaxfed.store`), so an interrupted run resumes
  and a finished one can grow.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import sys
import time
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxfed import engine, stats, store, validation
from jaxfed.experiments import catalog

__all__ = [
    "Experiment",
    "Reading",
    "Sweep",
    "band_table",
    "check",
    "check_finite",
    "check_bernoulli_setting",
    "check_loss_normalisation",
    "check_natgrad_setting",
    "make_config",
    "preset_variant",
    "run_experiment",
    "load_results",
]


class Sweep(NamedTuple):
    """What the engine runs for one configuration."""

    trial: Callable  # trial(key, point) -> dict of arrays
    points: list  # point pytrees for the engine (array leaves traced, others static)
    labels: list  # JSON dict per point, e.g. {"topology": "ring"}
    metric_axes: dict  # metric -> axis names after (point, trial), e.g. {"kl": ("slot",)}
    # axis name -> its coordinate values, one JSON number or string per index (e.g. {"record": [1, 2, 5]});
    # "slot" and "round" default to 1, 2, …: see axis_coords. Recorded in config.json ("coords").
    coords: Mapping[str, list] | None = None


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
    plot: Callable[[Any, list, dict, str], None]  # (config, labels, results, png path)
    report: Callable[[Any, list, dict], Reading | str]  # (config, labels, results) -> markdown + verdicts
    default_trials: int = 1000  # used by `jaxfed run` without --trials and by `jaxfed reproduce`
    common_random_numbers: bool = False  # all points of a trial share its key (same data and draws)
    # Trials per micro-batch by platform ("cpu", "gpu", …) where the engine's default
    # (jaxfed.engine.MICRO_BATCH) does not suit the trial: narrow for expensive trials, which a
    # wide micro-batch pads in small runs, wide for cheap ones. Part of a stored run's identity.
    micro_batch: Mapping[str, int] | None = None
    source: str = ""  # "path/to/file.py:ATTRIBUTE" of a user experiment (set when loaded from a file)
    plugin: str = ""  # entry-point name of an installed plugin experiment (set when loaded through it)

    def __post_init__(self):
        # The name becomes a directory and a file name (``<out>/<name>/<name>.png``): nothing that
        # could climb out of the result directory.
        validation.check(
            "name", self.name, isinstance(self.name, str) and _NAME.fullmatch(self.name) is not None, _NAME_TEXT
        )


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NAME_TEXT = "letters, digits, '.', '_' and '-', starting with a letter or digit (it names files)"


# --------------------------------------------------------------------------- configs
_SCALAR_TYPES = (bool, int, float, str)
PARAMETER_TYPES = "bool, int, float, str, or tuple[T, ...] of one of these"
"""The types a config field may have: ``--set`` and ``jaxfed plot`` parse every parameter from text."""


def check_config_class(config_cls) -> dict:
    """The type hints of ``config_cls``, after checking that it is a dataclass whose every field
    has one of the :data:`PARAMETER_TYPES`.

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
    return config_cls(**values)


def preset_variant(config_cls: type, name: str) -> type:
    """A subclass of ``config_cls`` whose defaults are the preset ``name`` (for an experiment that runs
    the preset by default, e.g. in ``jaxfed reproduce``)."""
    presets: dict[str, dict] = getattr(config_cls, "PRESETS", {})
    values = dict(presets[name], preset=name)
    hints = typing.get_type_hints(config_cls)
    fields = [(key, hints[key], dataclasses.field(default=value)) for key, value in values.items()]
    return dataclasses.make_dataclass(f"{config_cls.__name__}_{name}", fields, bases=(config_cls,), frozen=True)


def check_finite(config_cls: type, values: dict) -> None:
    """Refuses NaN and ±inf in every float parameter (and every entry of a float tuple) of
    ``values``, unless the field says otherwise with ``metadata={"nonfinite": True}``.

    Runs before ``config_cls.__post_init__``, whose range checks (``> 0`` …) let inf through.
    """
    for f in dataclasses.fields(config_cls):
        if f.name not in values or f.metadata.get("nonfinite"):
            continue
        value = values[f.name]
        entries = value if isinstance(value, tuple) else (value,)
        for entry in entries:
            if isinstance(entry, float):
                validation.number(f.name, entry)


def check_representable(config, dtype: str) -> None:
    """Refuses a float parameter (or an entry of a float tuple) that is not 0 but has no normal
    value in the run's ``dtype`` ("float32" or "float64"): below the smallest normal number the
    device flushes it to 0 (``variance=1e-45`` passes "> 0" but is 0 in float32, and every trial
    is NaN), above the largest it is inf."""
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


AXES_NUMBERED_FROM_1 = ("slot", "round")
"""Axes whose coordinate values default to 1, 2, …, n (slot i = 1..n_slots, round 1..n_rounds)."""


def axis_coords(
    metric_axes: Mapping, coords: Mapping | None, shapes: Mapping[str, tuple], warn: Callable[[str], None] | None = None
) -> dict:
    """The coordinate values of each metric axis (config.json's ``"coords"``): a sweep's own
    (``coords``, :attr:`Sweep.coords`), else 1..n for the axes of :data:`AXES_NUMBERED_FROM_1`;
    an axis with neither has none (it is read by position). ``metric_axes``: metric -> axis
    names; ``shapes``: metric -> shape of one trial's value. Values whose count is not the axis's
    length are left out, with a line to ``warn``."""
    lengths: dict[str, int] = {}
    for name, axes in metric_axes.items():
        for axis, length in zip(axes, shapes.get(name, ())):
            lengths.setdefault(axis, length)
    out = {}
    for axis, length in lengths.items():
        given = (coords or {}).get(axis)
        if given is None:
            if axis in AXES_NUMBERED_FROM_1:
                out[axis] = list(range(1, length + 1))
        elif len(given) == length:
            out[axis] = _jsonable(list(given))
        elif warn is not None:
            warn(f"coords[{axis!r}] has {len(given)} values, the axis has {length}; not recorded")
    return out


JSON_TYPES = "str, int, float, bool, None, and lists and dicts with string keys of these"
"""What a label or parameter may hold: what config.json and the store's identity can record."""


def check_json(name: str, value) -> None:
    """Refuses a value that JSON cannot record as it is (``JSON_TYPES``; NumPy scalars count as
    numbers), naming the first offending entry, e.g. ``labels[0]['o']``."""
    if isinstance(value, dict):
        for key, item in value.items():
            validation.check(f"{name} key", key, isinstance(key, str), "a string (JSON keys are strings)")
            check_json(f"{name}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json(f"{name}[{i}]", item)
    elif not (value is None or isinstance(value, (str, int, float, bool, np.integer, np.floating))):
        raise ValueError(f"{name} must be JSON ({JSON_TYPES}), got {value!r} of type {type(value).__name__}")


check = validation.check  # kept for experiments written against it: see jaxfed.validation for the rest


def band_table(x_name: str, x_values, labels: list[str], band: stats.Band, index, fmt: str = "{:.3g}") -> str:
    """Markdown table: one row per point, one column per x, cells ``median [lower, upper]``."""
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


def check_bernoulli_setting(cfg, min_agents: int = 2) -> None:
    """Validates the fields every G-FVL experiment shares: n_agents, n_per_agent, prior_a, prior_b,
    alpha, theta_true."""
    validation.integer("n_agents", cfg.n_agents, min_agents)
    validation.integer("n_per_agent", cfg.n_per_agent, 1)
    validation.positive("prior_a", cfg.prior_a)
    validation.positive("prior_b", cfg.prior_b)
    validation.positive("alpha", cfg.alpha)
    validation.probability("theta_true", cfg.theta_true)


def check_loss_normalisation(value) -> None:
    """``loss_normalisation`` is one of :data:`jaxfed.likelihoods.LOSS_NORMALISATIONS` ("sum", "mean")."""
    from jaxfed import likelihoods

    allowed = likelihoods.LOSS_NORMALISATIONS
    validation.one_of("loss_normalisation", value, allowed)


def check_natgrad_setting(cfg) -> None:
    """Validates the fields of the non-conjugate (natural-gradient) G-FVL experiments: epsilon,
    loss_normalisation, rho, baseline, n_samples."""
    from jaxfed import natgrad

    validation.number("epsilon", cfg.epsilon, 0.0, 0.5, high_open=True)
    check_loss_normalisation(cfg.loss_normalisation)
    validation.positive("rho", cfg.rho)
    validation.one_of("baseline", cfg.baseline, natgrad.BASELINES)
    minimum = 1 if cfg.baseline == "constant" else 2
    validation.integer("n_samples", cfg.n_samples, minimum)


# --------------------------------------------------------------------------- running
def _versions() -> dict:
    from jaxfed import __version__

    return {"jaxfed": __version__, "jax": jax.__version__, "numpy": np.__version__}


def run_experiment(
    exp: Experiment,
    config,
    n_trials: int | None = None,
    options: engine.RunOptions | None = None,
    *,
    imports: Mapping[str, str] | None = None,
    quiet: bool = False,
    **legacy,
) -> tuple[dict, dict]:
    """Runs an experiment through the engine and writes its result directory.

    Args:
        exp, config: the experiment and its parameters.
        n_trials: trials per point (default ``exp.default_trials``); with a precision target the most.
        options: how to run it, a :class:`jaxfed.engine.RunOptions` (default:
            ``RunOptions.for_experiments()``, which keeps raw trials while they fit, ``keep="auto"``);
            the result directory is ``options.out_dir``. The identity, the metric axes, common random
            numbers and the micro-batch width are the experiment's own.
        imports: ({file name: SHA-256}, from :func:`catalog.import_extensions`): the user files
            loaded for the run (``--import FILE``: channels, conjugate models, …), held in its identity.
        quiet: no progress (``progress=False``).
        **legacy: fields of ``RunOptions`` (``seed=``, ``out_dir=``, ``keep=`` …), over those of ``options``.

    The run's identity (what a rerun on ``out_dir`` must match) is the experiment, parameters,
    points, seed and dtype, and for an experiment that runs user code the SHA-256 of every user
    file it runs and a plugin's distribution and version (:func:`catalog.code_identity`); the trial
    count is not part of it, so rerunning with more trials computes only the new ones (see
    :mod:`jaxfed.store`). Trials with a NaN or ±inf metric are counted per point in
    ``config_json["nonfinite_trials"]`` and reported on stderr, in raw and summary modes alike.
    Progress goes to stderr unless ``quiet`` (:class:`jaxfed.engine.Progress`, its lines prefixed
    with the experiment's name). ``config.json`` records the options (``"options"``) and what the
    engine chose (``"engine"``); it is written after ``metrics.npz`` (the figure last) and records
    the SHA-256 of ``metrics.npz``, so :func:`load_results` never pairs one run's config with
    another's metrics.

    Returns:
        (config_json, results) where results maps metric names to raw arrays (point, trial, …)
        or, with ``keep="summary"``, to :class:`jaxfed.stats.Summary`.

    Raises:
        ValueError: a bad option, parameter or sweep (before any work), or what :func:`jaxfed.engine.run` raises.
    """
    started = time.perf_counter()
    options = _run_options(options, quiet, legacy)
    n_trials = exp.default_trials if n_trials is None else n_trials
    validation.trial_count(n_trials, "trials")
    dtype = _checked_dtype(config)
    sweep = exp.build(config)
    check_sweep(sweep)
    out_dir = options.out_dir
    if out_dir is not None:  # refused before any work: the run would write through these links at its end
        for name in ("config.json", "metrics.npz", f"{exp.name}.png"):
            store.check_no_link(os.path.join(out_dir, name))
    identity = _identity(exp, config, sweep, options.seed, dtype, imports)
    options = _engine_options(exp, sweep, options, identity)
    results = engine.run(sweep.trial, sweep.points, n_trials, options=options)
    config_json = _record(exp, identity, options, n_trials, sweep, results)
    if jax.process_index() == 0:
        for line in nonfinite_lines(config_json["nonfinite_trials"], sweep.labels, n_trials):
            print(f"jaxfed: warning: {exp.name}: {line}", file=sys.stderr)
    if out_dir is None or jax.process_index() != 0:
        return config_json, results
    return _write_result_directory(exp, config, sweep, out_dir, config_json, results, started)


def _run_options(options, quiet: bool, legacy: dict) -> engine.RunOptions:
    """``options`` (default ``RunOptions.for_experiments()``) with the keyword arguments over it."""
    validation.check(
        "options", options, options is None or isinstance(options, engine.RunOptions), "a jaxfed.engine.RunOptions"
    )
    known = {f.name for f in dataclasses.fields(engine.RunOptions)}
    for name in legacy:
        if name not in known:
            raise TypeError(f"run_experiment() got an unexpected keyword argument {name!r}")
    if quiet:
        legacy = dict(legacy, progress=False)
    if options is None:
        return engine.RunOptions.for_experiments(**legacy)
    return dataclasses.replace(options, **legacy)


def _checked_dtype(config) -> str:
    """The run's dtype, after checking the config's class and values (finite, JSON, normal in the dtype)."""
    check_config_class(type(config))
    check_finite(type(config), {f.name: getattr(config, f.name) for f in dataclasses.fields(config)})
    dtype = "float64" if jax.config.read("jax_enable_x64") else "float32"
    check_representable(config, dtype)
    check_json("parameters", dataclasses.asdict(config))
    return dtype


def _identity(exp: Experiment, config, sweep: Sweep, seed: int, dtype: str, imports) -> dict:
    """What identifies an experiment's run in its store (see :func:`run_experiment`)."""
    return _jsonable(
        {
            "experiment": exp.name,
            "parameters": dataclasses.asdict(config),
            "points": sweep.labels,
            "seed": seed,
            "dtype": dtype,
            **catalog.code_identity(exp, config),  # user code: "code" (file digests), "plugin"
            **({"imports": dict(imports)} if imports else {}),
        }
    )


def _engine_options(exp: Experiment, sweep: Sweep, options: engine.RunOptions, identity: dict) -> engine.RunOptions:
    """The engine's options of an experiment's run: the experiment's identity, axes, common random
    numbers and micro-batch width, and progress lines named after the experiment (in a log)."""
    progress = options.progress
    if not isinstance(progress, engine.Progress):
        progress = engine.Progress(progress is not False, label=f"{exp.name}: ")
    return dataclasses.replace(
        options,
        identity=identity,
        progress=progress,
        common_random_numbers=exp.common_random_numbers,
        micro_batch=(exp.micro_batch or {}).get(jax.devices()[0].platform),
        metric_axes=sweep.metric_axes,
    )


def _record(exp: Experiment, identity: dict, options: engine.RunOptions, n_trials: int, sweep: Sweep, results) -> dict:
    """config.json's content, before the digests of the files it names."""
    info = dict(results.info)  # (RunInfo.record(): the keys "engine" has always had)
    nonfinite = info.pop("nonfinite_trials")
    config_json = dict(identity)
    if exp.source:
        config_json["source"] = exp.source  # for the reader (never imported from the directory: see `jaxfed plot`)
    config_json.update(
        n_trials=n_trials,
        keep=options.keep,
        description=exp.description,
        metrics={name: _metric_doc(value, sweep.metric_axes[name]) for name, value in results.items()},
        nonfinite_trials=nonfinite,
        coords=axis_coords(sweep.metric_axes, sweep.coords, _trial_shapes(results), _warn(exp)),
        options=_jsonable(options.record()),
        engine=info,
        versions=_versions(),
        device=str(jax.devices()[0]),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    return config_json


def _trial_shapes(results: Mapping) -> dict:
    """metric -> the shape of one trial's value (after (point, trial), or (point,) of a summary)."""
    return {
        name: tuple(value.mean.shape[1:] if isinstance(value, stats.Summary) else value.shape[2:])
        for name, value in results.items()
    }


def _warn(exp: Experiment) -> Callable[[str], None]:
    def warn(line: str) -> None:
        if jax.process_index() == 0:
            print(f"jaxfed: warning: {exp.name}: {line}", file=sys.stderr)

    return warn


def _write_result_directory(exp, config, sweep, out_dir, config_json, results, started) -> tuple[dict, dict]:
    """Writes metrics.npz, config.json and the figure, unless a rerun computed nothing (the record
    is left as it was) or served fewer trials than stored (the record describes the stored run)."""
    computed = any(size is not None for size in config_json["engine"]["chunk_sizes"])
    recorded = None if computed else _stored_record(out_dir)
    n_trials = config_json["n_trials"]
    if recorded is not None and (recorded["n_trials"], recorded["keep"]) == (n_trials, config_json["keep"]):
        figure = os.path.join(out_dir, f"{exp.name}.png")
        if not os.path.lexists(figure):  # (a plot that failed after the record was written)
            exp.plot(config, sweep.labels, results, figure)
        return recorded, results  # a rerun that computed nothing leaves the record as it was
    if recorded is not None and recorded["n_trials"] > n_trials:
        # fewer trials than stored: served from the store; the record still describes the stored run
        return dict(config_json, served_from=out_dir, stored_trials=recorded["n_trials"]), results
    data = store.savez_bytes(_flatten(results))
    store.atomic_write_bytes(os.path.join(out_dir, "metrics.npz"), data)
    with open(os.path.join(out_dir, "identity.json"), "rb") as f:
        config_json["identity_sha256"] = store.identity_digest(json.loads(f.read().decode()))
    config_json["metrics_sha256"] = hashlib.sha256(data).hexdigest()
    config_json["wall_s"] = round(time.perf_counter() - started, 3)  # what producing these results took
    store.atomic_write_json(os.path.join(out_dir, "config.json"), config_json)
    # The figure last: a plot that fails (a bug in a user's plot) loses no result; `jaxfed plot`
    # or the same command again draws it.
    exp.plot(config, sweep.labels, results, os.path.join(out_dir, f"{exp.name}.png"))
    return config_json, results


def _stored_record(out_dir: str) -> dict | None:
    """The config.json of ``out_dir`` when it and metrics.npz verify (see :func:`load_results`),
    or None when they cannot be used (absent, damaged, of another run): then the run writes both."""
    try:
        record, _ = load_results(out_dir)
    except ValueError:
        return None
    return record


def nonfinite_lines(nonfinite: dict, labels: list, n_trials: int) -> list[str]:
    """One line per (metric, point) with trials holding NaN or ±inf (``nonfinite``: metric -> per-point counts)."""
    lines = []
    for name, counts in nonfinite.items():
        for label, count in zip(labels, counts):
            if count:
                where = ", ".join(f"{k}={v}" for k, v in label.items())
                lines.append(
                    f"{name}: {count} of {n_trials} trials of point {where} have NaN or infinite values "
                    "(left out of bands and summaries; counted in config.json)"
                )
    return lines


def _metric_doc(value, axes) -> dict:
    if isinstance(value, stats.Summary):
        cells = ["point", *axes]
        return {
            "kept": "summary",
            "arrays": {f"{field}": cells + (["bin"] if field == "hist" else []) for field in stats.Summary._fields},
            "shape": list(value.mean.shape),
            "histogram": {
                "log10_min": stats.HIST_LOG_MIN,
                "log10_max": stats.HIST_LOG_MAX,
                "bins_per_decade": stats.HIST_PER_DECADE,
                "quantile_relative_error": 10 ** (1 / stats.HIST_PER_DECADE) - 1,
            },
        }
    return {"kept": "raw", "axes": ["point", "trial", *axes], "shape": list(value.shape), "dtype": str(value.dtype)}


def _flatten(results: dict) -> dict:
    """metrics.npz layout: raw metrics by name; summaries as ``name/field`` arrays."""
    out = {}
    for name, value in results.items():
        if isinstance(value, stats.Summary):
            out.update({f"{name}/{field}": v for field, v in value._asdict().items()})
        else:
            out[name] = value
    return out


def load_results(out_dir: str, read_metrics: bool = True) -> tuple[dict, dict]:
    """Reads ``config.json`` and ``metrics.npz`` of a finished run (raw arrays or Summaries).

    A result directory is data: nothing in it is executed, no link in it is followed, and its
    record is verified before it is believed: config.json must agree with identity.json and the
    stored chunk headers (:func:`jaxfed.store.verify_record`), metrics.npz must be the file
    config.json was written with (SHA-256), and every metric must have the shape config.json
    gives it, with one row per point and (raw) ``n_trials`` trials. With ``read_metrics=False``
    only config.json is read and verified (the results are ``{}``).

    Raises:
        ValueError: one line naming the file, when either is missing, unreadable, a link, or not
            of one run with the others.
    """
    import io

    config_path, metrics_path = os.path.join(out_dir, "config.json"), os.path.join(out_dir, "metrics.npz")
    store.check_no_link(config_path)
    try:
        with open(config_path, "rb") as f:
            config_json = json.loads(f.read().decode())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(
            f"{config_path}: cannot be read as JSON ({type(err).__name__}); is {out_dir} a finished run?"
        ) from None
    required = {
        "experiment": str,
        "parameters": dict,
        "points": list,
        "n_trials": int,
        "metrics": dict,
        "metrics_sha256": str,
        "identity_sha256": str,
    }
    if not isinstance(config_json, dict) or not all(isinstance(config_json.get(k), t) for k, t in required.items()):
        needs = ", ".join(f"{k} ({t.__name__})" for k, t in required.items())
        raise ValueError(f"{config_path}: not the config.json of a finished run (needs {needs})")
    store.verify_record(out_dir, config_json, config_path)
    if not read_metrics:
        return config_json, {}
    store.check_no_link(metrics_path)
    try:
        with open(metrics_path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise ValueError(f"{metrics_path}: cannot be read ({err.strerror})") from None
    if hashlib.sha256(data).hexdigest() != config_json["metrics_sha256"]:
        raise ValueError(f"{metrics_path}: does not match config.json (checksum); rerun the command to rewrite both")
    results: dict = {}
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        for key in z.files:
            if "/" in key:
                name, field = key.split("/", 1)
                results.setdefault(name, {})[field] = z[key]
            else:
                results[key] = z[key]
    results = {k: stats.Summary(**v) if isinstance(v, dict) else v for k, v in results.items()}
    _check_shapes(config_path, config_json, results)
    return config_json, results


def _check_shapes(config_path: str, config_json: dict, results: dict) -> None:
    """ValueError unless every metric has the shape config.json gives it, one row per point and,
    raw, ``n_trials`` trials."""
    documented = config_json["metrics"]
    if set(documented) != set(results):
        raise ValueError(f"{config_path}: lists metrics {sorted(documented)}, metrics.npz holds {sorted(results)}")
    n_points, n_trials = len(config_json["points"]), config_json["n_trials"]
    for name, value in results.items():
        shape = list((value.mean if isinstance(value, stats.Summary) else value).shape)
        doc = documented[name]
        expected_lead = [n_points] if isinstance(value, stats.Summary) else [n_points, n_trials]
        if not isinstance(doc, dict) or doc.get("shape") != shape or shape[: len(expected_lead)] != expected_lead:
            raise ValueError(
                f"{config_path}: metric {name!r} is {shape} in metrics.npz, which does not fit the record "
                f"({n_points} points, {n_trials} trials, shape {doc.get('shape') if isinstance(doc, dict) else doc})"
            )


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj
