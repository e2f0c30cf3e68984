"""The ``jaxfed`` commands: each takes the parsed arguments, calls one library function and prints
what it did (the result's path on stdout; status lines on stderr unless ``--quiet``)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import tqdm

from jaxfed.cli.parser import DEFAULT_MAX_TRIALS, DEFAULT_OUT, parse_sets, run_options
from jaxfed.engine import cache as compilation_cache
from jaxfed.engine.sizing import size_text
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.results import export_all
from jaxfed.runs import distributed, finished, launch, runner, sharding, verifying
from jaxfed.runs import reproduce as reproducing
from jaxfed.runs.describe import describe


def say(line: str) -> None:
    """A status line on stderr, above any progress bar (never written into one)."""
    tqdm.tqdm.write(line, file=sys.stderr)


def _say_unless_quiet(args: argparse.Namespace):
    return None if args.progress is False else say  # (--quiet)


def list_experiments(args: argparse.Namespace) -> int:
    """``jaxfed list``: the built-in experiments and what each shows."""
    width = max(len(name) for name in REGISTRY)
    for name, exp in REGISTRY.items():
        print(f"{name:<{width}}  {exp.description}")
    return 0


def show(args: argparse.Namespace) -> int:
    """``jaxfed show NAME``: the experiment's parameters (:func:`jaxfed.runs.describe.describe`)."""
    print(describe(launch.experiment_named(args.name)))
    return 0


DEFAULT_BUDGET_S = 1800.0
"""``--decide``'s budget without ``--budget`` (30 minutes)."""


def _budget(args: argparse.Namespace) -> float | None:
    """``--decide``'s budget in seconds (None without ``--decide``); ``--budget`` alone is refused."""
    if not args.decide:
        if args.budget is not None:
            raise ValueError(
                "--budget is the time --decide spends growing undecided runs: give --decide too, or leave --budget out"
            )
        return None
    return DEFAULT_BUDGET_S if args.budget is None else args.budget


def _trials(args: argparse.Namespace, exp) -> int:
    """The trials per point ``jaxfed run`` asks for, after refusing flags that do not go together."""
    _budget(args)
    if args.tasks is not None and args.executor is None:
        raise ValueError(
            "--tasks is the number of shards of a Dask run: give --executor dask://HOST:PORT too, or leave --tasks out"
        )
    if args.executor is not None and args.shard is not None:
        raise ValueError(
            "--executor runs every shard of the run on Dask and merges them: it does not go with --shard I/M (one "
            "shard in this process); give one of them"
        )
    if args.target_se is None and (
        args.target_metric is not None or args.max_trials is not None or args.target_statistic is not None
    ):
        raise ValueError("--target-metric, --target-statistic and --max-trials go with --target-se X")
    n_trials = exp.default_trials if args.trials is None else args.trials
    if args.target_se is not None:
        if args.trials is not None:
            raise ValueError("--trials is a fixed count; with --target-se give the cap as --max-trials")
        if args.target_metric is None:
            raise ValueError("--target-se needs --target-metric NAME[@index]")
        n_trials = args.max_trials or DEFAULT_MAX_TRIALS
    if args.decide and (args.target_se is not None or args.shard is not None or args.executor is not None):
        raise ValueError("--decide grows one process's run: it does not go with --target-se, --shard or --executor")
    if args.target_se is not None and args.shard is not None:
        raise ValueError(
            "--shard: a precision target (--target-se) cannot be sharded: where each point stops depends on every "
            "trial before it; run it in one process"
        )
    if args.target_se is not None and args.executor is not None:
        raise ValueError("--executor: a precision target (--target-se) cannot be sharded; run it in one process")
    return n_trials


