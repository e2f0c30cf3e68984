"""``jaxfed run`` as one call: an experiment found by the name the command line takes, run into its
result directory (:func:`jaxfed.runs.runner.run_experiment`, which writes every file of it through
:func:`jaxfed.runs.writer.write_run`), grown with ``--decide`` where asked. :func:`run` is the
Python twin of the command (``jaxfed.run``); :func:`run_named` is what the command and :func:`run`
both call.

Internal but for :func:`run` (the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

import jax

from jaxfed import engine, validation
from jaxfed.experiment import Experiment, make_config
from jaxfed.runs import catalog, reproduce
from jaxfed.runs.runner import notice_if_slow, run_and_say

DEFAULT_OUT = "results"
"""The directory under which a run goes when none is given: ``results/NAME``."""
DEFAULT_MAX_TRIALS = 1_000_000
"""Trials per point at most in a precision-targeted run when no cap is given."""


def experiment_named(name: str) -> Experiment:
    """:func:`jaxfed.runs.catalog.find`, saying on stderr when a user file's import takes long
    (:func:`jaxfed.runs.runner.notice_if_slow`).

    Args:
        name: a built-in name, ``path/to/file.py:NAME`` or a plugin's name.

    Returns:
        The experiment.

    Raises:
        ValueError: an unknown name, or a file that defines no such experiment.
    """
    path, sep, _ = name.rpartition(":")
    if not (sep and path.endswith(".py")):
        return catalog.find(name)
    with notice_if_slow(f"importing {path}"):
        return catalog.find(name)


def set_texts(parameters: Mapping[str, object]) -> dict[str, str]:
    """Parameters as ``--set KEY=VALUE`` takes them: text as it is, a tuple or list joined by commas,
    anything else (a number, a bool) as ``str`` writes it.

    Args:
        parameters: name -> value.

    Returns:
        name -> text, for :func:`jaxfed.experiment.make_config`.
    """
    return {
        key: ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
        for key, value in parameters.items()
    }


def run_named(
    exp: Experiment,
    n_trials: int,
    options: engine.RunOptions,
    sets: Mapping[str, str],
    *,
    imports: Mapping[str, str] | None = None,
    budget: float | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[dict, str | None]:
    """One run of ``exp`` into ``options.out_dir`` with its report (``jaxfed run NAME``), or, with a
    ``budget``, grown until its claims are decided (``--decide``:
    :func:`jaxfed.runs.reproduce.run_deciding`).

    Args:
        exp: the experiment.
        n_trials: trials per point (with a precision target: the most).
        options: the run options, built once from what the caller gave; ``out_dir`` set.
        sets: the parameters as ``--set`` strings.
        imports: the user files loaded for the run (:func:`jaxfed.runs.catalog.import_extensions`).
        budget: ``--decide``'s seconds; None: no growth.
        say: status lines (None: none).

    Returns:
        (config_json, report.md's path): the run's record (``{}`` after ``--decide``) and the path
        of its report (None where none was written: trials served from a larger stored run, or a
        process other than 0).

    Raises:
        ValueError: a bad parameter or option, or what :func:`jaxfed.runs.run_experiment` raises.
    """
    config = make_config(exp.config_cls, dict(sets))
    if budget is not None:
        path = reproduce.run_deciding(exp, config, n_trials, options, sets, budget, imports=imports, say=say)
        return {}, path
    config_json, _ = run_and_say(exp, config, n_trials, options, imports=imports, say=say)
    report = os.path.join(str(options.out_dir), "report.md")
    written = jax.process_index() == 0 and "served_from" not in config_json and os.path.exists(report)
    return config_json, report if written else None


def run(
    name: str,
    trials: int | None = None,
    *,
    out: str | None = None,
    seed: int | None = None,
    options: engine.RunOptions | None = None,
    imports: Sequence[str] = (),
    **parameters,
) -> str:
    """Runs an experiment into its result directory, as ``jaxfed run NAME`` does.

    The directory gets everything the command writes: metrics.npz, config.json, the figure,
    report.md, verdicts.json and report.html (so :func:`jaxfed.verdicts` reads it), and its
    metrics.npz is byte for byte the command's. A directory that holds the same run already is
    grown (more trials) or resumed, as by the command.

    >>> import jaxfed
    >>> out = jaxfed.run("gfvl-topologies", trials=64, out="results/topo", n_slots=20)  # doctest: +SKIP
    >>> jaxfed.verdicts(out)  # doctest: +SKIP

    Args:
        name: as on the command line: a built-in experiment (``jaxfed list``), ``path/to/file.py:NAME``
            or an installed plugin's name.
        trials: trials per point (default: the experiment's own; with a precision target in
            ``options``, the most, default 1,000,000).
        out: the result directory (default ``results/NAME``, as the command's).
        seed: the run's seed (default ``options.seed``, 0).
        options: how to run it, a :class:`jaxfed.engine.RunOptions` (default
            ``RunOptions.for_experiments()``, the command's defaults); ``out`` and ``seed`` win over
            its ``out_dir`` and ``seed``.
        imports: user files to execute first (``--import FILE.py``: channels, conjugate models, …).
        **parameters: the experiment's parameters, as ``--set KEY=VALUE`` takes them: text, or
            Python values (numbers, bools; a tuple or list is joined by commas).

    Returns:
        The result directory's absolute path.

    Raises:
        ValueError: an unknown experiment, parameter or value, a bad option, or what
            :func:`jaxfed.runs.run_experiment` raises.
    """
    validation.check(
        "options", options, options is None or isinstance(options, engine.RunOptions), "a jaxfed.engine.RunOptions"
    )
    imported = catalog.import_extensions(imports)
    exp = experiment_named(name)
    options = engine.RunOptions.for_experiments() if options is None else options
    if trials is None:
        trials = DEFAULT_MAX_TRIALS if options.targeted else exp.default_trials
    out_dir = os.path.abspath(out if out is not None else options.out_dir or os.path.join(DEFAULT_OUT, exp.name))
    options = dataclasses.replace(options, out_dir=out_dir, seed=options.seed if seed is None else seed)
    run_named(exp, trials, options, set_texts(parameters), imports=imported or None)
    return out_dir
