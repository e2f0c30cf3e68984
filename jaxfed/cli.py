"""Command line: jaxfed list | show NAME | run NAME | reproduce | plot DIR | report DIR | export DIR | cache info|clear.

Errors in names, values or parameters, and any exception raised in a user experiment's code (with
the file and line), print one line ``jaxfed: error: …`` and exit with status 2; ``--debug`` (or
``JAXFED_DEBUG=1``) shows the full traceback instead.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import dataclasses
import os
import re
import signal
import sys
import threading
import time
import typing
from collections.abc import Callable

import jax
import tqdm

from jaxfed import store, validation
from jaxfed.engine import cache, devices
from jaxfed.engine.options import MAX_DEVICES as MAX_DEVICES  # (--devices at most; re-exported)
from jaxfed.engine.options import RunOptions
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.results import FORMATS, deciding, export_all, report
from jaxfed.runs import catalog, distributed, identity, run_experiment, sharding, verifying
from jaxfed.runs.catalog import find as get
from jaxfed.runs.describe import describe
from jaxfed.runs.reproduce import Overall, experiment_group
from jaxfed.runs.runner import calling_after, still_running
from jaxfed.store.rundir import load_results

DEFAULT_OUT = "results"
DEFAULT_MAX_TRIALS = 1_000_000  # trials per point at most in a precision-targeted run
DEBUG_ENV = "JAXFED_DEBUG"  # set (to anything but 0/false/no/off): tracebacks instead of one-line errors


def _parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _cmd_list(args) -> int:
    width = max(len(name) for name in REGISTRY)
    for name, exp in REGISTRY.items():
        print(f"{name:<{width}}  {exp.description}")
    return 0


def _cmd_show(args) -> int:
    print(describe(_get(args.name)))
    return 0


def _get(name: str):
    """:func:`jaxfed.runs.find`, saying on stderr when a user file's import takes long."""
    path, sep, _ = name.rpartition(":")
    if not (sep and path.endswith(".py")):
        return get(name)
    with still_running(f"importing {path}"):
        return get(name)


def _say(line: str) -> None:
    """A status line on stderr, above any progress bar (never written into one)."""
    tqdm.tqdm.write(line, file=sys.stderr)


def _quiet(args) -> bool:
    return args.progress is False  # (--quiet)


def _run_one(exp, overrides, args, out_dir, n_trials):
    """Runs one experiment with the command's run options into ``out_dir``; returns (config, config_json, results)."""
    cfg = make_config(exp.config_cls, overrides)
    options = dataclasses.replace(_run_options(args), out_dir=out_dir)
    if not _quiet(args):
        _say(f"{exp.name}: {n_trials} trials -> {out_dir}")
    config_json, results = run_experiment(exp, cfg, n_trials, options, imports=args.imported)
    engine = config_json["engine"]
    if not _quiet(args) and "served_from" in config_json:
        _say(
            f"{exp.name}: served the first {n_trials} of the {config_json['stored_trials']} stored trials "
            "(the stored run's record is left as it is)"
        )
    elif not _quiet(args):
        waited = sum(s for s in engine["compile_wait_s"] if s is not None)
        _say(
            f"{exp.name}: chunk size(s) {engine['chunk_sizes']} trials over {engine['devices']} device(s) "
            f"in {engine['processes']} process(es), kept {engine['keep']}; {config_json['wall_s']:.1f} s, of which "
            f"waiting for the compiler {waited:.1f} s{' (from the cache)' if all(engine['compile_cached']) else ''}"
        )
    return cfg, config_json, results


