#!/usr/bin/env bash
# Issue 35's targets on a lent GPU in under 8 minutes of device time, JAX's start-up included
# (benchmarks/README.md, "The accelerator script"). The steps, each under its own time limit
# (scaling.py writes its JSON after each part, so a cut keeps the parts it finished):
#
# 1. gfvl_conjugate.py at 100,000 trials (the size of its 2026-11-30 figure): throughput in
#    trial·slot/s; then at 2^20 trials (KERNEL_TRIALS, the size of the issue's figures), the Fig. 3
#    kernel (the engine's chunk function) against a plain jit(vmap) of the same trial on the same
#    trials and against its RNG limit;
# 2. summary_parts.py: where a summary chunk's device time goes (a diagnostic: no target);
# 3. scaling.py --engine --parts sweep million: the summary sweep through `jaxfed run`, sized from
#    the kernel's speed measured first (SWEEP_SECONDS of it, at least SWEEP_MIN trials), against
#    the kernel; raw mode against the device-to-host bandwidth it measures; MILLION (10^8) trials
#    with --keep summary, end to end, with the peak host RSS;
# 4. targets.py: one table, every target with its figure and met / not met (targets.md).
#
#     bash benchmarks/accelerator.sh
#     SIZE=tiny bash benchmarks/accelerator.sh   # every step at tiny sizes on one device: a CPU check
#
# The script exits with status 1 when a step failed or ran out of its time (the others still run).
# JSON, the table and a log go to $OUT (default benchmarks/results/accelerator).
# Environment: PYTHON (default python3); SIZE (tiny: sizes for a CPU, one host device unless
# XLA_FLAGS says otherwise); CONJUGATE_S, KERNEL_S, PARTS_S, ENGINE_S (seconds per step);
# CONJUGATE_TRIALS, KERNEL_TRIALS, PARTS_CHUNK, SWEEP_SECONDS, SWEEP_MIN, KERNEL_PROBE, MILLION.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results/accelerator}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# The engine comparisons run several JAX processes one after the other beside a parent that holds
# the device too: none may take three quarters of the GPU's memory at start-up.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ "${SIZE:-}" = tiny ]; then
    export XLA_FLAGS=${XLA_FLAGS:---xla_force_host_platform_device_count=1}
    conjugate=(--trials "${CONJUGATE_TRIALS:-256}" --loop-trials 1 --numpy-trials 64 --repeats 1)
    kernel=(--trials "${KERNEL_TRIALS:-512}" --loop-trials 1 --numpy-trials 64 --repeats 1)
    parts=(--quick --chunk "${PARTS_CHUNK:-1024}")
    engine=(--sweep-trials 1024 --raw-trials 512 --million "${MILLION:-2048}" --repeats 1)
else
    conjugate=(--trials "${CONJUGATE_TRIALS:-100000}" --loop-trials 2 --numpy-trials 2000 --repeats 5)
    kernel=(--trials "${KERNEL_TRIALS:-1048576}" --loop-trials 1 --numpy-trials 2000 --repeats 3)
    parts=(--chunk "${PARTS_CHUNK:-1048576}")
    engine=(--sweep-seconds "${SWEEP_SECONDS:-8}" --sweep-min "${SWEEP_MIN:-16777216}"
        --kernel-probe "${KERNEL_PROBE:-1048576}" --million "${MILLION:-100000000}" --repeats 3)
fi
failed=$(mktemp)
step() {  # step SECONDS NAME COMMAND...: runs COMMAND under a time limit, records a failure
    local limit=$1 name=$2
    shift 2
    echo "== $name ($(date -u +%T), limit ${limit} s)"
    timeout "$limit" "$@" || echo "$name: exit status $?" >>"$failed"
}
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
    $py -c "import jax, numpy; print('jax', jax.__version__, 'numpy', numpy.__version__, jax.devices())"
    step "${CONJUGATE_S:-50}" gfvl_conjugate $py benchmarks/gfvl_conjugate.py "${conjugate[@]}" \
        --out "$out/gfvl_conjugate.json"
    step "${KERNEL_S:-60}" fig3_kernel $py benchmarks/gfvl_conjugate.py "${kernel[@]}" --out "$out/fig3_kernel.json"
    step "${PARTS_S:-60}" summary_parts $py benchmarks/summary_parts.py "${parts[@]}" \
        --out "$out/summary_parts.json"
    step "${ENGINE_S:-240}" engine $py benchmarks/scaling.py --engine --parts sweep million "${engine[@]}" \
        --out "$out/engine.json"
    $py benchmarks/targets.py "$out" || echo "targets: exit status $?" >>"$failed"
    date -u
    if [ -s "$failed" ]; then
        echo "failed steps:"
        cat "$failed"
    fi
} 2>&1 | tee "$out/log.txt"
status=0
[ -s "$failed" ] && status=1
rm -f "$failed"
exit $status
