#!/usr/bin/env bash
# gpu-check.sh OUTDIR: the device check of the CUDA backend, sized to finish in < 8 minutes.
#   1. device facts (nvidia-smi, nvcc --version)            -> OUTDIR/device.log
#   2. build the CUDA tests (make CUDA=1, build-cuda/)       -> OUTDIR/build.log
#   3. run build-cuda/tests/test_cuda (CUDA vs CPU kernels) and
#      build-cuda/tests/test_cuda_session (compressed-cache decode on the GPU vs the CPU;
#      needs models/SmolLM2-135M-Instruct.Q4_1.gguf, else its GPU cases skip)
#                                                            -> OUTDIR/test_cuda.log (both)
#   4. if a GPU benchmark target exists (build-cuda/bin/bench_cuda), build and run it
#                                                            -> OUTDIR/bench.log (Markdown table),
#                                                               OUTDIR/bench_cuda.json (its JSON line)
#   5. optional (GPU_CHECK_SANITIZER=1): test_cuda under compute-sanitizer -> OUTDIR/sanitizer.log
# and a summary OUTDIR/results.json. Every step has a timeout; a step that would start
# past the overall budget is recorded as "not run". Exit status 0 ("ok": true) when the
# build succeeded, test_cuda had no failure and, if nvidia-smi saw a GPU, no case was
# skipped; 1 otherwise. Without a GPU the CUDA cases skip and "ok" only means "builds".
set -u
OUT=${1:?usage: scripts/gpu-check.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1
BUDGET=${GPU_CHECK_BUDGET:-450}          # seconds for the whole script (< 8 min)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }

json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n\r\t'; }

# run NAME LIMIT LOG cmd...: runs with a timeout capped by the remaining budget;
# sets RC and SECS.
run_step() {
    local name=$1 limit=$2 log=$3; shift 3
    local l; l=$(left)
    if [ "$l" -le 10 ]; then RC=-1; SECS=0; echo "$name: not run (budget spent)" >"$log"; return; fi
    [ "$limit" -gt "$l" ] && limit=$l
    local t0; t0=$(date +%s)
    timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
    RC=$?
    SECS=$(( $(date +%s) - t0 ))
    echo "== $name: rc=$RC in ${SECS}s (limit ${limit}s)" | tee -a "$log"
}

# cmocka counts from a log
count() { grep -oE "^\[  $1 *\] [0-9]+" "$2" 2>/dev/null | grep -oE '[0-9]+$' | awk '{s+=$1} END {print s+0}'; }

# 1. device
{
    nvidia-smi 2>&1 || echo "nvidia-smi not available"
    "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>&1 || echo "nvcc not available"
} >"$OUT/device.log"
DEVICE=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)

# 2. build
run_step build 300 "$OUT/build.log" make -j"$JOBS" CUDA=1 build-cuda/tests/test_cuda build-cuda/tests/test_cuda_session
BUILD_RC=$RC BUILD_S=$SECS

# 3. tests
TEST_RC=-1 TEST_S=0 P=0 F=0 S=0
if [ "$BUILD_RC" -eq 0 ]; then
    run_step test_cuda 150 "$OUT/test_cuda.log" sh -c \
        'build-cuda/tests/test_cuda; a=$?; build-cuda/tests/test_cuda_session; b=$?; [ "$a" -eq 0 ] && [ "$b" -eq 0 ]'
    TEST_RC=$RC TEST_S=$SECS
    P=$(count PASSED "$OUT/test_cuda.log"); S=$(count SKIPPED "$OUT/test_cuda.log")
    F=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$OUT/test_cuda.log" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
fi
CASES=$(grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_' "$OUT/test_cuda.log" 2>/dev/null |
        sed -E 's/^\[ +([A-Z]+) +\] (test_[A-Za-z0-9_]+).*/"\2": "\1"/' | sort -u | paste -sd, -)

# 4. benchmark, if the tree has one
BENCH_RC=-1 BENCH_S=0 BENCH_NOTE="no GPU benchmark target (build-cuda/bin/bench_cuda) in this tree"
if make -n CUDA=1 build-cuda/bin/bench_cuda >/dev/null 2>&1; then
    run_step bench_build 120 "$OUT/bench_build.log" make -j"$JOBS" CUDA=1 build-cuda/bin/bench_cuda
    if [ "$RC" -eq 0 ]; then
        run_step bench 120 "$OUT/bench.log" build-cuda/bin/bench_cuda --budget 90 ${GPU_CHECK_BENCH_ARGS:-} --json "$OUT/bench_cuda.json"
        BENCH_RC=$RC BENCH_S=$SECS BENCH_NOTE="see bench.log"
        # bench_cuda writes the JSON at the end; if it was cut short, keep whatever line it printed
        if [ ! -s "$OUT/bench_cuda.json" ]; then
            grep -E '^\{"bench_cuda"' "$OUT/bench.log" >"$OUT/bench_cuda.json" 2>/dev/null || rm -f "$OUT/bench_cuda.json"
        fi
        [ -s "$OUT/bench_cuda.json" ] && BENCH_NOTE="see bench.log and bench_cuda.json"
    else
        BENCH_RC=$RC BENCH_NOTE="bench build failed, see bench_build.log"
    fi
fi

# 5. memory checker (optional: slow)
SAN_RC=-1
if [ "${GPU_CHECK_SANITIZER:-0}" = 1 ] && [ "$BUILD_RC" -eq 0 ]; then
    CS="${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"
    if [ -x "$CS" ]; then
        run_step sanitizer 150 "$OUT/sanitizer.log" sh -c "'$CS' --tool memcheck --error-exitcode 3 build-cuda/tests/test_cuda && \
            '$CS' --tool memcheck --error-exitcode 3 build-cuda/tests/test_cuda_session"
        SAN_RC=$RC
    fi
fi

# On a machine with a GPU, a skipped CUDA case means the check did not happen: not ok.
GPU_SEEN=false
[ -n "${DEVICE:-}" ] && GPU_SEEN=true
OK=false
if [ "$BUILD_RC" -eq 0 ] && [ "$TEST_RC" -eq 0 ] && [ "$F" -eq 0 ]; then
    if [ "$GPU_SEEN" = false ] || [ "$S" -eq 0 ]; then OK=true; fi
fi

cat >"$OUT/results.json" <<EOF
{
  "ok": $OK,
  "gpu_seen": $GPU_SEEN,
  "device": "$(json_str "${DEVICE:-unknown}")",
  "seconds_total": $(( $(date +%s) - START )),
  "build": {"rc": $BUILD_RC, "seconds": $BUILD_S},
  "test_cuda": {"rc": $TEST_RC, "seconds": $TEST_S, "passed": $P, "failed": $F, "skipped": $S,
                "cases": {${CASES}}},
  "bench": {"rc": $BENCH_RC, "seconds": $BENCH_S, "note": "$(json_str "$BENCH_NOTE")"},
  "compute_sanitizer": {"rc": $SAN_RC}
}
EOF
cat "$OUT/results.json"
[ "$OK" = true ]
