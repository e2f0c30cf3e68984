"""How any experiment is run, built-in or a user's (docs/experiments.md, docs/clusters.md).

- :mod:`~jaxfed.runs.catalog`: an experiment found by name (``find``), a user's ``file.py:NAME``
  and installed plugins included; :mod:`~jaxfed.runs.identity`: the code a run's identity names;
  :mod:`~jaxfed.runs.describe`: its parameters (``jaxfed show``);
- :mod:`~jaxfed.runs.launch`: ``jaxfed run`` as one call (:func:`run`, ``jaxfed.run``);
  :mod:`~jaxfed.runs.runner`: one run through the engine into its result directory, whose every
  file :mod:`~jaxfed.runs.writer` writes; :mod:`~jaxfed.runs.finished`: a finished run read back
  (``jaxfed plot``, ``jaxfed report``);
- :mod:`~jaxfed.runs.sharding`: a run cut into shards and the one ``merge``;
  :mod:`~jaxfed.runs.distributed`: the shards as Dask tasks; :mod:`~jaxfed.runs.verifying`: stored
  trials recomputed; :mod:`~jaxfed.runs.reproduce`: ``jaxfed reproduce`` and ``--decide``.
"""

from jaxfed.runs.catalog import find
from jaxfed.runs.distributed import run_on_dask
from jaxfed.runs.launch import run
from jaxfed.runs.runner import run_experiment
from jaxfed.runs.sharding import merge, run_shard
from jaxfed.runs.verifying import verify

__all__ = ["find", "run", "run_experiment", "run_shard", "merge", "run_on_dask", "verify"]
