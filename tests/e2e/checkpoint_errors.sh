# Damaged checkpoints given to --resume or generate: one line naming the file, exit 1.
source "$(dirname "$0")/common.bash" "$@"
TOOL="python3 $(dirname "$0")/safetensors_tool.py"

expect_ok "$LT" train --steps 2 --batch 8 --eval-batches 1 --device cpu --save "$WORK/vit" || { finish; exit 1; }
expect_ok "$LT" train --model gpt2-tiny --steps 2 --batch 2 --seq-len 16 --eval-batches 1 --device cpu \
  --save "$WORK/gpt" || { finish; exit 1; }

# damage NAME CHECKPOINT FILE TOOL-ARGS...: a copy of CHECKPOINT with FILE damaged, in $WORK/NAME.
damage() {
  local name=$1 src=$2 file=$3
  shift 3
  rm -rf "${WORK:?}/$name"
  cp -r "$WORK/$src" "$WORK/$name"
  $TOOL "$1" "$WORK/$name/$file" "${@:2}"
}

for ck in vit gpt; do
  if [ $ck = vit ]; then W=vit.embeddings.patch_embeddings.projection.weight; else W=transformer.h.0.attn.c_attn.weight; fi
  for use in resume generate; do
    if [ $use = resume ]; then CMD=("$LT" train --steps 4 --resume); else CMD=("$LT" generate --max-new-tokens 4 --checkpoint); fi
    [ $ck = vit ] && [ $use = generate ] && continue
    damage bad $ck model.safetensors truncate 100
    expect_error 1 "model.safetensors'?: the header length [0-9]+ runs past the end of the file" "${CMD[@]}" "$WORK/bad"
    damage bad $ck model.safetensors truncate 5
    expect_error 1 "model.safetensors'?: it has 5 bytes" "${CMD[@]}" "$WORK/bad"
    damage bad $ck model.safetensors bad-header
    expect_error 1 "model.safetensors'?: the header is not valid JSON" "${CMD[@]}" "$WORK/bad"
    damage bad $ck model.safetensors to-f64 $W
    expect_error 1 "tensor '$W' in F64: leantrain saves weights as F32, BF16 or F16" "${CMD[@]}" "$WORK/bad"
    damage bad $ck model.safetensors reshape $W
    expect_error 1 "shape mismatch for tensor '$W' in .*model.safetensors: the file has \[" "${CMD[@]}" "$WORK/bad"
    damage bad $ck model.safetensors drop $W
    expect_error 1 "missing tensor '$W' in .*model.safetensors" "${CMD[@]}" "$WORK/bad"
    rm -rf "$WORK/bad" && cp -r "$WORK/$ck" "$WORK/bad" && echo "{" >"$WORK/bad/trainer_state.json"
    expect_error 1 "trainer_state.json is corrupt: it is not valid JSON" "${CMD[@]}" "$WORK/bad"
    rm -f "$WORK/bad/trainer_state.json"
    expect_error 1 "not a complete leantrain checkpoint: trainer_state.json is missing" "${CMD[@]}" "$WORK/bad"
    expect_error 1 "checkpoint '$WORK/none' not found: no such directory" "${CMD[@]}" "$WORK/none"
  done
done

# Optimizer state that does not fit the model.
damage bad vit optimizer.safetensors reshape conv_proj.weight.exp_avg
expect_error 1 "'conv_proj.weight.exp_avg' has shape \[" "$LT" train --steps 4 --resume "$WORK/bad"
damage bad vit optimizer.safetensors truncate 50
expect_error 1 "optimizer.safetensors'?: the header length" "$LT" train --steps 4 --resume "$WORK/bad"
# Resuming with another optimizer, and generating from an image model.
expect_error 1 "trained with adamw.*--optimizer adamw" "$LT" train --steps 4 --optimizer sgd --resume "$WORK/vit"
expect_error 1 "cannot generate from .*image classifier" "$LT" generate --checkpoint "$WORK/vit"
# An interrupted save (only DIR.old left) says where the checkpoint went.
mv "$WORK/vit" "$WORK/moved.old"
expect_error 1 "a save was interrupted; the previous checkpoint is in .*moved.old" "$LT" train --resume "$WORK/moved"
finish
