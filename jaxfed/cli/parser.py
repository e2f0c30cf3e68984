"""The ``jaxfed`` command's arguments: the parser of every command (:func:`build_parser`), the
argument types that check values in one line, and the run options built once from the arguments
(:func:`run_options`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import typing
from collections.abc import Callable

from jaxfed import validation
from jaxfed.engine import cache
from jaxfed.engine.options import RunOptions
from jaxfed.results import FORMATS
from jaxfed.runs.launch import DEFAULT_MAX_TRIALS, DEFAULT_OUT

DESCRIPTION = "jaxfed list | show NAME | run NAME | reproduce | plot DIR | report DIR | export DIR | cache info|clear."
DEBUG_ENV = "JAXFED_DEBUG"  # set (to anything but 0/false/no/off): tracebacks instead of one-line errors


def parse_sets(items: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` arguments as a mapping (parsed once per command).

    Args:
        items: the ``--set`` arguments.

    Returns:
        key -> value text.

    Raises:
        ValueError: an argument without ``=``.
    """
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _budget(text: str) -> float:
    """Seconds of a duration such as 30m, 2h, 90s or 1h30m."""
    match = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?", text.strip())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"budget must be a duration such as 30m, 2h, 90s or 1h30m, got {text!r}")
    hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return 3600 * hours + 60 * minutes + seconds


def _add_decide_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--decide",
        action="store_true",
        help="grow the runs holding undecided claims look by look (n, 2n, 4n, … trials) until they are decided "
        "or the budget is spent, keeping the stated 5%% error rate over the whole procedure (report.md says how)",
    )
    p.add_argument("--budget", type=_budget, default=None, metavar="DURATION", help="with --decide: time to spend deciding (default 30m)")  # fmt: skip


def _argument(check: Callable, parse: type = int) -> Callable[[str], object]:
    """An argparse ``type``: the text parsed by ``parse``, then checked by ``check`` (a
    :mod:`jaxfed.validation` function of the value); text that does not parse goes to the check as
    it is, so both failures name the parameter, the value and what is allowed in one line."""

    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = text
        try:
            return check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def _positive_int(name: str) -> Callable[[str], object]:
    return _argument(lambda value: validation.integer(name, value, 1))


def _positive_float(name: str) -> Callable[[str], object]:
    return _argument(lambda value: validation.positive(name, value), float)


def _trials(name: str) -> Callable[[str], object]:
    """Trials per point: an integer in [1, 2**53] (:data:`jaxfed.validation.MAX_TRIALS`)."""
    return _argument(lambda value: validation.trial_count(value, name))


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``jaxfed: error: …``, exit status 2) instead of usage dumps."""

    def error(self, message):
        self.exit(2, f"jaxfed: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxfed`` command's parser: one sub-command each (``args.command`` names it: :data:`jaxfed.cli.commands.COMMANDS`).

    Returns:
        The parser.
    """
    parser = _Parser(prog="jaxfed", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("list", help="list the experiments")
    show = sub.add_parser("show", help="an experiment's parameters: default, type and meaning")
    show.add_argument("name", help="experiment name, or path/to/file.py:NAME for a user experiment")
    _add_run_command(sub.add_parser("run", help="run one experiment"))
    _add_reproduce_command(sub.add_parser("reproduce", help="run every paper experiment at its default size"))
    for name, what in (
        ("plot", "redraw the figure of a finished run"),
        ("report", "write DIR/report.md and report.html of a finished run (its verdicts; nothing is computed)"),
    ):
        reader = sub.add_parser(name, help=what)
        reader.add_argument(
            "dir",
            help="result directory of a finished run; a run made with --import FILE.py needs the same --import again "
            "(the figure and report run that code; a directory never names code to run)",
        )
        reader.add_argument(
            "--experiment",
            default=None,
            metavar="FILE.py:NAME",
            help="the user or plugin experiment that wrote DIR (never taken from DIR itself; its code must match the run's)",
        )
    verify = sub.add_parser("verify", help="recompute stored trials of a finished run and compare them bit for bit")
    verify.add_argument("dir", help="result directory of a finished raw run")
    verify.add_argument("--sample", type=_argument(lambda n: n if n == "all" else validation.integer("--sample", n, low=1)), default=8,
                        help="raw: trials drawn per point group (default 8), each recomputed with its micro-batch; summary: "
                        "the smallest stored block sums per group; all: everything")  # fmt: skip
    verify.add_argument("--seed", type=_argument(validation.seed), default=0, help="seed of the draw (default 0)")
    verify.add_argument("--experiment", default=None, metavar="FILE.py:NAME", help="the user or plugin experiment that wrote DIR")  # fmt: skip
    merge = sub.add_parser(
        "merge", help="join the shards of one run (jaxfed run --shard I/M) into its result directory"
    )
    merge.add_argument("dirs", nargs="+", metavar="DIR", help="shard directories, in any order")
    merge.add_argument(
        "--out", required=True, help="the merged run's result directory (new, or a merge of the same run)"
    )
    merge.add_argument("--partial", action="store_true", help="merge the shards from 0 up to the first missing one (the report says so)")  # fmt: skip
    merge.add_argument("--experiment", default=None, metavar="FILE.py:NAME", help="the user or plugin experiment that wrote the shards")  # fmt: skip
    merge.add_argument("--mix-builds", action="store_true", help="merge shards computed by different builds (JAX, jaxlib, backend or processor: their values differ in the last bits); build.json then says mixed")  # fmt: skip
    merge.add_argument("--quiet", dest="progress", action="store_false", default=None, help="no status lines")
    _add_export_command(sub.add_parser("export", help="write a finished run as netCDF, or a table as CSV or Parquet"))
    _add_cache_command(sub.add_parser("cache", help="the compilation cache: where it is and its size, or clear it"))
    for command in sub.choices.values():
        command.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="FILE.py",
            help="execute this Python file first (it registers channels, conjugate models, …); recorded with "
            "its SHA-256, so growth, resume, plot and report need the same file (repeatable)",
        )
    debug = f"on an error, the full traceback instead of one line (env {DEBUG_ENV}=1)"
    parser.add_argument("--debug", action="store_true", help=debug)
    for command in sub.choices.values():  # after the command too: `jaxfed run NAME --debug`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug)
    return parser