def _cmd_run(args) -> int:
    exp = _get(args.name)
    n_trials = exp.default_trials if args.trials is None else args.trials
    if args.target_se is None and (
        args.target_metric is not None or args.max_trials is not None or args.target_statistic is not None
    ):
        raise ValueError("--target-metric, --target-statistic and --max-trials go with --target-se X")
    if args.target_se is not None:
        if args.trials is not None:
            raise ValueError("--trials is a fixed count; with --target-se give the cap as --max-trials")
        if args.target_metric is None:
            raise ValueError("--target-se needs --target-metric NAME[@index]")
        n_trials = args.max_trials or DEFAULT_MAX_TRIALS
    if args.decide and (args.target_se is not None or args.shard is not None or args.executor is not None):
        raise ValueError("--decide grows one process's run: it does not go with --target-se, --shard or --executor")
    if args.shard is not None:
        return _cmd_run_shard(exp, args, n_trials)
    out_dir = args.out or os.path.join(args.default_out, exp.name)
    if args.executor is not None:
        return _cmd_run_on_executor(exp, args, n_trials, out_dir)
    start = time.perf_counter()
    cfg, config_json, results = _run_one(exp, _parse_sets(args.set), args, out_dir, n_trials)
    if args.decide:
        runs = {exp.name: deciding.Run(exp, cfg, config_json, results, 0, n_trials, deciding.seconds_per_trial(config_json, n_trials))}  # fmt: skip
        sections, text = _decided(runs, args, lambda name: out_dir, _parse_sets(args.set))
        path = report.write(out_dir, list(sections.items()), time.perf_counter() - start, text)
        if not _quiet(args):
            _say(f"{exp.name}: report {path}")
    elif jax.process_index() == 0 and "served_from" not in config_json:
        path = _write_report(out_dir, exp, cfg, config_json, results, time.perf_counter() - start)
        if not _quiet(args):
            _say(f"{exp.name}: report {path}")
    print(args.out_given or os.path.join(DEFAULT_OUT, exp.name))  # (as given: the run went to its absolute form)
    return 0


def _decided(runs: dict, args, out_dir_of, overrides: dict) -> tuple[dict, str]:
    """(sections, report.md's account) of ``--decide`` on ``runs`` (:func:`jaxfed.results.deciding.decide`)."""

    def grow(run, n: int, seconds_left: float):
        before = run.config_json["n_trials"]
        with _stopped_after(seconds_left):
            cfg, config_json, results = _run_one(run.exp, overrides, args, out_dir_of(run.exp.name), n)
        spt = deciding.seconds_per_trial(config_json, n - before)
        return run._replace(cfg=cfg, config_json=config_json, results=results, seconds_per_trial=spt)

    say = (lambda line: None) if _quiet(args) else _say
    sections, claims, spent, before, stopped = deciding.decide(runs, grow, args.budget, say)
    return sections, deciding.summary(claims, before, spent, args.budget, stopped)


@contextlib.contextmanager
def _stopped_after(seconds: float):
    """Raises :class:`jaxfed.results.deciding.StepStopped` in the block once ``seconds`` have
    passed: a timer thread simulates a SIGALRM in the main thread (``_thread.interrupt_main``), so
    the run stops at its next Python step, as after Ctrl-C, its finished chunks stored. No interval
    timer is touched: a real SIGALRM meanwhile (another alarm of the process, pytest-timeout's)
    goes to the handler that was there. Without SIGALRM (Windows) or off the main thread, the block
    runs to its end."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = threading.Event()

    def on_alarm(signum, frame):
        if ours.is_set():
            raise deciding.StepStopped
        if callable(previous):
            previous(signum, frame)

    def fire():
        ours.set()
        _thread.interrupt_main(signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with calling_after(max(seconds, 1e-3), fire):
            yield
    finally:
        signal.signal(signal.SIGALRM, previous)


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
    p.add_argument("--budget", type=_budget, default=1800.0, metavar="DURATION", help="with --decide: time to spend deciding (default 30m)")  # fmt: skip


def _cmd_run_shard(exp, args, n_trials: int) -> int:
    """``jaxfed run NAME --shard I/M``: one shard's trials into its own directory (no report: merge the shards)."""
    if args.target_se is not None:
        raise ValueError(
            "--shard: a precision target (--target-se) cannot be sharded: where each point stops depends on every "
            "trial before it; run it in one process"
        )
    shard = sharding.check_shard(sharding.parse_shard(args.shard), n_trials)
    out_dir = args.out or os.path.join(
        args.default_out, f"{exp.name}.shards", f"{shard.index:05d}-of-{shard.count:05d}"
    )
    start, stop = sharding.shard_range(n_trials, shard)
    if not _quiet(args):
        _say(f"{exp.name}: shard {shard} of {n_trials} trials: trials [{start}, {stop}) of each point -> {out_dir}")
    cfg = make_config(exp.config_cls, _parse_sets(args.set))
    options = dataclasses.replace(_run_options(args), out_dir=out_dir)
    sharding.compute_shard(exp, cfg, n_trials, shard, options, imports=args.imported)
    print(out_dir)
    return 0


