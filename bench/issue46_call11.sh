#!/usr/bin/env bash
# cuDNN attention with grouped-query heads after the backward's workspace took the engine's scratch
# (backend/attention_workspace.h), one device call:
#   1. the GPU tests of the cuDNN route (CudnnAttention.*, AttentionKernel.*), plans logged;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, the MFU step and the checkpointed step
#      (--checkpoint blocks --fused-step), leantrain's attention and cuDNN's alternating, each run's
#      peaks beside its plan's.
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call11.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call11}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
LEANTRAIN_CUDNN_LOG=1 timeout 150 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='CudnnAttention.*:AttentionKernel.*' \
  > "$OUT/unit-cudnn.txt" 2>&1
el "unit cudnn"; grep -E "FAILED|PASSED|tests ran|timing|33554|H 32 Hkv 4" "$OUT/unit-cudnn.txt" | head -16
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed"
for round in ${ROUNDS_LIST:-1 2}; do
  for v in "mfu|" "mfu-cudnn|--attention-kernel cudnn" "ckpt|--checkpoint blocks --fused-step" \
           "ckpt-cudnn|--checkpoint blocks --fused-step --attention-kernel cudnn"; do
    IFS='|' read -r label flags <<< "$v"
    [ -f "$OUT/plan-$label.json" ] || timeout 120 "./$BUILD/leantrain" plan $F $flags --json > "$OUT/plan-$label.json" 2>"$OUT/plan-$label.err"
    timeout 150 "./$BUILD/leantrain" train $F $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
      --metrics-json "$OUT/tl-$label-$round.json" > "$OUT/tl-$label-$round.log" 2>&1 ||
      { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label-$round.log")"; continue; }
    python3 - "$OUT/plan-$label.json" "$OUT/tl-$label-$round.json" "$label" "$round" <<'PY' | tee -a "$OUT/tinyllama.jsonl"
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tok_s = run["steady_items_per_s"]; step_s = 4096 / tok_s
print(json.dumps({"variant": sys.argv[3], "round": int(sys.argv[4]), "tokens_per_s": round(tok_s),
                  "ms_per_step": round(1e3 * step_s, 2), "mfu": round(3 * plan["forward_flops"] / step_s / 989e12, 4),
                  "peak_allocated": run["peak_allocated_bytes"], "plan_peak_allocated": plan["peak_allocated_bytes"],
                  "peak_reserved": run["peak_reserved_bytes"], "plan_peak_reserved": plan["peak_reserved_bytes"],
                  "peak_equals_plan": run["peak_allocated_bytes"] == plan["peak_allocated_bytes"]
                                      and run["peak_reserved_bytes"] == plan["peak_reserved_bytes"]}))
PY
  done
  el "tinyllama round $round"
done
