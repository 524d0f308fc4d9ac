# Save -> resume continues the same loss curve exactly: N steps straight equal N/2 steps, a save,
# then a resumed process for the other N/2 (with gradient accumulation, and for GPT too).
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"

losses() { grep '"loss"' "$1" | sed 's/.*"step": \([0-9]*\), "loss": \([^,]*\),.*/\1 \2/'; }

check_resume() {  # name, then the run's flags
  local name=$1
  shift
  expect_ok "$LT" train "$@" --steps 8 --metrics "$WORK/$name-full.jsonl" || return
  expect_ok "$LT" train "$@" --steps 8 --stop-at 4 --save "$WORK/$name-ck" --metrics "$WORK/$name-half.jsonl" || return
  expect_grep "stopping after step 4" "$WORK/out"
  expect_grep '"step": 4' "$WORK/$name-ck/trainer_state.json"
  # Only --resume: the run's settings (steps, batch, metrics file, ...) come from the checkpoint.
  expect_ok "$LT" train --resume "$WORK/$name-ck" || return
  expect_grep "resumed from .* at step 4" "$WORK/out"
  losses "$WORK/$name-full.jsonl" >"$WORK/a"
  losses "$WORK/$name-half.jsonl" >"$WORK/b"
  if [ "$(wc -l <"$WORK/a")" = 8 ] && diff "$WORK/a" "$WORK/b" >/dev/null; then ok; else
    fail "$name: resumed losses differ from the straight run"; paste "$WORK/a" "$WORK/b" >&2; fi
}

check_resume vit --batch 16 --micro-batch 8 --eval-batches 1 --device cpu --optimizer adamw --warmup 2 --clip 1.0
check_resume gpt --model gpt2-tiny --batch 4 --seq-len 32 --eval-batches 1 --device cpu --optimizer sgd --momentum 0.9

# The checkpoint is complete, and its weights are a standard safetensors file.
for f in model.safetensors optimizer.safetensors config.json trainer_state.json; do
  if [ -s "$WORK/vit-ck/$f" ]; then ok; else fail "checkpoint file $f missing"; fi
done
if $TOOL check "$WORK/vit-ck/model.safetensors" >"$WORK/names"; then ok; else fail "model.safetensors does not parse"; fi
# transformers' ViTForImageClassification names
expect_grep "^vit.embeddings.patch_embeddings.projection.weight F32 \[64, 1, 7, 7\]" "$WORK/names" "model.safetensors tensors"
expect_grep "^classifier.weight F32 \[10, 64\]" "$WORK/names" "model.safetensors tensors"
if $TOOL check "$WORK/gpt-ck/optimizer.safetensors" >"$WORK/names"; then ok; else fail "optimizer.safetensors does not parse"; fi
expect_grep "^transformer.wte.weight.momentum_buffer F32" "$WORK/names" "optimizer.safetensors tensors"
# With the real safetensors package, when this machine has it.
if python3 -c "import safetensors, numpy" 2>/dev/null; then
  if python3 -c "from safetensors.numpy import load_file; import sys; assert len(load_file(sys.argv[1])) > 10" \
    "$WORK/vit-ck/model.safetensors"; then ok; else fail "safetensors.numpy cannot load model.safetensors"; fi
fi
# A flag given again wins over the checkpoint's setting: --steps 10 trains two more steps.
expect_ok "$LT" train --resume "$WORK/vit-ck" --steps 10
expect_grep "^training 10 steps on cpu: batch 16 \(2 x micro-batch 8\)" "$WORK/out"
expect_grep "final: steps 10" "$WORK/out"
# Resuming past the end is a usage error.
expect_error 2 "nothing to train: the checkpoint is at step 8" "$LT" train --resume "$WORK/gpt-ck"
finish