def _cmd_merge(args) -> int:
    """``jaxfed merge DIR... --out DIR``: the shards of one run joined into the one-process run's directory."""
    start = time.perf_counter()
    out_dir = sharding.merge(args.dirs, args.out, partial=args.partial, experiment=args.experiment, imports=args.imports, mix_builds=args.mix_builds)  # fmt: skip
    if not _quiet(args):
        _say(f"merged {len(args.dirs)} shard directories in {time.perf_counter() - start:.1f} s")
    print(out_dir)
    return 0


def _cmd_run_on_executor(exp, args, n_trials: int, out_dir: str) -> int:
    """``jaxfed run NAME --executor dask://HOST:PORT``: the run's shards as Dask tasks, merged here."""
    if args.target_se is not None:
        raise ValueError("--executor: a precision target (--target-se) cannot be sharded; run it in one process")
    start, options = time.perf_counter(), _run_options(args)
    distributed.run_on_dask(
        args.executor, exp.source or exp.name, n_trials, out_dir, sets=dict(_parse_sets(args.set)),
        seed=options.seed, keep=options.keep, imports=args.imports, tasks=args.tasks, quiet=_quiet(args),
        mix_builds=options.mix_builds,
    )  # fmt: skip
    config_json, results = load_results(out_dir)
    cfg = make_config(exp.config_cls, _parse_sets(args.set))
    _write_report(out_dir, exp, cfg, config_json, results, time.perf_counter() - start)
    print(args.out_given or os.path.join(DEFAULT_OUT, exp.name))
    return 0


def _write_report(out_dir: str, exp, cfg, config_json: dict, results: dict, seconds: float) -> str:
    """``out_dir/report.md``: the verdict policy, the table of claims and the experiment's section."""
    return report.write(out_dir, [(exp.name, report.section(exp, cfg, config_json, results, seconds))], seconds)


def _reproduced(only: str | None) -> list:
    """The experiments ``jaxfed reproduce`` runs: every built-in one, or those ``--only`` names
    (comma-separated, in that order); ValueError listing the known names for an unknown one."""
    if only is None:
        return list(REGISTRY.values())
    names = list(dict.fromkeys(name.strip() for name in only.split(",") if name.strip()))
    unknown = [name for name in names if name not in REGISTRY] or ([] if names else [only])
    if unknown:
        raise ValueError(f"--only: unknown experiment(s) {', '.join(map(repr, unknown))}; known: {', '.join(REGISTRY)}")
    return [REGISTRY[name] for name in names]


REFERENCE_SECONDS: dict[str, tuple[float, float]] = {
    "gfvl-topologies": (8.1, 0.1),
    "gfvl-local-iters": (69.6, 20.1),
    "gfvl-local-iters-paper": (93.4, 25.0),
    "gfvl-unlearning": (66.7, 24.7),
    "gfvl-unlearning-paper": (71.2, 15.0),
    "gfvl-unlearning-conjugate": (30.9, 0.5),
    "gfvl-heterogeneity": (42.5, 0.7),
    "gfvl-logistic": (80.6, 44.1),
    "gfvl-wallclock": (38.8, 5.4),
    "gfvl-graphs": (20.4, 7.3),
    "kmeans-convergence": (47.8, 119.9),
    "kmeans-snr": (113.3, 408.1),
    "kmeans-ablation": (90.7, 85.0),
    "kmeans-devices": (52.1, 16.7),
    "kmeans-digits1": (11.1, 14.1),
    "kmeans-oac-counts": (37.7, 13.8),
    "kmeans-channels": (71.0, 27.1),
}
"""Per built-in experiment, what it took in a reference ``jaxfed reproduce --compilation-cache off``
at its default trial count: (seconds outside its trials: building, compiling, the figure and the
reading; seconds of its trials, point-trials / rate summed over the engine's groups' "done" lines).
The priors of the overall ETA (:func:`reproduce_priors`), which the run corrects as it goes: only
the ratios between experiments matter once one has finished. Measured at 1b5d909 (2026-12-04, the
2-core CPU shared with other jobs, load average 4-11: 29 min 48 s in all; a quiet run of 52b2204
took 5 min 50 s, docs/performance.md); the G-FVL half took 11 min 17 s, the k-means half 18 min 30 s
(the ETA of trials per point done said 3 min 54 s for it)."""


