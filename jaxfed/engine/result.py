"""What a run returns: a :class:`RunResult` (metric -> raw array or summary) with its
:class:`RunInfo`, what the engine chose and measured (per group a :class:`GroupInfo`; with a
precision target a :class:`TargetInfo`), which config.json's ``"engine"`` records."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import NamedTuple


class GroupInfo(NamedTuple):
    """What the engine chose and measured for one group; all None when the store already held
    every trial and nothing was compiled."""

    chunk_size: int | None = None
    compile_s: float | None = None  # seconds spent compiling (with a device mesh)
    compile_cached: bool | None = None  # every executable came from the persistent cache
    compile_wait_s: float | None = None  # seconds the run waited for this group's compile (the rest overlapped)


class TargetInfo(NamedTuple):
    """A precision-targeted run's outcome: per point the trials run and the standard error reached."""

    se: float
    metric: str  # as given ("NAME", "NAME@i", …)
    statistic: str
    max_trials: int
    trials_per_point: list
    se_reached: list


@dataclasses.dataclass(frozen=True)
class RunInfo(Mapping):
    """What the engine chose and measured. Also read as the dict config.json's ``"engine"``
    records (:meth:`record`): ``info["chunk_sizes"]`` is ``[g.chunk_size for g in info.groups]``.

    Keys of the record: ``devices``, ``processes``, ``keep``, ``budget_bytes``,
    ``compilation_cache`` (directory or None); per group ``chunk_sizes``, ``compile_s``,
    ``compile_cached`` and ``compile_wait_s`` (:class:`GroupInfo`: groups compile side by side,
    so the run waits for less than their summed ``compile_s``); ``nonfinite_trials``:
    metric -> per point, the trials with a NaN or ±inf value; with a precision target,
    ``target`` (:class:`TargetInfo`).
    """

    devices: int
    processes: int
    budget_bytes: int
    keep: str  # "raw" or "summary"
    compilation_cache: str | None
    groups: tuple[GroupInfo, ...]
    nonfinite_trials: dict
    target: TargetInfo | None = None

    def record(self) -> dict:
        """This info as config.json's ``"engine"`` records it.

        Returns:
            A JSON dict: devices, processes, chunk sizes, budget, compile times and cache hits per
            group, the precision target's outcome (if any), keep, compilation cache, non-finite trials.
        """
        out: dict = dict(
            devices=self.devices, processes=self.processes, chunk_sizes=[g.chunk_size for g in self.groups]
        )
        out.update(budget_bytes=self.budget_bytes)
        for field in ("compile_s", "compile_cached", "compile_wait_s"):
            out[field] = [getattr(g, field) for g in self.groups]
        if self.target is not None:
            out["target"] = self.target._asdict()
        out.update(keep=self.keep, compilation_cache=self.compilation_cache, nonfinite_trials=self.nonfinite_trials)
        return out

    def __getitem__(self, key: str):
        return self.record()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.record())

    def __len__(self) -> int:
        return len(self.record())


class RunResult(dict):
    """What :func:`run` returns: a dict metric -> raw array (point, trial, …) or
    :class:`jaxfed.stats.Summary`, plus ``info``, a :class:`RunInfo`. As a labelled
    :class:`xarray.Dataset`: :func:`jaxfed.results.to_xarray` (``jaxfed.to_xarray(result, sweep)``)."""

    def __init__(self, metrics: dict, info: RunInfo):
        super().__init__(metrics)
        self.info = info
