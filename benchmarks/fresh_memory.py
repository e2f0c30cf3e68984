"""What this machine charges for memory a process touches for the first time (issue 58's caller).

A merge of 100,000 raw Fig. 3 trials fills result arrays of 370 MB and writes a metrics.npz of the
same size: both touch memory no page of the process held before (the arrays' pages, and the page
cache under the new file). On a virtual machine whose host takes back the guest's free pages, each
such page can cost far more than the copy into it. This measures it in fresh processes, ``--rounds``
of them ``--gap`` seconds apart (time for the host to take freed pages back), each timing:

- ``first_touch``: writing every byte of a new ``--mb`` MB array (``np.empty`` then ``a[:] = 1``);
- ``second_touch``: the same again (the pages are held now: the copy's own cost);
- ``copy_into_new``: ``b[:] = a`` into a second new array of the same size;
- ``write_fsync``: writing the array to a new file and ``os.fsync`` (the page cache's first touch).

Each round's figures are recorded with the load average before it; the JSON has the medians.

    python benchmarks/fresh_memory.py [--mb 370] [--rounds 5] [--gap 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

FIGURES = ("first_touch", "second_touch", "copy_into_new", "write_fsync")


def one_round(n_bytes: int, directory: str) -> dict:
    """The four timings of :data:`FIGURES` in this process, in seconds."""
    out = {}
    t = time.perf_counter()
    a = np.empty(n_bytes // 4, np.float32)
    a[:] = 1
    out["first_touch"] = time.perf_counter() - t
    t = time.perf_counter()
    a[:] = 2
    out["second_touch"] = time.perf_counter() - t
    t = time.perf_counter()
    b = np.empty_like(a)
    b[:] = a
    out["copy_into_new"] = time.perf_counter() - t
    path = os.path.join(directory, f"fresh-{os.getpid()}.bin")
    t = time.perf_counter()
    with open(path, "wb") as f:
        f.write(a)
        f.flush()
        os.fsync(f.fileno())
    out["write_fsync"] = time.perf_counter() - t
    os.remove(path)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=370, help="megabytes per array (370: 100,000 Fig. 3 trials)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gap", type=float, default=10.0, help="seconds between rounds")
    parser.add_argument("--out", default="benchmarks/results/fresh_memory.json")
    parser.add_argument("--round", action="store_true", help=argparse.SUPPRESS)  # (one round, in a child process)
    args = parser.parse_args(argv)
    n_bytes = args.mb * 10**6
    if args.round:
        with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(args.out))) as directory:
            print(json.dumps(one_round(n_bytes, directory)))
        return {}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rounds = []
    for i in range(args.rounds):
        if i:
            time.sleep(args.gap)
        load = os.getloadavg()
        child = [sys.executable, __file__, "--round", "--mb", str(args.mb), "--out", args.out]
        figures = json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout)
        rounds.append({"load": list(load), **figures})
        print(f"round {i + 1}: " + ", ".join(f"{k} {figures[k]:.3f} s" for k in FIGURES), flush=True)
    payload = {
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "numpy": np.__version__},
        "mb": args.mb,
        "gap_s": args.gap,
        "rounds": rounds,
        "median_s": {k: statistics.median(r[k] for r in rounds) for k in FIGURES},
    }
    with open(args.out, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
