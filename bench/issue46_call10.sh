#!/usr/bin/env bash
# Issue 46 and the plan's safety net after this round's defaults (the convolution plans, the tiled
# delta-rule passes), one device call:
#   1. the plan sweep on two seeds not drawn before (bench/plan_sweep.sh 4 and 5, N configurations each);
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW: the MFU step (no checkpointing) and the
#      checkpointed fine-tuning step (--checkpoint blocks --fused-step), each with leantrain's
#      attention and with cuDNN's (--attention-kernel cudnn), alternating;
#   3. resnet50 B32 bf16-mixed SGD under Nsight Compute (the kernel table with the convolution plans).
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call10.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call10}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for seed in ${SEEDS:-4 5}; do
  OUT=$OUT/sweep timeout "${SWEEP_S:-200}" bash bench/plan_sweep.sh "$seed" "${N:-60}" > /dev/null 2>&1
  el "sweep seed $seed"; tail -4 "$OUT/sweep/sweep-seed$seed.txt"
done
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed"
timeout 120 "./$BUILD/leantrain" plan $F --json > "$OUT/tl-plan.json" 2>&1
for round in 1 2; do
  for v in "mfu|" "mfu-cudnn|--attention-kernel cudnn" "ckpt|--checkpoint blocks --fused-step" \
           "ckpt-cudnn|--checkpoint blocks --fused-step --attention-kernel cudnn"; do
    IFS='|' read -r label flags <<< "$v"
    timeout 150 "./$BUILD/leantrain" train $F $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
      --metrics-json "$OUT/tl-$label-$round.json" > "$OUT/tl-$label-$round.log" 2>&1 ||
      { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label-$round.log")"; continue; }
    python3 - "$OUT/tl-plan.json" "$OUT/tl-$label-$round.json" "$label" "$round" <<'PY' | tee -a "$OUT/tinyllama.jsonl"
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tok_s = run["steady_items_per_s"]; step_s = 4096 / tok_s
print(json.dumps({"variant": sys.argv[3], "round": int(sys.argv[4]), "tokens_per_s": round(tok_s),
                  "ms_per_step": round(1e3 * step_s, 2), "mfu": round(3 * plan["forward_flops"] / step_s / 989e12, 4),
                  "peak_allocated": run["peak_allocated_bytes"], "peak_reserved": run["peak_reserved_bytes"]}))
PY
  done
  el "tinyllama round $round"
done
[ "${PROFILE:-1}" = 1 ] && timeout 150 bash bench/profile_train_kernels.sh "$OUT/prof-r50" --model resnet50 --batch 32 \
  --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --steps 3 --eval-batches 0 \
  > "$OUT/prof-r50.md" 2>&1
el "resnet50 profile"; head -40 "$OUT/prof-r50.md"
rm -rf "$OUT/prof-r50/ncu.csv"