def reproduce_priors(experiments: list, trials: dict[str, int]) -> dict[str, float]:
    """Seconds each experiment is expected to take before anything has run, in run order:
    ``fixed + trials_s × n / N`` from its :data:`REFERENCE_SECONDS` (``n`` its trials per point now,
    ``N`` its default); an experiment without a reference (a registered user experiment) gets the
    mean prior of its group's experiments that have one (of all of them, if none has), else 0."""
    known = {
        exp.name: fixed + trials_s * trials[exp.name] / exp.default_trials
        for exp in experiments
        if exp.name in REFERENCE_SECONDS
        for fixed, trials_s in [REFERENCE_SECONDS[exp.name]]
    }

    def mean_of(names: list) -> float | None:
        return sum(known[n] for n in names) / len(names) if names else None

    everywhere = mean_of(list(known)) or 0.0

    def guess(name: str) -> float:
        same = mean_of([n for n in known if experiment_group(n) == experiment_group(name)])
        return everywhere if same is None else same

    return {exp.name: known[exp.name] if exp.name in known else guess(exp.name) for exp in experiments}


def _record_digest(out_dir: str) -> str | None:
    """The ``record_sha256`` of ``out_dir/config.json``, None when there is none to read."""
    try:
        record = store.read_json(os.path.join(out_dir, "config.json"))
    except (OSError, store.StoreError):
        return None
    return record.get("record_sha256") if isinstance(record, dict) else None


def _computed_here(config_json: dict, digest_before: str | None) -> bool:
    """Whether a run computed its trials here, so that its time measures this machine: it wrote a
    new record (a rerun that computed nothing keeps the stored one) and did not serve its trials
    from a larger stored run. (A resumed run that computed part of its trials counts: its time is short.)"""
    return "served_from" not in config_json and config_json.get("record_sha256") != digest_before


def _cmd_reproduce(args) -> int:
    experiments = _reproduced(args.only)
    trials = {exp.name: max(1, round(exp.default_trials * args.scale)) for exp in experiments}
    # Which experiment of how many, and an overall ETA from each experiment's reference time,
    # corrected by its group's finished ones; the engine's per-group bars open below it (on a
    # terminal), its lines between its lines (in a log).
    overall = Overall(not _quiet(args) and jax.process_index() == 0, reproduce_priors(experiments, trials))
    sections, times, start, runs_of = [], [], time.perf_counter(), {}
    for exp in experiments:
        overall.start(exp.name)
        t0, out_dir = time.perf_counter(), os.path.join(args.out, exp.name)
        digest_before = _record_digest(out_dir)
        cfg, config_json, results = _run_one(exp, {}, args, out_dir, trials[exp.name])
        runs_of[exp.name] = (cfg, config_json, results)
        times.append((exp.name, time.perf_counter() - t0))
        sections.append((exp.name, report.section(exp, cfg, config_json, results, times[-1][1])))
        overall.finish(measured=_computed_here(config_json, digest_before))
    overall.close()
    text = ""
    if args.decide:
        runs = {
            exp.name: deciding.Run(
                exp,
                cfg,
                config_json,
                results,
                0,
                trials[exp.name],
                deciding.seconds_per_trial(config_json, trials[exp.name]),
            )  # fmt: skip
            for exp, (_, sec) in zip(experiments, sections)
            for cfg, config_json, results in [runs_of[exp.name]]
        }
        decided, text = _decided(runs, args, lambda name: os.path.join(args.out, name), {})
        sections = list(decided.items())
    if jax.process_index() == 0:
        path = report.write(args.out, sections, time.perf_counter() - start, text)
        if not _quiet(args):
            width = max(len(name) for name, _ in times)
            lines = [f"  {name:<{width}}  {seconds:8.1f} s" for name, seconds in times]
            print(
                "\n".join(
                    [
                        "jaxfed reproduce: time per experiment",
                        *lines,
                        f"  {'total':<{width}}  {time.perf_counter() - start:8.1f} s",
                    ]
                ),
                file=sys.stderr,
            )
        print(path)  # the report's path, once, on stdout (for scripts)
    return 0


