"""Results as labelled data: a run as an :class:`xarray.Dataset`, bands and verdicts as pandas tables.

This module is named for the data it makes; its own imports of xarray are absolute (``import
xarray``: the library, never this module).

- :func:`open_results` reads a finished run's directory (``config.json`` and ``metrics.npz``,
  verified as ``jaxfed plot`` verifies them: :func:`jaxfed.store.rundir.load_results`) into a
  dataset; nothing the directory names is imported or run.
- :func:`to_xarray` does the same for an in-memory :class:`jaxfed.engine.RunResult` and its
  :class:`~jaxfed.experiment.Sweep`.
- :func:`bands` is :func:`jaxfed.stats.band` as a table, :func:`verdicts` a report's claims as one.
- :func:`unstack` turns the ``point`` dimension into one dimension per label key.

The dataset (docs/results.md lists it per experiment):

- a **raw** metric ``NAME`` is the variable ``NAME`` with dims ``("point", "trial", *axes)``, its
  values and dtype those of ``metrics.npz`` bit for bit;
- a **summary** metric (``--keep summary``) is the variables ``NAME_count``, ``NAME_nan_count``,
  ``NAME_mean``, ``NAME_se`` (dims ``("point", *axes)``) and ``NAME_hist`` (``("point", *axes,
  "bin")``), as stored, and ``NAME_quantile`` (``("point", *axes, "quantile")``), the 12.5%, 50% and
  87.5% quantiles read from the histogram (:func:`jaxfed.stats.summary_quantile`; the ``quantile``
  coordinate holds 0.125, 0.5, 0.875);
- ``NAME_nonfinite_trials`` (``("point",)``): per point the trials with a NaN or ±inf value;
- coordinates: ``trial`` 0, 1, …; each metric axis its values from ``config.json``'s ``"coords"``
  (slots and rounds from 1, the slot of each record, the local iterations L·i; an axis without
  recorded values, as in a directory written before they were recorded, has none and is read by
  position); ``point`` a :class:`pandas.MultiIndex` of the label keys (``topology``; ``algorithm``,
  ``digits``, ``snr_db``, …), so ``ds.kl.sel(topology="star")`` works. The sweeps' key ``method``
  is the coordinate ``algorithm`` (``method`` is an argument of ``.sel``: :data:`RENAMED_LABELS`). A key a point's label lacks
  is NaN for a numeric key, ``""`` for a string key and False for a flag;
- attributes: every other entry of ``config.json`` (parameters, seed, trials, dtype, versions, the
  engine's choices, digests, …); strings and numbers as they are, anything else (objects, lists,
  booleans, null) as its JSON text, so the dataset writes to netCDF as it is after
  :func:`for_netcdf`.

xarray and pandas are imported when a function here is first called, not with ``jaxfed``. The
exports (netCDF, CSV, Parquet) are in :mod:`jaxfed.results.export`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np

from jaxfed import stats
from jaxfed.store import rundir
from jaxfed.store.rundir import VERDICT_COLUMNS

__all__ = [
    "open_results",
    "to_xarray",
    "unstack",
    "bands",
    "verdicts",
]

QUANTILES = (0.125, 0.5, 0.875)
"""The quantiles of a summary metric's ``NAME_quantile`` variable: the 75% band and the median."""

SUMMARY_FIELDS = ("count", "nan_count", "mean", "se", "hist")
"""The stored fields of a summary metric (:class:`jaxfed.stats.Summary`), variables ``NAME_FIELD``."""

_NOT_ATTRIBUTES = ("points", "metrics", "coords")


_MISSING_TEXT = (
    "jaxfed's labelled results need xarray and pandas (core dependencies of jaxfed): "
    "python -m pip install xarray pandas"
)


def _xarray():
    try:
        import xarray  # on first use: `import jaxfed` and `jaxfed run` do not load it
    except ImportError:  # a core dependency: only a broken install lacks it
        raise ValueError(_MISSING_TEXT) from None
    return xarray


def _pandas():
    try:
        import pandas  # on first use: `import jaxfed` and `jaxfed run` do not load it
    except ImportError:  # a core dependency: only a broken install lacks it
        raise ValueError(_MISSING_TEXT) from None
    return pandas


