# A LLaMA-family run on --data synthetic has no tokenizer; its checkpoint must still resume
# (it failed with "checkpoint ... has no tokenizer.json"), and to the same losses as one run.
source "$(dirname "$0")/common.bash" "$@"
RUN="train --model llama-tiny --data synthetic --steps 4 --batch 4 --seq-len 32 --device cpu --log-every 1"
# shellcheck disable=SC2086
expect_ok "$LT" $RUN --metrics "$WORK/whole.jsonl"
# shellcheck disable=SC2086
expect_ok "$LT" $RUN --stop-at 2 --save "$WORK/ck" --metrics "$WORK/first.jsonl"
# shellcheck disable=SC2086
expect_ok "$LT" $RUN --resume "$WORK/ck" --metrics "$WORK/second.jsonl"
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for f in sys.argv[1:] for l in open(f) if "\"loss\"" in l])' "$@"; }
whole=$(losses "$WORK/whole.jsonl"); parts=$(losses "$WORK/first.jsonl" "$WORK/second.jsonl")
if [ "$whole" = "$parts" ] && [ "$whole" != "[]" ]; then ok; else fail "losses: one run $whole, resumed $parts"; fi
finish
