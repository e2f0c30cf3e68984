"""The result directory of a finished run: what is in it, how it is written and how it is read back.

A run of an experiment (:func:`jaxfed.runs.run_experiment`) leaves in its directory:

- ``config.json``: every parameter, the points (``"points"``, in point-axis order), seed, trials,
  each metric's axes (``"metrics"``: :func:`metric_doc`) and their coordinate values (``"coords"``:
  :func:`axis_coords`), per point the trials with non-finite metrics (``"nonfinite_trials"``),
  versions, device and the SHA-256 of ``metrics.npz`` (written after it; the figure comes last);
- ``metrics.npz``: one array per metric with axes (point, trial, …) as listed in config.json, or a
  summary's fields as ``NAME/FIELD`` arrays (:func:`npz_arrays`);
- ``<name>.png``: the figure; ``report.md`` and ``verdicts.json``: the report and its claims as data
  (:func:`write_verdicts`);
- ``chunks/``, ``identity.json``: the store (see :mod:`jaxfed.store`), so an interrupted run resumes
  and a finished one can grow.

A directory is data: :func:`load_results` verifies config.json against the store and metrics.npz
against config.json before believing either, follows no link and imports nothing it names.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
import time
from collections.abc import Callable, Mapping

import jax
import numpy as np

from jaxfed import stats, store, validation
from jaxfed._version import __version__

CONFIG_FILE = "config.json"
"""The run's record: parameters, points, seed, trials, metric docs, coordinates, versions, digests."""
METRICS_FILE = "metrics.npz"
"""The metrics: one array per raw metric, ``NAME/FIELD`` arrays per summary (:func:`npz_arrays`)."""
SHARD_KEY = "shard"
"""The key of a shard's config.json that says which shard it is (:mod:`jaxfed.runs.sharding`)."""
VERDICTS_FILE = "verdicts.json"
"""Written beside report.md (``jaxfed run``, ``report``, ``reproduce``): the claims of its sections."""


# --------------------------------------------------------------------------- what config.json can hold
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


def jsonable(obj):
    """``obj`` with tuples as lists and NumPy scalars as Python numbers (what json.dumps writes)."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


def versions() -> dict:
    """config.json's ``"versions"``: of jaxfed, JAX and NumPy."""
    return {"jaxfed": __version__, "jax": jax.__version__, "numpy": np.__version__}


# --------------------------------------------------------------------------- metrics and their axes
AXES_NUMBERED_FROM_1 = ("slot", "round")
"""Axes whose coordinate values default to 1, 2, …, n (slot i = 1..n_slots, round 1..n_rounds)."""


def axis_coords(
    metric_axes: Mapping, coords: Mapping | None, shapes: Mapping[str, tuple], warn: Callable[[str], None] | None = None
) -> dict:
    """The coordinate values of each metric axis (config.json's ``"coords"``): a sweep's own
    (``coords``, :attr:`jaxfed.experiment.Sweep.coords`), else 1..n for the axes of
    :data:`AXES_NUMBERED_FROM_1`; an axis with neither has none (it is read by position).
    ``metric_axes``: metric -> axis names; ``shapes``: metric -> shape of one trial's value
    (:func:`trial_shapes`). Values whose count is not the axis's length are left out, with a line
    to ``warn``."""
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
            out[axis] = jsonable(list(given))
        elif warn is not None:
            warn(f"coords[{axis!r}] has {len(given)} values, the axis has {length}; not recorded")
    return out


def trial_shapes(results: Mapping) -> dict:
    """metric -> the shape of one trial's value (after (point, trial) of a raw array, or (point,) of
    a :class:`jaxfed.stats.Summary`)."""
    return {
        name: tuple(value.mean.shape[1:] if isinstance(value, stats.Summary) else np.shape(value)[2:])
        for name, value in results.items()
    }


