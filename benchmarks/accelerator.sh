#!/usr/bin/env bash
# The benchmark run on a lent GPU, as recorded in benchmarks/README.md: gfvl_logistic at
# accelerator sizes, then where a summary chunk's device time goes (summary_parts.py), then the
# engine-overhead comparisons (scaling.py --engine, sized from the
# kernel's measured speed), then the other benchmarks at accelerator sizes (run_all.py
# --accelerator). Each step has its own time limit and writes its JSON as it goes, so a step cut
# short keeps what it finished. JSON and a log go to $OUT (default benchmarks/results/accelerator).
#
#     bash benchmarks/accelerator.sh
#
# Environment: PYTHON (default python3), LOGISTIC_S, PARTS_S, ENGINE_S, RUN_ALL_S (seconds per step),
# PARTS_CHUNK (summary_parts.py --chunk),
# SWEEP_SECONDS and KERNEL_PROBE (scaling.py --sweep-seconds / --kernel-probe), MILLION.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results/accelerator}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# The engine comparisons run several JAX processes one after the other beside a parent that holds
# the device too: none may take three quarters of the GPU's memory at start-up.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
work=$(mktemp -d)
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    $py -c "import jax, numpy; print('jax', jax.__version__, 'numpy', numpy.__version__, jax.devices())"
    timeout "${LOGISTIC_S:-110}" $py benchmarks/run_all.py --accelerator --only gfvl_logistic \
        --out "$work/logistic/run_all.json"
    cp "$work/logistic/run_all.json" "$out/run_all_logistic_gpu.json"
    date -u
    # Where the summary chunk's device time goes, at the engine's GPU chunk size (1,864,192 on the H200).
    timeout "${PARTS_S:-180}" $py benchmarks/summary_parts.py --chunk "${PARTS_CHUNK:-1864192}" \
        --out "$out/summary_parts_gpu.json"
    date -u
    timeout "${ENGINE_S:-230}" $py benchmarks/scaling.py --engine --parts sweep in-process million fixed \
        --sweep-seconds "${SWEEP_SECONDS:-20}" --kernel-probe "${KERNEL_PROBE:-1048576}" \
        --million "${MILLION:-1000000}" --out "$out/engine_gpu.json"
    date -u
    timeout "${RUN_ALL_S:-200}" $py benchmarks/run_all.py --accelerator \
        --only gfvl_conjugate gfvl_nonconjugate oac_channel kmeans_oac scaling --out "$work/rest/run_all.json"
    cp "$work/rest/run_all.json" "$out/run_all_gpu.json"
    date -u
} 2>&1 | tee "$out/log.txt"
