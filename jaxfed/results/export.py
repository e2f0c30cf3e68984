"""Exports of a finished run (``jaxfed export``): the dataset as netCDF, a metric or its bands as a
CSV or Parquet table, and every run under a folder at once (:func:`export_all`).

- :func:`table`: one metric of a dataset (:func:`jaxfed.results.xarray.open_results`) as a long table;
- :func:`export`: one run's file, built in memory and written atomically beside its name, never
  over one of the run's own files;
- :func:`export_all`: every finished run under a folder (:func:`runs_in`);

The face :mod:`jaxfed.results` re-exports these names; its attribute ``export`` is the function
:func:`export`, so import this module as ``from jaxfed.results.export import …``.

xarray and pandas are imported when a function here is first called, not with ``jaxfed``.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import stat

from jaxfed import store
from jaxfed.results.xarray import QUANTILES, _open, _pandas, bands, coordinate_name, for_netcdf, metrics_of
from jaxfed.store import rundir
from jaxfed.store.rundir import VERDICTS_FILE

# --------------------------------------------------------------------------- exports
FORMATS = {"netcdf": "nc", "csv": "csv", "parquet": "parquet"}
"""``jaxfed export --format``: the formats and their file extensions."""

EXTRAS = {"netcdf": (("h5netcdf", "h5py"), "netcdf"), "parquet": (("pyarrow",), "parquet")}
"""Format -> (the packages it needs, the extra that installs them: ``pip install "jaxfed[EXTRA]"``)."""


def _needs(fmt: str) -> None:
    """ValueError naming the extra when the package ``fmt`` writes with is missing."""
    if fmt not in EXTRAS:
        return
    packages, extra = EXTRAS[fmt]
    for package in packages:
        if importlib.util.find_spec(package) is None:
            raise ValueError(
                f"--format {fmt} needs the package {package}, which is not installed: "
                f'python -m pip install "jaxfed[{extra}]"'
            )


def table(ds, metric: str):
    """One metric as a long table (one row per cell): the label columns, ``trial`` (raw) and the
    axis coordinates, then the values (raw: column ``NAME``; summary: ``NAME_count``,
    ``NAME_nan_count``, ``NAME_mean``, ``NAME_se`` and the quantiles ``NAME_q12.5``, ``NAME_q50``,
    ``NAME_q87.5``).

    Args:
        ds: a dataset of :func:`jaxfed.results.open_results` (not unstacked).
        metric: a metric of the run.

    Returns:
        A :class:`pandas.DataFrame`, one row per cell.

    Raises:
        ValueError: an unknown metric (naming the run's).
    """
    known = metrics_of(ds)
    if metric not in known:
        raise ValueError(f"unknown metric {metric!r}; this run's metrics: {', '.join(known)}")
    if metric in ds.data_vars:
        return ds[metric].to_dataframe(name=metric).reset_index()
    cells = ds[[f"{metric}_{field}" for field in ("count", "nan_count", "mean", "se")]]
    quantiles = ds[f"{metric}_quantile"]
    dims = quantiles.dims[:-1]  # (point, *axes), then quantile
    for i, q in enumerate(QUANTILES):
        cells = cells.assign({f"{metric}_q{100 * q:g}": (dims, quantiles.values[..., i])})
    return cells.to_dataframe().reset_index()


def export(directory: str, fmt: str, metric: str | None = None, with_bands: bool = False, out: str | None = None):
    """Writes the run in ``directory`` (``jaxfed export``) and returns the file's path: the dataset
    as netCDF (``for_netcdf``; one metric's variables with ``metric``), or a table as CSV or
    Parquet: :func:`bands` with ``with_bands`` (every metric's, with a ``metric`` column, without
    ``metric``), else :func:`table` of ``metric`` (needed when the run has several).

    The file is ``out``, by default ``DIR/EXPERIMENT[.METRIC][.bands].EXT`` (the name read from the
    record must be a plain file name: a record naming ``../x`` is refused). It is built in memory
    (netCDF too: the HDF5 library never writes to the disk, so a full disk cannot crash it), then
    written to a temporary file beside its name and renamed over it (never through a link). It
    is never one of the run's own files (config.json, metrics.npz, identity.json, verdicts.json,
    report.md, the figure, the lock, anything under chunks/).

    Args:
        directory: a result directory.
        fmt: ``"netcdf"``, ``"csv"`` or ``"parquet"`` (:data:`FORMATS`).
        metric: one metric only (needed for a table of a run with several).
        with_bands: a table of the bands instead of the cells.
        out: the file to write (default: beside the run, named for it).

    Returns:
        The path of the file written.

    Raises:
        ValueError: one line naming the file given: not a finished run, an unknown metric or
            format, a missing optional package (naming the extra that installs it), a target
            that is a directory, a file of the run, or cannot be written (read-only, full disk, …).
    """
    pd = _pandas()
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    _needs(fmt)
    ds, config_json = _open(directory)
    known = metrics_of(ds)
    if metric is not None and metric not in known:
        raise ValueError(f"unknown metric {metric!r}; this run's metrics: {', '.join(known)}")
    name = str(ds.attrs.get("experiment", "results"))
    path = _export_target(directory, name, out, metric, with_bands, fmt)
    if fmt == "netcdf":
        if with_bands:
            raise ValueError("--bands writes a table: use --format csv or parquet")
        if metric is not None:
            ds = ds[[v for v, var in ds.data_vars.items() if var.attrs.get("metric") == metric]]
        return _write(path, bytes(for_netcdf(ds).to_netcdf(engine="h5netcdf")))
    if with_bands:
        frames = [bands(ds, m).assign(metric=m) for m in ([metric] if metric else known)]
        frame = pd.concat(frames, ignore_index=True)
        frame = frame[["metric"] + [c for c in frame.columns if c != "metric"]]
    else:
        if metric is None and len(known) > 1:
            raise ValueError(
                f"--format {fmt} writes one table: give --metric NAME (one of {', '.join(known)}) or --bands"
            )
        frame = table(ds, metric or known[0])
    frame = _integers_kept(frame, ds, config_json["points"])
    if fmt == "csv":
        return _write(path, frame.to_csv(index=False).encode())
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return _write(path, buffer.getvalue())


def _integers_kept(frame, ds, labels: list):
    """``frame`` with every integer coordinate as pandas' nullable ``Int64``: a label key whose values
    are integers (k-means' ``digits``, NaN in the dataset where a point lacks it), ``trial``, and an
    axis with integer coordinates or none (``round``, ``slot``; NaN in a --bands table where a metric
    lacks the axis). A CSV then reads ``4`` and ``1``, not ``4.0`` and ``1.0``, and a missing one is
    empty; Parquet keeps the integer type."""
    keys = list(dict.fromkeys(k for lab in labels for k in lab))
    names = set()
    for key in keys:
        present = [lab[key] for lab in labels if lab.get(key) is not None]
        if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            names.add(coordinate_name(key, keys))
    names |= {str(d) for d in ds.dims if d != "point" and (d not in ds.coords or ds[d].dtype.kind in "iu")}
    for column in frame.columns:
        if column in names and frame[column].dtype.kind == "f":
            frame[column] = frame[column].astype("Int64")
    return frame


def runs_in(directory: str) -> list[str]:
    """The result directories of a ``jaxfed reproduce`` directory: each subdirectory (not a link)
    holding a ``config.json``, in name order.

    Args:
        directory: a ``jaxfed reproduce`` directory.

    Returns:
        The paths of its result directories.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        raise ValueError(f"{directory}: cannot be read ({err.strerror})") from None
    return [
        os.path.join(directory, n)
        for n in names
        if not os.path.islink(os.path.join(directory, n))
        and os.path.isfile(os.path.join(directory, n, rundir.CONFIG_FILE))
    ]


def export_all(
    directory: str, fmt: str, metric: str | None = None, with_bands: bool = False, out: str | None = None
) -> list[str]:
    """:func:`export` of a run's directory, or of every run in a ``jaxfed reproduce`` directory
    (:func:`runs_in`; with ``metric``, the runs that have it), each to its default name in its own
    directory or in the directory ``out``; the paths written.

    Args:
        directory: a result directory, or a ``jaxfed reproduce`` directory of them.
        fmt: ``"netcdf"``, ``"csv"`` or ``"parquet"`` (:data:`FORMATS`).
        metric: one metric only.
        with_bands: tables of the bands instead of the cells.
        out: a file (one run) or a directory (several runs) to write into.

    Returns:
        The paths of the files written.

    Raises:
        ValueError: as :func:`export`; a directory holding no run; ``out`` not a directory for
            several runs; no run with ``metric``.
    """
    config = os.path.join(directory, rundir.CONFIG_FILE)
    if os.path.lexists(config) and not os.path.isfile(config):
        raise ValueError(f"{config}: is not a regular file (a FIFO, device, socket, directory or link); not read")
    if os.path.isfile(config) or not os.path.isdir(directory):
        return [export(directory, fmt, metric=metric, with_bands=with_bands, out=out)]
    runs = runs_in(directory)
    if not runs:
        raise ValueError(f"{directory}: holds no finished run (no config.json in it or in a directory in it)")
    if fmt in ("csv", "parquet") and metric is None and not with_bands:
        raise ValueError(
            f"{directory} holds {len(runs)} runs: --format {fmt} writes one table per run: give --bands or --metric NAME"
        )
    if out is not None and not os.path.isdir(out):
        raise ValueError(f"{out}: {directory} holds {len(runs)} runs; --out must be a directory to write them into")
    if metric is not None:
        runs = [run for run in runs if metric in _recorded_metrics(run)]
        if not runs:
            raise ValueError(f"{directory}: no run in it has the metric {metric!r}")
    paths = []
    for run in runs:
        target = None
        if out is not None:
            name = os.path.basename(run)
            stem = ".".join([name] + ([metric] if metric else []) + (["bands"] if with_bands else []))
            target = os.path.join(out, f"{stem}.{FORMATS.get(fmt, fmt)}")
        paths.append(export(run, fmt, metric=metric, with_bands=with_bands, out=target))
    return paths


def _recorded_metrics(run: str) -> list[str]:
    config_json, _ = rundir.load_results(run, read_metrics=False)
    return list(config_json.get("metrics", {}))


_RUN_FILES = (
    rundir.CONFIG_FILE,
    rundir.METRICS_FILE,
    "identity.json",
    VERDICTS_FILE,
    "report.md",
    "report.html",
    ".lock",
    ".user-code-running",
    store.CHUNK_DIR,
)
"""The files of a result directory an export never writes (with the figure, EXPERIMENT.png)."""
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _export_target(directory: str, name: str, out: str | None, metric, with_bands: bool, fmt: str) -> str:
    """The file an export writes: ``out`` as given, or the default name in ``directory`` built from
    the record's experiment name (a plain file name, checked); ValueError naming it when it is
    empty, a directory, a device, FIFO or socket (replaced by a rename, whoever runs the export),
    has no existing directory, or is a file of the run."""
    if out is None:
        stem = ".".join([name] + ([metric] if metric else []) + (["bands"] if with_bands else []))
        if not _FILE_NAME.fullmatch(stem) or ".." in stem:
            raise ValueError(
                f"{directory}/{rundir.CONFIG_FILE}: its experiment name {name!r} is no plain file name; "
                "give the file to write with --out"
            )
        out = os.path.join(directory, f"{stem}.{FORMATS[fmt]}")
    out = os.fspath(out)
    if not out:
        raise ValueError("--out is empty; give the file to write")
    if os.path.isdir(out):
        raise ValueError(f"{out}: is a directory; give the file to write (e.g. {os.path.join(out, 'export')})")
    if os.path.lexists(out) and not os.path.islink(out) and not stat.S_ISREG(os.lstat(out).st_mode):
        raise ValueError(f"{out}: is a device, FIFO or socket; an export writes only a regular file or a new name")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise ValueError(f"{out}: its directory {parent} does not exist")
    run = os.path.realpath(directory)
    target = os.path.join(os.path.realpath(parent), os.path.basename(out))
    own = [os.path.join(run, n) for n in _RUN_FILES] + [os.path.join(run, f"{name}.png")]
    if target in own or target.startswith(store.chunk_dir(run) + os.sep):
        raise ValueError(
            f"{out}: is a file of the run in {directory}; an export never replaces one: give another --out"
        )
    return out


def _write(path: str, data: bytes) -> str:
    """Writes ``data`` to ``path`` through a temporary file beside it renamed over it (never through
    a link; :func:`jaxfed.store.atomic_write_bytes`); ValueError naming ``path`` when it cannot."""
    try:
        store.atomic_write_bytes(path, data)
    except store.StoreError as err:
        raise ValueError(str(err)) from None
    return path


# --------------------------------------------------------------------------- the layout, for the docs
