# Every optimizer trains from the CLI, and the optimizer_state row of the memory table shrinks
# as the guide says: adamw (8 B/param) > lion = adamw bf16 states (4) > adamw8bit (~2) > lion8bit (~1).
source "$(dirname "$0")/common.bash" "$@"

state_bytes() {  # prints the optimizer_state peak of a short synthetic run, in bytes
  "$LT" train --model vit-tiny --data synthetic --steps 2 --batch 8 --device cpu --eval-batches 1 \
    --metrics-json "$WORK/m.json" "$@" >"$WORK/out" 2>&1 || { cat "$WORK/out"; return 1; }
  python3 -c "import json; print(json.load(open('$WORK/m.json'))['categories_peak']['optimizer_state'])"
}
adamw=$(state_bytes --optimizer adamw) || fail "adamw run failed"
lion=$(state_bytes --optimizer lion) || fail "lion run failed"
bf16=$(state_bytes --optimizer adamw --state-dtype bf16) || fail "adamw bf16-state run failed"
a8=$(state_bytes --optimizer adamw8bit) || fail "adamw8bit run failed"
l8=$(state_bytes --optimizer lion8bit) || fail "lion8bit run failed"
echo "optimizer_state peaks: adamw $adamw, lion $lion, adamw bf16 $bf16, adamw8bit $a8, lion8bit $l8"
[ "$lion" -lt "$adamw" ] && ok || fail "lion ($lion) should keep less state than adamw ($adamw)"
[ "$bf16" -lt "$adamw" ] && ok || fail "bf16 states ($bf16) should be smaller than f32 ($adamw)"
[ "$a8" -lt "$bf16" ] && ok || fail "adamw8bit ($a8) should be smaller than bf16 states ($bf16)"
[ "$l8" -lt "$a8" ] && ok || fail "lion8bit ($l8) should be smaller than adamw8bit ($a8)"

# --nesterov and --dampening reach the SGD update: with the same seed and data, each changes the
# loss after a few steps (the update formulas themselves are checked in test_optim_update.cpp).
last_loss() {  # prints the training loss of the last step of a short synthetic SGD run
  "$LT" train --model vit-tiny --data synthetic --steps 4 --batch 8 --device cpu --eval-batches 1 \
    --optimizer sgd --lr 0.1 --warmup 0 --metrics "$WORK/s.jsonl" "$@" >"$WORK/out" 2>&1 || { cat "$WORK/out"; return 1; }
  python3 -c "import json; print([json.loads(l) for l in open('$WORK/s.jsonl') if '\"loss\"' in l][-1]['loss'])"
}
plain=$(last_loss) || fail "sgd run failed"
nest=$(last_loss --nesterov) || fail "sgd --nesterov run failed"
damp=$(last_loss --dampening 0.5) || fail "sgd --dampening run failed"
echo "sgd loss after 4 steps: momentum $plain, nesterov $nest, dampening 0.5 $damp"
[ "$nest" != "$plain" ] && ok || fail "--nesterov did not change the run (loss $nest)"
[ "$damp" != "$plain" ] && ok || fail "--dampening did not change the run (loss $damp)"
finish
