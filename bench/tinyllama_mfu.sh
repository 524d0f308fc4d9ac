#!/usr/bin/env bash
# TinyLlama-1.1B MFU (issue 16's larger-model line): B4 x T1024, bf16-mixed, AdamW, no
# checkpointing, the default step and --fused-step, alternating. MFU = 3 x the forward FLOPs that
# `leantrain plan` counts / (seconds per step) / 989 TFLOP/s (dense bf16 peak of H100/H200 SXM).
# PROFILE=1 adds the per-kernel table of a 3-step run (ncu; start-up included).
#   BUILD=g OUT=$OUT ROUNDS=2 PROFILE=1 bash bench/tinyllama_mfu.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/tinyllama-mfu}; ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
B=4; T=1024
F="--model tinyllama-1.1b --data synthetic --batch $B --seq-len $T --precision bf16-mixed"
timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/plan.json" 2>&1 || { echo "plan failed"; tail -3 "$OUT/plan.json"; }
for round in $(seq 1 "$ROUNDS"); do
  for variant in default fused; do
    extra=""; [ "$variant" = fused ] && extra="--fused-step"
    timeout 240 "./$BUILD/leantrain" train $F $extra ${EXTRA:-} --device cuda --steps 15 --eval-batches 0 --log-every 5 \
      --metrics-json "$OUT/run-$variant-$round.json" > "$OUT/run-$variant-$round.log" 2>&1 || { echo "run failed"; tail -3 "$OUT/run-$variant-$round.log"; continue; }
    python3 - "$OUT/plan.json" "$OUT/run-$variant-$round.json" "$variant" "$round" $((B * T)) <<'PY' | tee -a "$OUT/mfu.jsonl"
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tok_s = run["steady_items_per_s"]
step_s = int(sys.argv[5]) / tok_s  # tokens per step / tokens per second
print(json.dumps({"variant": sys.argv[3], "round": int(sys.argv[4]), "tokens_per_s": round(tok_s),
                  "ms_per_step": round(1e3 * step_s, 2), "mfu": round(3 * plan["forward_flops"] / step_s / 989e12, 4),
                  "peak_allocated": run["peak_allocated_bytes"], "plan_peak_allocated": plan["peak_allocated_bytes"]}))
PY
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  timeout 400 bash bench/profile_train_kernels.sh "$OUT/prof" $F --steps 3 --eval-batches 0 > "$OUT/kernels.md" 2>&1
  head -32 "$OUT/kernels.md"
fi
