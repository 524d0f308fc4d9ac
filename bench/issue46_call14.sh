#!/usr/bin/env bash
# Where TinyLlama's step goes on the GPU (issue 46's per-kernel "after" table with cuDNN attention),
# one device call: TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW with --attention-kernel cudnn, the
# plain step, --fused-step, and the checkpointed fine-tuning config (--checkpoint blocks
# --fused-step): each run's tokens/s and peaks beside the plan's (tinyllama_row.py), then an Nsight
# Compute trace of a 3-step run cut into steps by bench/ncu_step_table.py (one optimizer step's
# kernels; their sum against the measured step bounds the idle time). The device has no nsys.
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call14.sh
set -u
CALL_OUT_DEFAULT=/tmp/call14; source bench/call_lib.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || echo "no ncu: no kernel tables"
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
for v in ${VARIANTS:-"mfu|" "fused|--fused-step" "ckpt|--checkpoint blocks --fused-step"}; do
  IFS='|' read -r label flags <<< "$v"
  timeout 120 "./$BUILD/leantrain" plan $F $flags --json > "$OUT/plan-$label.json" 2>"$OUT/plan-$label.err"
  timeout 150 "./$BUILD/leantrain" train $F $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
    --metrics-json "$OUT/tl-$label.json" > "$OUT/tl-$label.log" 2>&1 ||
    { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label.log")"; continue; }
  python3 bench/tinyllama_row.py "$OUT/plan-$label.json" "$OUT/tl-$label.json" "$label" 1 | tee -a "$OUT/tinyllama.jsonl"
  if [ -n "$NCU" ] && [[ " ${NCU_FOR:-mfu fused ckpt} " == *" $label "* ]]; then
    timeout 300 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
      "./$BUILD/leantrain" train $F $flags --device cuda --steps 3 --eval-batches 0 > "$OUT/ncu-$label.csv" 2> "$OUT/ncu-$label.err"
    python3 bench/ncu_step_table.py "$OUT/ncu-$label.csv" > "$OUT/steps-$label.md" 2>&1
    xz -T8 -f "$OUT/ncu-$label.csv"; head -14 "$OUT/steps-$label.md"
  fi
  el "tinyllama $label"
done
tar -C "$OUT" -czf "$OUT/call14.tgz" --exclude='*.nsys-rep' --exclude=call14.tgz . 2>/dev/null