# --------------------------------------------------------------------------- building a dataset
def open_results(directory: str | os.PathLike, *, unstack: bool = False):
    """The finished run in ``directory`` as an :class:`xarray.Dataset` (layout: module docstring).

    The directory is data: ``config.json`` and ``metrics.npz`` are read and verified as a whole
    (identity, digests, shapes, metrics.npz against the chunks beside it; no link followed, no
    FIFO or device waited on) by :func:`jaxfed.store.rundir.load_results`, and no code it names is
    imported.

    Args:
        directory: a result directory (``jaxfed run NAME --out DIR``).
        unstack: one dimension per label key instead of ``point`` (:func:`unstack`).

    Returns:
        The :class:`xarray.Dataset` (layout: module docstring).

    Raises:
        ValueError: one line naming the file, when ``directory`` is not a finished run.
    """
    ds, _ = _open(directory)
    return _unstack_points(ds) if unstack else ds


def _open(directory: str | os.PathLike):
    """(dataset, config.json) of the finished run in ``directory``, verified (:func:`open_results`)."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: is not a directory (a finished run's result directory)")
    config_json, results = rundir.load_results(directory)
    ds = _dataset(
        results,
        config_json["points"],
        {name: _doc_axes(name, doc) for name, doc in config_json["metrics"].items()},
        config_json.get("coords", {}),
        {k: v for k, v in config_json.items() if k not in _NOT_ATTRIBUTES},
        config_json.get("nonfinite_trials"),
    )
    return ds, config_json


def _doc_axes(name: str, doc: Mapping) -> tuple:
    """A metric's axes after (point, trial) from its config.json entry."""
    if doc.get("kept") == "summary":
        return tuple(doc["arrays"]["mean"][1:])
    return tuple(doc["axes"][2:])


def to_xarray(result: Mapping, sweep=None, *, labels=None, metric_axes=None, coords=None, unstack: bool = False):
    """An in-memory run (:class:`jaxfed.engine.RunResult`, or any dict of raw arrays and
    :class:`jaxfed.stats.Summary`) as the dataset :func:`open_results` gives for a directory.

    Args:
        result: metric -> raw array (point, trial, …) or Summary (point, …), e.g. ``engine.run(…)``.
        sweep: the :class:`~jaxfed.experiment.Sweep` that was run: its labels, metric axes and
            coordinate values (:func:`jaxfed.store.rundir.axis_coords`).
        labels, metric_axes, coords: instead of (or over) the sweep's; without either, ``point``
            is 0, 1, … and the axes ``dim_0``, ``dim_1``, …
        unstack: one dimension per label key instead of ``point`` (:func:`unstack`).

    Returns:
        The :class:`xarray.Dataset`, as :func:`open_results` lays it out.
    """
    results = dict(result)
    if not results:
        raise ValueError("result: holds no metric")
    first = next(iter(results.values()))
    n_points = (first.mean if isinstance(first, stats.Summary) else np.asarray(first)).shape[0]
    labels = labels if labels is not None else (sweep.labels if sweep is not None else None)
    labels = labels if labels is not None else [{} for _ in range(n_points)]  # point: 0, 1, …
    shapes = rundir.trial_shapes(results)
    if metric_axes is None:
        metric_axes = sweep.metric_axes if sweep is not None else {}
    metric_axes = {
        name: tuple(metric_axes.get(name, [f"dim_{i}" for i in range(len(s))])) for name, s in shapes.items()
    }
    recorded = dict(
        rundir.axis_coords(metric_axes, sweep.coords if sweep is not None else None, shapes), **(coords or {})
    )
    info = getattr(result, "info", None)
    attrs = {"engine": info.record()} if info is not None else {}
    nonfinite = attrs.get("engine", {}).pop("nonfinite_trials", None)
    ds = _dataset(results, labels, metric_axes, recorded, attrs, nonfinite)
    return _unstack_points(ds) if unstack else ds


