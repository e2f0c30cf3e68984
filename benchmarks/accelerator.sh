#!/usr/bin/env bash
# The benchmark run on a lent GPU, as recorded in benchmarks/README.md: the engine-overhead
# comparisons at GPU sizes (scaling.py --engine), then every benchmark at accelerator sizes
# (run_all.py --accelerator). JSON and a log go to $OUT (default benchmarks/results/accelerator).
#
#     bash benchmarks/accelerator.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results/accelerator}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    python -c "import jax, numpy; print('jax', jax.__version__, 'numpy', numpy.__version__, jax.devices())"
    timeout "${ENGINE_S:-260}" python benchmarks/scaling.py --engine --sweep-trials 67108864 --raw-trials 2097152 \
        --million 1000000 --out "$out/engine_gpu.json"
    work=$(mktemp -d)
    timeout "${RUN_ALL_S:-270}" python benchmarks/run_all.py --accelerator --out "$work/run_all.json"
    cp "$work/run_all.json" "$out/run_all_gpu.json"
    date -u
} 2>&1 | tee "$out/log.txt"