def run(args: argparse.Namespace) -> int:
    """``jaxfed run NAME``: one process's run (:func:`jaxfed.runs.launch.run_named`), one shard
    (``--shard``: :func:`jaxfed.runs.sharding.compute_shard`) or the shards on Dask (``--executor``:
    :func:`jaxfed.runs.run_on_dask`)."""
    if args.executor is not None:
        distributed.scheduler_address(args.executor)  # (a bad address refused at once, before any work)
    elif args.wait_for_workers is not None:
        raise ValueError("--wait-for-workers N goes with --executor dask://HOST:PORT (the workers of that scheduler)")
    exp = launch.experiment_named(args.name)
    n_trials, sets, options, talk = _trials(args, exp), parse_sets(args.set), run_options(args), _say_unless_quiet(args)
    if args.dry_run:
        return _dry_run(args, exp, n_trials, sets, options)
    if args.shard is not None:
        shard = sharding.check_shard(sharding.parse_shard(args.shard), n_trials)
        out_dir = args.out or os.path.join(args.default_out, f"{exp.name}.shards", f"{shard.index:05d}-of-{shard.count:05d}")  # fmt: skip
        sharding.check_not_replacing(os.path.abspath(out_dir), shard)  # (before anything is said or done)
        if talk:
            start, stop = sharding.shard_range(n_trials, shard)
            talk(f"{exp.name}: shard {shard} of {n_trials} trials: trials [{start}, {stop}) of each point -> {out_dir}")
        cfg = make_config(exp.config_cls, sets)
        sharding.compute_shard(exp, cfg, n_trials, shard, dataclasses.replace(options, out_dir=out_dir), imports=args.imported)  # fmt: skip
        print(out_dir)
        return 0
    out_dir = args.out or os.path.join(args.default_out, exp.name)
    if args.executor is not None:
        distributed.run_on_dask(
            args.executor, exp.source or exp.name, n_trials, out_dir, sets=sets, seed=options.seed,
            keep=options.keep, imports=args.imports, tasks=args.tasks,
            wait_for_workers=args.wait_for_workers, quiet=talk is None, mix_builds=options.mix_builds,
        )  # fmt: skip
    else:
        budget = _budget(args)
        options = dataclasses.replace(options, out_dir=out_dir)
        _, report = launch.run_named(exp, n_trials, options, sets, imports=args.imported, budget=budget, say=talk)
        if talk and report is not None:
            talk(f"{exp.name}: report {report}")
    print(args.out_given or os.path.join(DEFAULT_OUT, exp.name))  # (as given: the run went to its absolute form)
    return 0


def _dry_run(args: argparse.Namespace, exp, n_trials: int, sets: dict, options) -> int:
    """``jaxfed run … --dry-run``: the run's (or shard's) plan on stdout (:func:`jaxfed.runs.runner.dry_run`)."""
    for flag, given in (("--executor", args.executor), ("--decide", args.decide), ("--target-se", args.target_se)):
        if given:  # (a target's chunks and a decision's growth depend on the values computed)
            raise ValueError(f"--dry-run: does not go with {flag}, whose plan depends on the trials computed")
    what, trial_range = f"{n_trials:,} trials per point", None
    if args.shard is not None:
        shard = sharding.check_shard(sharding.parse_shard(args.shard), n_trials)
        trial_range, what = sharding.shard_range(n_trials, shard), f"shard {shard} of {what}"
    options = dataclasses.replace(options, trial_range=trial_range, out_dir=args.out)
    plan = runner.dry_run(exp, make_config(exp.config_cls, sets), n_trials, options, imports=args.imported)
    start, stop = plan.trials
    print(f"{exp.name}: {what}: trials [{start:,}, {stop:,}) of each point ({stop - start:,}), keep {plan.keep}")
    print(f"micro-batch {plan.width} trials, {plan.devices} device(s), budget {size_text(plan.budget)} per device")
    for g, (points, size, chunks, need) in enumerate(plan.groups):
        print(
            f"group {g + 1}/{len(plan.groups)}: {points} point(s), {chunks:,} chunk(s) of at most {size:,} trials, "
            f"about {size_text(need)} per device (estimated from shapes; the compiled chunk's analysis decides)"
        )
    print("dry run: nothing compiled, computed or written")
    return 0


def merge(args: argparse.Namespace) -> int:
    """``jaxfed merge DIR... --out DIR``: the shards of one run joined into the one-process run's
    directory (:func:`jaxfed.runs.merge`)."""
    start = time.perf_counter()
    out_dir = sharding.merge(args.dirs, args.out, partial=args.partial, experiment=args.experiment, imports=args.imports, mix_builds=args.mix_builds)  # fmt: skip
    if args.progress is not False:
        say(f"merged {len(args.dirs)} shard directories in {time.perf_counter() - start:.1f} s")
    print(out_dir)
    return 0