def _finished_run(args):
    """(experiment, config, config_json, results) of the verified run in ``args.dir``, with the code
    the user names (``--experiment``, ``--import``), never code the directory names."""
    config_json, results = load_results(args.dir)
    if config_json.get("imports", {}) != (args.imported or {}):
        raise ValueError(
            f"{args.dir} was run with --import {', '.join(sorted(config_json.get('imports', {}))) or '(nothing)'}: "
            "give the same files (a result directory never runs the code it names), unchanged (differs in "
            + "; ".join(store.describe_differences(config_json.get("imports", {}), args.imported or {}))
            + ")"
        )
    exp = _plotting_experiment(args.dir, config_json, args.experiment)
    params = {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in config_json["parameters"].items()}
    cfg = make_config(exp.config_cls, params)
    if args.experiment or config_json.get("code"):
        _check_code(args.dir, exp, cfg, config_json)
    return exp, cfg, config_json, results


def _cmd_plot(args) -> int:
    exp, cfg, config_json, results = _finished_run(args)
    path = os.path.join(args.dir, f"{exp.name}.png")
    exp.plot(cfg, config_json["points"], results, path)
    print(path)
    return 0


def _cmd_report(args) -> int:
    start = time.perf_counter()
    exp, cfg, config_json, results = _finished_run(args)
    print(_write_report(args.dir, exp, cfg, config_json, results, time.perf_counter() - start))
    return 0


def _cmd_verify(args) -> int:
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


def _plotting_experiment(out_dir: str, config_json: dict, named: str | None):
    """The experiment whose plot redraws ``out_dir``: a built-in found by the recorded name, or the
    one the user names (``--experiment``). A result directory is data: code it names (a user
    file, a plugin) is never imported on its say-so."""
    recorded = config_json["experiment"]
    # (a built-in run with user code, e.g. an --import'ed channel, is read with that code named
    # again: its digests are checked below)
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
    exp = get(named)
    if exp.name != recorded:
        raise ValueError(f"--experiment {named}: is the experiment {exp.name!r}, but {out_dir} holds {recorded!r}")
    return exp


