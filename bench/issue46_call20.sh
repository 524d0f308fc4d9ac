#!/usr/bin/env bash
# Bytes off TinyLlama's step, one device call: swiglu_linear's backward writes the activation in
# its input-gradient kernel (no swiglu_fwd recompute), RMSNorm's backward does dx and the weight's
# sums in one pass up to 2048 columns, and the rotary kernel moves 16 bytes a thread.
#   1. GPU tests of the three (and the op table, norms, rotary, MoE and model tests around them);
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention, the default step and the
#      checkpointed config (--checkpoint blocks --fused-step), this commit's binary (BUILD) and the
#      one before (OLD, 9ca7983's leantrain), alternating, two rounds, each run's peaks beside its plan;
#   3. an Nsight Compute trace of the new default step cut into one step (bench/ncu_step_table.py);
#   4. the randomized plan sweep, seed 6.
#   BUILD=build-gpu OLD=build-old OUT=$OUT bash bench/issue46_call20.sh
set -u
CALL_OUT_DEFAULT=/tmp/call20; source bench/call_lib.sh
gpu_tests 'SwigluActivation*:RopeVec*:NormFusedBackward*:RopePositions*:OpsBackends*:*Moe*Cuda*:*MoeCuda*:Llama*:Gemma*:Qwen*:*F32WeightGrads*'
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
tinyllama_beside "$OLD" "$BUILD"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 300 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --print-units base \
    "./$BUILD/leantrain" train $TL_FLAGS --device cuda --steps 3 --eval-batches 0 > "$OUT/ncu-mfu.csv" 2> "$OUT/ncu-mfu.err"
  python3 bench/ncu_step_table.py "$OUT/ncu-mfu.csv" > "$OUT/steps-mfu.md" 2>&1
  xz -T8 -f "$OUT/ncu-mfu.csv"; head -24 "$OUT/steps-mfu.md"
  el "ncu"
fi
OUT=$OUT/sweep6 bash bench/plan_sweep.sh 6 60 | tail -3
el "sweep"
tar -C "$OUT" -czf "$OUT/call20.tgz" --exclude=call20.tgz . 2>/dev/null