def reproduce(args: argparse.Namespace) -> int:
    """``jaxfed reproduce``: every paper experiment and one report (:func:`jaxfed.runs.reproduce.reproduce`);
    the time per experiment on stderr, report.md's path on stdout."""
    talk = _say_unless_quiet(args)
    budget = _budget(args)
    done = reproducing.reproduce(
        args.out, scale=args.scale, only=args.only, options=run_options(args), imports=args.imported,
        budget=budget, say=talk,
    )  # fmt: skip
    if done.report is None:
        return 0
    if talk is not None:
        width = max(len(name) for name, _ in done.times)
        lines = [f"  {name:<{width}}  {seconds:8.1f} s" for name, seconds in done.times]
        total = f"  {'total':<{width}}  {done.seconds:8.1f} s"
        print("\n".join(["jaxfed reproduce: time per experiment", *lines, total]), file=sys.stderr)
    print(done.report)  # the report's path, once, on stdout (for scripts)
    return 0


def plot(args: argparse.Namespace) -> int:
    """``jaxfed plot DIR``: the figure drawn again (:func:`jaxfed.runs.finished.plot`)."""
    print(finished.plot(args.dir, args.experiment, args.imported))
    return 0


def report(args: argparse.Namespace) -> int:
    """``jaxfed report DIR``: report.md, verdicts.json and report.html written again
    (:func:`jaxfed.runs.finished.report`)."""
    print(finished.report(args.dir, args.experiment, args.imported))
    return 0


def verify(args: argparse.Namespace) -> int:
    """``jaxfed verify DIR``: exit status 0 when every value recomputes bit for bit, 1 when values
    differ by a few ulp as another build's do (:class:`jaxfed.runs.verifying.OtherBuild`), 2
    when values differ (an error line, as every other refusal)."""
    try:
        line = verifying.verify(args.dir, sample=args.sample, seed=args.seed, experiment=args.experiment, imports=args.imports)  # fmt: skip
    except verifying.OtherBuild as err:
        print(f"jaxfed: verify: {err}", file=sys.stderr)
        return 1
    print(line)
    return 0


def export(args: argparse.Namespace) -> int:
    """``jaxfed export DIR --format F``: the files written (:func:`jaxfed.results.export_all`)."""
    for path in export_all(args.dir, args.format, metric=args.metric, with_bands=args.bands, out=args.out):
        print(path)
    return 0


def cache(args: argparse.Namespace) -> int:
    """``jaxfed cache info|clear``: the compilation cache (:func:`jaxfed.engine.cache_info`, :func:`jaxfed.engine.clear_cache`)."""
    path = compilation_cache.compilation_cache_dir(args.compilation_cache)
    if path is not None and os.path.lexists(path) and not os.path.isdir(path):
        given = "--compilation-cache" if args.compilation_cache else f"${compilation_cache.CACHE_ENV}"
        raise ValueError(
            f"{given} {path}: is a file, not a cache folder; name a folder (a new one is created by the first run)"
        )
    if args.action == "clear":
        before = compilation_cache.clear_cache(args.compilation_cache)
        if before.path is not None:
            print(f"removed {before.entries} compiled program(s), {_size(before.bytes)}, from {before.path}")
            return 0
    info = compilation_cache.cache_info(args.compilation_cache)
    if info.path is None:
        print(
            f"compilation cache: off (${compilation_cache.CACHE_ENV} or --compilation-cache says so); runs compile every program"
        )
        return 0
    state = "" if info.exists else " (not created yet: the first run creates it)" if info.writable else " (absent)"
    print(f"compilation cache: {info.path}{state}")
    print(f"compiled programs: {info.entries}, {_size(info.bytes)}")
    if info.rejected:
        print(
            f"not loaded: {info.rejected} program(s) the cache holds were compiled again instead of loaded (JAX "
            "rejects some CPU entries on some processors: jax-ml/jax#38445); `jaxfed cache clear` starts it afresh"
        )
    print(
        "writable: yes"
        if info.writable
        else "writable: no (runs compile without it and say so; choose another with --compilation-cache or "
        f"${compilation_cache.CACHE_ENV})"
    )
    return 0


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.1f} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:.1f} KiB"


COMMANDS = {
    "list": list_experiments,
    "show": show,
    "run": run,
    "reproduce": reproduce,
    "plot": plot,
    "report": report,
    "verify": verify,
    "merge": merge,
    "export": export,
    "cache": cache,
}
"""Each command's function, by the name ``args.command`` holds."""