def _check_code(out_dir: str, exp, cfg, config_json: dict) -> None:
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
    """Trials per point: an integer in [1, 2**32] (trial indices are folded into keys as 32 bits)."""
    return _argument(lambda value: validation.trial_count(value, name))


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``jaxfed: error: …``, exit status 2) instead of usage dumps."""

    def error(self, message):
        self.exit(2, f"jaxfed: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxfed", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sub.add_parser("list", help="list the experiments").set_defaults(func=_cmd_list)
    show = sub.add_parser("show", help="an experiment's parameters: default, type and meaning")
    show.add_argument("name", help="experiment name, or path/to/file.py:NAME for a user experiment")
    show.set_defaults(func=_cmd_show)
    _add_run_command(sub.add_parser("run", help="run one experiment"))
    _add_reproduce_command(sub.add_parser("reproduce", help="run every paper experiment at its default size"))
    for name, func, what in (
        ("plot", _cmd_plot, "redraw the figure of a finished run"),
        (
            "report",
            _cmd_report,
            "write DIR/report.md and report.html of a finished run (its verdicts; nothing is computed)",
        ),
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
        reader.set_defaults(func=func)
    verify = sub.add_parser("verify", help="recompute stored trials of a finished run and compare them bit for bit")
    verify.add_argument("dir", help="result directory of a finished raw run")
    verify.add_argument("--sample", type=_argument(lambda n: n if n == "all" else validation.integer("--sample", n, low=1)), default=8,
                        help="raw: trials drawn per point group (default 8), each recomputed with its micro-batch; summary: "
                        "the smallest stored block sums per group; all: everything")  # fmt: skip
    verify.add_argument("--seed", type=_argument(validation.seed), default=0, help="seed of the draw (default 0)")
    verify.add_argument("--experiment", default=None, metavar="FILE.py:NAME", help="the user or plugin experiment that wrote DIR")  # fmt: skip
    verify.set_defaults(func=_cmd_verify)
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
    merge.set_defaults(func=_cmd_merge)
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
    export.set_defaults(func=_cmd_export)


def _cmd_export(args) -> int:
    for path in export_all(args.dir, args.format, metric=args.metric, with_bands=args.bands, out=args.out):
        print(path)
    return 0


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
    parser.set_defaults(func=_cmd_cache)


def _cmd_cache(args) -> int:
    if args.action == "clear":
        before = cache.clear_cache(args.compilation_cache)
        if before.path is not None:
            print(f"removed {before.entries} compiled program(s), {_size(before.bytes)}, from {before.path}")
            return 0
    info = cache.cache_info(args.compilation_cache)
    if info.path is None:
        print(f"compilation cache: off (${cache.CACHE_ENV} or --compilation-cache says so); runs compile every program")
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
        f"${cache.CACHE_ENV})"
    )
    return 0


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.1f} MiB" if n_bytes >= 2**20 else f"{n_bytes / 2**10:.1f} KiB"


def _add_run_command(run: argparse.ArgumentParser) -> None:
    run.add_argument("name", help="experiment name (see jaxfed list), or path/to/file.py:NAME for a user experiment")
    run.add_argument(
        "--trials",
        type=_trials("trials"),
        default=None,
        help="trials per point, at most 2**32; more than a stored run's computes only the new ones",
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
        "--max-trials",
        type=_trials("max_trials"),
        default=None,
        help=f"with --target-se: the most trials per point (default {DEFAULT_MAX_TRIALS:,})",
    )
    _add_decide_options(run)
    _add_run_options(run, "run")
    _add_process_options(run)
    run.set_defaults(func=_cmd_run)


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
    rep.set_defaults(func=_cmd_reproduce)


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
    (not given: the option's own default, see :func:`_run_options`)."""
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


def _run_options(args) -> RunOptions:
    """The run options of the command line: the arguments given over the experiments' defaults
    (:meth:`jaxfed.engine.RunOptions.for_experiments`)."""
    given = {f.name: getattr(args, f.name) for f in _cli_fields(args.command)}
    return RunOptions.for_experiments(**{name: value for name, value in given.items() if value is not None})


def _env_int(name: str):
    """The variable's text (argparse passes a string default through the option's ``type``, so a
    bad value is a one-line error like a bad flag), or None when unset or empty."""
    return os.environ.get(name) or None


