# --lean-saves (default) / --no-lean-saves: the same losses to the bit on the CPU, and the plan
# says what the lean blocks save (GPT-2 124M: the norms' and the GELU's outputs, 6 of 16 C per
# token and block, are recomputed in backward instead of kept).
source "$(dirname "$0")/common.bash" "$@"
RUN="train --model gpt2-tiny --data synthetic --steps 4 --batch 4 --seq-len 32 --device cpu --log-every 1"
# shellcheck disable=SC2086
expect_ok "$LT" $RUN --metrics "$WORK/lean.jsonl"
# shellcheck disable=SC2086
expect_ok "$LT" $RUN --no-lean-saves --metrics "$WORK/full.jsonl"
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l])' "$1"; }
if [ "$(losses "$WORK/lean.jsonl")" = "$(losses "$WORK/full.jsonl")" ] && [ -n "$(losses "$WORK/lean.jsonl")" ]; then ok
else fail "losses differ: $(losses "$WORK/lean.jsonl") vs $(losses "$WORK/full.jsonl")"; fi
PLAN="plan --model gpt2-124m --data synthetic --device cuda --precision bf16-mixed --batch 16 --seq-len 1024 --json"
act() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["categories_peak"]["activation"])' "$1"; }
# shellcheck disable=SC2086
expect_ok "$LT" $PLAN && cp "$WORK/out" "$WORK/plan-lean.json"
# shellcheck disable=SC2086
expect_ok "$LT" $PLAN --no-lean-saves && cp "$WORK/out" "$WORK/plan-full.json"
lean=$(act "$WORK/plan-lean.json"); full=$(act "$WORK/plan-full.json")
# 6 C per token per block of bf16 (2 bytes): 16 x 1024 tokens x 768 x 6 x 2 x 12 blocks = 1.81e9 B.
# The peak holds every block's saves at once, so at least 5/6 of that shows (the GELU's 4 C alone
# is 1.21e9).
if [ $((full - lean)) -ge 1200000000 ]; then ok; else fail "activation peak: lean $lean B, full $full B"; fi
expect_error 2 "lean-saves" "$LT" train --model gpt2-tiny --lean-saves=maybe
finish
