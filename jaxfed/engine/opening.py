"""A run's store before any work (:func:`jaxfed.engine.core.plan`): what a stored run fixes (its
micro-batch width and platform), the identity the store keeps, the store opened and verified
(process 0) with a refusal raised on every process, and the build claimed before the first trial.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from jaxfed import builds, stats
from jaxfed.engine.devices import raise_on_every_process
from jaxfed.engine.options import RunOptions
from jaxfed.engine.progress import Progress
from jaxfed.engine.target import Target
from jaxfed.store import STORE_FORMAT, Store, StoreError, stored_identity


def before_work(options: RunOptions, store: Store, sinks: list, specs_of: list, span: int) -> None:
    """With every group's sink restored: a run that computes nothing (``stored_only``) checked to
    find every trial stored; a run with trials left to compute records its build in the store first
    (:func:`_claim_build`).

    Args:
        options: the run's.
        store: the opened store.
        sinks, specs_of: per group its restored sink and its :class:`jaxfed.store.GroupSpec`.
        span: the trials per point this run computes.

    Raises:
        ValueError: a ``stored_only`` run whose store lacks trials (naming the first group);
            :class:`jaxfed.store.StoreError`: another build's trials stored, without ``mix_builds``.
    """
    if options.stored_only:
        _check_all_stored(options.out_dir, sinks, specs_of, span)
    elif not all(sink.resume().complete for sink in sinks):
        _claim_build(store)


def _check_all_stored(out_dir, sinks: list, specs_of: list, span: int) -> None:
    """ValueError naming the first group whose store lacks trials, for a run that computes none."""
    for g, (sink, spec) in enumerate(zip(sinks, specs_of)):
        resume = sink.resume()
        if not resume.complete:
            wanted = len(spec.point_ids) * span
            raise ValueError(
                f"{out_dir}: group {g + 1} holds {resume.done} of its {wanted} point-trials; stored_only computes none"
            )


def stored_run(options: RunOptions) -> tuple[int, str]:
    """What the run stored in ``options.out_dir`` was computed with, for a run that takes every
    trial from it (``stored_only``, one process).

    Args:
        options: the run's (``out_dir`` given).

    Returns:
        (micro-batch width, platform) of the stored run.

    Raises:
        ValueError: more than one process, or no stored run in ``out_dir``.
    """
    if jax.process_count() != 1:
        raise ValueError("stored_only runs in one process (a merge computes nothing to share out)")
    stored = stored_identity(str(options.out_dir))  # (stored_only implies out_dir: RunOptions checks it)
    width = None if stored is None else stored.get("micro_batch")
    where = None if stored is None else stored.get("platform")
    if type(width) is not int or not isinstance(where, str):
        raise ValueError(f"{options.out_dir}: holds no stored run to take every trial from (stored_only)")
    return width, where


def stored_width(options: RunOptions, where: str) -> int | None:
    """The micro-batch width a run that grows or resumes the one stored in ``options.out_dir``
    keeps: growth and resume compute every trial at the width the run began with.

    Args:
        options: the run's.
        where: this run's platform.

    Returns:
        The stored run's width on process 0; None elsewhere, without a stored run, with
        ``overwrite`` or on another platform (where the store refuses the run or starts it anew).
    """
    if options.out_dir is None or options.overwrite or jax.process_index() != 0:
        return None
    stored = stored_identity(options.out_dir)
    width = None if stored is None else stored.get("micro_batch")
    if stored is None or stored.get("platform") != where or type(width) is not int:
        return None
    return width if width > 0 and width % stats.summary.SUMMARY_BLOCK == 0 else None


def coloured_aliases(identity: dict | None, programs: list, coloured: Callable[[], list]):
    """The identity a run started in a terminal stored before program digests were canonical, if it
    differs: a generator, so that the store prints the programs again only when the identity it
    holds is not ``identity`` (:class:`jaxfed.store.Store` reads its ``aliases`` only then).

    Args:
        identity: the store's identity (None: no store).
        programs: its canonical program digests.
        coloured: returns the digests as a terminal coloured them.

    Returns:
        A generator of at most one identity, ``identity`` with the coloured digests.
    """
    if identity is None:
        return
    digests = coloured()
    if digests != programs:
        yield dict(identity, programs=digests)


def store_identity(options: RunOptions, width: int, where: str, programs: list, target: Target | None) -> dict:
    """The identity the store keeps: the caller's plus what a trial's compiled program depends on,
    so that a trial computed at another micro-batch width, on another platform or by another
    program is not mixed in (and where each point stops, with a target).

    Args:
        options: the run's (its ``identity``, seed, common random numbers, target metric).
        width, where: the run's micro-batch width and platform.
        programs: per group the digest of one trial's program.
        target: the run's precision target, or None.

    Returns:
        The JSON dict of the identity.
    """
    identity = dict(
        options.identity or {},
        seed=options.seed,
        common_random_numbers=bool(options.common_random_numbers),
        store_format=STORE_FORMAT,
        micro_batch=width,
        platform=where,
        programs=programs,
    )
    if target is not None:
        identity["target"] = {"se": target.se, "metric": options.target_metric}
        if target.statistic != "mean":  # (stores of mean-targeted runs keep their identity)
            identity["target"]["statistic"] = target.statistic
    return identity


def open_store(options: RunOptions, identity: dict | None, bar: Progress, is_main: bool, resources, aliases=(), where: str | None = None) -> Store:  # fmt: skip
    """The store (process 0 reads and verifies every stored file before anything is compiled or
    computed), closed with ``resources``; a refusal is raised on every process. It is given this
    process's build on the platform ``where`` (:func:`jaxfed.builds.this_build`; none for a run
    that computes nothing), which it records before the first trial is computed (:func:`_claim_build`).

    Args:
        options: the run's (``out_dir``, ``overwrite``, ``trial_range``, ``mix_builds``).
        identity: from :func:`store_identity` (None: no store).
        bar: the run's progress display, whose ``note`` the store speaks through.
        is_main: whether this is process 0 (the others open no directory).
        resources: the plan's exit stack, which closes the store.
        aliases: identities the stored one may equal instead (:func:`coloured_aliases`).
        where: the run's platform.

    Returns:
        The :class:`jaxfed.store.Store`.

    Raises:
        StoreError: an unusable ``out_dir`` or stored file, on every process.
    """
    refusal: StoreError | None = None
    store = None
    try:
        out_dir = options.out_dir if is_main else None
        build = None if options.stored_only or out_dir is None else builds.this_build(where)
        first = options.trial_range[0] if options.trial_range else 0
        store = Store(out_dir, identity or {}, options.overwrite, note=bar.note, aliases=aliases, first_trial=first, build=build, mix_builds=options.mix_builds)  # fmt: skip
        resources.callback(store.close)
    except StoreError as err:
        refusal = err
    raise_on_every_process(refusal)
    assert store is not None
    return store


def _claim_build(store: Store) -> None:
    """Records this build in the store before any trial is computed (process 0's: the store is
    there), refused where another build computed the stored trials without ``mix_builds``
    (:meth:`jaxfed.store.Store.claim_build`); a refusal is raised on every process. A run that
    computes nothing (every trial stored) claims nothing, so a finished run is read, reported and
    served on any machine."""
    refusal: StoreError | None = None
    try:
        store.claim_build()
    except StoreError as err:
        refusal = err
    raise_on_every_process(refusal)