def _add_export_command(export: argparse.ArgumentParser) -> None:
    export.add_argument(
        "dir",
        help="result directory of a finished run, or a `jaxfed reproduce` directory: every run in it "
        "(read and verified, nothing run); it reads the stored numbers only, so a run made with --import needs no "
        "--import here",
    )
    export.add_argument(
        "--format",
        required=True,
        choices=list(FORMATS),
        help="netcdf: the labelled dataset (jaxfed.open_results); csv, parquet: a table (one metric's values, or --bands)",
    )
    export.add_argument("--metric", default=None, help="this metric only (csv and parquet need it unless --bands)")
    export.add_argument(
        "--bands",
        action="store_true",
        help="the median (column q50) and 75%% band per point and index (jaxfed.bands), of --metric or of every metric",
    )
    export.add_argument(
        "--out",
        default=None,
        help="the file to write (default DIR/EXPERIMENT[.METRIC][.bands].EXT); for a reproduce directory, "
        "the directory to write each run's file into (default: each run's own directory)",
    )


def _add_cache_command(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("info", "clear"),
        help="info: the directory, its compiled programs and size, whether runs can write it; "
        "clear: remove its compiled programs (the next run of each compiles it again)",
    )
    parser.add_argument(
        "--compilation-cache",
        default=None,
        metavar="DIR",
        help=f"this directory instead of the one runs use (${cache.CACHE_ENV}, else ~/.cache/jaxfed/xla)",
    )


def _add_run_command(run: argparse.ArgumentParser) -> None:
    run.add_argument("name", help="experiment name (see jaxfed list), or path/to/file.py:NAME for a user experiment")
    run.add_argument(
        "--trials",
        type=_trials("trials"),
        default=None,
        help="trials per point, at most 2**53; more than a stored run's computes only the new ones",
    )
    run.add_argument("--out", default=None, help=f"result directory (default {DEFAULT_OUT}/NAME)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter")
    run.add_argument(
        "--shard",
        default=None,
        metavar="I/M",
        help="compute shard I of M only (trials cut on blocks of 64; default --out results/NAME.shards/I-of-M), then "
        "`jaxfed merge`; auto/M: shard SLURM_ARRAY_TASK_ID (or a Kubernetes JOB_COMPLETION_INDEX) of M; auto: a "
        "whole SLURM array's task of its count",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="plan and size the run (or --shard) without compiling or computing: its trial range, chunks and "
        "memory per device; writes nothing",
    )
    run.add_argument(
        "--executor",
        default=None,
        metavar="dask://HOST:PORT",
        help="run the shards as tasks of this Dask scheduler (the dask extra; a shared file system) and merge them",
    )
    run.add_argument(
        "--tasks",
        type=_positive_int("tasks"),
        default=None,
        help="with --executor: shards (default 4 per worker thread; a lost worker loses at most its task)",
    )
    run.add_argument(
        "--wait-for-workers",
        type=_positive_int("wait_for_workers"),
        default=None,
        metavar="N",
        help="with --executor: wait until N Dask workers have joined before cutting the run into tasks (a cluster "
        "still starting is then filled; default: the workers present, or the first to join)",
    )
    run.add_argument(
        "--max-trials",
        type=_trials("max_trials"),
        default=None,
        help=f"with --target-se: the most trials per point (default {DEFAULT_MAX_TRIALS:,})",
    )
    _add_decide_options(run)
    _add_run_options(run, "run")
    _add_process_options(run)