def metric_doc(value, axes) -> dict:
    """config.json's entry for one metric (``"metrics"``): kept raw or as a summary, its arrays'
    axes and shape (and a summary's histogram)."""
    if isinstance(value, stats.Summary):
        cells = ["point", *axes]
        return {
            "kept": "summary",
            "arrays": {f"{field}": cells + (["bin"] if field == "hist" else []) for field in stats.Summary._fields},
            "shape": list(value.mean.shape),
            "histogram": {
                "log10_min": stats.summary.HIST_LOG_MIN,
                "log10_max": stats.summary.HIST_LOG_MAX,
                "bins_per_decade": stats.summary.HIST_PER_DECADE,
                "quantile_relative_error": 10 ** (1 / stats.summary.HIST_PER_DECADE) - 1,
            },
        }
    return {"kept": "raw", "axes": ["point", "trial", *axes], "shape": list(value.shape), "dtype": str(value.dtype)}


def npz_arrays(results: Mapping) -> dict:
    """metrics.npz layout: raw metrics by name; summaries as ``name/field`` arrays."""
    out = {}
    for name, value in results.items():
        if isinstance(value, stats.Summary):
            out.update({f"{name}/{field}": v for field, v in value._asdict().items()})
        else:
            out[name] = value
    return out


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


# --------------------------------------------------------------------------- writing
def write_results(out_dir: str, config_json: dict, results: Mapping, started: float) -> dict:
    """Writes ``metrics.npz`` of ``results``, then ``config.json``: ``config_json`` with the digests
    of identity.json, metrics.npz and the chunk set (:func:`chunks_digest`), ``wall_s``, the
    seconds since ``started`` (a :func:`time.perf_counter` reading taken when the run began), and
    last ``record_sha256``, the digest of everything else it holds (:func:`record_digest`). Both
    atomically (no link followed); returns the config.json written."""
    data = store.savez_bytes(npz_arrays(results))
    store.atomic_write_bytes(os.path.join(out_dir, METRICS_FILE), data)
    config_json["identity_sha256"] = store.identity_digest(store.read_json(os.path.join(out_dir, "identity.json")))
    config_json["metrics_sha256"] = hashlib.sha256(data).hexdigest()
    config_json["chunks_sha256"] = chunks_digest(out_dir, config_json["n_trials"])
    config_json["wall_s"] = round(time.perf_counter() - started, 3)  # what producing these results took
    config_json["record_sha256"] = record_digest(config_json)
    store.atomic_write_json(os.path.join(out_dir, CONFIG_FILE), config_json)
    return config_json


def write_shard_record(out_dir: str, config_json: dict) -> dict:
    """Writes a shard's ``config.json`` (no metrics.npz: a shard's trials are a part of the run's,
    see :mod:`jaxfed.runs.sharding`): ``config_json`` with the digest of identity.json and
    last ``record_sha256``; returns it."""
    config_json["identity_sha256"] = store.identity_digest(store.read_json(os.path.join(out_dir, "identity.json")))
    config_json["record_sha256"] = record_digest(config_json)
    store.atomic_write_json(os.path.join(out_dir, CONFIG_FILE), config_json)
    return config_json


MAKING = ("created", "wall_s", "device", "versions", "options", "engine", "shards", "chunks_sha256")
"""The entries of config.json that record when and how a run was made (its date, times, devices,
chunk sizes, the shards it was merged from, the chunk files that hold it), not what its results
are: two runs of one command, a grown run and a merge of shards differ in them alone."""


def results_digest(record: Mapping) -> str:
    """SHA-256 of what a run's record says its results are: config.json without ``record_sha256``
    and the entries of :data:`MAKING` (the experiment, parameters, points, seed, trials, metric
    docs, coordinates, non-finite counts, identity and metrics.npz's digest). verdicts.json signs it,
    so it is the same bytes for every run that computed the same results."""
    return record_digest({k: v for k, v in record.items() if k not in MAKING})


def record_digest(record: Mapping) -> str:
    """SHA-256 of a record (config.json, verdicts.json) without its ``record_sha256``: every entry
    read back as truth (points, coordinates, non-finite counts, verdicts, …) is under it."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(jsonable(body), sort_keys=True).encode()).hexdigest()


def _run_chunks(out_dir: str, n_trials: int) -> list[store.ChunkName]:
    """The chunks of the run of ``n_trials`` trials in ``out_dir``: all but the raw chunks of
    trials from ``n_trials`` on (a larger run's, kept for growth, or a growth that was
    interrupted), which are not the run's."""
    return [c for c in store.list_chunks(out_dir) if not (c.kind == "raw" and c.start >= n_trials)]


