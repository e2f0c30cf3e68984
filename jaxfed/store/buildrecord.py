"""The builds record of a result directory (``build.json``): which builds computed its trials.

A build (:func:`jaxfed.builds.this_build`) is the JAX and jaxlib versions, the backend and the
processor; the same seed gives other last bits under another one. The record is kept apart from
``identity.json`` (directories written before it was recorded keep their identity digest). The
:class:`~jaxfed.store.runstore.Store` records its build before it computes a trial
(:meth:`~jaxfed.store.runstore.Store.claim_build`) and refuses another build's directory in the
one line :func:`build_refusal` or :func:`jax_refusal` writes.

Internal: not a public API (no ``__all__``; the public names are in tests/project/public_api.txt).
"""

from __future__ import annotations

import os

from jaxfed import builds
from jaxfed.store.chunks import _HINT
from jaxfed.store.files import StoreError, check_no_link, read_json

BUILD_FILE = "build.json"
"""The file of a result directory that records which builds computed its trials (:func:`read_builds`)."""


def read_builds(out_dir: str) -> dict | None:
    """The builds record of a result directory (its ``build.json``), or None where it has none (a
    directory written before builds were recorded, or one that never computed a trial).

    The record is ``{"builds": [build, …], "mixed": bool}``: every build (:func:`jaxfed.builds.this_build`)
    that computed trials here, in the order they came, ``mixed`` when there is more than one (only
    ever with ``mix_builds``), and ``"unrecorded": true`` when the directory held trials before its
    builds were recorded (by a build nobody wrote down).

    Args:
        out_dir: a result directory.

    Returns:
        The record (a dict), or None.

    Raises:
        StoreError: ``build.json`` is a link, unreadable or not such a record (one line naming it).
    """
    path = os.path.join(out_dir, BUILD_FILE)
    if not os.path.lexists(path):
        return None
    check_no_link(path)
    record = read_json(path)
    listed = record.get("builds") if isinstance(record, dict) else None
    if not (isinstance(listed, list) and all(isinstance(b, dict) for b in listed)):
        raise StoreError(f'{path}: is not a record of builds (a JSON object with a list "builds"); {_HINT}')
    return record


def builds_record(listed: list, unrecorded: bool = False) -> dict:
    """The ``build.json`` of the builds ``listed`` (each once, in order; see :func:`read_builds`).

    Args:
        listed: builds (:func:`jaxfed.builds.this_build` dicts), in the order they computed trials.
        unrecorded: the directory held trials before its builds were recorded.

    Returns:
        The record ``{"builds": […], "mixed": bool}`` (and ``"unrecorded": true``).
    """
    distinct: list = []
    for build in listed:
        if not any(builds.same_bits(build, b) for b in distinct):
            distinct.append(build)
    record: dict = {"builds": distinct, "mixed": len(distinct) > 1}
    if unrecorded:
        record["unrecorded"] = True
    return record


def build_refusal(where: str, stored: dict, here: dict) -> str:
    """The one line that refuses to add trials of the build ``here`` to ``where`` (a directory),
    whose trials the build ``stored`` computed: both builds, what differs and what to do.

    Args:
        where: the result directory.
        stored: the build that computed its trials.
        here: this process's build.

    Returns:
        The message, one line.
    """
    return (
        f"{where} holds trials computed by {builds.short(stored)}, this is {builds.short(here)}"
        + builds.feature_note(stored, here)
        + ": the same seed gives other last bits there; run it with the run's build "
        f"({builds.remedy(stored, here)}), use another --out directory, or pass --mix-builds (mix_builds=True) to "
        "add this build's trials and record the run as mixed"
    )


def jax_refusal(where: str, stored_jax: dict, here: dict, differing: list[str]) -> str:
    """The one line that refuses a run whose trial programs differ from those ``where`` holds, which
    a JAX of another version (``stored_jax``'s ``jax`` and ``jaxlib``) traced: mixing is impossible.

    Args:
        where: the result directory.
        stored_jax: ``{"jax", "jaxlib"}`` of the build that computed its run (:func:`recorded_jax`).
        here: this process's build.
        differing: the differing keys of the two identities (:func:`describe_differences`).

    Returns:
        The message, one line.
    """
    there = f"jax {stored_jax.get('jax')} (jaxlib {stored_jax.get('jaxlib') or stored_jax.get('jax')})"
    pip = builds.remedy(
        dict(here, jax=stored_jax.get("jax"), jaxlib=stored_jax.get("jaxlib") or stored_jax.get("jax")), here
    )
    return (
        f"{where} holds a run computed by {there}, whose trial programs this jax {here.get('jax')} (jaxlib "
        f"{here.get('jaxlib')}) traces differently (differs in {'; '.join(differing)}): the JAX version is the cause, "
        f"and trials of two JAX versions cannot be mixed; run with the run's versions ({pip}), or use another --out "
        "directory (--overwrite discards the run)"
    )


def recorded_jax(out_dir: str) -> dict | None:
    """``{"jax", "jaxlib"}`` of the build that computed the run in ``out_dir`` (its first recorded
    build; for a directory written before builds were recorded, config.json's ``versions``, which
    name JAX but not jaxlib), or None where nothing says.

    Args:
        out_dir: a result directory.

    Returns:
        ``{"jax": …, "jaxlib": …}`` (``jaxlib`` None where only config.json says), or None.
    """
    try:
        record = read_builds(out_dir)
        if record and record["builds"]:
            first = record["builds"][0]
            return {"jax": first.get("jax"), "jaxlib": first.get("jaxlib")}
        path = os.path.join(out_dir, "config.json")
        config = read_json(path) if os.path.isfile(path) and not os.path.islink(path) else None
    except StoreError:
        return None
    versions = config.get("versions") if isinstance(config, dict) else None
    jax_version = versions.get("jax") if isinstance(versions, dict) else None
    return {"jax": jax_version, "jaxlib": None} if isinstance(jax_version, str) else None
