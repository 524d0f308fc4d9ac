#!/usr/bin/env bash
# The short form of bench/issue46_call25.sh, for a call with little device time left: the GPU
# tests of this stop's changes, then TinyLlama-1.1B (B4 x T1024 bf16-mixed AdamW, cuDNN attention)
# with and without the norm taken by the update (-niu: LEANTRAIN_NORM_IN_UPDATE=1, with its
# readbacks) and the checkpointed config (--checkpoint blocks --fused-step) with and without the
# dry recomputation tail (-tail: LEANTRAIN_RECOMPUTE_TAIL=1), alternating for as many rounds as
# the call allows; every row's peaks beside its plan (tinyllama.jsonl).
#   BUILD=build-gpu OUT=$OUT/short timeout 200 bash bench/issue46_call25_short.sh
set -u
CALL=call25-short; CALL_OUT_DEFAULT=/tmp/$CALL; source bench/call_lib.sh
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
NIU=LEANTRAIN_NORM_IN_UPDATE=1 TAIL=LEANTRAIN_RECOMPUTE_TAIL=1
gpu_tests 'NormInUpdate*:ScalarReadback*:RecomputeTail*'
for round in 1 2 3; do
  tinyllama_run mfu ""
  tinyllama_run mfu-niu "" $NIU
  tinyllama_run ckpt "--checkpoint blocks --fused-step"
  tinyllama_run ckpt-tail "--checkpoint blocks --fused-step" $TAIL
  el "tinyllama round $round"
done
