#!/usr/bin/env bash
# --fused-step's updates beside the backward (LEANTRAIN_OPT_STREAM) and kept casts
# (LEANTRAIN_KEEP_CASTS), one device call:
#   1. GPU tests: FusedStep.* (the same bits and the planned peak beside the backward), the stream
#      and optimizer tests;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention: the default step, --fused-step
#      in turn, beside the backward (modes 1 and 2, optimizer grid 8 or 0 blocks an SM), with kept
#      casts; then the checkpointed config (--checkpoint blocks --fused-step) likewise; each run's
#      peaks beside its plan's (the plan run with the same knobs);
#   3. GPT-2 124M B16 x T1024 (leantrain_bench, cuDNN attention) plain and fused + beside + kept
#      casts, lean saves on and off, beside llm.c's cuDNN build (LLMC=its train_gpt2cu), memory by
#      nvidia-smi for both; two rounds.
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call15.sh
set -u
CALL_OUT_DEFAULT=/tmp/call15; source bench/call_lib.sh
export NCCL_NVLS_ENABLE=0
if [ "${UNIT:-1}" = 1 ]; then
  timeout 200 "./$BUILD/leantrain_tests" --gtest_brief=1 \
    --gtest_filter='FusedStep.*:CrossStreamReuse.*:Optim*:AdamW*:*Optimizer*:ActivationOffload.Cuda*' > "$OUT/unit.txt" 2>&1
  el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
fi
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
S1="LEANTRAIN_OPT_STREAM=1"; S2="LEANTRAIN_OPT_STREAM=2"; G0="LEANTRAIN_OPT_STREAM_GRID=0"; K="LEANTRAIN_KEEP_CASTS=1"
for round in 1 2; do
  tinyllama_run mfu ""
  tinyllama_run fused --fused-step
  tinyllama_run side1 --fused-step $S1
  tinyllama_run side2 --fused-step $S2
  tinyllama_run side1-g0 --fused-step $S1 $G0
  tinyllama_run side2-g0 --fused-step $S2 $G0
  tinyllama_run keep-side1 --fused-step $S1 $K
  tinyllama_run keep-side2 --fused-step $S2 $K
  tinyllama_run keep-side2-g0 --fused-step $S2 $G0 $K
  tinyllama_run keep-inturn --fused-step $K
  tinyllama_run ckpt "--checkpoint blocks --fused-step"
  tinyllama_run ckpt-side2 "--checkpoint blocks --fused-step" $S2
  tinyllama_run ckpt-keep-side2 "--checkpoint blocks --fused-step" $S2 $K
  tinyllama_run ckpt-keep-side1 "--checkpoint blocks --fused-step" $S1 $K
  el "tinyllama round $round"
done
gpt2_beside_llmc "keep|--lean-saves 0|" "keep-fused-side2-casts|--lean-saves 0 --fused-step 1|$S2 $K" \
  "keep-fused-side1-casts|--lean-saves 0 --fused-step 1|$S1 $K" "keep-fused-side2|--lean-saves 0 --fused-step 1|$S2" \
  "lean|--lean-saves 1|" "lean-fused-side2-casts|--lean-saves 1 --fused-step 1|$S2 $K"
tar -C "$OUT" -czf "$OUT/call15.tgz" --exclude=call15.tgz . 2>/dev/null