def _dataset(results: Mapping, labels: list, metric_axes: Mapping, coords: Mapping, attrs: Mapping, nonfinite):
    """The dataset of ``results`` (metric -> raw array or Summary) with named dims and coordinates."""
    xr = _xarray()
    n_points = len(labels)
    data_vars: dict = {}
    lengths: dict = {}  # dim -> length, to keep one length per dimension name
    for name, value in results.items():
        axes = _dims(name, metric_axes[name], _cells(value)[1:], lengths)
        if isinstance(value, stats.Summary):
            cells = ("point", *axes)
            for field in SUMMARY_FIELDS:
                dims = cells + (("bin",) if field == "hist" else ())
                data_vars[_var(name, field, results)] = (dims, getattr(value, field), {"metric": name, "field": field})
            quantiles = np.stack([stats.summary_quantile(value, q) for q in QUANTILES], axis=-1)
            data_vars[_var(name, "quantile", results)] = (cells + ("quantile",), quantiles, {"metric": name})
        else:
            data_vars[name] = (("point", "trial", *axes), np.asarray(value), {"metric": name, "kept": "raw"})
        if nonfinite is not None and name in nonfinite:
            counts = np.asarray(nonfinite[name], np.int64)
            data_vars[_var(name, "nonfinite_trials", results)] = (("point",), counts, {"metric": name})
    ds_coords: dict = {}
    raw = [np.shape(v)[1] for v in results.values() if not isinstance(v, stats.Summary)]
    if raw:
        ds_coords["trial"] = np.arange(raw[0])
    if any(isinstance(v, stats.Summary) for v in results.values()):
        ds_coords["quantile"] = np.asarray(QUANTILES)
    for dim, length in lengths.items():
        values = coords.get(dim)
        if values is not None and len(values) == length:
            ds_coords[dim] = np.asarray(values)
    ds = xr.Dataset(data_vars, coords=ds_coords, attrs={k: _attribute(v) for k, v in attrs.items()})
    return _with_point_index(ds, labels, n_points)


def _cells(value) -> tuple:
    return value.mean.shape if isinstance(value, stats.Summary) else np.shape(value)[:1] + np.shape(value)[2:]


def _dims(name: str, axes: tuple, shape: tuple, lengths: dict) -> tuple:
    """The dims of a metric's axes; an axis whose length differs from the same name's in an
    earlier metric is named ``AXIS_NAME`` (one length per dimension of a dataset)."""
    out = []
    for axis, length in zip(axes, shape):
        dim = axis if lengths.setdefault(axis, length) == length else f"{axis}_{name}"
        lengths.setdefault(dim, length)
        out.append(dim)
    return tuple(out)


def _var(name: str, field: str, results: Mapping) -> str:
    var = f"{name}_{field}"
    if var in results:
        raise ValueError(f"metric {var!r} has the name of metric {name!r}'s {field}; rename one of them")
    return var


