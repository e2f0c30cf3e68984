"""Results as labelled data: a run as an :class:`xarray.Dataset`, bands and verdicts as pandas tables.

This face re-exports its modules' names (``jaxfed.results.NAME``); the code is in:

- :mod:`jaxfed.results.xarray`: the labelled data: :func:`open_results` (a finished run's
  directory, verified, into a dataset), :func:`to_xarray` (an in-memory run), :func:`unstack`,
  :func:`bands` and :func:`verdicts` (tables), the dataset's layout (:func:`layout_table`);
- :mod:`jaxfed.results.export`: the exports (``jaxfed export``): netCDF, CSV and Parquet
  (:func:`export`, :func:`export_all`, :data:`FORMATS`);
- :mod:`jaxfed.results.report`, :mod:`jaxfed.results.report_html`, :mod:`jaxfed.results.deciding`:
  a run's report, its HTML page and the ``--decide`` loop's reading of claims (not imported here).

xarray and pandas are imported when a function here is first called, not with ``jaxfed``.
"""

# ruff: noqa: F401 (a face: every import below is a re-export)

from jaxfed.results.export import EXTRAS, FORMATS, export, export_all, runs_in, table
from jaxfed.results.xarray import (
    QUANTILES,
    RENAMED_LABELS,
    SEL_ARGUMENTS,
    SUMMARY_FIELDS,
    bands,
    coordinate_name,
    for_netcdf,
    layout_table,
    metrics_of,
    open_results,
    to_xarray,
    unstack,
    verdicts,
)
from jaxfed.store.rundir import VERDICT_COLUMNS, VERDICTS_FILE  # (the names results has had)

__all__ = [
    "open_results",
    "to_xarray",
    "unstack",
    "bands",
    "verdicts",
]
