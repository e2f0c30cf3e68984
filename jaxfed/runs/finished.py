"""A finished run read back with the code the user names (``jaxfed plot DIR``, ``jaxfed report
DIR``): a result directory is data, and the code it names (a user file, a plugin) is never imported
on its say-so.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from jaxfed import store
from jaxfed.experiment import Experiment, make_config
from jaxfed.experiments import REGISTRY
from jaxfed.results import report as reports
from jaxfed.runs import catalog, identity, writer
from jaxfed.store.rundir import load_results


def finished_run(out_dir: str, experiment: str | None = None, imports: Mapping[str, str] | None = None) -> tuple:
    """The verified run in ``out_dir`` with the code the user names, never code the directory names.

    Args:
        out_dir: the result directory.
        experiment: the user or plugin experiment that wrote it (``path/file.py:NAME``), needed
            for one that is not built in; its code must be the run's.
        imports: the user files loaded (``--import``, :func:`jaxfed.runs.catalog.import_extensions`):
            the run's own, unchanged.

    Returns:
        (experiment, config, config_json, results).

    Raises:
        ValueError: other imports or code than the run's, an experiment not built in and not
            named, or a directory that is not a verified run.
    """
    config_json, results = load_results(out_dir)
    if config_json.get("imports", {}) != (imports or {}):
        raise ValueError(
            f"{out_dir} was run with --import {', '.join(sorted(config_json.get('imports', {}))) or '(nothing)'}: "
            "give the same files (a result directory never runs the code it names), unchanged (differs in "
            + "; ".join(store.describe_differences(config_json.get("imports", {}), imports or {}))
            + ")"
        )
    exp = _plotting_experiment(out_dir, config_json, experiment)
    params = {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in config_json["parameters"].items()}
    cfg = make_config(exp.config_cls, params)
    if experiment or config_json.get("code"):
        _check_code(out_dir, exp, cfg, config_json)
    return exp, cfg, config_json, results


def plot(out_dir: str, experiment: str | None = None, imports: Mapping[str, str] | None = None) -> str:
    """Draws the figure of the finished run in ``out_dir`` again (``jaxfed plot DIR``).

    Args:
        out_dir, experiment, imports: as :func:`finished_run` takes them.

    Returns:
        The figure's path, ``out_dir/NAME.png``.

    Raises:
        ValueError: what :func:`finished_run` raises.
    """
    exp, cfg, config_json, results = finished_run(out_dir, experiment, imports)
    path = os.path.join(out_dir, f"{exp.name}.png")
    exp.plot(cfg, config_json["points"], results, path)
    return path


def report(out_dir: str, experiment: str | None = None, imports: Mapping[str, str] | None = None) -> str:
    """Writes report.md, verdicts.json and report.html of the finished run in ``out_dir`` again
    (``jaxfed report DIR``; nothing is computed), or of a reproduction's folder, interrupted or
    not (:func:`report_reproduction`).

    Args:
        out_dir, experiment, imports: as :func:`finished_run` takes them.

    Returns:
        report.md's path.

    Raises:
        ValueError: what :func:`finished_run` raises.
    """
    start = time.perf_counter()
    if _is_reproduction(out_dir):
        if experiment is not None:
            raise ValueError(
                f"--experiment {experiment}: {out_dir} is a reproduction's folder (its runs are built in); "
                "give one run's directory to report a user experiment"
            )
        return report_reproduction(out_dir, imports)
    exp, cfg, config_json, results = finished_run(out_dir, experiment, imports)
    return writer.write_report(out_dir, exp, cfg, config_json, results, time.perf_counter() - start)


def _is_reproduction(out_dir: str) -> bool:
    """Whether ``out_dir`` is a ``jaxfed reproduce`` folder rather than one run's: no run's
    config.json of its own, and its plan or a subdirectory holding one."""
    if os.path.exists(os.path.join(out_dir, "config.json")) or not os.path.isdir(out_dir):
        return False
    if os.path.isfile(os.path.join(out_dir, writer.PLAN)):
        return True
    return any(os.path.isfile(os.path.join(out_dir, name, "config.json")) for name in REGISTRY.names())


def planned(out_dir: str) -> list[str]:
    """The experiments a reproduction in ``out_dir`` set out to run, in order: its plan
    (:data:`jaxfed.runs.writer.PLAN`), or, in a folder without one, every built-in experiment.

    Args:
        out_dir: the reproduction's folder.

    Returns:
        Experiment names.

    Raises:
        ValueError: a plan that cannot be read.
    """
    path = os.path.join(out_dir, writer.PLAN)
    if not os.path.exists(path):
        return list(REGISTRY.names())
    try:
        plan = store.read_json(path)
        names = list(plan["experiments"])
    except (OSError, store.StoreError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a reproduction plan written by jaxfed reproduce ({err})") from err
    if not all(isinstance(name, str) for name in names):
        raise ValueError(f"{path}: not a reproduction plan written by jaxfed reproduce (experiment names)")
    return names


def report_reproduction(out_dir: str, imports: Mapping[str, str] | None = None) -> str:
    """``jaxfed report DIR`` of a reproduction's folder, finished or interrupted: report.md,
    verdicts.json and report.html of the experiments whose runs finished (``DIR/NAME``, read as
    :func:`finished_run` reads one run), in the planned order (:func:`planned`), naming the
    others as missing; nothing is computed.

    Args:
        out_dir: the reproduction's folder.
        imports: the user files loaded (the runs' own).

    Returns:
        report.md's path.

    Raises:
        ValueError: no planned experiment finished (the line names the folder), or a plan that
            cannot be read.
    """
    start = time.perf_counter()
    sections, missing = [], []
    for name in planned(out_dir):
        run_dir = os.path.join(out_dir, name)
        try:
            exp, cfg, config_json, results = finished_run(run_dir, None, imports)
        except (OSError, ValueError) as err:
            missing.append(f"{name} ({_why_missing(run_dir, err)})")
            continue
        sections.append((name, reports.section(exp, cfg, config_json, results, float(config_json.get("wall_s", 0.0)))))
    if not sections:
        raise ValueError(
            f"{out_dir}: no experiment of the reproduction finished ({', '.join(missing)}); nothing to report"
        )
    return writer.write_sections(out_dir, sections, time.perf_counter() - start, missing=tuple(missing))


def _why_missing(run_dir: str, err: Exception) -> str:
    """Why a planned experiment is not in the report: not run, interrupted (a directory without the
    record a finished run ends with), or its run could not be read (the error, shortened)."""
    if not os.path.isdir(run_dir):
        return "not run"
    if not os.path.exists(os.path.join(run_dir, "config.json")):
        return "interrupted"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"not read: {text[:200]}"


def _plotting_experiment(out_dir: str, config_json: dict, named: str | None) -> Experiment:
    """The experiment whose plot redraws ``out_dir``: a built-in found by the recorded name, or the
    one the user names (``--experiment``)."""
    recorded = config_json["experiment"]
    # (a built-in run with user code, e.g. an --import'ed channel, is read with that code named
    # again: its digests are checked)
    runs_code = bool(config_json.get("plugin") or config_json.get("source"))
    if named is None:
        if runs_code or recorded not in REGISTRY:
            where = config_json.get("source") or recorded
            raise ValueError(
                f"{out_dir} was written by the experiment {where!r}, which is not built in; a result directory never "
                f"runs the code it names: give the experiment yourself with --experiment path/to/file.py:NAME (or the "
                "plugin's name), after checking it"
            )
        return REGISTRY[recorded]
    exp = catalog.find(named)
    if exp.name != recorded:
        raise ValueError(f"--experiment {named}: is the experiment {exp.name!r}, but {out_dir} holds {recorded!r}")
    return exp


def _check_code(out_dir: str, exp: Experiment, cfg, config_json: dict) -> None:
    """ValueError unless the named experiment's code is the code that wrote ``out_dir`` (the
    digests of its files and its plugin's version, as in the run's identity)."""
    current = identity.code_identity(exp, cfg)
    stored = {k: config_json[k] for k in ("code", "plugin") if k in config_json}
    if current != stored:
        raise ValueError(
            f"{exp.source or exp.plugin or exp.name}: is not the code that wrote {out_dir} (differs in "
            + "; ".join(store.describe_differences(stored, current))
            + ")"
        )
