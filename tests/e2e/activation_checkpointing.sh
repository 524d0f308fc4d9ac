# --checkpoint: the run logs what it recomputes and trains to the same losses; bad values are
# one-line usage errors (exit 2).
source "$(dirname "$0")/common.bash" "$@"

RUN=("$LT" train --model gpt2-tiny --steps 3 --batch 4 --seq-len 32 --eval-batches 1 --device cpu --log-every 1)

expect_ok "${RUN[@]}" --metrics "$WORK/none.jsonl"
for mode in blocks every:2 selective 'transformer\.h\.[13]'; do
  expect_ok "${RUN[@]}" --checkpoint "$mode" --metrics "$WORK/ck.jsonl" || continue
  expect_grep "activation checkpointing \(.*\): [0-9]+ modules recomputed in backward: transformer\.h\." "$WORK/out" "$mode log"
  # Same losses, learning rates and gradient norms, to the last digit (the step's seconds differ).
  if cmp -s <(sed 's/, "seconds": [0-9.e+-]*//' "$WORK/none.jsonl") <(sed 's/, "seconds": [0-9.e+-]*//' "$WORK/ck.jsonl"); then ok; else
    fail "--checkpoint $mode changed the metrics"; diff "$WORK/none.jsonl" "$WORK/ck.jsonl" | head -4 >&2; fi
done
expect_ok "${RUN[@]}"
if grep -q "activation checkpointing" "$WORK/out"; then fail "none should log nothing"; else ok; fi

expect_error 2 "--checkpoint every:0: every:K needs a whole number" "${RUN[@]}" --checkpoint every:0
expect_error 2 "not a valid regular expression" "${RUN[@]}" --checkpoint 'transformer\.h\.[0'
expect_error 2 "--checkpoint auto.*planner" "${RUN[@]}" --checkpoint auto
expect_error 2 "selects no module.*transformer\.wte" "${RUN[@]}" --checkpoint 'encoder\.layers\..*'
expect_error 2 "matches transformer\.h \(a ModuleList\)" "${RUN[@]}" --checkpoint 'transformer\.h'
"$LT" train --help >"$WORK/help" 2>&1
expect_grep "^ *--checkpoint " "$WORK/help" "train --help"
finish
