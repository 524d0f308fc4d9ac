#!/usr/bin/env bash
# The plan on configurations nobody chose, after this round's kernel and default changes (the
# convolution plans, the tiled delta-rule passes, the frozen gated norm's skipped weight sums):
# bench/plan_sweep.sh with two seeds not drawn before, then the ResNet and Qwen3.5 rows of
# plan_vs_measured. Run on the GPU machine from the repo root:
#   BUILD=build-gpu OUT=/tmp/call8 bash bench/issues_44_46_call8.sh
set -u
CALL_OUT_DEFAULT=/tmp/call8; source bench/call_lib.sh
for seed in ${SEEDS:-4 5}; do
  OUT=$OUT timeout "${SWEEP_S:-200}" bash bench/plan_sweep.sh "$seed" "${N:-60}" > /dev/null 2>&1
  el "sweep seed $seed"; tail -4 "$OUT/sweep-seed$seed.txt"
done
