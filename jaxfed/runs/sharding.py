"""Shards and their merge: a run computed as independent pieces, anywhere, and joined exactly.

Every trial is a pure function of (seed, point, trial index, code), and a run's results do not
depend on how its trials were chunked. So a run of N trials per point can be cut into M shards,
each the trials ``[start, stop)`` of every point (:func:`shard_range`: fixed by N and M alone,
cut on the summary's sum blocks of 64 trials), computed by separate processes on separate
machines at separate times (:func:`run_shard`: a SLURM array task, a Kubernetes indexed job, a
Dask task), and merged (:func:`merge_shards`) into the directory a one-process run writes:

- raw shards: their chunk files are the run's chunk files (the same name, header and values);
- summary shards: each keeps the aligned dyadic pieces of its block range
  (:func:`jaxfed.stats.summary.range_state`), which :func:`jaxfed.stats.summary.joined` folds in
  trial order into the state a one-process run folds, bit for bit; the last shard holds the tail.

Shards computed by different builds (:mod:`jaxfed.builds`: another JAX, jaxlib, backend or
processor, whose values differ in the last bits) are refused unless ``mix_builds``; the merged
directory's ``build.json`` lists every shard's build (mixed, where there are several).

The merged directory is then finished by the ordinary run on it, which takes every trial from the
store and computes none (``RunOptions.stored_only``: with the stored micro-batch width and platform,
so shards computed on GPUs merge on a CPU): metrics.npz is the one-process run's byte for byte.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from jaxfed import builds, engine, stats, store, validation
from jaxfed.experiment import make_config
from jaxfed.experiments import REGISTRY
from jaxfed.runs import catalog, identity
from jaxfed.runs.runner import run_experiment
from jaxfed.store import rundir

SHARD_KEY = rundir.SHARD_KEY
"""The key of a shard's config.json that says which shard it is: ``{"index", "count", "trials"}``."""


class Shard(NamedTuple):
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int  # type: ignore[assignment]  # (a field named like tuple.index: the shard's number)
    count: int  # type: ignore[assignment]  # (like tuple.count: how many shards)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_range(n_trials: int, shard: Shard) -> tuple[int, int]:
    """Trials [start, stop) of each point that ``shard`` computes in a run of ``n_trials``: the
    B = ⌈n_trials / 64⌉ sum blocks cut at ⌊i·B / M⌋ (sizes differ by at most one block), the
    last shard ending at ``n_trials``.

    >>> [shard_range(1000, Shard(i, 3)) for i in range(3)]
    [(0, 320), (320, 640), (640, 1000)]
    """
    block = stats.summary.SUMMARY_BLOCK
    n_blocks = math.ceil(n_trials / block)
    check_shard(shard, n_trials)
    first, last = shard.index * n_blocks // shard.count, (shard.index + 1) * n_blocks // shard.count
    return first * block, min(last * block, n_trials)


