"""The last step of ``benchmarks/accelerator.sh``: one table of issue 35's targets on one H200, each
with its figure and whether it is met, read from the JSON the script's steps wrote.

| target | figure read from |
|---|---|
| 10^8 Fig. 3 trials through ``jaxfed run --keep summary``, end to end < 10 s | ``engine.json`` ``million_summary`` |
| the engine's chunk function >= 0.9x a plain ``jit(vmap)`` of the same trial on the same trials | ``fig3_kernel.json`` |
| summary sweep >= 0.85x the kernel for >= 10^7 trials, compile included | ``engine.json`` ``summary_sweep`` |
| raw >= 0.5 of the device-to-host bandwidth (measured by the same run) | ``engine.json`` ``raw_no_out`` |
| Fig. 3 kernel >= 0.25 of its RNG limit | ``fig3_kernel.json`` |
| host RSS <= 2 GB (the 10^8-trial run's peak) | ``engine.json`` ``million_summary`` |
| ``gfvl_conjugate`` above 1.27e10 trial·slot/s (its 2026-11-30 figure) | ``gfvl_conjugate.json`` |

A target is "met" or "not met" on its figure; "not measured" where its step did not finish (its
JSON or field is missing) or ran below the target's size. ``fig3_kernel.json`` is
``gfvl_conjugate.py`` at 2^20 trials, where the kernel is not launch-bound (``gfvl_conjugate.json``'s
figures stand in for it when it is missing) (a tiny run on a CPU: the table is still
written, the figures then say nothing about the targets).

    python benchmarks/targets.py DIR [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def _row(target: str, figure: str | None, met: bool | None, why: str = "") -> dict:
    verdict = "not measured" if met is None else "met" if met else "not met"
    return {"target": target, "figure": figure if figure is not None else "-", "verdict": verdict, "note": why}


def targets(directory: str) -> list[dict]:
    """The rows of the table from ``directory``'s ``engine.json`` (``scaling.py --engine``),
    ``gfvl_conjugate.json`` and ``fig3_kernel.json``."""
    engine = _load(os.path.join(directory, "engine.json"))
    conjugate = _load(os.path.join(directory, "gfvl_conjugate.json"))
    kernel = _load(os.path.join(directory, "fig3_kernel.json")) or conjugate
    rows = []

    million = engine.get("million_summary")
    target = "10^8 Fig. 3 trials, `jaxfed run --keep summary`, end to end < 10 s"
    if million is None:
        rows.append(_row(target, None, None, "engine.json has no million_summary"))
    else:
        figure = f"{million['seconds']:.1f} s for {million['trials']:.3g} trials"
        full = million["trials"] >= 10**8
        rows.append(_row(target, figure, million["seconds"] < 10.0 if full else None, "" if full else "below 10^8"))

    target = "engine chunk function >= 0.9x plain jit(vmap), same trials"
    if "kernel_over_plain_vmap" not in kernel:
        rows.append(_row(target, None, None, "fig3_kernel.json has no kernel_over_plain_vmap"))
    else:
        ratio = kernel["kernel_over_plain_vmap"]
        rows.append(_row(target, f"{ratio:.2f}x ({kernel['sizes']['trials']} trials)", ratio >= 0.9))

    sweep = engine.get("summary_sweep")
    target = "summary sweep >= 0.85x the kernel, >= 10^7 trials, compile included"
    if sweep is None:
        rows.append(_row(target, None, None, "engine.json has no summary_sweep"))
    else:
        full = sweep["trials"] >= 10**7
        figure = f"{sweep['ratio_to_kernel']:.2f}x ({sweep['trials']} trials)"
        rows.append(
            _row(target, figure, sweep["ratio_to_kernel"] >= 0.85 if full else None, "" if full else "below 10^7")
        )

    raw = engine.get("raw_no_out", {})
    target = "raw >= 0.5 of the measured device-to-host bandwidth"
    if "fraction_of_device_to_host" not in raw:
        rows.append(_row(target, None, None, "engine.json has no raw_no_out bandwidth"))
    else:
        link = raw["device_to_host"]["bytes_per_s"]
        figure = f"{raw['fraction_of_device_to_host']:.2f} ({raw['bytes_per_s'] / 1e9:.2f} of {link / 1e9:.2f} GB/s)"
        rows.append(_row(target, figure, raw["fraction_of_device_to_host"] >= 0.5))

    target = "Fig. 3 kernel >= 0.25 of its RNG limit"
    if "fraction_of_rng_limit" not in kernel:
        rows.append(_row(target, None, None, "fig3_kernel.json missing"))
    else:
        fraction = kernel["fraction_of_rng_limit"]
        rows.append(_row(target, f"{fraction:.2f} ({kernel['sizes']['trials']} trials)", fraction >= 0.25))

    target = "host RSS <= 2 GB (the 10^8-trial run)"
    if million is None:
        rows.append(_row(target, None, None, "engine.json has no million_summary"))
    else:
        rss = million["peak_rss_mib"] * 2**20
        full = million["trials"] >= 10**8
        figure = f"{rss / 1e9:.2f} GB at {million['trials']:.3g} trials"
        rows.append(_row(target, figure, rss <= 2e9 if full else None, "" if full else "below 10^8"))

    target = "gfvl_conjugate > 1.27e10 trial·slot/s (2026-11-30)"
    if "throughput_trial_slots_per_s" not in conjugate:
        rows.append(_row(target, None, None, "gfvl_conjugate.json missing"))
    else:
        rate = conjugate["throughput_trial_slots_per_s"]
        rows.append(_row(target, f"{rate:.3g} trial·slot/s", rate > 1.27e10))
    return rows


def markdown(rows: list[dict], machine: str) -> str:
    lines = [
        f"Issue 35's targets on one H200, measured on {machine}:",
        "",
        "| target | figure | verdict |",
        "|---|---|---|",
    ]
    for row in rows:
        note = f" ({row['note']})" if row["note"] else ""
        lines.append(f"| {row['target']} | {row['figure']} | {row['verdict']}{note} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="where accelerator.sh's steps wrote engine.json and gfvl_conjugate.json")
    parser.add_argument("--out", default=None, help="JSON of the rows (default DIRECTORY/targets.json)")
    args = parser.parse_args(argv)
    rows = targets(args.directory)
    found = _load(os.path.join(args.directory, "gfvl_conjugate.json")) or _load(
        os.path.join(args.directory, "engine.json")
    )
    machine = found.get("machine", {}).get("device", "an unknown device")
    table = markdown(rows, machine)
    print(table, end="")
    out = args.out or os.path.join(args.directory, "targets.json")
    with open(out, "w") as f:
        json.dump({"machine": found.get("machine"), "rows": rows}, f, indent=2)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(table)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
