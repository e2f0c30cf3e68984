"""Merging shards into a run's result directory, its report included: :func:`merge`
(``jaxfed merge DIR... --out DIR``).

Internal: the public name is ``jaxfed.merge`` (tests/project/public_api.txt).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from jaxfed.experiments import sharding
from jaxfed.results import report


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

    Raises:
        ValueError: one line naming what is wrong (a directory that is not a verified, finished
            shard, shards of different runs or builds, a shard given twice or missing, ``out_dir``
            an input or another run).
    """
    start = time.perf_counter()
    run = sharding.merged(shard_dirs, out_dir, partial=partial, experiment=experiment, imports=imports, mix_builds=mix_builds)  # fmt: skip
    section = report.section(run.exp, run.cfg, run.config_json, run.results, time.perf_counter() - start)
    if run.left_out:
        shown = ", ".join(f"{i}/{run.count}" for i in run.left_out)
        section = section._replace(
            settings=section.settings
            + f" **A partial merge**: shards 0–{min(run.left_out) - 1} of {run.count} ({run.config_json['n_trials']} "
            f"of {run.n_trials} trials per point); shard(s) {shown} left out."
        )
    report.write(out_dir, [(run.exp.name, section)], time.perf_counter() - start)  # type: ignore[attr-defined]
    return out_dir
