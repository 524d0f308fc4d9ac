#!/usr/bin/env bash
# Kept casts written by the optimizer (LEANTRAIN_KEEP_CASTS: AdamW's kernel writes each updated
# parameter's bf16 copy, the forward casts no weight) and the head's gradients made in the forward
# (LEANTRAIN_LOSS_CHUNK_EAGER with --loss-chunk N), one device call:
#   1. GPU tests: KeptCasts.*, FusedStep.*, LinearCrossEntropy*, optimizer and stream tests;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention: the default step with and
#      without kept casts, --fused-step beside the backward with them, the checkpointed config with
#      and without; two rounds; each run's peaks beside its plan's;
#   3. `leantrain train` GPT-2 124M with kept casts and the eager chunked head: peaks beside the plan;
#   4. GPT-2 124M B16 x T1024 (leantrain_bench, cuDNN attention) plain, kept casts, eager chunks of
#      8192 rows, both, lean saves; beside llm.c's cuDNN build (LLMC), nvidia-smi memory; two rounds.
#   QUICK=1 runs fewer variants (the device time left was short).
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call17.sh
set -u
CALL_OUT_DEFAULT=/tmp/call17; source bench/call_lib.sh
export NCCL_NVLS_ENABLE=0
timeout 200 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='KeptCasts.*:FusedStep.*:LinearCrossEntropy*:CrossStreamReuse.*:Optim*:AdamW*:*Optimizer*' > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
K="LEANTRAIN_KEEP_CASTS=1"; S1="LEANTRAIN_OPT_STREAM=1"; E="LEANTRAIN_LOSS_CHUNK_EAGER=1"
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
for round in 1 2; do
  tinyllama_run mfu ""
  tinyllama_run mfu-keep "" $K
  [ "${QUICK:-0}" = 1 ] || tinyllama_run fused-keep-side1 --fused-step $K $S1
  tinyllama_run ckpt "--checkpoint blocks --fused-step"
  [ "${QUICK:-0}" = 1 ] || tinyllama_run ckpt-keep "--checkpoint blocks --fused-step" $K
  tinyllama_run ckpt-keep-side1 "--checkpoint blocks --fused-step" $K $S1
  el "tinyllama round $round"
done
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves --attention-kernel cudnn --loss-chunk 8192"
train_vs_plan gpt2 "$E $K" $T
el "gpt2 train vs plan"
if [ "${QUICK:-0}" = 1 ]; then
  gpt2_beside_llmc "keep|--lean-saves 0|" "keep-casts|--lean-saves 0|$K" "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K" \
    "lean-eager-casts|--lean-saves 1 --loss-chunk 8192|$E $K"
else
  gpt2_beside_llmc "keep|--lean-saves 0|" "keep-casts|--lean-saves 0|$K" "keep-eager|--lean-saves 0 --loss-chunk 8192|$E" \
    "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K" "lean|--lean-saves 1|" \
    "lean-eager-casts|--lean-saves 1 --loss-chunk 8192|$E $K"
fi
tar -C "$OUT" -czf "$OUT/call17.tgz" --exclude=call17.tgz . 2>/dev/null
