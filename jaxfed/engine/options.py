""":class:`RunOptions`: one value describes how a run is done (everything but the trial, the
points and the trial count), checked once when it is made.

Each option is declared once, as a field made by :func:`option`: its default, its documentation
(``help``), its check (a :mod:`jaxfed.validation` function of a given value) and how the command
line offers it. :func:`jaxfed.engine.run` takes the fields as keyword arguments,
:func:`jaxfed.runs.run_experiment` as ``options=`` or keyword arguments, the ``jaxfed run``
and ``jaxfed reproduce`` arguments are generated from the fields, and config.json records them
(``"options"``): a new field appears in all four places without another edit.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from jaxfed import stats, validation
from jaxfed.engine.progress import Progress
from jaxfed.engine.target import TARGET_STATISTICS

KEEP_MODES = ("raw", "summary", "auto")
"""What a run keeps: every trial, streaming summaries, or raw while the raw metrics fit in
:data:`jaxfed.engine.core.RAW_LIMIT_BYTES`."""

DISTRIBUTED_MODES = ("auto", "off")
"""Whether a run joins the processes a cluster scheduler started (see :attr:`RunOptions.distributed`)."""

COMMANDS = ("run", "reproduce")
"""The commands that take run options."""

# --devices at most: checked when the flag is parsed, before XLA creates any device (10,000 host
# devices took 28 s and 1.2 GB to create, 100,000 never finished). Host devices beyond the CPU
# cores only add overhead; 64 covers the accelerators of any one host.
MAX_DEVICES = max(64, 4 * (os.cpu_count() or 1))
_DEVICES_NOTE = f" (max(64, 4 x the {os.cpu_count() or 1} CPU cores))"


def option(
    default: Any,
    help: str,
    *,
    check: Callable[[Any], Any] | None = None,
    cli: bool = True,
    commands: tuple[str, ...] = COMMANDS,
    flag: str | None = None,
    parse: Callable[[str], Any] | None = None,
    cli_check: Callable[[Any], Any] | None = None,
    choices: tuple | None = None,
    metavar: str | None = None,
    record: bool = True,
    experiments: Any = dataclasses.MISSING,
):
    """A :class:`RunOptions` field: ``default`` and its documentation ``help`` (also the CLI's help).

    Args:
        check: called with a given (not None) value; raises a one-line ValueError or returns it.
        cli: offered by ``commands`` as ``--name-with-dashes`` (or ``flag``); False for what the
            caller (an experiment, a test) decides. A bool field is a switch: to True when its
            default is False (``--overwrite``), else to False (``progress``: ``--quiet``).
        parse: the argument's text -> value, raising ValueError with its own one-line message
            (default: the field's type, and text that does not parse goes to ``check`` as it is).
        cli_check: the check at parse time instead of ``check`` (``--devices`` is bounded
            before any device is created).
        choices, metavar: as in argparse.
        record: written to config.json's ``"options"``.
        experiments: the default of :func:`jaxfed.runs.run_experiment` and the CLI where
            it differs from the engine's (``keep``: ``"auto"``).
    """
    metadata = dict(
        help=help,
        check=check,
        cli=cli,
        commands=commands,
        flag=flag,
        parse=parse,
        cli_check=cli_check,
        choices=choices,
        metavar=metavar,
        record=record,
    )
    if experiments is not dataclasses.MISSING:
        metadata["experiments"] = experiments
    return dataclasses.field(default=default, metadata=metadata)


def parse_size(text: str) -> int:
    """'512M', '2G', '1.5GiB' or a plain number of bytes; finite and at least one byte.

    Raises:
        ValueError: ``expected a size such as 512M or 2G, got '…'``.
    """
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in "KMGT" else ""
    try:
        value = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise ValueError(f"expected a size such as 512M or 2G, got {text!r}") from None
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"expected a finite positive size such as 512M or 2G, got {text!r}")
    return int(value)


def _is(name: str, kinds: tuple, allowed: str) -> Callable[[Any], Any]:
    def check(value):
        validation.check(name, value, isinstance(value, kinds), allowed)
        return value

    return check


def _micro_batch(value):
    validation.check(
        "micro_batch",
        value,
        type(value) is int and value > 0 and value % stats.summary.SUMMARY_BLOCK == 0,
        f"a positive multiple of {stats.summary.SUMMARY_BLOCK} (trials)",
    )
    return value


def _trial_range(value):
    block = stats.summary.SUMMARY_BLOCK
    ok = (
        isinstance(value, tuple)
        and len(value) == 2
        and all(type(v) is int for v in value)
        and 0 <= value[0] < value[1]
        and value[0] % block == 0
    )
    validation.check("trial_range", value, ok, f"(start, stop) with 0 <= start < stop, start a multiple of {block}")
    return value


def _checkpoint_every(value):
    validation.check(
        "checkpoint_every", value, isinstance(value, (int, float)) and not isinstance(value, bool), "a number (seconds)"
    )
    return validation.non_negative("checkpoint_every", value)


def _target_se(value):
    validation.check("target_se", value, isinstance(value, (int, float)) and not isinstance(value, bool), "a number")
    return validation.positive("target_se", value)


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is done: seed, chunking, what is kept, devices and memory, caches, a precision
    target, the store; everything but the trial, the points and the trial count.

    Frozen, and checked once when made (``dataclasses.replace`` checks again): a bad value is one
    ``ValueError`` line naming the field, the value and what is allowed. Each field's ``help``
    (``dataclasses.fields(RunOptions)[i].metadata["help"]``) is its documentation, shown by
    ``jaxfed run --help``; see :func:`option` for how a field reaches the command line.
    """

    seed: int = option(
        0,
        "root seed in [0, 2**32): the key of (point p, trial t) is fold_in(fold_in(key(seed), p), t) (default 0)",
        check=validation.seed,
    )
    chunk_size: int | None = option(
        None,
        "trials per chunk, capped at the trial count (in summary mode rounded up to whole sum blocks); "
        "default: as many as --max-memory allows, in equal chunks",
        check=lambda value: validation.integer("chunk_size", value, 1),
    )
    max_memory: int | None = option(
        None,
        "memory budget per chunk and device, e.g. 2G (default: 1/4 of the device's); the chunk size follows "
        "from the compiled function's memory analysis",
        check=lambda value: validation.integer("max_memory", value, 1, note=" (bytes)"),
        parse=parse_size,
    )
    keep: str = option(
        "raw",
        "raw: every trial; summary: streaming summaries (count, mean, s.e., quantile histograms) computed on "
        "the device; auto: raw below 2 GiB of raw metrics (256 MiB on an accelerator, where raw is bound by the copy "
        "to the host) (default: raw in engine.run, auto in jaxfed run and run_experiment)",
        check=lambda value: validation.one_of("keep", value, KEEP_MODES),
        choices=KEEP_MODES,
        experiments="auto",
    )
    devices: int | None = option(
        None,
        f"local devices per process to shard trials over (default: all), at most {MAX_DEVICES} on the command "
        "line (on CPU it creates that many host devices; by default jaxfed run makes one host device per usable "
        "core unless XLA_FLAGS sets a count, engine.run uses those present: see engine.use_all_cores)",
        check=lambda value: validation.integer("devices", value, 1),
        cli_check=lambda value: validation.integer("devices", value, 1, MAX_DEVICES, note=_DEVICES_NOTE),
    )
    distributed: str = option(
        "auto",
        "auto: under a cluster scheduler that started several processes (srun under SLURM, mpirun under Open MPI) "
        "they are joined by jax.distributed, which finds the coordinator, process count and index from the "
        "scheduler's variables; the given --coordinator / --num-processes / --process-id win (in Python: "
        "jaxfed.engine.start_distributed() first, else the run is refused); off: every process runs on its own "
        "(default auto)",
        check=lambda value: validation.one_of("distributed", value, DISTRIBUTED_MODES),
        choices=DISTRIBUTED_MODES,
        record=False,
    )
    compilation_cache: str | None = option(
        None,
        "persistent compilation cache directory, or off (default: "
        "$JAXFED_COMPILATION_CACHE, else ~/.cache/jaxfed/xla); reruns of the same experiment and shapes skip compiling",
        check=_is("compilation_cache", (str,), "a directory or 'off'"),
        metavar="DIR|off",
    )
    overwrite: bool = option(
        False,
        "discard stored results that cannot be used (another config, damaged files, a summary of more trials than "
        "asked for) instead of refusing",
        check=_is("overwrite", (bool,), "True or False"),
    )
    checkpoint_every: float = option(
        30.0,
        "seconds between stored summary states of a running group, so a kill loses at most this much work "
        "(each group's state is also stored when it finishes; raw chunks are stored as they come); 0: after "
        "every chunk (default 30)",
        check=_checkpoint_every,
        metavar="S",
    )
    progress: bool | str | Progress | None = option(
        None,
        "no progress output (--quiet, progress=False); by default progress goes to stderr on process 0, a bar "
        "per group on a terminal (in a notebook, tqdm's notebook bar) and plain lines elsewhere, named by the "
        'text given (progress="NAME"), or to the jaxfed.engine.progress.Progress given',
        check=_is("progress", (bool, str, Progress), "True, False, None, a name or a jaxfed.engine.progress.Progress"),
        flag="--quiet",
        record=False,
    )
    target_se: float | None = option(
        None,
        "run each point until the standard error of the mean (or --target-statistic) of --target-metric is <= X "
        "(implies --keep summary; the trial count is then the most per point), deciding at chunk boundaries "
        "from completed chunks only",
        check=_target_se,
        commands=("run",),
        metavar="X",
    )
    target_metric: str | None = option(
        None,
        "the metric (and cell, e.g. loss@49 or kl@0,3) whose standard error --target-se bounds; without @index "
        "its worst cell",
        commands=("run",),
        metavar="NAME[@index]",
    )
    target_statistic: str = option(
        "mean",
        "with --target-se: whose standard error X bounds, the mean (default) or the median (from the histogram)",
        check=lambda value: validation.one_of("target_statistic", value, TARGET_STATISTICS),
        commands=("run",),
        choices=TARGET_STATISTICS,
    )
    out_dir: str | None = option(
        None,
        "result directory (process 0): finished chunks are stored there and a rerun resumes or grows the run "
        "(jaxfed.store); the command line's --out",
        check=_is("out_dir", (str, os.PathLike), "a directory path"),
        cli=False,
        record=False,
    )
    identity: dict | None = option(
        None,
        "JSON dict that identifies the run for resume (required with out_dir), without the trial count so that "
        "a run can grow (run_experiment: the experiment, parameters, points, seed, dtype)",
        check=_is("identity", (dict,), "a JSON dict"),
        cli=False,
        record=False,
    )
    mix_builds: bool = option(
        False,
        "add this machine's trials to a run (or shard) whose stored trials another build computed (another JAX "
        "or jaxlib version, backend or processor: their values differ in the last bits) instead of refusing; "
        "build.json then lists both and says mixed (a merge of such shards: jaxfed merge --mix-builds). "
        "Trials whose programs another JAX traced differently cannot be mixed",
        check=_is("mix_builds", (bool,), "True or False"),
        record=False,
    )
    common_random_numbers: bool = option(
        False,
        "every point of trial t gets the key fold_in(key(seed), t): points differ only by their parameters "
        "(run_experiment: the experiment's own)",
        check=_is("common_random_numbers", (bool,), "True or False"),
        cli=False,
    )
    micro_batch: int | None = option(
        None,
        "trials per micro-batch (default jaxfed.engine.choose_width: 512 on CPU, wider on an accelerator, a stored "
        "run's own when it grows): every trial is computed in "
        "a fixed-shape program of one point x this many trials; part of a stored run's identity "
        "(run_experiment: the experiment's own)",
        check=_micro_batch,
        cli=False,
    )
    metric_axes: dict | None = option(
        None,
        "the names of each metric's axes after (point, trial), checked against the trial's shapes before "
        "anything runs (run_experiment: the sweep's)",
        cli=False,
        record=False,
    )
    trial_range: tuple[int, int] | None = option(
        None,
        "(start, stop): compute only trials [start, stop) of each point, a shard of the run of n_trials "
        "(jaxfed run --shard I/M); start a multiple of the sum block, stop at most n_trials; everything "
        "else (the micro-batch width, keep='auto') is decided for the whole run",
        check=_trial_range,
        cli=False,
    )
    stored_only: bool = option(
        False,
        "True takes every trial from the run stored at out_dir and computes none (jaxfed merge finishes "
        "its merged shards so): the stored micro-batch width and platform are the run's whatever this "
        "machine's, so shards computed on GPUs merge on a CPU; a trial the store lacks is refused",
        check=_is("stored_only", (bool,), "True or False"),
        cli=False,
        record=False,
    )
    use_jit: bool = option(
        True,
        "False runs the same vmapped function unjitted on one device (for tests of the bookkeeping)",
        check=_is("use_jit", (bool,), "True or False"),
        cli=False,
    )

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value, check = getattr(self, f.name), f.metadata.get("check")
            if value is not None and check is not None:
                check(value)
        if self.targeted and self.trial_range is not None:
            raise ValueError(
                "a precision target (target_se) cannot run as a shard (trial_range, --shard): where each point stops "
                "depends on every trial before it; run it in one process"
            )
        if self.stored_only and (self.out_dir is None or self.overwrite):
            raise ValueError("stored_only takes every trial from a stored run: it needs out_dir, and not overwrite")
        if self.targeted and self.keep == "raw":
            raise ValueError(
                "a precision target (target_se) needs keep='summary' (--keep summary): raw runs have a fixed trial count"
            )

    @property
    def targeted(self) -> bool:
        """Whether a precision target is asked for (``target_se`` or ``target_metric`` given)."""
        return self.target_se is not None or self.target_metric is not None

    @classmethod
    def for_experiments(cls, **given) -> RunOptions:
        """The options of :func:`jaxfed.runs.run_experiment` and the CLI: ``given`` over the
        fields' experiment defaults (``keep="auto"``) over the engine's.

        Args:
            **given: fields of :class:`RunOptions` and their values.

        Returns:
            The options.

        Raises:
            ValueError: a field's value is not allowed (one line naming it); TypeError: an unknown field.
        """
        defaults = {f.name: f.metadata["experiments"] for f in dataclasses.fields(cls) if "experiments" in f.metadata}
        return cls(**{**defaults, **given})

    def record(self) -> dict:
        """The options config.json records (``"options"``).

        Returns:
            ``{field: value}`` for every field but those marked ``record=False`` (the store's path
            and identity, the progress display, the axis names).
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("record", True)}
