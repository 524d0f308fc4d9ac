#!/usr/bin/env bash
# The eager chunked head with the one-pass loss kernel (cross_entropy_fwd_bwd), one short device call:
# the GPU tests of linear_cross_entropy, `leantrain train` GPT-2 124M (eager chunks of 8192 rows, kept
# casts) beside its plan, and leantrain_bench GPT-2 plain and eager + kept casts beside llm.c's cuDNN
# build (LLMC), nvidia-smi memory for both, two rounds.
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call18.sh
set -u
CALL_OUT_DEFAULT=/tmp/call18; source bench/call_lib.sh
timeout 100 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='LinearCrossEntropy*:KeptCasts.*' > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -10
E="LEANTRAIN_LOSS_CHUNK_EAGER=1"; K="LEANTRAIN_KEEP_CASTS=1"
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves --attention-kernel cudnn --loss-chunk 8192"
train_vs_plan gpt2 "$E $K" $T
gpt2_beside_llmc "keep|--lean-saves 0|" "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K"
tar -C "$OUT" -czf "$OUT/call18.tgz" --exclude=call18.tgz . 2>/dev/null
