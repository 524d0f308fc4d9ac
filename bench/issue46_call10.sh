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
CALL_OUT_DEFAULT=/tmp/call10; source bench/call_lib.sh
OUT=$OUT/sweep bash bench/issues_44_46_call8.sh | tail -n +2  # the sweep on seeds 4 and 5 (its GPU line dropped)
UNIT=0 OUT=$OUT bash bench/issue46_call11.sh | tail -n +2  # TinyLlama's four variants, two rounds
[ "${PROFILE:-1}" = 1 ] && timeout 150 bash bench/profile_train_kernels.sh "$OUT/prof-r50" --model resnet50 --batch 32 \
  --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --steps 3 --eval-batches 0 \
  > "$OUT/prof-r50.md" 2>&1
el "resnet50 profile"; head -40 "$OUT/prof-r50.md"
rm -rf "$OUT/prof-r50/ncu.csv"