def chunks_digest(out_dir: str, n_trials: int) -> str:
    """SHA-256 of the chunk set of a run of ``n_trials`` trials in ``out_dir`` (:func:`_run_chunks`):
    each chunk file's name and its header's own SHA-256 (which covers the CRC-32 of every array
    the file holds, checked when it is read)."""
    listed = []
    for chunk in _run_chunks(out_dir, n_trials):
        header = store.chunk_header(os.path.join(store.chunk_dir(out_dir), chunk.name))
        listed.append([chunk.name, header.get("sha256") if isinstance(header, dict) else None])
    return hashlib.sha256(json.dumps(listed).encode()).hexdigest()


# --------------------------------------------------------------------------- reading
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
    config_path, metrics_path = os.path.join(out_dir, CONFIG_FILE), os.path.join(out_dir, METRICS_FILE)
    try:
        config_json = store.read_json(config_path)
    except store.StoreError as err:
        raise ValueError(f"{err}; is {out_dir} a finished run?") from None
    required = {
        "experiment": str,
        "parameters": dict,
        "points": list,
        "n_trials": int,
        "metrics": dict,
        "metrics_sha256": str,
        "identity_sha256": str,
        "record_sha256": str,
    }
    marker = config_json.get(SHARD_KEY) if isinstance(config_json, dict) else None
    if isinstance(marker, dict) and "metrics_sha256" not in config_json:
        of, trials = f"{marker.get('index')}/{marker.get('count')}", marker.get("trials")
        span = f"[{trials[0]}, {trials[1]})" if isinstance(trials, list) and len(trials) == 2 else "?"
        raise ValueError(
            f"{out_dir}: is shard {of} of a run (trials {span} of {config_json.get('n_trials')} per point), not a "
            "finished run: merge the shards first (jaxfed merge SHARD_DIR... --out DIR), then use DIR"
        )
    older = {k: t for k, t in required.items() if k != "record_sha256"}
    if (
        isinstance(config_json, dict)
        and "record_sha256" not in config_json
        and all(isinstance(config_json.get(k), t) for k, t in older.items())
    ):
        raise ValueError(
            f"{config_path}: was written before config.json carried its own digest (record_sha256); rerun the "
            "command that made it (it computes nothing and rewrites the record)"
        )
    if not isinstance(config_json, dict) or not all(isinstance(config_json.get(k), t) for k, t in required.items()):
        needs = ", ".join(f"{k} ({t.__name__})" for k, t in required.items())
        raise ValueError(f"{config_path}: not the config.json of a finished run (needs {needs})")
    store.verify_record(out_dir, config_json, config_path)
    if record_digest(config_json) != config_json["record_sha256"]:
        raise ValueError(
            f"{config_path}: does not match its own digest (record_sha256): it was edited after the run; "
            "rerun the command to rewrite it"
        )
    if store.list_chunks(out_dir) and chunks_digest(out_dir, config_json["n_trials"]) != config_json.get("chunks_sha256"):  # fmt: skip
        raise ValueError(
            f"{store.chunk_dir(out_dir)}: is not the chunk set {config_path} was written with (chunks_sha256); "
            "rerun the command to rewrite the record from the chunks"
        )
    if not read_metrics:
        return config_json, {}
    data = store.read_regular(metrics_path)
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
    _check_against_chunks(out_dir, config_json, results)
    _check_nonfinite(config_path, config_json, results)
    return config_json, results


