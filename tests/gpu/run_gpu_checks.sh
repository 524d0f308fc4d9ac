#!/usr/bin/env bash
# GPU machine check: run from the repo root with a prebuilt build-cuda (nothing is built here).
#   1. leantrain_tests: every unit test; the shared op test (OpsBackends) covers cuda when a GPU answers;
#   2. leantrain_gpu_checks: allocator vs cudaMemGetInfo and its meta simulation, CPU-equality
#      of copies/casts/RNG/dropout, GEMM/reduce/optimizer vs CPU, GEMM and optimizer timings.
# Failed unit tests are rerun once with LEANTRAIN_CUDA_SYNC=1 (synchronise after every kernel),
# so an asynchronous CUDA fault is reported at the kernel that caused it.
# Logs go to $OUT (when set) or /tmp/leantrain-gpu-checks. Exit 0 only when everything passed.
set -u
BUILD=${BUILD:-build-cuda}
LOGS=${OUT:-/tmp}/leantrain-gpu-checks
mkdir -p "$LOGS"
for bin in leantrain_tests leantrain_gpu_checks; do
  if [ ! -x "$BUILD/$bin" ]; then
    echo "missing $BUILD/$bin: build it on the dev machine with"
    echo "  cmake -S . -B build-cuda -G Ninja -DLEANTRAIN_CUDA=ON -DCMAKE_BUILD_TYPE=Release && ninja -C build-cuda"
    exit 2
  fi
done
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not available)"

echo "== unit tests ($BUILD/leantrain_tests)"
start=$(date +%s)
timeout 300 "./$BUILD/leantrain_tests" --gtest_color=no >"$LOGS/unit.log" 2>&1
unit_rc=$?
echo "   exit $unit_rc after $(( $(date +%s) - start ))s, log $LOGS/unit.log"
grep -E '^\[==========\] [0-9]+ tests? from .* ran|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+|^\[  FAILED  \] [0-9]+' "$LOGS/unit.log" | sed 's/^/   /'
cuda_ok=$(grep -E '^\[       OK \] .*cuda' "$LOGS/unit.log" | sed 's/ (.*//' | sort -u | wc -l)
cuda_skip=$(grep -E '^\[  SKIPPED \] .*cuda' "$LOGS/unit.log" | sed 's/ (.*//' | sort -u | wc -l)
echo "   tests with 'cuda' in their name: $cuda_ok passed, $cuda_skip skipped"
failed=$(grep -E '^\[  FAILED  \] [A-Za-z].*\.' "$LOGS/unit.log" | sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u)
if [ -n "$failed" ]; then
  echo "   failed tests:"
  echo "$failed" | sed 's/^/     /'
  filter=$(echo "$failed" | paste -sd: -)
  echo "   rerunning them with LEANTRAIN_CUDA_SYNC=1 -> $LOGS/unit_sync.log"
  LEANTRAIN_CUDA_SYNC=1 timeout 120 "./$BUILD/leantrain_tests" --gtest_color=no --gtest_filter="$filter" \
    >"$LOGS/unit_sync.log" 2>&1
  grep -E 'CUDA error|cuBLAS error|Failure|FAILED' "$LOGS/unit_sync.log" | head -40 | sed 's/^/     /'
elif [ $unit_rc -ne 0 ]; then
  echo "   the test binary failed without a failed test (crash or timeout); last lines:"
  tail -15 "$LOGS/unit.log" | sed 's/^/     /'
fi

# Some unit tests once more with settings in the environment: rerun "ENV=VALUE [ENV=VALUE]" NAME
# FILTER, log $LOGS/NAME.log. 240 s each: the norm filter alone took 132 s on an H100 (its CPU
# references of GPT-2's rows), past the 120 s this once had.
rerun() {
  echo "== tests $3 with $1"
  env $1 timeout 240 "./$BUILD/leantrain_tests" --gtest_color=no --gtest_filter="$3" >"$LOGS/$2.log" 2>&1
  local rc=$?
  grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$LOGS/$2.log" | sed 's/^/   /'
  if [ $rc -eq 124 ]; then echo "   timed out after 240 s"; fi
  if [ $rc -ne 0 ]; then unit_rc=$rc; fi
}
attention='*ttention*:*Attn*:*Gqa*:*BlockSparse*'
# The unit tests' grouped-query shapes are small, so the dK/dV kernel splits their heads over a
# cluster (src/backend/cuda/attention.cu, dkdv_splits): run the attention tests once more unsplit.
rerun LEANTRAIN_ATTN_DKDV_SPLITS=1 unit_unsplit "$attention"
# Once the cuBLASLt workspace is held, the tensor-core backward keeps delta there (dQ first); the
# other order (delta in dq's rows, dK/dV first) is what runs without it: run the tests with it too.
rerun LEANTRAIN_ATTN_OWN_DELTA=0 unit_rows_delta "$attention"
# The forward's 128-row blocks (two m-tiles per warp, D = 64) are not the default yet: test them.
rerun LEANTRAIN_ATTN_FWD_MT=2 unit_fwd_mt2 "$attention"
# With the workspace held, a norm's dx and its dw/db come out of one pass; the separate passes are
# what runs without it (and for rows over 1024 columns): run the norm tests with those too.
rerun LEANTRAIN_NORM_FUSED_BWD=0 unit_norm_two_pass '*Norm*:*CudaFastPaths*:*F32WeightGrads*'
# Column sums in two passes through the workspace (opt-in), and bias gradients from them after a
# plain GEMM instead of cuBLASLt's BGRAD epilogue.
rerun LEANTRAIN_REDUCE_COLS_SPLIT=1 unit_cols_split '*ReduceColsSplit*:*OpsBackends*:*Linear*'
rerun "LEANTRAIN_REDUCE_COLS_SPLIT=1 LEANTRAIN_GEMM_BGRAD_EPILOGUE=0" unit_own_bgrad \
  '*Linear*:*Gemm*:*F32WeightGrads*:*ReduceColsSplit*:*OpsBackends*'

echo "== GPU checks ($BUILD/leantrain_gpu_checks)"
start=$(date +%s)
timeout 180 "./$BUILD/leantrain_gpu_checks" >"$LOGS/gpu_checks.log" 2>&1
gpu_rc=$?
cat "$LOGS/gpu_checks.log"
echo "   exit $gpu_rc after $(( $(date +%s) - start ))s"

echo "== summary: unit tests exit $unit_rc, GPU checks exit $gpu_rc"
[ $unit_rc -eq 0 ] && [ $gpu_rc -eq 0 ]
