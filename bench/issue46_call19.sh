#!/usr/bin/env bash
# One device call for the commits since 318ba11 that no GPU has run (the one-pass eager head
# fbccc35, b9350d7, 9ca7983): bench/issue46_call18.sh (GPU tests of linear_cross_entropy, kept casts
# and the fused step; GPT-2 train beside its plan; GPT-2 plain and eager + kept casts beside llm.c,
# two rounds), then the randomized plan sweep twice: seed 4 as shipped, seed 5 with every opt-in
# path of the last stop on (kept casts, updates on the optimizer stream).
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call19.sh
set -u
CALL_OUT_DEFAULT=/tmp/call19; source bench/call_lib.sh
timeout 150 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='LinearCrossEntropy*:KeptCasts.*:FusedStep.*:CrossEntropy*' > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -10
E="LEANTRAIN_LOSS_CHUNK_EAGER=1"; K="LEANTRAIN_KEEP_CASTS=1"
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves --attention-kernel cudnn --loss-chunk 8192"
train_vs_plan gpt2 "$E $K" $T
gpt2_beside_llmc "keep|--lean-saves 0|" "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K" \
  "keep-eager|--lean-saves 0 --loss-chunk 8192|$E"
el "gpt2 done"
OUT=$OUT/sweep4 bash bench/plan_sweep.sh 4 60 | tail -3
env LEANTRAIN_KEEP_CASTS=1 LEANTRAIN_OPT_STREAM=1 OUT=$OUT/sweep5-knobs bash bench/plan_sweep.sh 5 60 | tail -3
el "sweeps"
tar -C "$OUT" -czf "$OUT/call19.tgz" --exclude=call19.tgz . 2>/dev/null
