#!/usr/bin/env bash
# The last checks of this stop's issue-46 work, one device call:
#   1. GPU tests: the SwiGLU, rotary and norm kernels, the op table (every op against the CPU),
#      the MoE and model tests around them;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention, the default step and the
#      checkpointed config, this commit's leantrain (BUILD) beside 9ca7983's (OLD), alternating, two
#      rounds, peaks beside the plans; `leantrain train` no longer waits for the device between
#      steps, so the new rows also show that;
#   3. the CUPTI timeline of the new default step (bench/gpu_timeline): where the GPU still idles;
#   4. `leantrain train` GPT-2 124M (the eager chunked head, kept casts) beside its plan;
#   5. the randomized plan sweep, seed 7.
#   BUILD=build-gpu OLD=build-old OUT=$OUT bash bench/issue46_call22.sh
# UNIT_FILTER, SWEEP_SEED, SWEEP_N and CALL (the archive's name) change the tests, the sweep's
# seed (7) and size (60) and the name for a later call (bench/issue46_call24.sh once did); NEW_ENV (e.g.
# LEANTRAIN_GRADIENT_PARTS=1) is set for BUILD's runs, the timeline, GPT-2's and the sweep's.
set -u
CALL=${CALL:-call22}; CALL_OUT_DEFAULT=/tmp/$CALL; source bench/call_lib.sh
gpu_tests "${UNIT_FILTER:-SwigluActivation*:RopeVec*:NormFusedBackward*:RopePositions*:OpsBackends*:*MoeCuda*:Llama*:Gemma*:Qwen*:*F32WeightGrads*:KeptCasts*:FusedStep*:LinearCrossEntropy*}"
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
tinyllama_beside "$OLD" "$BUILD" ${NEW_ENV:-}
mkdir -p "$OUT/lib"
if bash bench/gpu_timeline/build.sh "$OUT/lib" > /dev/null; then
  env ${NEW_ENV:-} CUDA_INJECTION64_PATH=$OUT/lib/libgpu_timeline.so GPU_TIMELINE_OUT=$OUT/tl-mfu.csv timeout 150 "./$BUILD/leantrain" train \
    $TL_FLAGS --device cuda --steps 8 --eval-batches 0 --log-every 4 > "$OUT/tl-mfu-traced.log" 2>&1
  python3 bench/gpu_timeline/gaps.py "$OUT/tl-mfu.csv" --skip 3 > "$OUT/gaps-tl-mfu.md" 2>&1
  sed -n '1,/^largest/p' "$OUT/gaps-tl-mfu.md" | tail -8; xz -T8 -f "$OUT/tl-mfu.csv"
fi
rm -rf "$OUT/lib"
el "timeline"
E="LEANTRAIN_LOSS_CHUNK_EAGER=1 LEANTRAIN_KEEP_CASTS=1"
train_vs_plan gpt2 "$E ${NEW_ENV:-}" --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves \
  --attention-kernel cudnn --loss-chunk 8192
el "gpt2 train"
SEED=${SWEEP_SEED:-7}; env ${NEW_ENV:-} OUT=$OUT/sweep$SEED bash bench/plan_sweep.sh "$SEED" "${SWEEP_N:-60}" | tail -3
el "sweep"
tar -C "$OUT" -czf "$OUT/$CALL.tgz" --exclude="$CALL.tgz" . 2>/dev/null
