# The finite-state guard: a diverged state (NaN/inf evaluation loss, weights or optimizer state)
# is never saved, the error names the checkpoint that is good (or says none was saved), and
# resume and generate refuse a checkpoint holding NaN/inf values or negative second moments.
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"
RUN=("$LT" train --batch 8 --eval-batches 1 --device cpu)

# A learning rate so large that the run diverges by step 2: nothing is saved. (The evaluation after
# step 2 is NaN in the g++ build; in the clang sanitizer build step 2's gradient norm overflows
# first: which comes first is the compilers' rounding at the edge of f32, either stops the run.)
expect_error 1 "(the evaluation loss is NaN|the gradient norm is (inf|NaN)) at step 2: training diverged.*no checkpoint was saved" \
  "${RUN[@]}" --steps 2 --lr 1e6 --optimizer sgd --momentum 0 --save "$WORK/nan"
if [ ! -e "$WORK/nan" ] && [ ! -e "$WORK/nan.tmp" ]; then ok; else fail "a NaN state was saved to $WORK/nan"; fi
# A save at step 2 (finite), then divergence: the message names that checkpoint, which stays at step 2.
expect_error 1 "(loss|gradient norm) is (NaN|inf|-inf).*the checkpoint in $WORK/ck \(step 2\) is intact" \
  "${RUN[@]}" --steps 6 --lr 1e6 --eval-every 2 --save "$WORK/ck"
expect_grep '"step": 2' "$WORK/ck/trainer_state.json" "the checkpoint after the divergence"
# Without --save the message does not promise a checkpoint.
expect_error 1 "is (NaN|infinite|inf|-inf) at step [0-9]+.*no checkpoint was saved" \
  "${RUN[@]}" --steps 20 --lr 1e6 --optimizer sgd --momentum 0

# Checkpoints holding NaN/inf or a negative second moment are refused by resume and generate.
expect_ok "$LT" train --model gpt2-tiny --steps 2 --batch 2 --seq-len 16 --eval-batches 1 --device cpu \
  --save "$WORK/gpt" || { finish; exit 1; }
W=transformer.h.0.attn.c_attn.weight
damage() {  # NAME FILE TOOL-ARGS...: a copy of the gpt checkpoint with FILE damaged, in $WORK/NAME
  rm -rf "${WORK:?}/$1" && cp -r "$WORK/gpt" "$WORK/$1" && $TOOL set "$WORK/$1/$2" "${@:3}"
}
damage nanw model.safetensors $W nan
expect_error 1 "nanw/model.safetensors is corrupt: weight '$W' holds NaN at element 0" "$LT" train --steps 4 --resume "$WORK/nanw"
expect_error 1 "nanw/model.safetensors is corrupt: weight '$W' holds NaN at element 0" \
  "$LT" generate --max-new-tokens 4 --checkpoint "$WORK/nanw"
damage infw model.safetensors transformer.wte.weight inf
expect_error 1 "weight 'transformer.wte.weight' holds inf" "$LT" generate --max-new-tokens 4 --checkpoint "$WORK/infw"
damage negv optimizer.safetensors $W.exp_avg_sq -1
expect_error 1 "negv/optimizer.safetensors is corrupt: optimizer state '$W.exp_avg_sq' holds -1 at element 0" \
  "$LT" train --steps 4 --resume "$WORK/negv"
damage nanv optimizer.safetensors $W.exp_avg_sq nan
expect_error 1 "optimizer state '$W.exp_avg_sq' holds NaN" "$LT" train --steps 4 --resume "$WORK/nanv"
damage nanm optimizer.safetensors $W.exp_avg -inf
expect_error 1 "optimizer state '$W.exp_avg' holds -inf" "$LT" train --steps 4 --resume "$WORK/nanm"
# None of the refused resumes wrote anything.
expect_grep '"step": 2' "$WORK/negv/trainer_state.json" "the refused checkpoint"
finish
