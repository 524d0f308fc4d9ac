#!/usr/bin/env bash
# A stacked weight's gradient kept as one buffer (0f764b0), one device call:
#   1. GPU tests: GradientParts.*, the fused step, kept casts, the LLaMA-family, MoE, SwiGLU tests;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention, the default step and the
#      checkpointed config, this commit's leantrain (BUILD) beside db2b651's (OLD), alternating, two
#      rounds, peaks beside the plans;
#   3. the CUPTI timeline of the new default step (bench/gpu_timeline): the gradient copies gone;
#   4. `leantrain train` GPT-2 124M (the eager chunked head, kept casts) beside its plan;
#   5. the randomized plan sweep, seed 8.
#   BUILD=build-gpu OLD=build-old OUT=$OUT bash bench/issue46_call23.sh
set -u
CALL_OUT_DEFAULT=/tmp/call23; source bench/call_lib.sh
timeout 240 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='GradientParts*:FusedStep*:KeptCasts*:Llama*:*MoeCuda*:SwigluActivation*:Gemma*:Qwen*:*F32WeightGrads*' \
  > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
NEW=$BUILD
for round in 1 2; do
  BUILD=$OLD tinyllama_run mfu-old ""
  BUILD=$NEW tinyllama_run mfu ""
  BUILD=$OLD tinyllama_run ckpt-old "--checkpoint blocks --fused-step"
  BUILD=$NEW tinyllama_run ckpt "--checkpoint blocks --fused-step"
  el "tinyllama round $round"
done
BUILD=$NEW
mkdir -p "$OUT/lib"
if bash bench/gpu_timeline/build.sh "$OUT/lib" > /dev/null; then
  CUDA_INJECTION64_PATH=$OUT/lib/libgpu_timeline.so GPU_TIMELINE_OUT=$OUT/tl-mfu.csv timeout 150 "./$BUILD/leantrain" train \
    $TL_FLAGS --device cuda --steps 8 --eval-batches 0 --log-every 4 > "$OUT/tl-mfu-traced.log" 2>&1
  python3 bench/gpu_timeline/gaps.py "$OUT/tl-mfu.csv" --skip 3 > "$OUT/gaps-tl-mfu.md" 2>&1
  sed -n '1,/^largest/p' "$OUT/gaps-tl-mfu.md" | tail -8; xz -T8 -f "$OUT/tl-mfu.csv"
fi
rm -rf "$OUT/lib"
el "timeline"
E="LEANTRAIN_LOSS_CHUNK_EAGER=1 LEANTRAIN_KEEP_CASTS=1"
train_vs_plan gpt2 "$E" --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves \
  --attention-kernel cudnn --loss-chunk 8192
el "gpt2 train"
OUT=$OUT/sweep8 bash bench/plan_sweep.sh 8 60 | tail -3
el "sweep"
tar -C "$OUT" -czf "$OUT/call23.tgz" --exclude=call23.tgz . 2>/dev/null