def _attribute(value):
    """A netCDF-safe attribute: strings and numbers as they are, the rest as JSON text."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    return json.dumps(value, sort_keys=True)


SEL_ARGUMENTS = ("indexers", "method", "tolerance", "drop")
"""The arguments of xarray's ``.sel``: a coordinate of one of these names cannot be selected by
keyword (``ds.loss.sel(method="oac")`` is xarray's fill method and returns the whole array)."""

RENAMED_LABELS = {"method": "algorithm"}
"""Label key -> its coordinate name: the k-means and unlearning experiments' ``method`` (centralized,
ideal, quantized, oac; unlearning, retrain) is ``algorithm``, so ``ds.sel(algorithm="oac")`` works.
Any other key named like an argument of ``.sel`` becomes ``label_KEY``. The sweeps keep their keys
(nothing a trial computes changes)."""


def coordinate_name(key: str, keys=()) -> str:
    """The coordinate of label key ``key`` (:data:`RENAMED_LABELS`; ``label_KEY`` for another
    argument of ``.sel``, or where the new name is itself one of the point's label ``keys``).

    Args:
        key: a label key of the points.
        keys: every label key of the points.

    Returns:
        The name of the key's coordinate (``key`` itself unless renamed).
    """
    if key not in SEL_ARGUMENTS:
        return key
    name = RENAMED_LABELS.get(key, f"label_{key}")
    return name if name not in keys else f"label_{key}"


def _label_columns(labels: list) -> dict:
    """Coordinate name (:func:`coordinate_name` of the label key) -> one value per point: missing
    ones NaN (numbers), "" (strings), False (flags)."""
    keys = list(dict.fromkeys(k for lab in labels for k in lab))
    columns = {}
    for key in keys:
        name = coordinate_name(key, keys)
        present = [lab[key] for lab in labels if key in lab and lab[key] is not None]
        if present and all(isinstance(v, bool) for v in present):
            columns[name] = np.asarray([bool(lab.get(key) or False) for lab in labels])
        elif present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            full = all(key in lab and lab[key] is not None for lab in labels)
            ints = full and all(isinstance(v, int) for v in present)
            values = [lab.get(key) if lab.get(key) is not None else np.nan for lab in labels]
            columns[name] = np.asarray(values, np.int64 if ints else np.float64)
        else:  # strings, or values of mixed or nested types: as text
            text = [v if isinstance(v, str) else json.dumps(v) for v in (lab.get(key, "") for lab in labels)]
            columns[name] = np.asarray(text, dtype=object)
    return columns


def _with_point_index(ds, labels: list, n_points: int):
    """``ds`` with the point labels as a MultiIndex on ``point`` (its levels the label keys)."""
    pd = _pandas()
    columns = _label_columns(labels)
    if not columns:
        return ds.assign_coords(point=np.arange(n_points))
    clash = [key for key in columns if key in ds.dims or key in ds.coords or key in ds.data_vars]
    if clash:  # a label key named like a dimension: keep it as a plain coordinate
        columns = {(f"label_{k}" if k in clash else k): v for k, v in columns.items()}
    index = pd.MultiIndex.from_arrays(list(columns.values()), names=list(columns))
    return ds.assign_coords(_xarray().Coordinates.from_pandas_multiindex(index, "point"))


def unstack(ds):
    """``ds`` with ``point`` replaced by one dimension per label key that tells points apart,
    each metric NaN where no point has that combination, and every point kept (xarray's own
    ``ds.unstack("point")`` would drop a point whose label lacks a key, stored as NaN).

    A key the other keys already determine (kmeans-snr's ``noise_free``, given by ``snr_db``) is
    no dimension but a coordinate over the others, so the grid stays as small as the sweep:
    kmeans-snr unstacks into ``algorithm`` × ``digits`` × ``snr_db``, gfvl-heterogeneity into
    ``topology`` × ``spread``. A dimension's values come in the order the points first give
    them. Integer and boolean metrics become float64 (for the NaN); ``point_index`` holds the
    point of each cell (−1: none).

    Args:
        ds: a dataset of :func:`open_results` or :func:`to_xarray` with a ``point`` dimension.

    Returns:
        The unstacked dataset.
    """
    return _unstack_points(ds)


def _unstack_points(ds):
    pd = _pandas()
    xr = _xarray()
    if "point" not in ds.dims:
        raise ValueError("unstack: the dataset has no point dimension (already unstacked?)")
    index = ds.indexes.get("point")
    if not isinstance(index, pd.MultiIndex):
        raise ValueError("unstack: the point dimension has no label keys to unstack into")
    names = [str(k) for k in index.names]
    columns = {k: index.get_level_values(k).to_numpy() for k in names}
    keys = _distinguishing(columns)
    levels = [_unique(columns[k]) for k in keys]
    shape = tuple(len(level) for level in levels)
    positions = tuple(np.asarray([_position(level, v) for v in columns[k].tolist()]) for k, level in zip(keys, levels))
    flat = np.ravel_multi_index(positions, shape) if keys else np.zeros(len(index), np.int64)
    if len(set(flat.tolist())) != len(flat):
        raise ValueError("unstack: two points have the same label; they cannot share a cell")
    size = int(np.prod(shape))
    plain = ds.drop_vars(["point", *names])
    out = {}
    for name, var in plain.data_vars.items():
        if "point" not in var.dims:
            out[name] = var
            continue
        moved = var.transpose("point", ...)
        out[name] = xr.Variable(
            tuple(keys) + moved.dims[1:], _scatter(moved.values, flat, size).reshape(shape + moved.shape[1:]), var.attrs
        )
    coords: dict = {k: level for k, level in zip(keys, levels)}
    coords.update({k: v for k, v in plain.coords.items() if "point" not in v.dims})
    for k in names:
        if k not in keys:  # a key the others determine: a coordinate over them
            coords[k] = (tuple(keys), _scatter(columns[k], flat, size).reshape(shape))
    point_index = np.full(size, -1, np.int64)
    point_index[flat] = np.arange(len(flat))
    result = xr.Dataset(out, coords=coords, attrs=ds.attrs)
    return result.assign(point_index=(tuple(keys), point_index.reshape(shape)))


def _distinguishing(columns: dict) -> list[str]:
    """The label keys that tell the points apart, dropping (last first) each key the others
    already determine."""
    keys = list(columns)
    for key in reversed(list(columns)):
        rest = [k for k in keys if k != key]
        if rest and _unique_rows([columns[k] for k in rest]):
            keys = rest
    return keys


def _unique_rows(columns: list) -> bool:
    rows = [tuple("nan" if isinstance(v, float) and np.isnan(v) else v for v in row) for row in zip(*columns)]
    return len(set(rows)) == len(rows)


def _scatter(values: np.ndarray, flat: np.ndarray, size: int) -> np.ndarray:
    """``values`` (point, …) placed at cells ``flat`` of ``size`` cells; the others NaN (numbers),
    "" (strings) or False (flags), integers as float64."""
    values = np.asarray(values)
    if values.dtype == object:
        full = np.full((size, *values.shape[1:]), "", dtype=object)
    elif values.dtype == bool and values.ndim == 1:
        full = np.zeros(size, bool)
    else:
        if not np.issubdtype(values.dtype, np.floating):
            values = values.astype(np.float64)
        full = np.full((size, *values.shape[1:]), np.nan, values.dtype)
    full[flat] = values
    return full


def _unique(values: np.ndarray) -> np.ndarray:
    """The distinct values in order of first appearance (NaN once)."""
    seen: list = []
    for v in values.tolist():
        if not any(_same(v, s) for s in seen):
            seen.append(v)
    return np.asarray(seen, dtype=values.dtype)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def _position(level: np.ndarray, value) -> int:
    return next(i for i, v in enumerate(level.tolist()) if _same(v, value))


def for_netcdf(ds):
    """``ds`` as netCDF can hold it: the ``point`` MultiIndex reset to plain coordinates along
    ``point`` (and ``point`` itself 0, 1, …), string coordinates as str (``xarray.open_dataset``
    of the file then gives this dataset back).

    Args:
        ds: a dataset of :func:`open_results` or :func:`to_xarray` (not unstacked).

    Returns:
        The dataset with plain coordinates.
    """
    if _is_multi(ds):
        ds = ds.reset_index("point").drop_vars("point", errors="ignore")
        ds = ds.assign_coords(point=np.arange(ds.sizes["point"]))
    strings = {
        name: coord.astype(str) for name, coord in ds.coords.items() if coord.dtype == object and name not in ds.dims
    }
    return ds.assign_coords(strings)


def _is_multi(ds) -> bool:
    pd = _pandas()
    return "point" in ds.indexes and isinstance(ds.indexes["point"], pd.MultiIndex)


# --------------------------------------------------------------------------- tables
def _summary_of(ds, metric: str) -> stats.Summary:
    return stats.Summary(**{field: ds[f"{metric}_{field}"].values for field in SUMMARY_FIELDS})


def metrics_of(ds) -> list[str]:
    """The metric names of a dataset (raw variables and summaries), in order.

    Args:
        ds: a dataset of :func:`open_results` or :func:`to_xarray`.

    Returns:
        The metric names: raw variables, and summaries by their ``NAME`` (without ``_count`` …).
    """
    names = [str(v) for v, var in ds.data_vars.items() if var.attrs.get("kept") == "raw"]
    names += [str(var.attrs["metric"]) for v, var in ds.data_vars.items() if var.attrs.get("field") == "mean"]
    return names


def bands(ds_or_dir, metric: str, mass: float = 0.75):
    """Median and central ``mass`` band over trials of ``metric``, one row per (point, index):
    the label columns, the metric's axis coordinates (``slot``, ``round``, …), ``q50`` (the
    median: a column ``median`` would hide behind ``DataFrame.median``, ``table.median`` being the
    method), ``lower``, ``upper`` (:func:`jaxfed.stats.band`, the same numbers) and ``n``, the finite
    trials of the cell.

    Args:
        ds_or_dir: a dataset of :func:`open_results` / :func:`to_xarray` (not unstacked) or a
            result directory.
        metric: a metric of the run.
        mass: the band's probability mass.

    Returns:
        A :class:`pandas.DataFrame`, one row per (point, index).

    Raises:
        ValueError: an unknown metric (naming the run's), or an unstacked dataset.
    """
    pd = _pandas()
    ds = open_results(ds_or_dir) if isinstance(ds_or_dir, (str, os.PathLike)) else ds_or_dir
    if "point" not in ds.dims:
        raise ValueError("bands: needs the dataset with its point dimension (not unstacked)")
    known = metrics_of(ds)
    if metric not in known:
        raise ValueError(f"unknown metric {metric!r}; this run's metrics: {', '.join(known)}")
    if metric in ds.data_vars:
        values = ds[metric].values
        band = stats.band(values, mass)
        n = np.isfinite(values).sum(axis=1)
        dims = ds[metric].dims[2:]
    else:
        summary = _summary_of(ds, metric)
        band = stats.band(summary, mass)
        n = summary.count
        dims = ds[f"{metric}_mean"].dims[1:]
    labels = _labels_frame(ds)
    rows = []
    for cell in np.ndindex(*band.median.shape):
        p, rest = cell[0], cell[1:]
        row = dict(labels[p])
        for dim, i in zip(dims, rest):
            row[dim] = ds[dim].values[i] if dim in ds.coords else i
        row.update(q50=band.median[cell], lower=band.lower[cell], upper=band.upper[cell], n=int(n[cell]))
        rows.append(row)
    return pd.DataFrame(rows)


def _labels_frame(ds) -> list[dict]:
    """Per point its label (the MultiIndex levels), or ``{"point": p}``."""
    index = ds.indexes.get("point")
    names = list(getattr(index, "names", None) or [])
    if _is_multi(ds) and names:
        return [dict(zip(names, (v.item() if hasattr(v, "item") else v for v in values))) for values in index]
    return [{"point": int(p)} for p in range(ds.sizes["point"])]


def verdicts(directory: str):
    """The claims of the report in ``directory`` (``verdicts.json``, written with ``report.md``)
    as a table: ``section``, ``claim``, ``estimate``, ``lower``, ``upper``, ``level``,
    ``interval`` (as report.md prints it), ``p_value`` (sign test), ``fraction_greater``, ``n``,
    ``n_dropped``, ``n_untied``, ``verdict``, ``reason``. Read only: nothing is computed.

    Args:
        directory: a result directory with a ``verdicts.json``.

    Returns:
        A :class:`pandas.DataFrame`, one row per claim.

    Raises:
        ValueError: no verdicts.json there (write one with ``jaxfed report DIR``), or not readable.
    """
    return _pandas().DataFrame(rundir.read_verdicts(directory), columns=list(VERDICT_COLUMNS))


def layout_table(experiments: Mapping, names=None) -> str:
    """The Markdown table of docs/results.md: per experiment of ``experiments`` (name ->
    :class:`~jaxfed.experiment.Experiment`, e.g. ``jaxfed.experiments.REGISTRY``; at its default
    parameters; ``names``: these only) each metric's dims in a raw run, the label keys
    (``point``'s levels; those :func:`unstack` makes dimensions in bold) and the coordinate values
    of its axes. Built from each experiment's sweep, nothing run (tests/results/test_results_xarray.py
    checks the page holds it).

    Args:
        experiments: name -> :class:`~jaxfed.experiment.Experiment`.
        names: the experiments to list (default: all of ``experiments``).

    Returns:
        The Markdown table, one row per experiment.
    """
    rows = ["| experiment | metrics: dims of a raw run | `point` levels | axis coordinates |", "|---|---|---|---|"]
    for name, exp in experiments.items():
        if names is not None and name not in names:
            continue
        sweep = exp.build(exp.config_cls())
        metrics = ", ".join(
            f"`{metric}` ({', '.join(('point', 'trial', *axes))})" for metric, axes in sweep.metric_axes.items()
        )
        columns = _label_columns(sweep.labels)
        split = set(_distinguishing(columns))
        levels = ", ".join(f"**{k}**" if k in split else k for k in columns)
        axes = list(dict.fromkeys(axis for names in sweep.metric_axes.values() for axis in names))
        coords = []
        for axis in axes:
            given = (sweep.coords or {}).get(axis)
            if given is not None:
                shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in given[:3])
                coords.append(f"{axis}: {shown}, …, {given[-1]}" if len(given) > 3 else f"{axis}: {shown}")
            elif axis in rundir.AXES_NUMBERED_FROM_1:
                coords.append(f"{axis}: 1, 2, …")
            else:
                coords.append(f"{axis}: by position")
        rows.append(f"| {name} | {metrics} | {levels} | {'; '.join(coords) or '–'} |")
    return "\n".join(rows)