def _check_against_chunks(out_dir: str, config_json: dict, results: dict) -> None:
    """ValueError unless metrics.npz is what the chunks beside it hold, bit for bit (each chunk
    read whole, its checksums verified): every raw metric holds the trials of the raw chunks and
    every trial is in one; every summary metric is the summary of its group's stored state
    (:func:`jaxfed.store.finish_summaries`, the engine's own last step)."""
    if not store.list_chunks(out_dir):
        return  # (a directory copied without its chunks: metrics.npz is checked against config.json alone)
    n_trials = config_json["n_trials"]
    raw = {name: value for name, value in results.items() if not isinstance(value, stats.Summary)}
    covered = np.zeros((len(config_json["points"]), n_trials), bool)
    summarised: set = set()
    for chunk in _run_chunks(out_dir, n_trials):
        path = os.path.join(store.chunk_dir(out_dir), chunk.name)
        if chunk.kind == "raw":
            header, arrays = store.read_chunk(path)
            (start, stop), points = header["trials"], header["point_ids"]
            stop = min(stop, n_trials)
            for metric, value in raw.items():
                if metric in arrays and not _same_bytes(arrays[metric][:, : stop - start], value[points, start:stop]):
                    raise _differs(out_dir, metric, path)
            covered[points, start:stop] = True
            continue
        stored = store.read_summary(path)
        points = stored.point_ids
        for metric, (_, summary) in store.finish_summaries(stored.states, stored.tails, stored.point_trials).items():
            value = results.get(metric)
            if not isinstance(value, stats.Summary):
                continue
            for field in stats.Summary._fields:
                if not _same_bytes(getattr(summary, field), getattr(value, field)[points]):
                    raise _differs(out_dir, metric, path)
            summarised.update(points)
    if raw and not covered.all() and len(summarised) < covered.shape[0]:
        raise ValueError(
            f"{out_dir}/{METRICS_FILE}: holds {int((~covered).sum())} (point, trial) values no chunk holds; "
            "rerun the command to rewrite it from the chunks"
        )


