#!/usr/bin/env bash
# The randomized plan-vs-measured sweep (issue 42), one device call: N configurations drawn from
# SEED, each planned (`leantrain plan --json`) and run (`leantrain train --device cuda
# --metrics-json`) with the same flags; one line per configuration and a summary.
#   BUILD=gpu-carry OUT=dir bash bench/plan_sweep.sh SEED [N]       (GPU machine; N default 60)
#   PLAN_ONLY=1 BUILD=build bash bench/plan_sweep.sh SEED [N]        (any machine: the draws and plans)
# Writes $OUT/sweep-seed$SEED.{jsonl,txt}. Exit 0 when every configuration is exact or within the
# bound its plan printed.
set -u
cd "$(dirname "$0")/.."
SEED=${1:?usage: bench/plan_sweep.sh SEED [N]}
N=${2:-60}
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/plan-sweep}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "plan sweep: seed $SEED, N $N, binary $BUILD/leantrain of $commit, gpu: ${gpu:-none}"
args=(--seed "$SEED" --n "$N" --bin "$BUILD/leantrain" --out "$OUT")
[ -n "${PLAN_ONLY:-}" ] && args+=(--plan-only)
python3 -u bench/plan_sweep.py "${args[@]}" ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep-seed$SEED.txt"
exit "${PIPESTATUS[0]}"
