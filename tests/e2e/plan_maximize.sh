# plan --budget B --maximize seq-len|batch: the answer fits, the next value does not (each checked by
# planning it on its own), and the one-line refusals. On the cpu device type (reserved == allocated,
# no context) so that each extra token or sample changes the need.
source "$(dirname "$0")/common.bash" "$@"
P=(plan --model gpt2-tiny --data synthetic --device-type cpu)
need() { "$LT" "${P[@]}" "$@" --json | grep -o '"total_needed_bytes": [0-9]*' | head -1 | grep -o '[0-9]*$'; }
value() { grep -o "\"$1\": [0-9]*" "$WORK/out" | head -1 | grep -o '[0-9]*$'; }
BUDGET=$((14 << 20))

expect_ok "$LT" "${P[@]}" --batch 1 --budget 14MiB --maximize seq-len --json
T=$(value maximized_value); N=$(value next_value)
[ -n "$T" ] && [ "$N" = $((T + 1)) ] && ok || fail "seq-len answer $T, next $N"
[ "$(need --batch 1 --seq-len "$T")" -le $BUDGET ] && ok || fail "seq-len $T does not fit"
[ "$(need --batch 1 --seq-len "$N")" -gt $BUDGET ] && ok || fail "seq-len $N fits"

expect_ok "$LT" "${P[@]}" --seq-len 16 --batch 1 --budget 20MiB --maximize batch --json
BS=$(value maximized_value); N=$(value next_value)
[ -n "$BS" ] && [ "$BS" -gt 1 ] && [ "$N" = $((BS + 1)) ] && ok || fail "batch answer $BS, next $N"
[ "$(need --seq-len 16 --batch "$BS")" -le $((20 << 20)) ] && ok || fail "batch $BS does not fit"
[ "$(need --seq-len 16 --batch "$N")" -gt $((20 << 20)) ] && ok || fail "batch $N fits"

# The text report: the answer line, the plan and the train command for it.
expect_ok "$LT" "${P[@]}" --batch 1 --budget 14MiB --maximize seq-len
expect_grep "largest seq-len that fits 14.00 MiB: $T " "$WORK/out" "answer line"
expect_grep "leantrain train .*--seq-len $T" "$WORK/out" "train command"
# Past the model's positions: the answer is the context, the next value refused.
expect_ok "$LT" "${P[@]}" --batch 1 --budget 1GiB --maximize seq-len
expect_grep "fits 1.00 GiB: 256 .*seq-len 257 is refused" "$WORK/out" "capped by positions"

expect_error 2 "--maximize seq-len: it needs a budget" "$LT" "${P[@]}" --maximize seq-len
expect_error 2 "--maximize depth: it can only grow seq-len or batch" "$LT" "${P[@]}" --budget 1GiB --maximize depth
expect_error 2 "--maximize seq-len: the model's sequence length cannot change" \
  "$LT" plan --model vit-tiny --data synthetic --batch 1 --budget 1GiB --maximize seq-len
expect_error 1 "even batch 1 needs .* over the budget" "$LT" "${P[@]}" --seq-len 64 --budget 1MiB --maximize batch
finish