def check_shard(shard: Shard, n_trials: int) -> Shard:
    """``shard``, after checking it (0 <= index < count <= the run's sum blocks)."""
    n_blocks = math.ceil(n_trials / stats.summary.SUMMARY_BLOCK)
    validation.check("shard", str(shard), 1 <= shard.count, "I/M with M >= 1")
    validation.check("shard", str(shard), 0 <= shard.index < shard.count, "I/M with 0 <= I < M")
    validation.check(
        "shard",
        str(shard),
        shard.count <= n_blocks,
        f"I/M with M at most {n_blocks} for {n_trials} trials (shards are cut on blocks of "
        f"{stats.summary.SUMMARY_BLOCK} trials)",
    )
    return shard


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """``I/M``; or ``auto``: a whole SLURM array's task (``SLURM_ARRAY_TASK_ID`` −
    ``SLURM_ARRAY_TASK_MIN`` of ``SLURM_ARRAY_TASK_COUNT``: ``--array=0-99`` or ``1-100``); or
    ``auto/M``: shard ``SLURM_ARRAY_TASK_ID`` of M (an array of any ids, e.g. a rerun of some
    with ``--array=17,42``), or a Kubernetes indexed job's (``JOB_COMPLETION_INDEX`` of M)."""
    env = os.environ if environ is None else environ
    allowed = "I/M (0 <= I < M), auto (a SLURM array task) or auto/M (a Kubernetes indexed job of M completions)"
    head, _, tail = text.partition("/")
    try:
        count = int(tail) if tail else None
        if head != "auto":
            return Shard(int(head), int(tail))
    except ValueError:
        raise ValueError(f"shard: got {text!r}; expected {allowed}") from None
    if "SLURM_ARRAY_TASK_ID" in env:
        index = _env_int(env, "SLURM_ARRAY_TASK_ID")
        if count is not None:  # the array's task ids are the shard indices (a rerun of some: --array=17,42)
            return Shard(index, count)
        index -= _env_int(env, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in env else 0
        return Shard(index, _env_int(env, "SLURM_ARRAY_TASK_COUNT"))
    if "JOB_COMPLETION_INDEX" in env:
        if count is None:
            raise ValueError(
                "shard: auto found JOB_COMPLETION_INDEX (a Kubernetes indexed job) but no count: give --shard auto/M, "
                "M the job's completions"
            )
        return Shard(_env_int(env, "JOB_COMPLETION_INDEX"), count)
    raise ValueError(
        f"shard: {text} found neither SLURM_ARRAY_TASK_ID (a SLURM job array) nor JOB_COMPLETION_INDEX "
        "(a Kubernetes indexed job) in the environment; give --shard I/M"
    )


def _env_int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        raise ValueError(f"shard: the environment's {name} is {env.get(name)!r}, not an integer") from None


# --------------------------------------------------------------------------- one shard
def run_shard(
    name: str,
    n_trials: int,
    shard: Shard | tuple[int, int] | str,
    out_dir: str,
    *,
    sets: Mapping[str, str] | None = None,
    seed: int = 0,
    keep: str = "auto",
    imports: Sequence[str] = (),
    quiet: bool = True,
) -> str:
    """``jaxfed run NAME --trials N --shard I/M --out DIR`` in this process (a Dask task, a script).

    Args:
        name: the experiment, built in or ``path/file.py:NAME``.
        n_trials: the whole run's trials per point (the shard computes its range of them).
        shard: (index, count), or ``"I/M"``, ``"auto"``, ``"auto/M"`` as ``--shard`` takes them.
        out_dir: the shard's directory.
        sets: the parameters, as ``--set`` strings.
        seed: the run's root seed.
        keep: ``"raw"``, ``"summary"`` or ``"auto"``.
        imports: user files to execute first (``--import``; once per content in a process).
        quiet: no progress lines.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: one line for a bad shard, name or parameter (see :func:`compute_shard`).
    """
    shard = parse_shard(shard) if isinstance(shard, str) else Shard(*shard)
    imported = catalog.import_extensions(imports)
    exp = catalog.find(name, REGISTRY)
    cfg = make_config(exp.config_cls, dict(sets or {}))
    options = engine.RunOptions.for_experiments(seed=seed, keep=keep, out_dir=out_dir, progress=not quiet)
    compute_shard(exp, cfg, n_trials, shard, options, imported or None)
    return out_dir


def compute_shard(
    exp,
    cfg,
    n_trials: int,
    shard: Shard,
    options: engine.RunOptions,
    imports: Mapping[str, str] | None = None,
    sweep=None,
) -> dict:
    """Computes shard ``shard`` of the experiment's run of ``n_trials`` trials into
    ``options.out_dir``, a result directory of the run's identity (a rerun resumes it like any
    run) whose config.json says which shard it is; returns that record. ``sweep``: the
    experiment's ``build(cfg)`` where the caller keeps it for several shards (see
    :func:`jaxfed.runs.run_experiment`).

    Raises:
        ValueError: a bad shard, a precision target (where each point stops depends on every trial
            before it), or what :func:`jaxfed.runs.run_experiment` raises.
    """
    check_shard(shard, n_trials)
    if options.out_dir is None:
        raise ValueError("a shard needs a result directory (--out, options.out_dir)")
    if options.targeted:
        raise ValueError(
            "--shard: a precision target (--target-se) cannot be sharded: where each point stops depends on every "
            "trial before it; run it in one process"
        )
    span = shard_range(n_trials, shard)
    check_not_replacing(os.path.abspath(options.out_dir), shard)
    options = dataclasses.replace(options, trial_range=span, out_dir=os.path.abspath(options.out_dir))
    started = time.perf_counter()
    config_json, _ = run_experiment(exp, cfg, n_trials, options, imports=imports, sweep=sweep)
    config_json["wall_s"] = round(time.perf_counter() - started, 3)  # (what the merge reports as its work)
    config_json[SHARD_KEY] = {"index": shard.index, "count": shard.count, "trials": list(span)}
    kept = _kept_record(str(options.out_dir), config_json)
    return kept if kept is not None else rundir.write_shard_record(str(options.out_dir), config_json)


def _kept_record(out_dir: str, config_json: dict) -> dict | None:
    """The shard's record as it was when a rerun (a Dask call run again) computed nothing: the
    times, devices and chunk sizes of the run that computed it stay recorded. None where this run
    computed trials, or where no intact record of the same shard and trials is there."""
    if any(size is not None for size in config_json["engine"]["chunk_sizes"]):
        return None
    record = _finished_record(out_dir)
    same = ("experiment", "parameters", "seed", "n_trials", "keep", SHARD_KEY)
    if record is None or any(record.get(k) != rundir.jsonable(config_json[k]) for k in same):
        return None
    return record if record.get("record_sha256") == rundir.record_digest(record) else None


def _finished_record(out_dir: str) -> dict | None:
    """The config.json of the finished run or shard in ``out_dir``, or None where there is none (or
    none that can be read: the run's own checks then say what is wrong)."""
    path = os.path.join(out_dir, rundir.CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    try:
        record = store.read_json(path)
    except (store.StoreError, OSError):
        return None
    return record if isinstance(record, dict) and "n_trials" in record else None


def _described(record: dict) -> str:
    """ "shard 0/4 of a run of N trials per point" or "a finished run of N trials per point"."""
    part = record.get(SHARD_KEY)
    if isinstance(part, dict) and {"index", "count"} <= set(part):
        return (
            f"shard {part['index']}/{part['count']} (finished) of a run of {int(record['n_trials']):,} trials per point"
        )
    return f"a finished run of {int(record['n_trials']):,} trials per point"


def check_not_replacing(out_dir: str, shard: Shard) -> None:
    """Refuses to compute a shard where it would replace a finished run or another shard's record
    (its chunks would stay behind); the same shard resumes there.

    Args:
        out_dir: the shard's directory (absolute).
        shard: the shard to compute there.

    Raises:
        ValueError: one line naming what ``out_dir`` holds and where the shard should go instead.
    """
    record = _finished_record(out_dir)
    if record is None:
        return
    part = record.get(SHARD_KEY)
    if isinstance(part, dict) and (part.get("index"), part.get("count")) == (shard.index, shard.count):
        return
    raise ValueError(
        f"--shard {shard}: {out_dir} holds {_described(record)}; computing shard {shard} there would replace "
        "its record. Give each shard its own --out (e.g. "
        f"{os.path.join(os.path.dirname(out_dir), str(shard.index))}), or remove {out_dir} first to replace it"
    )


# --------------------------------------------------------------------------- merge
class ShardDir(NamedTuple):
    """A verified shard directory: its path, its record, its shard, its trials [start, stop) and
    the builds that computed them (its ``build.json``; None for a shard written before builds were
    recorded)."""

    path: str
    record: dict
    shard: Shard
    trials: tuple[int, int]
    builds: dict | None = None


def read_shard(path: str) -> ShardDir:
    """The shard in ``path``, its record checked against its identity and every chunk header
    (:func:`jaxfed.store.verify_record`); ValueError naming the directory otherwise."""
    record_path = os.path.join(path, rundir.CONFIG_FILE)
    try:
        record = store.read_json(record_path)
    except FileNotFoundError:
        raise ValueError(f"{path}: holds no {rundir.CONFIG_FILE}: not a finished shard (rerun its command)") from None
    if not isinstance(record, dict) or not isinstance(record.get(SHARD_KEY), dict):
        raise ValueError(f"{path}: is not a shard (its {rundir.CONFIG_FILE} names none); merge takes shard directories")
    if record.get("record_sha256") != rundir.record_digest(record):
        raise ValueError(f"{record_path}: was changed after it was written (its record digest differs)")
    marker = record[SHARD_KEY]
    shard = Shard(int(marker["index"]), int(marker["count"]))
    try:
        store.verify_record(path, record, record_path)
    except store.StoreError as err:
        raise damaged_shard(err, path, shard) from None
    trials = shard_range(int(record["n_trials"]), shard)
    if list(trials) != marker["trials"]:
        raise ValueError(
            f"{record_path}: shard {shard} of {record['n_trials']} trials is {trials}, not {marker['trials']}"
        )
    return ShardDir(path, record, shard, trials, store.read_builds(path))


def damaged_shard(err: store.StoreError, path: str, shard: Shard) -> ValueError:
    """merge's refusal of a damaged file of the shard in ``path``: the store's line naming the
    file, with the advice of a command that has it (merge has no ``--overwrite``; the shard's own
    command does) in place of the store's."""
    text = str(err)
    if not text.endswith(f"; {store.DAMAGE_HINT}"):
        return ValueError(f"merge: {text}")
    text = text[: -len(store.DAMAGE_HINT) - 2]
    return ValueError(
        f"merge: {text}; shard {shard} in {path} is damaged: run its command again with --overwrite "
        f"(jaxfed run … --shard {shard} --out {path} --overwrite) to recompute that part, then merge again"
    )


def check_one_run(shards: list[ShardDir], partial: bool) -> list[ShardDir]:
    """The shards to merge, in trial order: all of one run (experiment, parameters, seed, code:
    the identity; the trial count, the shard count, what is kept), each once, every one of them
    (or, with ``partial``, those from shard 0 up to the first one missing)."""
    if not shards:
        raise ValueError("merge: no shard directories given")
    first = shards[0]
    for other in shards[1:]:
        for key in ("identity_sha256", "n_trials", "keep"):
            if other.record.get(key) != first.record.get(key):
                if key == "identity_sha256":
                    _check_same_jax(first, other)
                raise ValueError(f"merge: {other.path} and {first.path} are not shards of one run (their {key} differ)")
        if other.shard.count != first.shard.count:
            raise ValueError(
                f"merge: {other.path} is shard {other.shard}, {first.path} shard {first.shard}: cut into different counts"
            )
    by_index: dict[int, ShardDir] = {}
    for s in shards:
        if s.shard.index in by_index:
            raise ValueError(f"merge: shard {s.shard} is given twice ({by_index[s.shard.index].path} and {s.path})")
        by_index[s.shard.index] = s
    missing = [i for i in range(first.shard.count) if i not in by_index]
    if missing and not partial:
        n = int(first.record["n_trials"])
        spans = [shard_range(n, Shard(i, first.shard.count)) for i in missing[:5]]
        shown = ", ".join(f"{i}/{first.shard.count} (trials [{a}, {b}))" for i, (a, b) in zip(missing, spans))
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ValueError(f"merge: shard(s) {shown}{more} missing; run them, or merge what is there with --partial")
    prefix = missing[0] if missing else first.shard.count
    if prefix == 0:
        raise ValueError(f"merge --partial: shard 0/{first.shard.count} is missing; a merged run starts at trial 0")
    return [by_index[i] for i in range(prefix)]


def _check_same_jax(first: ShardDir, other: ShardDir) -> None:
    """ValueError saying that the JAX version is why two shards' identities differ, where they
    differ in their trial programs alone and their JAX versions differ."""
    a, b = (store.recorded_jax(s.path) for s in (first, other))
    if a is None or b is None or a.get("jax") == b.get("jax"):
        return
    identities = [store.read_json(os.path.join(s.path, "identity.json")) for s in (first, other)]
    differing = store.describe_differences(*identities)
    if not all(line.startswith("programs") for line in differing):
        return
    raise ValueError(
        f"merge: {other.path} (shard {other.shard}) was computed by jax {b['jax']}, {first.path} (shard {first.shard}) "
        f"by jax {a['jax']}, which trace the trials to other programs (differs in {'; '.join(differing)}): the JAX "
        "version is the cause, and shards of two JAX versions cannot be merged; rerun one shard with the other's "
        f"versions (pip install jax=={a['jax']} jaxlib=={a.get('jaxlib') or a['jax']})"
    )


def check_builds(shards: list[ShardDir], mix_builds: bool) -> dict:
    """The merged run's ``build.json`` (:func:`jaxfed.store.builds_record`): every shard's builds,
    in trial order; a shard written before builds were recorded makes it ``unrecorded``.

    Raises:
        ValueError: two shards were computed by different builds (one line: both shards and
            builds, what to do), and not ``mix_builds``.
    """
    listed: list = []
    unrecorded = False
    for s in shards:
        record = s.builds or {"builds": [], "unrecorded": True}
        unrecorded = unrecorded or bool(record.get("unrecorded"))
        for build in record["builds"]:
            first = next((b for b in listed if not builds.same_bits(b, build)), None)
            if first is not None and not mix_builds:
                owner = next(t for t in shards if t.builds and any(builds.same_bits(first, b) for b in t.builds["builds"]))  # fmt: skip
                note = builds.feature_note(first, build, (f"in shard {owner.shard}", f"in shard {s.shard}"))
                raise ValueError(
                    f"merge: {s.path} (shard {s.shard}) was computed by {builds.short(build)}, {owner.path} (shard "
                    f"{owner.shard}) by {builds.short(first)}{note}: the same seed gives "
                    f"other last bits on each; rerun one shard with the other's build ({builds.remedy(first, build)}), "
                    "or pass --mix-builds (mix_builds=True) to merge them and record the run as mixed"
                )
            listed.append(build)
    return store.builds_record(listed, unrecorded)


class Merged(NamedTuple):
    """A merged run: its experiment and config, its record and results, and the shards a partial
    merge left out."""

    exp: object
    cfg: object
    config_json: dict
    results: dict
    left_out: list
    count: int  # type: ignore[assignment]  # (like tuple.count: the shards the run was cut into)
    n_trials: int  # the whole run's trials per point


def merge(
    shard_dirs: Sequence[str],
    out_dir: str,
    *,
    partial: bool = False,
    experiment: str | None = None,
    imports: Sequence[str] = (),
    mix_builds: bool = False,
) -> str:
    """Merges the shards of one run (``jaxfed run NAME --trials N --shard I/M``, in any order) into
    ``out_dir``: metrics.npz and verdicts.json equal to the one-process run's byte for byte
    (report.md too, but for its lines of how and how long it was computed); returns ``out_dir``.

    Every shard is verified (its record, identity and chunk checksums) and must be finished; the
    shards must be of one run (experiment, parameters, seed, code, trial count, shard count) and
    each given once. The inputs are only read; a rerun writes the same directory again.

    Args:
        shard_dirs: the shard directories.
        out_dir: the merged run's directory: new, empty, or an earlier merge of the same run.
        partial: merge the shards from 0 up to the first missing one (a shorter run, which
            report.md says; it can be grown with ``jaxfed run NAME --trials N --out OUT_DIR``)
            instead of refusing.
        experiment: the user or plugin experiment that wrote the shards (``path/file.py:NAME``;
            a result directory never runs the code it names); built-in ones are found by name.
        imports: the user files the shards were run with (``--import``).
        mix_builds: merge shards computed by different builds (JAX, jaxlib, backend or processor:
            :mod:`jaxfed.builds`), whose values differ in the last bits, instead of refusing; the
            merged ``build.json`` lists them all and says ``"mixed": true``.

    Returns:
        ``out_dir``.

    Raises:
        ValueError: one line naming what is wrong (a directory that is not a verified, finished
            shard, shards of different runs or builds, a shard given twice or missing, ``out_dir``
            an input or another run).
    """
    merged(shard_dirs, out_dir, partial=partial, experiment=experiment, imports=imports, mix_builds=mix_builds)
    return out_dir


def merged(
    paths: Sequence[str],
    out_dir: str,
    *,
    partial: bool = False,
    experiment: str | None = None,
    imports: Sequence[str] = (),
    mix_builds: bool = False,
) -> Merged:
    """:func:`merge_shards` of a built-in experiment found by its recorded name, or of the one
    ``experiment`` names (``path/file.py:NAME``), with the user files ``imports`` (``--import``)
    the shards ran with."""
    if not paths:
        raise ValueError("merge: no shard directories given")
    imported = catalog.import_extensions(imports)
    first = read_shard(os.path.abspath(paths[0]))
    exp, cfg = experiment_of(first.record, experiment, imported)
    config_json, results, left_out = merge_shards(paths, out_dir, exp=exp, cfg=cfg, partial=partial, imports=imported or None, mix_builds=mix_builds)  # fmt: skip
    return Merged(exp, cfg, config_json, results, left_out, first.shard.count, int(first.record["n_trials"]))


def merge_shards(
    paths: Sequence[str],
    out_dir: str,
    *,
    exp,
    cfg,
    partial: bool = False,
    imports: Mapping[str, str] | None = None,
    mix_builds: bool = False,
) -> tuple[dict, dict, list[int]]:
    """Merges the shard directories ``paths`` (any order) into ``out_dir`` and finishes it with
    the ordinary run of the experiment on it, which computes nothing (``stored_only``): (config_json, results, the
    indices of the shards left out by ``partial``). The inputs are read only; a rerun writes the
    same directory again. ``mix_builds``: merge shards that different builds computed
    (:func:`check_builds`), recording the run as mixed.

    Raises:
        ValueError: a directory that is not a verified shard, shards of different runs (or of two
            JAX versions: it says so), a shard given twice or missing (unless ``partial``), an
            unfinished shard, shards of different builds (unless ``mix_builds``), or ``out_dir``
            one of the inputs.
    """
    started = time.perf_counter()
    shards = [read_shard(os.path.abspath(p)) for p in paths]
    used = check_one_run(shards, partial)
    out_dir = os.path.abspath(out_dir)
    if any(os.path.realpath(s.path) == os.path.realpath(out_dir) for s in shards):
        raise ValueError(f"merge: --out {out_dir} is one of the shards; merge writes a new directory")
    inside = [s.path for s in shards if os.path.realpath(out_dir).startswith(os.path.realpath(s.path) + os.sep)]
    if inside:
        raise ValueError(f"merge: --out {out_dir} is inside the shard {inside[0]}; merge writes a directory of its own")
    record = used[0].record
    n_trials = used[-1].trials[1]
    built = check_builds(used, mix_builds)
    _copy_chunks(used, out_dir)
    store.atomic_write_json(os.path.join(out_dir, store.BUILD_FILE), built)
    options = engine.RunOptions.for_experiments(
        seed=int(record["seed"]), keep=record["keep"], out_dir=out_dir, progress=False, stored_only=True
    )
    left_out = sorted(set(range(used[0].shard.count)) - {s.shard.index for s in used})
    # The result directory's files, report.md included, written as after a one-process run.
    note = _partial_note(used, left_out)
    account = [shard_account(s) for s in used]
    config_json, results = run_experiment(exp, cfg, n_trials, options, imports=imports, report=note, shards=account, started=started)  # fmt: skip
    return config_json, results, left_out


def shard_account(shard: ShardDir) -> dict:
    """What the merged run's config.json records of one shard's work (``"shards"``), from the
    shard's own record: its index and trials, the seconds its last run took (``wall_s``; None for
    a shard written before shards recorded it) and compiled (summed over its groups), its devices,
    processes and chunk sizes."""
    engine_info = shard.record.get("engine", {})
    compile_s = [s for s in engine_info.get("compile_s", []) if s is not None]
    return {
        "index": shard.shard.index,
        "trials": list(shard.trials),
        "wall_s": shard.record.get("wall_s"),
        "compile_s": round(sum(compile_s), 3),
        "device": shard.record.get("device"),
        "devices": engine_info.get("devices"),
        "processes": engine_info.get("processes"),
        "chunk_sizes": engine_info.get("chunk_sizes"),
        "created": shard.record.get("created"),
    }


def _partial_note(used: list[ShardDir], left_out: list[int]) -> str:
    """What the report's settings say of a partial merge ("" for a whole one)."""
    if not left_out:
        return ""
    count, shown = used[0].shard.count, ", ".join(f"{i}/{used[0].shard.count}" for i in left_out)
    return (
        f" **A partial merge**: shards 0–{min(left_out) - 1} of {count} ({used[-1].trials[1]} "
        f"of {used[0].record['n_trials']} trials per point); shard(s) {shown} left out."
    )


def _copy_chunks(shards: list[ShardDir], out_dir: str) -> None:
    """Writes the merged run's identity and chunks into ``out_dir``: raw chunks checked and linked
    (or copied) as they are (each shard's covering its trials, or it is not finished), each
    group's summary joined in trial order."""
    identity_bytes = store.read_regular(os.path.join(shards[0].path, "identity.json"))
    _check_out(out_dir, identity_bytes, shards[-1].trials[1])
    os.makedirs(store.chunk_dir(out_dir), exist_ok=True)
    store.atomic_write_bytes(os.path.join(out_dir, "identity.json"), identity_bytes)
    for s in shards:
        raw = [c for c in store.list_chunks(s.path) if c.kind == "raw" and c.canonical]
        for group in sorted({c.group for c in raw}):
            covered = s.trials[0]
            for c in sorted((c for c in raw if c.group == group), key=lambda c: c.start):
                covered = max(covered, c.stop) if c.start <= covered else covered
            if covered < s.trials[1]:
                raise ValueError(
                    f"merge: {s.path} (shard {s.shard}) holds trials up to {covered} of [{s.trials[0]}, "
                    f"{s.trials[1]}): not finished; rerun its command"
                )
        for chunk in raw:
            path = os.path.join(store.chunk_dir(s.path), chunk.name)
            try:  # (checked here: the merged run would find it damaged under out_dir's name)
                read_stat = _lstat(path)
                data = store.read_regular(path)
                store.read_chunk(path, data)
            except store.StoreError as err:
                raise damaged_shard(err, s.path, s.shard) from None
            # Linked where the filesystem allows: the shard's bytes are not written again.
            store.atomic_link_or_write(os.path.join(store.chunk_dir(out_dir), chunk.name), path, data, read_stat)
    groups = sorted({c.group for c in store.list_chunks(shards[0].path) if c.kind == "summary"})
    for group in groups:
        _join_summaries(shards, out_dir, group)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:  # (gone: reading it says so)
        return None


def _check_out(out_dir: str, identity_bytes: bytes, n_trials: int) -> None:
    """ValueError unless ``out_dir`` is new, empty or a merge of the same run (a rerun, of
    ``n_trials`` trials per point): never a shard, a larger run (which the merge would shrink) or a
    smaller one (which it would replace)."""
    if not os.path.lexists(out_dir):
        return
    store.check_no_link(out_dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"merge: --out {out_dir} is not a directory")
    names = os.listdir(out_dir)
    if not names:
        return
    path = os.path.join(out_dir, "identity.json")
    if "identity.json" not in names and store.remove_leftovers(out_dir):
        return  # (a merge killed before it wrote the identity: its rerun starts afresh)
    if "identity.json" not in names:
        raise ValueError(f"merge: --out {out_dir} holds files that are not a jaxfed run; use a new or empty directory")
    if store.read_json(path) != json.loads(identity_bytes):
        raise ValueError(f"merge: --out {out_dir} holds another run (its identity.json differs); use a new directory")
    record = _finished_record(out_dir)
    if record is None:
        return
    if SHARD_KEY in record:
        raise ValueError(f"merge: --out {out_dir} holds {_described(record)}; merge the shards into a new directory")
    if int(record["n_trials"]) != n_trials:
        lost = "shrink it" if int(record["n_trials"]) > n_trials else "replace it"
        raise ValueError(
            f"merge: --out {out_dir} holds {_described(record)}; merging {n_trials:,} trials per point there would "
            f"{lost}. Merge into a new --out (or grow that run with jaxfed run … --trials N --out {out_dir})"
        )


def _join_summaries(shards: list[ShardDir], out_dir: str, group: int) -> None:
    """Writes group ``group``'s summary of the merged run: the shards' states joined in trial order
    (:func:`jaxfed.stats.summary.joined`), the last shard's tail."""
    states, tails, point_ids, chunk = None, None, None, None
    for s in shards:
        try:
            stored = store.read_summary(store.summary_path(s.path, group))
        except store.StoreError as err:
            raise damaged_shard(err, s.path, s.shard) from None
        if stored.stop != s.trials[1]:
            raise ValueError(
                f"merge: {s.path} (shard {s.shard}) holds trials up to {stored.stop} of [{s.trials[0]}, {s.trials[1]}): "
                "not finished; rerun its command"
            )
        if states is None:
            states, point_ids, chunk = dict(stored.states), stored.point_ids, stored.chunk
        else:
            states = {m: stats.summary.joined(states[m], stored.states[m]) for m in states}
        tails = stored.tails
    assert states is not None and tails is not None and point_ids is not None
    n = shards[-1].trials[1]
    snapshot = {m: dict(state._asdict(), tail=tails[m]) for m, state in states.items()}
    store.write_summary(out_dir, group, point_ids, np.full(len(point_ids), n).tolist(), chunk or 1, snapshot)


# --------------------------------------------------------------------------- the experiment
def experiment_of(record: dict, named: str | None, imported: Mapping[str, str] | None, what: str = "the shards"):
    """(experiment, config) of a shard's or run's record: a built-in experiment by its recorded
    name, or the one the user names (``named``, ``path/file.py:NAME``); a directory never runs code
    it names. The user files ``--import``'ed must be those the run imported. ``what``: what the
    refusals call the directories ("the shards"; ``jaxfed verify``: "the run")."""
    if record.get("imports", {}) != dict(imported or {}):
        raise ValueError(
            f"{what} ran with --import {', '.join(sorted(record.get('imports', {}))) or '(nothing)'}: "
            "give the same files, unchanged"
        )
    recorded = record["experiment"]
    if named is None:
        if record.get("plugin") or record.get("source") or recorded not in REGISTRY:
            raise ValueError(
                f"{what} came from the experiment {record.get('source') or recorded!r}, which is not built "
                "in; a result directory never runs the code it names: give it with --experiment path/to/file.py:NAME"
            )
        exp = REGISTRY[recorded]
    else:
        exp = catalog.find(named, REGISTRY)
        if exp.name != recorded:
            raise ValueError(f"--experiment {named}: is the experiment {exp.name!r}, but {what} recorded {recorded!r}")
    params = {k: ",".join(map(str, v)) if isinstance(v, list) else str(v) for k, v in record["parameters"].items()}
    cfg = make_config(exp.config_cls, params)
    code = identity.code_identity(exp, cfg)
    if code != {k: record[k] for k in ("code", "plugin") if k in record}:
        raise ValueError(f"{exp.source or exp.name}: is not the code that wrote {what} (its file digests differ)")
    return exp, cfg
