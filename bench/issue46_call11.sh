#!/usr/bin/env bash
# cuDNN attention with grouped-query heads after the backward's workspace took the engine's scratch
# (backend/attention_workspace.h), one device call:
#   1. the GPU tests of the cuDNN route (CudnnAttention.*, AttentionKernel.*), plans logged;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, the MFU step and the checkpointed step
#      (--checkpoint blocks --fused-step), leantrain's attention and cuDNN's alternating, each run's
#      peaks beside its plan's.
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call11.sh     (UNIT=0: TinyLlama only)
set -u
CALL_OUT_DEFAULT=/tmp/call11; source bench/call_lib.sh
if [ "${UNIT:-1}" = 1 ]; then
  LEANTRAIN_CUDNN_LOG=1 timeout 150 "./$BUILD/leantrain_tests" --gtest_brief=1 \
    --gtest_filter='CudnnAttention.*:AttentionKernel.*' > "$OUT/unit-cudnn.txt" 2>&1
  el "unit cudnn"; grep -E "FAILED|PASSED|tests ran|timing|33554|H 32 Hkv 4" "$OUT/unit-cudnn.txt" | head -16
fi
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed"
for round in ${ROUNDS_LIST:-1 2}; do
  for v in "mfu|" "mfu-cudnn|--attention-kernel cudnn" "ckpt|--checkpoint blocks --fused-step" \
           "ckpt-cudnn|--checkpoint blocks --fused-step --attention-kernel cudnn"; do
    IFS='|' read -r label flags <<< "$v"
    [ -f "$OUT/plan-$label.json" ] || timeout 120 "./$BUILD/leantrain" plan $F $flags --json > "$OUT/plan-$label.json" 2>"$OUT/plan-$label.err"
    timeout 150 "./$BUILD/leantrain" train $F $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
      --metrics-json "$OUT/tl-$label-$round.json" > "$OUT/tl-$label-$round.log" 2>&1 ||
      { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label-$round.log")"; continue; }
    python3 bench/tinyllama_row.py "$OUT/plan-$label.json" "$OUT/tl-$label-$round.json" "$label" "$round" |
      tee -a "$OUT/tinyllama.jsonl"
  done
  el "tinyllama round $round"
done