def _start_devices(args) -> None:
    """Device and process set-up of the commands that run (before JAX initialises its backends):
    the processes a cluster scheduler started (``--distributed auto``) or those given by hand
    joined by ``jax.distributed``; on a CPU ``--devices N`` host devices, else one per usable core
    (:func:`jaxfed.engine.devices.default_host_devices`) unless ``XLA_FLAGS`` sets a count.
    Processes started by hand may share a machine, which none of them can see: each keeps one host
    device unless ``--devices`` is given. ``jaxfed reproduce`` keeps one host device unless
    ``--devices`` is given: XLA's compile of a program already takes both cores of a 2-core CPU,
    and at the experiments' default sizes, where a group runs about as long as it compiles, every
    core did not make the whole command faster (docs/performance.md)."""
    if not hasattr(args, "distributed"):  # (list, show, plot, report run nothing)
        return
    n = args.num_processes
    cluster = devices.scheduler_processes(os.environ) if args.distributed != "off" and n != 1 else None
    by_hand = cluster is None and n is not None and n > 1
    if args.devices:
        devices.ask_host_devices(args.devices)
    elif (
        not by_hand
        and args.func is not _cmd_reproduce
        and devices.host_devices_asked(os.environ.get("XLA_FLAGS", "")) is None
    ):
        if not devices.backends_started():  # (cli.main called in a process that already uses JAX)
            devices.ask_host_devices(devices.default_host_devices())
    if by_hand:
        if not args.coordinator or args.process_id is None:
            raise ValueError(
                "a multi-process run needs --coordinator host:port and --process-id (or their JAXFED_ variables)"
            )
        validation.index("process_id", args.process_id, n, f"an index in [0, num_processes = {n})")
    if by_hand or cluster is not None:
        found = "" if cluster is None else f" ({cluster.n_processes} {cluster.scheduler} processes)"
        _initialize_distributed(args.coordinator, n, args.process_id, args.coordinator_timeout, found)
    if args.devices:
        present = jax.local_devices()
        if args.devices > len(present):
            raise ValueError(
                f"--devices {args.devices}: only {len(present)} {present[0].platform} device(s) present on this machine"
            )


