"""Memory: what a run is allowed to allocate (host results, a chunk on the device) and the chunk
size that follows, refused with one line before anything is computed when it does not fit."""

from __future__ import annotations

import math
import os

import numpy as np

from jaxfed import stats

BUDGET_FOR_CHUNKS = 0.75  # share of the budget a chunk's buffers may take


HOST_FRACTION = 0.75  # share of the host's memory that raw results or summary states may take


SUMMARY_BYTES_PER_BIN = 20  # int32: state, a chunk's counts, the folded state, the one being written and its bytes


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def balanced_chunk(n_trials: int, fits: int, step: int) -> int:
    """The chunk size for ``n_trials`` when at most ``fits`` trials fit in one chunk: as few
    chunks as fit, of equal size (a multiple of ``step``), so that the last one is not mostly
    padding (262,144 trials in chunks of 190,784 computed 381,568).

    ceil(n / ceil(n / fits)) rounded up to ``step``; at least ``step``, at most ``n_trials``.
    """
    fits = max(step, fits // step * step)
    n_chunks = -(-n_trials // fits)
    return min(n_trials, round_up(-(-n_trials // n_chunks), step))


def trial_bytes(n_points: int, specs: dict) -> int:
    """Bytes of one trial's metrics (``specs``: metric -> (shape, dtype)) at every one of ``n_points`` points."""
    return n_points * sum(math.prod(shape) * np.dtype(dt).itemsize for shape, dt in specs.values())


def host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def size_text(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, e.g. ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


def check_host_memory(keep: str, n_points: int, n_trials: int, specs: dict) -> None:
    """Refuses, before anything is allocated, results that cannot fit in the host's memory."""
    cells = sum(math.prod(shape) for shape, _ in specs.values())
    if keep == "raw":
        need = n_trials * trial_bytes(n_points, specs)
        hint = "keep fewer trials or use keep='summary' (--keep summary)"
    else:
        need = n_points * cells * (stats.N_BINS * SUMMARY_BYTES_PER_BIN + 64)
        hint = "use smaller metric shapes"
    budget = HOST_FRACTION * host_memory()
    if need > budget:
        raise ValueError(
            f"keep={keep!r}: the results would need {size_text(need)} of host memory, more than the budget of "
            f"{size_text(budget)} ({HOST_FRACTION:.0%} of this machine's); {hint}"
        )


def refuse_chunk(chunk_size: int, minimum: bool, need: float, budget: int) -> None:
    if need > budget:
        what, hint = (
            (f"the smallest chunk ({chunk_size} trials)", "smaller shapes")
            if minimum
            else (f"a chunk of {chunk_size} trials", "a smaller chunk size")
        )
        raise ValueError(
            f"{what} would need {size_text(need)} per device, more than the memory budget of {size_text(budget)} "
            f"(--max-memory / max_memory); use {hint} or a larger budget"
        )


def check_chunk_outputs(
    n_points: int, specs: dict, chunk_size: int | None, n_devices: int, width: int, budget: int
) -> None:
    """Refuses a chunk whose outputs alone (a device's share plus the host copy) exceed the
    budget: the smallest chunk (a micro-batch of ``width`` trials on every device), or the given
    one. Needs only shapes, so it runs before compiling."""
    step = width * n_devices
    batch = step if chunk_size is None else round_up(chunk_size, step)
    out_per_trial = trial_bytes(n_points, specs)
    refuse_chunk(chunk_size or step, chunk_size is None, batch * out_per_trial * (1 + 1 / n_devices), budget)


def summary_output_bytes(n_points: int, specs: dict) -> int:
    """Bytes of a summary chunk's outputs that do not grow with the batch: int32 counts and
    histograms, the float64 partial sums (at most 2 per level and sum), and the raw tail block."""
    per_cell = 4 * (stats.N_BINS + 2) + 8 * 2 * 2 * stats.SUM_LEVELS
    return n_points * sum(
        math.prod(shape) * (per_cell + stats.SUMMARY_BLOCK * np.dtype(dt).itemsize) + 4 for shape, dt in specs.values()
    )