def _same_bytes(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == np.ascontiguousarray(b).tobytes()


def _differs(out_dir: str, metric: str, path: str) -> ValueError:
    return ValueError(
        f"{out_dir}/{METRICS_FILE}: metric {metric!r} differs from {path}; metrics.npz is not what the run's "
        "chunks hold: rerun the command to rewrite it from them"
    )


def _check_nonfinite(config_path: str, config_json: dict, results: dict) -> None:
    """ValueError unless config.json's ``nonfinite_trials`` of each raw metric counts, per point,
    the trials of metrics.npz with a NaN or ±inf in any cell."""
    recorded = config_json.get("nonfinite_trials") or {}
    for name, value in results.items():
        if isinstance(value, stats.Summary) or not np.issubdtype(value.dtype, np.inexact):
            continue
        counts = (~np.isfinite(value.reshape(value.shape[:2] + (-1,))).all(-1)).sum(axis=1)
        if name in recorded and list(recorded[name]) != counts.tolist():
            raise ValueError(f"{config_path}: nonfinite_trials of {name!r} does not count the values in metrics.npz")


def remove_own_file(path: str) -> None:
    """Removes ``path`` where it is a regular file (a report jaxfed wrote); a link or anything
    else there is left as it is (the write that follows refuses it), an absent one is no error."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def stored_record(out_dir: str) -> dict | None:
    """The config.json of ``out_dir`` when it and metrics.npz verify (see :func:`load_results`),
    or None when they cannot be used (absent, damaged, of another run)."""
    try:
        record, _ = load_results(out_dir)
    except ValueError:
        return None
    return record


def same_metrics(out_dir: str, results: Mapping) -> bool:
    """Whether ``out_dir/metrics.npz`` holds exactly ``results`` (the arrays a rerun served from
    the chunks), bit for bit: a rerun with nothing to compute keeps the stored file only then."""
    try:
        with np.load(io.BytesIO(store.read_regular(os.path.join(out_dir, METRICS_FILE))), allow_pickle=False) as z:
            stored = {key: z[key] for key in z.files}
    except (ValueError, OSError):
        return False
    given = {k: np.asarray(v) for k, v in npz_arrays(results).items()}
    return set(stored) == set(given) and all(
        stored[k].dtype == given[k].dtype
        and stored[k].shape == given[k].shape
        and stored[k].tobytes() == given[k].tobytes()
        for k in given
    )


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


# --------------------------------------------------------------------------- verdicts.json
VERDICT_COLUMNS = (
    "section",
    "claim",
    "estimate",
    "lower",
    "upper",
    "level",
    "interval",
    "p_value",
    "fraction_greater",
    "n",
    "n_dropped",
    "n_untied",
    "verdict",
    "reason",
    "trials_needed",
)
"""The fields of a claim in ``verdicts.json`` (the columns of :func:`jaxfed.results.verdicts`)."""


def verdict_records(named_sections: list) -> list[dict]:
    """The rows of ``verdicts.json``: per claim of the (section name, Reading) pairs its
    :class:`jaxfed.stats.Verdict` fields, the section and the interval as report.md prints it
    (NaN as null)."""

    def number(x):
        x = float(x)
        return x if np.isfinite(x) else None

    rows = []
    for section, reading in named_sections:
        for v in reading.verdicts:
            testable = v.verdict != stats.NOT_TESTABLE
            rows.append(
                {
                    "section": section,
                    "claim": v.claim,
                    "estimate": number(v.estimate),
                    "lower": number(v.lower),
                    "upper": number(v.upper),
                    "level": number(v.level),
                    "interval": v.interval_text() if testable else "",
                    "p_value": number(v.p_value),
                    "fraction_greater": number(v.fraction_greater),
                    "n": int(v.n),
                    "n_dropped": int(v.n_dropped),
                    "n_untied": int(v.n_untied),
                    "verdict": v.verdict,
                    "reason": v.reason,
                    # an undecided claim's trials to decide it (an estimate); null where it is decided,
                    # nothing estimates it, or no number would (its reason says which)
                    "trials_needed": None if v.trials_needed in (None, math.inf) else int(v.trials_needed),
                }
            )
    return rows


def write_verdicts(out_dir: str, named_sections: list, report: str = "report.md") -> None:
    """Writes ``<out_dir>/verdicts.json``: the claims of ``report``'s (section name, Reading) pairs
    (:func:`verdict_records`), atomically."""
    records: dict = {"format": 1, "report": report, "verdicts": verdict_records(named_sections)}
    config_path = os.path.join(out_dir, CONFIG_FILE)
    if os.path.isfile(config_path):  # a run's own directory: the verdicts name the results they were read from
        records["results_sha256"] = results_digest(store.read_json(config_path))
    records["record_sha256"] = record_digest(records)
    store.atomic_write_json(os.path.join(out_dir, VERDICTS_FILE), records)


def read_verdicts(directory: str) -> list[dict]:
    """The claims in ``<directory>/verdicts.json`` (rows of :data:`VERDICT_COLUMNS`). Read only.

    Raises:
        ValueError: no verdicts.json there (``jaxfed report DIR`` writes one), a link, or not readable.
    """
    path = os.path.join(directory, VERDICTS_FILE)
    store.check_no_link(path)
    if not os.path.lexists(path):
        raise ValueError(f"{path}: does not exist; `jaxfed report {directory}` writes it with report.md")
    records = store.read_json(path)
    if not isinstance(records, dict) or not isinstance(records.get("verdicts"), list):
        raise ValueError(f"{path}: not a verdicts file (no list of verdicts)")
    if records.get("record_sha256") != record_digest(records):
        raise ValueError(
            f"{path}: does not match its own digest (record_sha256): it was edited after the report; "
            f"`jaxfed report {directory}` rewrites it"
        )
    config_path = os.path.join(directory, CONFIG_FILE)
    if "results_sha256" in records:
        written_from, now = records["results_sha256"], results_digest(load_results(directory, False)[0])
    elif "config_record_sha256" in records:  # (a verdicts.json written before results_sha256: the whole record)
        written_from, now = records["config_record_sha256"], load_results(directory, False)[0]["record_sha256"]
    else:
        return records["verdicts"]
    if written_from != now:
        raise ValueError(
            f"{path}: was written from another record than {config_path}; `jaxfed report {directory}` rewrites it"
        )
    return records["verdicts"]
