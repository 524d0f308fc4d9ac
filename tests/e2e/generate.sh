# Generate from a tiny saved GPT: the prompt comes back followed by sampled text; greedy decoding
# is deterministic; bad sampling flags are usage errors.
source "$(dirname "$0")/common.bash" "$@"

expect_ok "$LT" train --model gpt2-tiny --steps 20 --batch 8 --seq-len 32 --lr 3e-3 --eval-batches 1 --device cpu \
  --save "$WORK/gpt" || { finish; exit 1; }
expect_ok "$LT" generate --checkpoint "$WORK/gpt" --prompt "Q: Why" --max-new-tokens 40 --temperature 0.8 --top-k 20
if [ "$(head -c 6 "$WORK/out")" = "Q: Why" ]; then ok; else fail "output does not start with the prompt"; cat "$WORK/out" >&2; fi
if [ "$(wc -c <"$WORK/out")" -ge 40 ]; then ok; else fail "fewer than 40 new bytes"; cat "$WORK/out" >&2; fi
expect_ok "$LT" generate --checkpoint "$WORK/gpt" --prompt "The " --max-new-tokens 30 --temperature 0
cp "$WORK/out" "$WORK/greedy1"
expect_ok "$LT" generate --checkpoint "$WORK/gpt" --prompt "The " --max-new-tokens 30 --temperature 0
if cmp -s "$WORK/out" "$WORK/greedy1"; then ok; else fail "greedy decoding differs between runs"; fi
expect_ok "$LT" generate --checkpoint "$WORK/gpt" --max-new-tokens 10  # empty prompt
expect_error 2 "--temperature -1" "$LT" generate --checkpoint "$WORK/gpt" --temperature -1
expect_error 2 "--top-k -3" "$LT" generate --checkpoint "$WORK/gpt" --top-k -3
expect_error 2 "--max-new-tokens -1" "$LT" generate --checkpoint "$WORK/gpt" --max-new-tokens -1
finish