def _add_reproduce_command(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("--out", default=DEFAULT_OUT, help=f"result directory (default {DEFAULT_OUT})")
    rep.add_argument("--scale", type=_positive_float("scale"), default=1.0, help="multiply every default trial count")
    rep.add_argument(
        "--only",
        default=None,
        metavar="NAME[,NAME...]",
        help="run these experiments only (see jaxfed list); report.md then holds their sections only",
    )
    _add_decide_options(rep)
    _add_run_options(rep, "reproduce")
    _add_process_options(rep)


def _add_process_options(p: argparse.ArgumentParser) -> None:
    """A multi-process run's set-up (``jax.distributed``): not run options, they start the processes."""
    p.add_argument(
        "--coordinator",
        default=os.environ.get("JAXFED_COORDINATOR"),
        help="host:port of process 0 for a multi-process run (env JAXFED_COORDINATOR); under srun or mpirun "
        "found from the scheduler (--distributed auto)",
    )
    p.add_argument(
        "--num-processes",
        type=_positive_int("num_processes"),
        default=_env_int("JAXFED_NUM_PROCESSES"),
        help="processes in a multi-process run (env JAXFED_NUM_PROCESSES)",
    )
    p.add_argument(
        "--process-id",
        type=_argument(lambda value: validation.integer("process_id", value, 0)),
        default=_env_int("JAXFED_PROCESS_ID"),
        help="this process's index in [0, num-processes) (env JAXFED_PROCESS_ID)",
    )
    # A string default goes through `type` too, so a bad environment value is a one-line error.
    p.add_argument(
        "--coordinator-timeout",
        type=_positive_float("coordinator_timeout"),
        default=os.environ.get("JAXFED_COORDINATOR_TIMEOUT") or "120",
        help="seconds to wait for every process to reach the coordinator (default 120; env JAXFED_COORDINATOR_TIMEOUT)",
    )


def _cli_fields(command: str) -> list:
    """The :class:`jaxfed.engine.RunOptions` fields ``command`` offers (see :func:`jaxfed.engine.options.option`)."""
    return [
        f for f in dataclasses.fields(RunOptions) if f.metadata.get("cli", True) and command in f.metadata["commands"]
    ]


def _add_run_options(parser: argparse.ArgumentParser, command: str) -> None:
    """An argument per run option of ``command``, generated from its RunOptions field: the flag
    ``--name-with-dashes``, the type, the check, choices and help. Every argument's default is None
    (not given: the option's own default, see :func:`run_options`)."""
    hints = typing.get_type_hints(RunOptions)
    for f in _cli_fields(command):
        meta = f.metadata
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        kinds = [t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None)]
        if bool in kinds:  # a switch: to True (``--overwrite``), or off for a default that is on (``--quiet``)
            const = f.default is False
            parser.add_argument(flag, dest=f.name, action="store_const", const=const, default=None, help=meta["help"])
        elif meta["choices"] is not None:
            parser.add_argument(flag, dest=f.name, default=None, choices=meta["choices"], help=meta["help"])
        else:
            convert = _option_type(meta, kinds[0])
            parser.add_argument(
                flag, dest=f.name, type=convert, default=None, metavar=meta["metavar"], help=meta["help"]
            )


def _option_type(meta, kind: type) -> Callable[[str], object]:
    """An argparse ``type`` of a run option: its ``parse`` (which names the problem itself), or its
    type with the text given to the check when it does not parse; then its check (``cli_check``)."""
    check = meta["cli_check"] or meta["check"] or (lambda value: value)
    if meta["parse"] is None:
        return _argument(check, kind)

    def convert(text: str):
        try:
            return check(meta["parse"](text))
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def run_options(args: argparse.Namespace) -> RunOptions:
    """The run options of the command line, built once per command: the arguments given over the
    experiments' defaults (:meth:`jaxfed.engine.RunOptions.for_experiments`).

    Args:
        args: the parsed arguments of ``run`` or ``reproduce``.

    Returns:
        The options (``out_dir`` unset: each run sets its own).
    """
    given = {f.name: getattr(args, f.name) for f in _cli_fields(args.command)}
    return RunOptions.for_experiments(**{name: value for name, value in given.items() if value is not None})


def _env_int(name: str):
    """The variable's text (argparse passes a string default through the option's ``type``, so a
    bad value is a one-line error like a bad flag), or None when unset or empty."""
    return os.environ.get(name) or None