def _initialize_distributed(
    coordinator: str | None, n: int | None, process_id: int | None, timeout: float, found: str = ""
) -> None:
    """:func:`jaxfed.engine.devices.start_distributed` (what is None found by JAX's cluster
    detection, ``found`` saying what it found), or one line and exit status 2 when not every
    process has reached the coordinator within ``timeout`` seconds.

    JAX itself aborts the process with a multi-line fatal log on its own timeout, so a watchdog
    thread (JAX's wait releases the interpreter) reports first and ends the process.
    """

    def give_up():
        where = f"the coordinator {coordinator}" if coordinator else f"the coordinator found by jax{found}"
        sys.stderr.write(
            f"jaxfed: error: {where} and all {n or 'the'} processes were not reachable within "
            f"{timeout:g} s (--coordinator-timeout); check the address and start every process\n"
        )
        sys.stderr.flush()
        os._exit(2)

    watchdog = threading.Timer(timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        devices.start_distributed(coordinator, n, process_id, timeout=int(timeout) + 30)  # JAX's limit after ours
    finally:
        watchdog.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The CLI only writes figures to files: the Agg backend, chosen here, when a command runs, not on
    # `import jaxfed.cli` (the library leaves the backend to its caller: a notebook keeps its own).
    import matplotlib

    matplotlib.use("Agg")
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")
    _resolve_paths(args)  # before any user code runs: a file that calls os.chdir at import moves nothing
    signals: list = []  # SIGINTs received: a KeyboardInterrupt without one was raised by code, not the user
    # An ignored SIGINT (a job started in the background, nohup, some batch runners) raises nothing: every
    # KeyboardInterrupt is then code's.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    previous = _count_interrupts(signals)
    try:
        _start_devices(args)
        with _os_exit_refused():
            with still_running(f"importing {', '.join(args.imports)}"):
                args.imported = catalog.import_extensions(args.imports)  # before any name is resolved
            return args.func(args)
    except KeyboardInterrupt as err:
        where = None if signals or (previous is None and not ignored) else catalog.user_frame(err)
        if where is not None and not debug:
            print(
                f"jaxfed: error: {where[0]}:{where[1]}: KeyboardInterrupt raised by the experiment's code (no "
                "interrupt signal was received); the run did not finish",
                file=sys.stderr,
            )
            return 2
        print("jaxfed: interrupted; rerun the same command to resume from the finished chunks", file=sys.stderr)
        return 130
    except SystemExit as err:  # (argparse's exits come before: this one is code called inside the command)
        where = catalog.user_frame(err)
        if where is None or debug:
            raise
        called = f"os._exit({err.code!r})" if isinstance(err, OsExitCalled) else f"sys.exit({err.code!r})"
        print(
            f"jaxfed: error: {where[0]}:{where[1]}: the experiment's code called {called}; "
            "the run did not finish (a file must define experiments, not exit)",
            file=sys.stderr,
        )
        return 2
    except Exception as err:
        line = None if debug else _error_line(err)
        if line is None:
            raise  # --debug, or a fault in jaxfed's own code: the traceback is the report
        print(f"jaxfed: error: {line}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class OsExitCalled(SystemExit):
    """``os._exit(status)`` called by code a command runs: raised in its place (see :func:`_os_exit_refused`)."""


@contextlib.contextmanager
def _os_exit_refused():
    """While a command runs user code, ``os._exit`` in this process raises :class:`OsExitCalled`
    (reported with the caller's file and line, exit status 2) instead of ending the process with
    the status the code chose and no result written. A forked child (another pid) still exits."""
    real, pid = os._exit, os.getpid()

    def refused(status: int) -> None:
        if os.getpid() != pid:
            real(status)
        raise OsExitCalled(status)

    os._exit = refused  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


def _resolve_paths(args) -> None:
    """Every path the command names made absolute, before any user code runs (``--out``, DIR,
    ``--import`` files, ``FILE.py:NAME``): a user file that calls ``os.chdir`` at import or in
    ``build()`` moves no result. ``args.out_given`` keeps ``--out`` as given (printed back)."""
    args.out_given = getattr(args, "out", None)
    args.default_out = os.path.abspath(DEFAULT_OUT)
    for name in ("out", "dir"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, os.path.abspath(value))
    args.imports = [os.path.abspath(path) for path in getattr(args, "imports", [])]
    for name in ("name", "experiment"):
        value = getattr(args, name, None)
        path, sep, attribute = value.rpartition(":") if isinstance(value, str) else ("", "", "")
        if sep and path.endswith(".py"):
            setattr(args, name, f"{os.path.abspath(path)}:{attribute}")


def _count_interrupts(signals: list):
    """Installs a SIGINT handler that notes each signal in ``signals`` and raises KeyboardInterrupt
    as Python's own does; returns the handler it replaced (None: left as it was, off the main
    thread or under another handler)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None

    def noted(signum, frame):
        signals.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, noted)
    return previous


def _error_line(err: Exception) -> str | None:
    """The one line that reports ``err`` (after ``jaxfed: error:``): a bad value, a path, memory,
    or any exception raised in user code (an experiment file's import, ``__post_init__``,
    ``build``, trial, plot), prefixed with the user file and line where it was raised; None for
    an unexpected exception in jaxfed's own code. A bad value, path or memory need that jaxfed
    reports (naming the parameter or file) keeps its message alone, wherever it was called from."""
    expected = isinstance(err, (ValueError, OSError, MemoryError))
    where = catalog.user_frame(err, raised_there=expected)
    at = f"{where[0]}:{where[1]}: " if where is not None else ""
    if isinstance(err, ValueError):
        return at + " ".join(str(err).split())
    if isinstance(err, OSError):  # a path that is not a directory, a read-only one, a full disk, …
        return at + (f"{err.filename}: " if err.filename else "") + str(err.strerror or err)
    if isinstance(err, MemoryError):
        return f"{at}out of memory ({' '.join(str(err).split()) or 'allocation failed'}); use smaller shapes"
    if where is None:
        return None
    first = next((text.strip() for text in str(err).splitlines() if text.strip()), "")  # JAX's run to pages
    return f"{at}{type(err).__name__}: {first} (the full traceback: --debug or {DEBUG_ENV}=1)"


def console() -> None:
    """The ``jaxfed`` command: :func:`main`, then the process ends with its exit status, even where
    user code left threads running (a non-daemon thread would keep the process alive, hanging,
    after the run was written): it says so and exits without them."""
    code = main()
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if left:
        names = ", ".join(sorted({t.name for t in left}))
        print(
            f"jaxfed: note: the experiment's code left {len(left)} thread(s) running ({names}); exiting without them",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    console()
