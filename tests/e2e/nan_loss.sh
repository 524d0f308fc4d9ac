# A diverging run stops with one line naming the step and suggesting a lower --lr (exit 1),
# and the last checkpoint stays intact and resumable.
source "$(dirname "$0")/common.bash" "$@"
RUN=("$LT" train --batch 16 --eval-batches 1 --device cpu)

# A learning rate far too large: the loss explodes, then turns NaN/inf.
expect_error 1 "(loss|gradient norm) is (NaN|infinite|inf|-inf) at step [0-9]+.*lower the learning rate, e.g. --lr" \
  "${RUN[@]}" --steps 20 --optimizer sgd --momentum 0 --lr 1e6

# A NaN injected at step 5, after a save at step 4: the checkpoint is the step-4 one, complete.
expect_error 1 "the training loss is NaN at step 5: training diverged.*the checkpoint in $WORK/ck \(step 4\) is intact" \
  "${RUN[@]}" --steps 8 --eval-every 4 --save "$WORK/ck" --debug-nan-at-step 5
expect_grep '"step": 4' "$WORK/ck/trainer_state.json" "trainer_state.json after the NaN"
for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
  if [ -s "$WORK/ck/$f" ]; then ok; else fail "checkpoint file $f missing after the NaN"; fi
done
if [ -e "$WORK/ck.tmp" ]; then fail "a half-written $WORK/ck.tmp was left behind"; else ok; fi
# Loss NaN in a later micro-batch names it.
expect_error 1 "NaN at step 2 \(micro-batch 1 of 2\)" "${RUN[@]}" --steps 3 --micro-batch 8 --debug-nan-at-step 2
# Resuming from the intact checkpoint works.
expect_ok "$LT" train --resume "$WORK/ck"
expect_grep "resumed from .* at step 4" "$WORK/out"
expect_grep "final: steps 8" "$WORK/out"
finish
